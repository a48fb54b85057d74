package main

import (
	"context"
	"strings"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/complete"
)

// examples are the Example sections of the commands' help, by command
// path, for the commands that do not set their own: every command shows
// at least one invocation a user can copy.
var examples = map[string]string{
	"converge": `  converge sync                      # apply the repository's last commit and converge
  converge list                      # composition roots and their children
  converge get vpc/fd-01-team-001    # one resource
  converge completion bash > /etc/bash_completion.d/converge`,
	"converge version": `  converge version`,
	"converge sync": `  converge sync
  converge sync --repo https://git.example.com/platform/infra.git --state /var/lib/converge
  converge sync --watch              # apply the work tree on every save
  converge sync -o json
  converge sync --allowed-signers .ssh/allowed_signers   # apply only commits signed by these SSH keys
  converge sync --override-change-limit                  # once past change_limit (recorded in the verdict)`,
	"converge get": `  converge get vpc/fd-01-team-001
  converge get classicbom/classic -o json
  converge get vpc/fd-01-team-001 vpc/sample-vpc -o wide
  converge get vpc --limit 50`,
	"converge list": `  converge list
  converge list --all --kind vpc --phase Failed
  converge list --all --limit 100 -o yaml`,
	"converge events": `  converge events classicbom/classic
  converge events --limit 50
  converge events route/fd-00-team-001 -o json
  converge events --watch --limit 20        # then follow, until Ctrl+C`,
	"converge bench": `  converge bench
  converge bench --runs 1 --teams 333000    # about a million resources`,
	"converge reconcile": `  converge reconcile                 # the running serve fetches and applies now, and this waits for the verdict
  converge reconcile vpc/sample-vpc  # resync one resource now`,
	"converge rollback": `  converge rollback                  # pin and apply the previous good revision
  converge rollback HEAD~2           # pin and apply that commit`,
	"converge unpin": `  converge unpin                     # follow the branch head again`,
	"converge suspend": `  converge suspend classicbom/classic  # dispatch nothing new for that root's subtree
  converge suspend                     # nor for anything`,
	"converge resume": `  converge resume classicbom/classic
  converge resume                      # lift the suspension of everything`,
	"converge plan": `  converge plan
  converge plan --rev HEAD~1 -o json
  converge plan --work-tree                  # the uncommitted work tree, as sync --watch applies it
  converge plan --all                        # every change and teardown step in full
  converge plan --detailed-exitcode          # CI: 0 no changes, 2 changes, 1 invalid, breaking or held
  converge plan --base origin/main --head HEAD -o markdown   # the pull request's plan comment, no state needed
  converge plan --base origin/main --head HEAD --comment 7 --forge github --forge-repo octo/site`,
	"converge serve": `  converge serve --listen :8080
  CONVERGE_WEBHOOK_SECRET=s3cret converge serve --repo https://git.example.com/platform/infra.git`,
	"converge leader": `  converge leader --state etcd://10.0.0.1:2379/converge`,
	"converge worker": `  converge worker classic    # what converge runs for a repository declaring the builtin worker`,
	"converge validate": `  converge validate
  converge validate examples/classic`,
	"converge lint": `  converge lint --base origin/main --head HEAD
  converge lint --base origin/main --head HEAD -o json`,
	"converge site": `  converge site build --out public`,
	"converge site build": `  converge site build --out public
  converge site build --out /srv/www/converge --state /var/lib/converge`,
	"converge status": `  converge status
  converge status HEAD~1 -o json`,
	"converge delete": `  converge delete account/fd-00-team-001
  converge delete classicbom/classic --timeout 30m
  converge delete vpc/sample-vpc --wait=false`,
	"converge do": `  converge do vpc/fd-01-team-001 enable_flow_logs
  converge do vpc/fd-01-team-001 enable_flow_logs --arg retention_days=30 -o json`,
	"converge state": `  converge state gc`,
	"converge completion": `  converge completion bash > /etc/bash_completion.d/converge
  converge completion zsh > "${fpath[1]}/_converge"`,
	"converge completion bash":       `  converge completion bash > /etc/bash_completion.d/converge`,
	"converge completion zsh":        `  converge completion zsh > "${fpath[1]}/_converge"`,
	"converge completion fish":       `  converge completion fish > ~/.config/fish/completions/converge.fish`,
	"converge completion powershell": `  converge completion powershell | Out-String | Invoke-Expression`,
	"converge help":                  `  converge help sync`,
	"converge state gc": `  converge state gc
  converge state gc --state /var/lib/converge`,
}

