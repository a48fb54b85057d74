package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/profile"
	"github.com/convergehq/converge/cmd/converge/internal/view"
	"github.com/convergehq/converge/cue"
	"github.com/convergehq/converge/scheduler"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/etcdstate"
	gitsync "github.com/convergehq/converge/sync"
)

// Exit codes: 0 ok, 1 the checked thing failed (invalid, breaking, not
// converged), 2 usage or environment error.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
	// exitChanges is plan --detailed-exitcode's "the plan has changes"
	// (terraform's 2), where an error is 1.
	exitChanges = 2
)

// errExit is an error that sets the exit code itself (plan
// --detailed-exitcode); errSilent prints nothing.
type errExit struct {
	code int
	err  error
}

func (e errExit) Error() string { return e.err.Error() }
func (e errExit) Unwrap() error { return e.err }

// errFailed wraps an error that means "the checked thing failed" (exit 1);
// so does an error wrapping converge.ErrNotFound (a named resource or
// revision does not exist); any other error is a usage or environment
// error (exit 2).
type errFailed struct{ err error }

func (e errFailed) Error() string { return e.err.Error() }
func (e errFailed) Unwrap() error { return e.err }

// failed returns an exit-1 error; a nil-safe helper for commands.
func failed(format string, args ...any) error {
	return errFailed{fmt.Errorf(format, args...)}
}

// errSilent is returned when the command already printed why it failed.
var errSilent = errors.New("")

// globals are the flags every command shares.
type globals struct {
	state string // --state: the store's directory, or etcd://HOST:PORT[,…]/PREFIX
	repo  string // --repo: local path or URL
	path  string // --path: sub-directory of the repository
	ref   string // --ref: branch

	// repoSet and pathSet say whether --repo and --path were given;
	// resolveSource fills in what was not.
	repoSet, pathSet bool
	// source is the applied revision's source the store recorded, when
	// resolveSource used it (nil otherwise).
	source *converge.AppliedSource

	// wrapStore, when set, wraps the store an engine commits to. Tests
	// only (e.g. a store whose commits fail); nil in the CLI.
	wrapStore func(scheduler.Store) scheduler.Store

	// gitTimeout and loadTimeout are --git-timeout and --load-timeout
	// (0: git_timeout and load_timeout in converge.cue, else the
	// defaults); headSettings is what converge.cue at the followed
	// head says, read by openSource.
	gitTimeout, loadTimeout time.Duration
	// loadDocumentTimeout, loadMemory and loadOutput are the budget of
	// evaluating a repository's documents (--load-document-timeout,
	// --load-memory, --load-output; sandbox).
	loadDocumentTimeout    time.Duration
	loadMemory, loadOutput string
	headSettings           converge.Settings

	// reinitState is --reinit-state (sync, serve): move an empty or
	// damaged state.db aside and start a fresh store.
	reinitState bool

	// etcdCA, etcdCert and etcdKey are --etcd-cacert, --etcd-cert and
	// --etcd-key; etcd is the etcd store --state names (nil for a
	// directory), parsed before any command runs.
	etcdCA, etcdCert, etcdKey string
	etcd                      *etcdstate.Options
	// leaderWait is --leader-wait: how long a changing command sent to
	// the leader of an etcd state waits for one to take it.
	leaderWait time.Duration
	// etcdCompact is --etcd-compact-retention: how much of etcd's
	// history a writer keeps when it compacts (0: it never compacts).
	etcdCompact time.Duration
	// etcdDefrag is --etcd-defrag-slack: past how much unused space in a
	// member's database file a writer defragments it ("": never).
	etcdDefrag string

	// logFormat and logLevel are --log-format and --log-level (defaults
	// $CONVERGE_LOG_FORMAT and $CONVERGE_LOG_LEVEL, else text and warn);
	// level is logLevel parsed.
	logFormat, logLevel string
	level               slog.Level
}

