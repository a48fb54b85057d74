package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergehq/converge/site"
)

// newSiteCommand builds `converge site`, whose one subcommand, `site build
// --out DIR`, writes the status site of the state for any static host.
// Serving it live (`converge serve`) is the daemon's job.
func newSiteCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "site",
		Short: "Write the status site of the state",
		Args:  cobra.NoArgs,
	}
	var out, title, baseURL string
	build := &cobra.Command{
		Use:   "build --out DIR",
		Short: "Write the static status site (index, resources, graphs, summary.json) into DIR",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx := c.Context()
			if out == "" {
				return usageErr("site build: --out DIR is required")
			}
			rd, done, err := openReader(g, c.ErrOrStderr())
			if err != nil {
				return err
			}
			defer done()
			sr, ok := rd.(site.Reader)
			if !ok {
				return fmt.Errorf("site build: a running converge holds the state; its serve publishes the site")
			}
			// A one-shot build holds its picture of the store (~0.9 GB
			// live at a million resources) while it allocates ~6 GB of
			// short-lived decoded rows and pages: collecting at 3× the
			// live heap instead of 2× saves ~15% of its CPU for ~40%
			// more peak memory; 5× (what this was before the site
			// stopped reading by ID) saved another ~7% for another
			// ~40% (docs/BENCHMARKS.md, "Site build at 1M"). GOGC,
			// when set, wins.
			if os.Getenv("GOGC") == "" {
				defer debug.SetGCPercent(debug.SetGCPercent(200))
			}
			st, err := site.Build(ctx, sr, out, site.Options{Title: title, BaseURL: baseURL})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "wrote %d files for %d resources to %s in %v; largest %s (%.1f KiB)\n",
				st.Files, st.Resources, out, st.Elapsed.Round(time.Millisecond), st.LargestFile, float64(st.Largest)/1024)
			return nil
		},
	}
	f := build.Flags()
	f.StringVar(&out, "out", "", "directory to write the site into (created; must be empty or an earlier site)")
	f.StringVar(&title, "title", "converge", "title shown on every page")
	f.StringVar(&baseURL, "base-url", "", "absolute URL the site will be served at (canonical links)")
	cmd.AddCommand(build)
	return cmd
}
