package bench

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"
)

// SyncRun is one `converge sync` of the repository from an empty store,
// timed as a user runs it: a new process that opens the repository,
// loads and validates every document, starts its workers, converges and
// commits.
type SyncRun struct {
	Resources int     `json:"resources"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"resources_per_second"`
	// PeakRSSMiB is the sync process's own peak (its rusage), its
	// workers not counted.
	PeakRSSMiB float64 `json:"peak_rss_mib"`
}

// convergedLine is sync's last line when every resource is Ready.
var convergedLine = regexp.MustCompile(`converged: (\d+)/(\d+) Ready`)

// syncOnce writes fsys as a one-commit git repository in dir/repo and
// times `converge sync` of it into the empty store dir/state.
func syncOnce(ctx context.Context, converge, dir string, fsys fs.FS) (SyncRun, error) {
	repo, st := filepath.Join(dir, "repo"), filepath.Join(dir, "state")
	if err := os.CopyFS(repo, fsys); err != nil {
		return SyncRun{}, fmt.Errorf("bench --sync: write the repository: %w", err)
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-q", "-m", "bench"}} {
		git := exec.CommandContext(ctx, "git", args...)
		git.Dir = repo
		git.Env = append(os.Environ(), "GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@localhost",
			"GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@localhost", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := git.CombinedOutput(); err != nil {
			return SyncRun{}, fmt.Errorf("bench --sync: git %v: %v\n%s", args, err, out)
		}
	}
	cmd := exec.CommandContext(ctx, converge, "sync", "--repo", repo, "--state", st, "--timeout", "60m")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	err := cmd.Run()
	wall := time.Since(t0)
	if err != nil {
		return SyncRun{}, failure("bench --sync: converge sync: %v\n%s", err, out.Bytes())
	}
	m := convergedLine.FindSubmatch(out.Bytes())
	if m == nil || string(m[1]) != string(m[2]) {
		return SyncRun{}, failure("bench --sync: converge sync did not converge:\n%s", out.Bytes())
	}
	n, _ := strconv.Atoi(string(m[1]))
	r := SyncRun{Resources: n, Seconds: wall.Seconds(), PerSecond: float64(n) / wall.Seconds()}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.PeakRSSMiB = float64(ru.Maxrss) / 1024 // KiB on Linux
	}
	return r, nil
}
