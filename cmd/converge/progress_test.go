package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every command's help shows an example a user can copy.
func TestEveryCommandHasExample(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if !c.Hidden && c.Name() != "__complete" && c.Name() != "__completeNoDesc" && strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s: no Example", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCommand())
}
