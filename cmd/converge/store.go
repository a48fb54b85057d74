package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/repopath"
	"github.com/convergehq/converge/cmd/converge/internal/view"
	"github.com/convergehq/converge/cue"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/stateapi"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/controlplane"
)

// reader is what the read commands read the state through (view.Reader).
type reader = view.Reader

// stateDir returns --state, or .converge/ at the root of the local
// repository's work tree. With --state etcd://… the store is in etcd and
// this directory keeps only what is local: the sockets, remote
// repositories' mirrors, the live site.
func stateDir(g *globals) (string, error) {
	if g.state != "" && !isEtcd(g.state) {
		return filepath.Abs(g.state)
	}
	if repopath.IsRemote(g.repo) {
		return filepath.Abs(".converge")
	}
	src, err := gitsync.OpenLocal(g.repo, g.ref)
	if err != nil {
		return "", fmt.Errorf("find state directory: %w (or pass --state)", err)
	}
	if src.Root() == "" {
		return "", errors.New("find state directory: bare repository: pass --state")
	}
	return filepath.Join(src.Root(), ".converge"), nil
}

// resolveSource settles which repository and sub-directory a command
// reads, in this order:
//
//  1. --repo and --path as given; a --path given while the current
//     directory is inside the repository's work tree is relative to it;
//  2. the source the store recorded for its applied revision, when
//     --path was not given and --repo was not or names the same
//     repository (g.source is then set);
//  3. the current directory's place inside the repository's work tree.
//
// A store that is damaged or cannot be read for its permissions is an
// error (exit 2, naming the file), except for sync and serve with
// --reinit-state, whose engine moves a damaged file aside; a store held
// by a converge without an admin API leaves the defaults.
func resolveSource(ctx context.Context, g *globals) error {
	if g.pathSet && !repopath.IsRemote(g.repo) {
		p, err := repopath.CwdRelative(g.repo, g.path)
		if err != nil {
			return err
		}
		g.path = p
	}
	if g.pathSet {
		return nil
	}
	// An etcd store is read wherever the command runs: an operator's
	// machine without the repository there reads the source it recorded.
	if dir, err := stateDir(g); err == nil || g.etcd != nil {
		src, err := storedSource(ctx, g, dir)
		if err != nil && !g.reinitState {
			return err
		}
		if src != nil && !src.Remote && !g.repoSet && g.state == "" && !repopath.IsRemote(g.repo) {
			// The repository's own .converge/ belongs to the repository it
			// applied: one copied with it (cp -a repo copy) must not make
			// the copy's commands read the original's head. (A --state
			// named on purpose may serve a repository elsewhere.)
			if here, err := gitsync.OpenLocal(g.repo, ""); err == nil && here.Root() != "" && !repopath.SamePath(here.Root(), src.Repo) {
				return usageErr("the state in %s was applied from the repository %s, not this one (%s): a copy made with its .converge/? "+
					"Pass --repo %s to use that repository, or --state DIR for this one's own state (or move %s aside)",
					dir, src.Repo, here.Root(), src.Repo, dir)
			}
		}
		if src != nil && (!g.repoSet || repopath.SameRepo(g.repo, src)) {
			if !src.Remote {
				if ok, _ := exists(src.Repo); !ok {
					src = nil // moved away: fall through to the current directory
				}
			}
			if src != nil {
				g.repo, g.path, g.source = src.Repo, src.Path, src
				if g.state == "" {
					g.state = dir // a remote Repo must not move it
				}
				return nil
			}
		}
	}
	if !repopath.IsRemote(g.repo) {
		if p, err := repopath.CwdRelative(g.repo, "."); err == nil {
			g.path = p
		}
	}
	return nil
}

// notePathFromState tells the user (on errOut) that cmd reads the path
// the state remembered, not the current directory's: the one case where
// what a command reads is not what its flags and directory say.
func notePathFromState(errOut io.Writer, g *globals, cmd string) {
	if g.source == nil || g.pathSet {
		return
	}
	p := g.path
	if p == "" {
		p = "the repository's root"
	}
	fmt.Fprintf(errOut, "note: %s reads %s, the path the state applied (--path chooses another)\n", cmd, p)
}