// Main runs the CLI with os.Args and returns the process exit code.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first SIGINT or SIGTERM cancels ctx: a fetch, a load or a
	// converge stops and what was accepted is flushed. A second one
	// then terminates at once, as without converge's handler (for a
	// command that has no context to stop, or a drain that takes long).
	go func() { <-ctx.Done(); stop() }()
	if f := os.Getenv(profile.EnvCPU); f != "" {
		stopProfile, err := profile.StartCPU(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "converge:", err)
			return exitUsage
		}
		defer stopProfile()
	}
	if f := os.Getenv(profile.EnvHeap); f != "" {
		defer profile.WatchHeap(f)()
	}
	root := newRootCommand()
	root.SetArgs(os.Args[1:])
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var x errExit
	if errors.As(err, &x) {
		if x.err != errSilent && x.err.Error() != "" {
			fmt.Fprintln(os.Stderr, "converge:", x.err)
		}
		return x.code
	}
	var f errFailed
	if !errors.As(err, &f) && errors.Is(err, converge.ErrNotFound) {
		err = errFailed{err}
	}
	if errors.As(err, &f) {
		if f.err != errSilent && f.err.Error() != "" {
			fmt.Fprintln(os.Stderr, "converge:", f.err)
		}
		return exitFailed
	}
	if err != errSilent {
		fmt.Fprintln(os.Stderr, "converge:", err)
		if errors.Is(err, state.ErrDamaged) {
			fmt.Fprintln(os.Stderr, damagedHint)
		}
	}
	return exitUsage
}

// damagedHint follows every error that found the state file damaged.
const damagedHint = "hint: nothing was changed; restore state.db from a backup, or rebuild the state from git: " +
	"`converge sync --reinit-state` (or serve --reinit-state) moves the damaged file aside and applies the repository " +
	"to a fresh store, which creates every resource again (a real provider may make duplicates)"

func newRootCommand() *cobra.Command { return newRoot(&globals{}) }

// newRoot builds the command tree around g, which the flags fill in.
func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:           "converge",
		Short:         "converge drives a git repository of BOM files to its declared state",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       view.BuildVersion().String(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	pf := root.PersistentFlags()
	pf.StringVar(&g.state, "state", "", "state directory (default .converge/ at the repository root), or an etcd store: etcd://HOST:PORT[,HOST:PORT…]/PREFIX (credentials from $"+envEtcdUser+" and $"+envEtcdPassword+")")
	pf.StringVar(&g.etcdCA, "etcd-cacert", "", "with --state etcd://…: verify the etcd servers with this PEM CA bundle (TLS)")
	pf.StringVar(&g.etcdCert, "etcd-cert", "", "with --state etcd://…: client certificate (PEM) for etcd (TLS)")
	pf.StringVar(&g.etcdKey, "etcd-key", "", "with --state etcd://…: the client certificate's key (PEM)")
	pf.DurationVar(&g.leaderWait, "leader-wait", 10*time.Second, "with --state etcd://… served by replicas: how long a changing command waits for a leader to take it")
	pf.DurationVar(&g.etcdCompact, "etcd-compact-retention", time.Minute, "with --state etcd://…: a writer compacts etcd's history (the cluster's, not only PREFIX's) to the revision it wrote this long ago; 0 never compacts, for a cluster that compacts itself")
	pf.StringVar(&g.etcdDefrag, "etcd-defrag-slack", "", "with --state etcd://…: after a compaction, a writer defragments a member whose database file has this much unused space (e.g. 512MiB) and over half of what it uses: one member every 10 minutes at most, the etcd leader only after handing on its leadership (defragmenting blocks the member for seconds); default never, for an operator who defragments")
	pf.StringVar(&g.repo, "repo", ".", "repository: a local path or a URL (default: the one the state last applied, else .)")
	pf.StringVar(&g.path, "path", "", "sub-directory holding the documents, relative to the current directory inside the repository (default: the one the state last applied)")
	pf.StringVar(&g.ref, "ref", "", "branch to follow (default: the repository's HEAD branch)")
	pf.DurationVar(&g.gitTimeout, "git-timeout", 0, "give up on a fetch, clone or push of notes that takes longer (default: git_timeout in converge.cue, else "+gitsync.DefaultGitTimeout.String()+")")
	pf.DurationVar(&g.loadTimeout, "load-timeout", 0, "give up on loading a revision's documents that takes longer (default: load_timeout in converge.cue, else "+gitsync.DefaultLoadTimeout.String()+")")
	pf.DurationVar(&g.loadDocumentTimeout, "load-document-timeout", 0, "refuse a file whose documents take longer to evaluate (default "+cue.DefaultDocumentTimeout.String()+")")
	pf.StringVar(&g.loadMemory, "load-memory", "", "refuse documents whose evaluation needs more memory, e.g. 2GiB (default 4GiB)")
	pf.StringVar(&g.loadOutput, "load-output", "", "refuse documents that evaluate to more JSON, all together, e.g. 64MiB (default 256MiB)")
	pf.StringVar(&g.logFormat, "log-format", envOr(envLogFormat, "text"), "log format: text or json (default $"+envLogFormat+", else text); logs go to stderr")
	pf.StringVar(&g.logLevel, "log-level", envOr(envLogLevel, "warn"), "log level: debug, info or warn (default $"+envLogLevel+", else warn); warnings and errors always show, -v lowers it to debug")
	root.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		if err := checkNotNegative(c); err != nil {
			return err
		}
		g.repoSet, g.pathSet = c.Flags().Changed("repo"), c.Flags().Changed("path")
		if _, err := g.sandbox(); err != nil {
			return err // a bad --load-memory or --load-output
		}
		if err := g.parseLogFlags(); err != nil {
			return err
		}
		if !isEtcd(g.state) {
			if g.etcdCA != "" || g.etcdCert != "" || g.etcdKey != "" || c.Flags().Changed("etcd-compact-retention") || g.etcdDefrag != "" {
				return usageErr("--etcd-cacert, --etcd-cert, --etcd-key, --etcd-compact-retention and --etcd-defrag-slack need --state etcd://…")
			}
			return nil
		}
		var err error
		if g.etcd, err = parseEtcdState(g.state, g.etcdCA, g.etcdCert, g.etcdKey, os.Getenv); err != nil {
			return err
		}
		g.etcd.CompactRetention = g.etcdCompact
		if g.etcdCompact == 0 {
			g.etcd.CompactRetention = -1
		}
		if g.etcdDefrag != "" {
			n, err := parseBytes(g.etcdDefrag)
			if err != nil || n <= 0 {
				return usageErr("--etcd-defrag-slack %q: want a size such as 512MiB", g.etcdDefrag)
			}
			if g.etcdCompact == 0 {
				return usageErr("--etcd-defrag-slack needs compaction (--etcd-compact-retention above 0): it runs after one")
			}
			g.etcd.DefragSlack = n
		}
		return nil
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return fmt.Errorf("%w\n%s", err, c.UsageString()) })
	for _, c := range subcommands(g) {
		root.AddCommand(c)
	}
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	guide(g, root)
	return root
}

