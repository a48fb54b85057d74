package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// addOutputFlag registers -o/--output on c, defaulting to def.
func addOutputFlag(c *cobra.Command, output *string, def string) {
	c.Flags().StringVarP(output, "output", "o", def, "output format: table|json|yaml")
}

// checkOutput returns a usage error unless output is one of allowed.
func checkOutput(output string, allowed ...string) error {
	for _, a := range allowed {
		if output == a {
			return nil
		}
	}
	return fmt.Errorf("output %q: want one of %v", output, allowed)
}