// documentsDir is the work-tree directory of --repo and --path as
// resolveSource settled them: --path is relative to the repository's root
// (when --repo is a git work tree), not to the current directory.
func documentsDir(g *globals) string {
	root := g.repo
	if src, err := gitsync.OpenLocal(g.repo, ""); err == nil && src.Root() != "" {
		root = src.Root()
	}
	return filepath.Join(root, filepath.FromSlash(g.path))
}

// checkLocalPath refuses a --path that leaves the repository (".." or
// absolute): every command reads below the repository's root only.
func checkLocalPath(g *globals) error {
	if g.path == "" || repopath.IsRemote(g.repo) {
		return nil
	}
	if !filepath.IsLocal(filepath.FromSlash(g.path)) {
		return usageErr("--path %s: outside the repository %s", g.path, g.repo)
	}
	return nil
}

// storedSource returns the source the store in dir recorded, from the
// store or the admin API of the converge holding it; nil if none. A
// store that is damaged, or that cannot be read for its permissions, is
// an error.
func storedSource(ctx context.Context, g *globals, dir string) (*converge.AppliedSource, error) {
	ok, err := hasState(g, dir)
	if err != nil || !ok {
		return nil, err
	}
	st, err := openState(g, dir, false, 200*time.Millisecond)
	if errors.Is(err, state.ErrLocked) {
		c, cerr := dialAdmin(dir)
		if cerr != nil {
			return nil, nil
		}
		src, _ := c.Source(ctx)
		return src, nil
	}
	if errors.Is(err, state.ErrDamaged) || errors.Is(err, fs.ErrPermission) {
		return nil, controlplane.OpenError(err)
	}
	if err != nil {
		return nil, nil // the command's own open says what is wrong
	}
	defer st.Close() // read only: a failed close loses nothing
	src, err := st.Source(ctx)
	if errors.Is(err, state.ErrDamaged) {
		return nil, err
	}
	return src, nil
}

// openSource opens the repository --repo names: a local repository in
// place, or a remote one mirrored (and fetched) into the state directory.
func openSource(ctx context.Context, g *globals, dir string) (*gitsync.Source, error) {
	src, err := openFollowed(ctx, g, dir)
	if err != nil || !src.Remote() {
		return src, err
	}
	if _, err := src.Fetch(ctx); err != nil {
		return nil, err
	}
	setTimeouts(g, src, nil, headSettings(g, src, g.path)) // the fetched head's converge.cue
	return src, nil
}

// openFollowed opens the repository --repo names (a remote one's
// mirror, cloned on first use) without fetching, with its git timeout
// set (setTimeouts) from what converge.cue at the head it has says.
func openFollowed(ctx context.Context, g *globals, dir string) (*gitsync.Source, error) {
	var src *gitsync.Source
	var err error
	if repopath.IsRemote(g.repo) {
		src, err = gitsync.OpenRemote(ctx, gitsync.RemoteOptions{URL: g.repo, Ref: g.ref, Dir: filepath.Join(dir, "sources"), Timeout: g.gitTimeout})
	} else {
		src, err = gitsync.OpenLocal(g.repo, g.ref)
	}
	if err != nil {
		return nil, err
	}
	setTimeouts(g, src, nil, headSettings(g, src, g.path))
	return src, nil
}

// setTimeouts bounds src's fetches and pushes and syncer's loads (either
// may be nil): --git-timeout and --load-timeout when given, else set's
// git_timeout and load_timeout (converge.cue), else the defaults. set is
// remembered as g.headSettings for a syncer made later.
func setTimeouts(g *globals, src *gitsync.Source, syncer *gitsync.Syncer, set converge.Settings) {
	g.headSettings = set
	pick := func(flag, setting time.Duration) time.Duration {
		if flag > 0 {
			return flag
		}
		return setting // 0: the default
	}
	if src != nil {
		src.SetTimeout(pick(g.gitTimeout, set.GitTimeout))
	}
	if syncer != nil {
		syncer.LoadTimeout, syncer.Sandbox = loadBudget(g, set)
	}
}

