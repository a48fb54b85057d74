package main

import "github.com/spf13/cobra"

// subcommands lists every subcommand, each built by its own new…Command
// constructor in its own file. There is no init() registration.
func subcommands(g *globals) []*cobra.Command {
	return []*cobra.Command{
		newVersionCommand(),
		newSyncCommand(g),
		newGetCommand(g),
		newListCommand(g),
		newTreeCommand(g),
		newEventsCommand(g),
		newBenchCommand(g),
		newPlanCommand(g),
		newServeCommand(g),
		newLeaderCommand(g),
		newWorkerCommand(g),
		newValidateCommand(g),
		newLintCommand(g),
		newSiteCommand(g),
		newStatusCommand(g),
		newDeleteCommand(g),
		newDoCommand(g),
		newReconcileCommand(g),
		newRollbackCommand(g),
		newUnpinCommand(g),
		newSuspendCommand(g),
		newResumeCommand(g),
		newExplainCommand(g),
		newInitCommand(),
		newStateCommand(g),
		newInternalEvalCommand(),
	}
}