// guide gives every command of root's tree its Example (from examples,
// unless it has one) and completion: kinds and names for KIND/NAME
// arguments, a kind's verbs for do, the values of -o and --kind.
func guide(g *globals, root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Example == "" {
			c.Example = examples[c.CommandPath()]
		}
		if f := c.Flags().Lookup("output"); f != nil {
			_ = c.RegisterFlagCompletionFunc("output", outputCompletion(c))
		}
		if f := c.Flags().Lookup("kind"); f != nil && c.Name() == "list" {
			_ = c.RegisterFlagCompletionFunc("kind", func(cc *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
				return kindNames(cc.Context(), g), cobra.ShellCompDirectiveNoFileComp
			})
		}
		if f := c.Flags().Lookup("phase"); f != nil {
			_ = c.RegisterFlagCompletionFunc("phase", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
				ps := make([]string, len(converge.Phases))
				for i, p := range converge.Phases {
					ps[i] = string(p)
				}
				return ps, cobra.ShellCompDirectiveNoFileComp
			})
		}
		if strings.Contains(c.Use, "KIND/NAME") && c.ValidArgsFunction == nil {
			verb := strings.HasSuffix(c.Use, "VERB")
			c.ValidArgsFunction = func(cc *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
				ctx := cc.Context()
				switch {
				case len(args) == 0:
					return completeResource(ctx, g, toComplete)
				case len(args) == 1 && verb:
					return verbsOf(ctx, g, converge.ID(args[0])), cobra.ShellCompDirectiveNoFileComp
				}
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// outputCompletion offers the -o values c's help lists (table|json|yaml
// unless it says otherwise).
func outputCompletion(c *cobra.Command) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	vals := []string{"table", "json", "yaml"}
	if f := c.Flags().Lookup("output"); f != nil {
		if _, list, ok := strings.Cut(f.Usage, ": "); ok {
			vals = strings.Split(strings.Fields(list)[0], "|")
		}
	}
	return cobra.FixedCompletions(vals, cobra.ShellCompDirectiveNoFileComp)
}

// completionReader opens the state for a completion, or nil: completion
// never fails loudly, and never asks etcd (its flags are not parsed yet).
func completionReader(g *globals) (reader, func()) {
	if isEtcd(g.state) {
		return nil, nil
	}
	rd, done, err := openReader(g, discard{})
	if err != nil {
		return nil, nil
	}
	return rd, done
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// kindNames lists the kinds the state knows.
func kindNames(ctx context.Context, g *globals) []string {
	rd, done := completionReader(g)
	if rd == nil {
		return nil
	}
	defer done()
	return complete.Kinds(ctx, rd)
}

// completeResource completes a KIND/NAME argument: "KIND/" for each kind
// until a slash is typed, then that kind's names starting with what was
// typed, read by prefix from the store's ID order (complete.Names).
func completeResource(ctx context.Context, g *globals, toComplete string) ([]string, cobra.ShellCompDirective) {
	kind, name, ok := strings.Cut(toComplete, "/")
	if !ok {
		var out []string
		for _, k := range kindNames(ctx, g) {
			if strings.HasPrefix(k, kind) {
				out = append(out, k+"/")
			}
		}
		return out, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
	}
	rd, done := completionReader(g)
	if rd == nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer done()
	out, grouped := complete.Names(ctx, rd, kind, name)
	if grouped {
		return out, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// verbsOf lists the operator verbs of id's kind version: its reactions
// other than the engine's own.
func verbsOf(ctx context.Context, g *globals, id converge.ID) []string {
	rd, done := completionReader(g)
	if rd == nil {
		return nil
	}
	defer done()
	return complete.Verbs(ctx, rd, id)
}