// loadBudget is what bounds a syncer's loads: --load-timeout when given,
// else set's load_timeout (converge.cue), else the default (0); and the
// child process the documents are evaluated in (g.sandbox).
func loadBudget(g *globals, set converge.Settings) (time.Duration, *cue.Sandbox) {
	timeout := set.LoadTimeout
	if g.loadTimeout > 0 {
		timeout = g.loadTimeout
	}
	// g.sandbox fails only on a bad flag, which every command making a
	// syncer checked first (PersistentPreRunE).
	sb, _ := g.sandbox()
	return timeout, sb
}

// headSettings is what converge.cue below path at src's head says; the
// zero Settings when it cannot be read (the load that follows says why).
func headSettings(g *globals, src *gitsync.Source, path string) converge.Settings {
	set, err := headSettingsOf(g, src, path)
	if err != nil {
		return converge.Settings{}
	}
	return set
}

// openReader opens the state for reading. When a daemon holds it, done
// says on errOut why the daemon's answers may be behind, if they may
// (its commits fail).
func openReader(g *globals, errOut io.Writer) (rd reader, done func(), err error) {
	if g.etcd != nil {
		// etcd serves readers beside the writer: no daemon to ask.
		st, err := controlplane.OpenEtcd(g.etcd, true, 0)
		if err != nil {
			return nil, nil, controlplane.OpenError(err)
		}
		return st, func() { st.Close() }, nil // read only: a failed close loses nothing
	}
	dir, err := stateDir(g)
	if err != nil {
		return nil, nil, err
	}
	if ok, err := stateFileExists(dir); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("no state in %s: run converge sync first", dir)
		}
		return nil, nil, err
	}
	st, err := state.Open(dir, state.Options{LockTimeout: 200 * time.Millisecond})
	if errors.Is(err, state.ErrLocked) {
		if c, cerr := dialAdmin(dir); cerr == nil {
			return c, func() {
				if w := c.Warning(); w != "" {
					fmt.Fprintln(errOut, "converge: warning:", w)
				}
			}, nil
		}
		return nil, nil, fmt.Errorf("open state: %w (a running converge holds it)", err)
	}
	if err != nil {
		return nil, nil, controlplane.OpenError(err)
	}
	return st, func() { st.Close() }, nil // read only: a failed close loses nothing
}

// dialAdmin connects to the admin API of the converge holding dir.
func dialAdmin(dir string) (*stateapi.Client, error) {
	return stateapi.Dial(filepath.Join(dir, stateapi.SocketName))
}

// openStoreForWrite opens the store for a short write, failing fast when
// another converge holds it.
func openStoreForWrite(g *globals, dir string) (state.Backend, error) {
	return openState(g, dir, true, 200*time.Millisecond)
}

func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return false, err
}

// withResource is the preamble of the commands about one resource: it
// checks -o against table|json|yaml, parses KIND/NAME and opens the state
// for reading around fn.
func withResource(g *globals, errOut io.Writer, output, arg string, fn func(rd reader, id converge.ID) error) error {
	if err := checkOutput(output, "table", "json", "yaml"); err != nil {
		return err
	}
	id, err := converge.ParseID(arg)
	if err != nil {
		return err
	}
	rd, done, err := openReader(g, errOut)
	if err != nil {
		return err
	}
	defer done()
	return fn(rd, id)
}

// headWorkers reads the worker processes the converge.cue below path at
// src's head declares, without loading (or applying) anything else.
func headWorkers(g *globals, src *gitsync.Source, path string) ([]converge.WorkerSpec, error) {
	set, err := headSettingsOf(g, src, path)
	return set.Workers, err
}

// headSettingsOf is controlplane.HeadSettings under --load-* (g.sandbox).
func headSettingsOf(g *globals, src *gitsync.Source, path string) (converge.Settings, error) {
	sb, err := g.sandbox()
	if err != nil {
		return converge.Settings{}, err
	}
	return controlplane.HeadSettings(src, path, sb)
}
