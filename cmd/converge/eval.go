package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge/cue"
)

// newInternalEvalCommand builds the hidden `converge internal-eval`: the
// child a cue.Sandbox starts to evaluate a repository's documents under a
// time and memory budget (docs/ARCHITECTURE.md, "Untrusted documents").
// It reads the documents on stdin and writes its progress and result on
// stdout; it is not for people.
func newInternalEvalCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "internal-eval",
		Short:  "Evaluate documents for a parent converge (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return cue.ServeSandbox(os.Stdin, os.Stdout)
		},
	}
}

// sandbox returns where the documents of a repository are evaluated: a
// child `converge internal-eval` under --load-document-timeout,
// --load-memory and --load-output.
func (g *globals) sandbox() (*cue.Sandbox, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("locate converge binary: %w", err)
	}
	b := cue.Budget{Document: g.loadDocumentTimeout}
	if b.Memory, err = parseBytes(g.loadMemory); err != nil {
		return nil, usageErr("--load-memory %s: %v", g.loadMemory, err)
	}
	if b.Output, err = parseBytes(g.loadOutput); err != nil {
		return nil, usageErr("--load-output %s: %v", g.loadOutput, err)
	}
	return &cue.Sandbox{Budget: b, Command: func(ctx context.Context) *exec.Cmd {
		c := exec.CommandContext(ctx, self, "internal-eval")
		// Named converge whatever the file is called: a test binary
		// (script_test.go's TestMain) then runs converge, not its tests.
		c.Args[0] = "converge"
		return c
	}}, nil
}

// parseBytes reads a size such as "512MiB", "4GiB", "1GB" or "1048576";
// "" is 0 (the default).
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	units := []struct {
		suffix string
		n      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	mul := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mul = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.n
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mul {
		return 0, fmt.Errorf("want a positive size such as 512MiB or 4GiB")
	}
	return n * mul, nil
}
