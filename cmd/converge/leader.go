package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge/cmd/converge/internal/view"
	"github.com/convergehq/converge/state/etcdstate"
)

func newLeaderCommand(g *globals) *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "leader",
		Short: "Print the name of the replica that leads the control plane of an etcd state (exit 1: none leads)",
		Long: `leader asks etcd which replica (serve --replica NAME --state etcd://…)
leads the control plane of the state --state names, and prints its name.
With -o json it prints what the leader published: its name, since when it
leads, its workers and HTTP addresses, host and pid. It exits 1 when no
replica leads (none runs, or one has just lost its term and the next has
not won yet); a leader that died is named until its election lease
expires. Without an etcd quorum it fails (exit 2) saying "etcd has lost
its quorum".`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := checkOutput(output, "table", "json", "yaml"); err != nil {
				return err
			}
			if g.etcd == nil {
				return usageErr("leader needs --state etcd://…: only replicas sharing an etcd state elect a leader")
			}
			a, err := etcdstate.Leader(*g.etcd)
			if errors.Is(err, etcdstate.ErrNoLeader) {
				return failed("no replica leads %s", g.state)
			}
			if err != nil {
				return err
			}
			if output != "table" {
				return view.WriteData(c.OutOrStdout(), output, a)
			}
			fmt.Fprintln(c.OutOrStdout(), a.Name)
			return nil
		},
	}
	addOutputFlag(c, &output, "table")
	return c
}
