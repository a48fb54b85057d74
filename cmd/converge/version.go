package main

import (
	"fmt"

	"github.com/convergehq/converge/cmd/converge/internal/view"
	"github.com/spf13/cobra"
)

func newVersionCommand() *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:     "version",
		Short:   "Print converge's version, the commit it was built from and its date",
		Example: "  converge version\n  converge version -o json\n  converge --version",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := checkOutput(output, "table", "json", "yaml"); err != nil {
				return err
			}
			v := view.BuildVersion()
			if output != "table" {
				return view.WriteData(c.OutOrStdout(), output, v)
			}
			fmt.Fprintln(c.OutOrStdout(), v)
			return nil
		},
	}
	c.Flags().StringVarP(&output, "output", "o", "table", "output: table, json or yaml")
	return c
}