// checkNotNegative refuses a negative value of any count or duration
// flag (--limit, --timeout, --git-timeout, …): none has a meaning below
// zero, and a negative one used to act as "no limit" or "give up at once".
func checkNotNegative(c *cobra.Command) error {
	var err error
	c.Flags().Visit(func(f *pflag.Flag) {
		switch f.Value.Type() {
		case "int", "int64", "duration", "float64":
		default:
			return
		}
		if err == nil && strings.HasPrefix(f.Value.String(), "-") {
			err = usageErr("--%s %s: must not be negative", f.Name, f.Value.String())
		}
	})
	return err
}

// usageErr returns an exit-2 error.
func usageErr(format string, args ...any) error { return fmt.Errorf(format, args...) }

// The environment variables that give --log-format and --log-level their
// defaults; serve, sync, delete and do set them for the workers they
// start, so a builtin worker logs as its parent re-logs it.
const (
	envLogFormat = "CONVERGE_LOG_FORMAT"
	envLogLevel  = "CONVERGE_LOG_LEVEL"
)

// envOr returns $name, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// parseLogFlags checks --log-format and --log-level.
func (g *globals) parseLogFlags() error {
	switch g.logFormat {
	case "text", "json":
	default:
		return usageErr("--log-format %q: want text or json", g.logFormat)
	}
	switch g.logLevel {
	case "debug":
		g.level = slog.LevelDebug
	case "info":
		g.level = slog.LevelInfo
	case "warn", "warning":
		g.level = slog.LevelWarn
	default:
		return usageErr("--log-level %q: want debug, info or warn (warnings and errors always show)", g.logLevel)
	}
	return nil
}

// logger returns the logger of a command: --log-format, to w (stderr),
// at --log-level; verbose (-v) lowers the level to debug. Warnings and
// errors always show.
func (g *globals) logger(w io.Writer, verbose bool) *slog.Logger {
	level := g.level
	if g.logLevel == "" {
		level = slog.LevelWarn // a globals no flags filled in (tests)
	}
	if verbose {
		level = min(level, slog.LevelDebug)
	}
	opts := &slog.HandlerOptions{Level: level}
	if g.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// workerLogEnv is the environment that makes a builtin worker log what
// its parent re-logs (providers.SupervisorOptions.RelogOutput): JSON,
// which keeps each line's level, message and attributes, at log's level.
func workerLogEnv(log *slog.Logger) []string {
	level := "warn"
	switch {
	case log.Enabled(context.Background(), slog.LevelDebug):
		level = "debug"
	case log.Enabled(context.Background(), slog.LevelInfo):
		level = "info"
	}
	return []string{envLogFormat + "=json", envLogLevel + "=" + level}
}
