package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/view"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/state/etcdtest"
	"github.com/convergehq/converge/state/stateapi"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/controlplane"
)

// TestMain lets testscript run converge in-process: a script's
// `exec converge …` (or plain `converge …`) re-enters Main.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"converge": func() { os.Exit(Main()) },
	})
}

// TestScripts runs every end-to-end scenario in testdata/script. Scenarios
// are named category-first (validate_*, sync_*, lint_*).
//
// Custom commands available to scripts:
//
//	example NAME DIR        copy examples/NAME (a whole example repository) to DIR
//	repo-init DIR           git init DIR on branch main with a test identity
//	commit DIR MESSAGE      stage everything in DIR and commit it
//	git-rev DIR REF VAR     set env VAR to the full hash of REF in DIR
//	kill-worker STATE NAME  SIGKILL the worker process NAME (e.g. classic-0) of the converge using STATE
//	check-state STATEDIR    consistency check of a store; prints resource counts per kind
//	wait-running STATE N    wait until N resources are Running (asks the daemon's admin API)
//	wait-get STATE ID PAT   wait until `get ID -o json` (daemon or store) matches PAT
//	wait-status STATE REV P wait until `status REV -o json` on STATE matches P, whatever its exit code
//	git-http-serve DIR VAR  serve the bare repositories in DIR over smart HTTP; VAR = base URL
//	webhook STATE SECRET N  POST a push webhook to the serve using STATE, signed with SECRET (- for none); want status N
//	wait-http STATE PATH P  wait until GET PATH on the serve using STATE answers 200 matching P
//	wait-file FILE PATTERN  wait until FILE exists and matches the regular expression PATTERN
//	exit-code N PROG ARGS   run PROG like exec and fail unless it exits with status N (1 failed, 2 usage)
//	etcd-start VAR MEMBERS  start an embedded etcd cluster of 1 or 3 members for the script; VAR = etcd://…/converge (a --state value)
//	hang-remote VAR [URL]   a real TCP server that accepts and never answers (VAR = its http:// URL); with URL it forwards there until
//	hang-remote -silence VAR, and hangs from then on
//	wait-hung VAR N         wait until the hang-remote VAR holds N connections it never answered
//	signal-pid FILE SIG     send SIG (TERM, INT, KILL) to the pid in FILE (e.g. written by sh -c 'echo $$ >FILE; exec converge …')
//	etcd-processes VAR N    start N members of a real `etcd` (out of process, Debian's etcd-server) on loopback; VAR as etcd-start
//	wait-leader STATE VAR [NOT]  wait until a serve replica (other than NOT) leads the etcd state STATE; VAR = its name
//	damage-state FILE HOW   damage a bbolt file in place: truncate-half, garbage-half (random bytes over its second
//	                        half), meta0 or meta1 (zero that meta page), truncate-pages or garbage-pages (the same,
//	                        halving the pages in use, which bbolt's file may be far bigger than), leaves (the
//	                        leaf pages of the classic accounts fd-20 to fd-29 misnamed: deep in the tree)
//	bom-teams FILE N        rewrite the _teams line of a classic BOM file to N teams (as bench --teams)
//	wait-children STATE ID N  wait until the store holds at least N children of ID (asks the admin API every 5ms)
//	wait-unlocked STATE     wait until no writer holds the etcd store STATE (a killed one's lock outlives it by its lease)
//
// Where a command takes STATEDIR, an etcd://… --state value works too.
//
// There is no sleep: a scenario waits on evidence (a phase, a verdict, a
// file, an HTTP answer), never for a while before it asserts.
//
// Conditions: [short] is true under `go test -short`; [scale] is true when
// CONVERGE_SCALE=1 is set (the ~100,000-resource runs, off by default);
// [root] when the tests run as root (who is never refused a file).
func TestScripts(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	goEnv = readGoEnv(t)
	testscript.Run(t, testscript.Params{
		Dir:                 filepath.Join(root, "testdata", "script"),
		RequireExplicitExec: false,
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "scale":
				return os.Getenv("CONVERGE_SCALE") == "1", nil
			case "root":
				return os.Geteuid() == 0, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Setup: func(env *testscript.Env) error {
			env.Setenv("CONVERGE_ROOT", root)
			env.Setenv("GIT_AUTHOR_NAME", "converge-test")
			env.Setenv("GIT_AUTHOR_EMAIL", "test@converge.invalid")
			env.Setenv("GIT_COMMITTER_NAME", "converge-test")
			env.Setenv("GIT_COMMITTER_EMAIL", "test@converge.invalid")
			env.Setenv("GIT_CONFIG_NOSYSTEM", "1")
			env.Setenv("HOME", env.WorkDir)
			// A scenario that builds Go (cmd_init) uses this machine's
			// module and build caches, not a fresh HOME's.
			for k, v := range goEnv {
				env.Setenv(k, v)
			}
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"example":        cmdExample(root),
			"repo-init":      cmdRepoInit,
			"commit":         cmdCommit,
			"git-rev":        cmdGitRev,
			"kill-worker":    cmdKillWorker,
			"wait-file":      cmdWaitFile,
			"check-state":    cmdCheckState,
			"wait-running":   cmdWaitRunning,
			"wait-get":       cmdWaitGet,
			"wait-status":    cmdWaitStatus,
			"git-http-serve": cmdGitHTTPServe,
			"webhook":        cmdWebhook,
			"wait-http":      cmdWaitHTTP,
			"exit-code":      cmdExitCode,
			"damage-state":   cmdDamageState,
			"etcd-start":     cmdEtcdStart,
			"hang-remote":    cmdHangRemote,
			"wait-hung":      cmdWaitHung,
			"signal-pid":     cmdSignalPid,
			"etcd-processes": cmdEtcdProcesses,
			"wait-leader":    cmdWaitLeader,
			"forge-webhook":  cmdForgeWebhook,
			"forge-fake":     cmdForgeFake,
			"forge-comments": cmdForgeComments,
			"metrics":        cmdMetrics,
			"metrics-match":  cmdMetricsMatch,
			"bom-teams":      cmdBOMTeams,
			"wait-children":  cmdWaitChildren,
			"wait-unlocked":  cmdWaitUnlocked,
			"created-after":  cmdCreatedAfter,
		},
	})
}

// goEnv is what `go env` says of the caches and the proxy, for scenarios
// that run the go command (a testscript's HOME is its work directory).
var goEnv map[string]string

func readGoEnv(t *testing.T) map[string]string {
	t.Helper()
	keys := []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOPROXY", "GOFLAGS", "GOTOOLCHAIN", "GONOSUMDB", "GOSUMDB"}
	out, err := exec.Command("go", append([]string{"env"}, keys...)...).Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	env := map[string]string{}
	for i, v := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if i < len(keys) && v != "" {
			env[keys[i]] = v
		}
	}
	return env
}

// repoRoot returns the module root (two levels above this package).
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("locate source file")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func cmdExample(root string) func(ts *testscript.TestScript, neg bool, args []string) {
	return func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) != 2 {
			ts.Fatalf("usage: example NAME DIR")
		}
		src := filepath.Join(root, "examples", args[0])
		dst := ts.MkAbs(args[1])
		err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(src, p)
			out := filepath.Join(dst, rel)
			if d.IsDir() {
				return os.MkdirAll(out, 0o755)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(out, b, 0o644)
		})
		ts.Check(err)
	}
}

func git(ts *testscript.TestScript, dir string, args ...string) string {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=converge-test", "GIT_AUTHOR_EMAIL=test@converge.invalid",
		"GIT_COMMITTER_NAME=converge-test", "GIT_COMMITTER_EMAIL=test@converge.invalid",
		"GIT_CONFIG_NOSYSTEM=1", "HOME="+ts.Getenv("HOME"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		ts.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func cmdRepoInit(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: repo-init DIR")
	}
	dir := ts.MkAbs(args[0])
	ts.Check(os.MkdirAll(dir, 0o755))
	git(ts, dir, "init", "-q", "-b", "main")
}

func cmdCommit(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: commit DIR MESSAGE")
	}
	dir := ts.MkAbs(args[0])
	// Never converge's own directory: a daemon writing its live site
	// there races git add (a temporary file renamed away under it).
	git(ts, dir, "add", "-A", "--", ".", ":(exclude).converge")
	git(ts, dir, "commit", "-q", "--allow-empty", "-m", args[1])
}

func cmdGitRev(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: git-rev DIR REF VAR")
	}
	out := git(ts, ts.MkAbs(args[0]), "rev-parse", args[1])
	ts.Setenv(args[2], strings.TrimSpace(out))
	fmt.Fprintf(ts.Stdout(), "%s\n", strings.TrimSpace(out))
}

// cmdKillWorker SIGKILLs the worker process named NAME of the converge
// whose state directory is STATEDIR (from its pid file), waiting up to 30s
// for the pid file to appear.
func cmdKillWorker(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: kill-worker STATEDIR NAME")
	}
	p := filepath.Join(ts.MkAbs(args[0]), "workers", args[1]+".pid")
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(p)
		if err == nil {
			var pid int
			if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				ts.Check(syscall.Kill(pid, syscall.SIGKILL))
				fmt.Fprintf(ts.Stdout(), "killed worker %s (pid %d)\n", args[1], pid)
				return
			}
		}
		if time.Now().After(deadline) {
			ts.Fatalf("no pid file %s: %v", p, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cmdWaitFile waits up to 60s for FILE to exist and contain PATTERN (a
// regular expression).
func cmdWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: wait-file FILE PATTERN")
	}
	re, err := regexp.Compile(args[1])
	ts.Check(err)
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, _ := os.ReadFile(ts.MkAbs(args[0]))
		if re.Match(b) {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("%s never matched %q; last content:\n%s", args[0], args[1], b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cmdCheckState opens the store in STATEDIR, runs its full consistency
// check, and fails on a duplicate UID; it prints "N resources, M kinds of
// resource, uids unique, consistent" and one "KIND N" line per kind.
func cmdCheckState(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: check-state STATEDIR")
	}
	var st state.Backend
	var err error
	if isEtcd(args[0]) {
		o, perr := parseEtcdState(args[0], "", "", "", os.Getenv)
		ts.Check(perr)
		st, err = controlplane.OpenEtcd(o, true, 0)
	} else {
		st, err = state.Open(ts.MkAbs(args[0]), state.Options{LockTimeout: 5 * time.Second})
	}
	ts.Check(err)
	defer st.Close()
	ts.Check(st.Check(context.Background()))
	rs, err := st.Resources(context.Background(), state.Filter{})
	ts.Check(err)
	uids := map[string]converge.ID{}
	kinds := map[string]int{}
	for _, r := range rs {
		if other, dup := uids[r.UID]; dup {
			ts.Fatalf("uid %s held by %s and %s", r.UID, other, r.ID())
		}
		uids[r.UID] = r.ID()
		kinds[r.Kind]++
	}
	fmt.Fprintf(ts.Stdout(), "%d resources, %d kinds of resource, uids unique, consistent\n", len(rs), len(kinds))
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(ts.Stdout(), "%s %d\n", k, kinds[k])
	}
}

// cmdWaitRunning waits up to 60s until at least N resources are Running
// (leased to a worker), asking the admin API of the converge that holds
// STATEDIR.
func cmdWaitRunning(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: wait-running STATEDIR N")
	}
	n, err := strconv.Atoi(args[1])
	ts.Check(err)
	sock := filepath.Join(ts.MkAbs(args[0]), stateapi.SocketName)
	deadline := time.Now().Add(60 * time.Second)
	for {
		var got int
		if c, err := stateapi.Dial(sock); err == nil {
			if rs, err := c.Resources(context.Background(), state.Filter{Phase: converge.PhaseRunning}); err == nil {
				got = len(rs)
			}
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("only %d resources Running after 60s, want %d", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cmdWaitGet waits up to 60s until `converge get KIND/NAME -o json` on
// STATEDIR (through the running daemon's admin API, or the store) matches
// the regular expression PATTERN.
func cmdWaitGet(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: wait-get STATEDIR KIND/NAME PATTERN")
	}
	re, err := regexp.Compile(args[2])
	ts.Check(err)
	g := scriptGlobals(ts, args[0])
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for {
		if rd, done, err := openReader(g, io.Discard); err == nil {
			if r, err := rd.Resource(context.Background(), converge.ID(args[1])); err == nil {
				var b strings.Builder
				view.WriteData(&b, "json", view.ResourceOf(r))
				last = b.String()
			}
			done()
		}
		if re.MatchString(last) {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("%s never matched %q; last:\n%s", args[1], args[2], last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cmdWaitStatus waits up to 60s until `converge status REV -o json` on
// STATEDIR (e.g. REV main@dirty: through the running daemon's admin API,
// or the store) prints what matches the regular expression PATTERN,
// whatever its exit code (a failed verdict exits 1).
func cmdWaitStatus(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: wait-status STATEDIR REV PATTERN")
	}
	re, err := regexp.Compile(args[2])
	ts.Check(err)
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for {
		c := newRootCommand()
		var out, errOut bytes.Buffer
		stateArg := args[0]
		if !isEtcd(stateArg) {
			stateArg = ts.MkAbs(stateArg)
		}
		c.SetArgs([]string{"--state", stateArg, "status", args[1], "-o", "json"})
		c.SetOut(&out)
		c.SetErr(&errOut)
		err := c.Execute()
		last = out.String() + errOut.String()
		if err != nil {
			last += "error: " + err.Error()
		}
		if re.MatchString(out.String()) {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("status %s never matched %q; last:\n%s", args[1], args[2], last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cmdGitHTTPServe serves the bare repositories under DIR over git's smart
// HTTP protocol (git http-backend behind net/http/cgi) until the script
// ends, and sets env VAR to the server's base URL.
func cmdGitHTTPServe(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: git-http-serve DIR VAR")
	}
	exe := strings.TrimSpace(git(ts, ts.MkAbs("."), "--exec-path"))
	backend := filepath.Join(exe, "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		ts.Fatalf("git-http-backend: %v", err)
	}
	srv := httptest.NewServer(&cgi.Handler{Path: backend,
		Env: []string{"GIT_PROJECT_ROOT=" + ts.MkAbs(args[0]), "GIT_HTTP_EXPORT_ALL=1"}})
	ts.Defer(srv.Close)
	ts.Setenv(args[1], srv.URL)
}

// cmdWebhook POSTs a push payload to the /hooks/git of the converge serve
// whose state directory is STATEDIR (address from its http.addr file),
// signed with SECRET ("-" sends no signature), and checks the HTTP status
// is CODE.
func cmdWebhook(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: webhook STATEDIR SECRET CODE")
	}
	var addr []byte
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		if addr, err = os.ReadFile(filepath.Join(ts.MkAbs(args[0]), "http.addr")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			ts.Fatalf("no http.addr in %s: %v", args[0], err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	body := []byte(`{"ref":"refs/heads/main"}`)
	req, err := http.NewRequest("POST", "http://"+strings.TrimSpace(string(addr))+"/hooks/git", bytes.NewReader(body))
	ts.Check(err)
	if args[1] != "-" {
		req.Header.Set("X-Hub-Signature-256", gitsync.Sign([]byte(args[1]), body))
	}
	resp, err := http.DefaultClient.Do(req)
	ts.Check(err)
	resp.Body.Close()
	if got := strconv.Itoa(resp.StatusCode); got != args[2] {
		ts.Fatalf("webhook: status %s, want %s", got, args[2])
	}
	fmt.Fprintf(ts.Stdout(), "webhook: %d\n", resp.StatusCode)
}

// cmdWaitHTTP waits up to 60s until GET PATH on the HTTP address of the
// converge serve using STATEDIR answers 200 with a body matching PATTERN.
func cmdWaitHTTP(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: wait-http STATEDIR PATH PATTERN")
	}
	re, err := regexp.Compile(args[2])
	ts.Check(err)
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for {
		if addr, err := os.ReadFile(filepath.Join(ts.MkAbs(args[0]), "http.addr")); err == nil {
			if resp, err := http.Get("http://" + strings.TrimSpace(string(addr)) + args[1]); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				last = fmt.Sprintf("%d %s", resp.StatusCode, b)
				if resp.StatusCode == http.StatusOK && re.Match(b) {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			ts.Fatalf("GET %s never matched %q; last: %.2000s", args[1], args[2], last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cmdExitCode runs PROG ARGS as exec does (its stdout and stderr are then
// what stdout and stderr match) and fails unless it exits with status N:
// `! exec` only tells zero from non-zero, and converge's 1 (the checked
// thing failed) and 2 (usage or environment) mean different things.
func cmdExitCode(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exit-code N PROG [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("%s: %v", args[1], err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", strings.Join(args[1:], " "), got, want)
	}
}

// scriptGlobals returns the globals of a command run on stateArg: a
// state directory relative to the script's directory, or etcd://….
func scriptGlobals(ts *testscript.TestScript, stateArg string) *globals {
	if !isEtcd(stateArg) {
		return &globals{state: ts.MkAbs(stateArg)}
	}
	o, err := parseEtcdState(stateArg, "", "", "", os.Getenv)
	ts.Check(err)
	return &globals{state: stateArg, etcd: o}
}

// cmdEtcdStart starts an embedded etcd cluster of MEMBERS (1 or 3) in the
// script's work directory, stopped when the script ends, and sets VAR to
// its --state value under the prefix /converge.
func cmdEtcdStart(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: etcd-start VAR MEMBERS")
	}
	n, err := strconv.Atoi(args[1])
	ts.Check(err)
	c, err := etcdtest.StartCluster(ts.MkAbs("etcd-data"), etcdtest.Options{Members: n})
	ts.Check(err)
	ts.Defer(c.Stop)
	ts.Setenv(args[0], c.URL("/converge"))
}

// cmdEtcdProcesses starts N members of the `etcd` binary on PATH (3.4
// from Debian's etcd-server in CI) as separate processes on free
// loopback ports, data and logs under the script's etcd-procs/, waits up
// to 60s until the cluster answers, and sets VAR to its --state value
// under /converge. The members are killed when the script ends.
func cmdEtcdProcesses(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: etcd-processes VAR N")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil || n < 1 {
		ts.Fatalf("etcd-processes: N %q: want a positive number", args[1])
	}
	eps, stop, err := startEtcdProcesses(ts.MkAbs("etcd-procs"), n, 0)
	if stop != nil {
		ts.Defer(stop)
	}
	if err != nil {
		ts.Fatalf("etcd-processes: %v", err)
	}
	hosts := make([]string, n)
	for i, e := range eps {
		hosts[i] = strings.TrimPrefix(e, "http://")
	}
	ts.Setenv(args[0], "etcd://"+strings.Join(hosts, ",")+"/converge")
}

// startEtcdProcesses starts n members of the `etcd` binary on PATH as
// separate processes on free loopback ports, data and logs under dir,
// and waits up to 60s until the cluster answers. A nice below 0 gives
// the members that scheduling priority (through nice(1); root may), as
// a cluster on machines of its own has. It returns the client URLs and
// a function that kills the members (set even on an error).
func startEtcdProcesses(dir string, n, nice int) ([]string, func(), error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, nil, err
	}
	var ls []net.Listener
	for range 2 * n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		ls = append(ls, l)
	}
	port := func(i int) int { return ls[i].Addr().(*net.TCPAddr).Port }
	for _, l := range ls {
		l.Close() // free now; the members bind them below
	}
	var initial, endpoints []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("p%d=http://127.0.0.1:%d", i, port(2*i+1)))
		endpoints = append(endpoints, fmt.Sprintf("http://127.0.0.1:%d", port(2*i)))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	var stops []func()
	stop := func() {
		for _, f := range stops {
			f()
		}
	}
	for i := range n {
		client, peer := endpoints[i], fmt.Sprintf("http://127.0.0.1:%d", port(2*i+1))
		log, err := os.Create(filepath.Join(dir, fmt.Sprintf("p%d.log", i)))
		if err != nil {
			return nil, stop, err
		}
		// A loaded machine: etcd's 1s default election timeout elects
		// again and again; 3s keeps one leader.
		argv := []string{bin}
		if nice != 0 {
			// Through nice(1): every thread of the member has the nice
			// (setpriority on a pid would set only its first thread's).
			argv = []string{"nice", "-n", strconv.Itoa(nice), bin}
		}
		cmd := exec.Command(argv[0], append(argv[1:], "--name", fmt.Sprintf("p%d", i), "--data-dir", filepath.Join(dir, fmt.Sprintf("p%d", i)),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "converge-script", "--election-timeout", "3000", "--heartbeat-interval", "300")...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			log.Close()
			return nil, stop, err
		}
		stops = append(stops, func() {
			cmd.Process.Kill()
			cmd.Wait()
			log.Close()
		})
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, stop, err
	}
	defer cli.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := cli.Put(ctx, "/converge-script-ready", "1")
		cancel()
		if err == nil {
			return endpoints, stop, nil
		}
		if time.Now().After(deadline) {
			return nil, stop, fmt.Errorf("the cluster did not answer in 60s: %v (logs in %s)", err, dir)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cmdWaitLeader waits up to 60s until a `serve --replica` other than
// NOT (if given) leads the etcd state STATE, its advert published, and
// sets VAR to its name.
func cmdWaitLeader(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: wait-leader STATE VAR [NOT]")
	}
	not := ""
	if len(args) == 3 {
		not = args[2]
	}
	o, err := parseEtcdState(args[0], "", "", "", os.Getenv)
	ts.Check(err)
	deadline := time.Now().Add(60 * time.Second)
	for {
		a, err := etcdstate.Leader(*o)
		if err == nil && !a.Since.IsZero() && a.Name != not {
			ts.Setenv(args[1], a.Name)
			fmt.Fprintf(ts.Stdout(), "leader %s\n", a.Name)
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("no leader after 60s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cmdDamageState damages the bbolt file FILE in place (see TestScripts).
func cmdDamageState(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: damage-state FILE truncate-half|garbage-half|truncate-pages|garbage-pages|leaves|meta0|meta1")
	}
	path := ts.MkAbs(args[0])
	b, err := os.ReadFile(path)
	ts.Check(err)
	// The pages in use: the newest meta page's page size times its
	// page count (bbolt's meta: page size at 24, pgid at 56, txid at 64).
	ne := binary.NativeEndian
	meta := func(off int) (ps, pgid, txid uint64) {
		return uint64(ne.Uint32(b[off+24:])), ne.Uint64(b[off+56:]), ne.Uint64(b[off+64:])
	}
	ps, pgid, txid := meta(0)
	if _, pgid1, txid1 := meta(int(ps)); txid1 > txid {
		pgid = pgid1
	}
	used := int(ps * pgid)
	garbage := func(from, to int) {
		r := rand.New(rand.NewPCG(1, 2))
		for i := from; i < to; i++ {
			b[i] = byte(r.Uint32())
		}
	}
	switch args[1] {
	case "truncate-half":
		b = b[:len(b)/2]
	case "garbage-half":
		garbage(len(b)/2, len(b))
	case "truncate-pages":
		b = b[:used/2]
	case "garbage-pages":
		garbage(used/2, used)
	case "leaves":
		// Every leaf page of the resources bucket whose first row is an
		// account of the classic domains fd-20 to fd-29 says it is
		// another page: bbolt panics on reaching one (a load, a full
		// list), while Open's checks (meta, freelist and root pages,
		// each bucket's first and last pages) pass. A leaf page is a
		// 16-byte header, then per element flags, pos, key and value
		// sizes (4 bytes each), pos counting from the element.
		n := 0
		for id := uint64(2); id < pgid; id++ {
			p := b[id*ps:]
			if ne.Uint64(p) != id || ne.Uint16(p[8:]) != 0x02 || ne.Uint16(p[10:]) == 0 {
				continue
			}
			e := p[16:]
			pos, ksize, vsize := ne.Uint32(e[4:]), ne.Uint32(e[8:]), ne.Uint32(e[12:])
			if int(pos+ksize) > len(e) {
				continue
			}
			if key := string(e[pos : pos+ksize]); strings.HasPrefix(key, "account/fd-2") && vsize > 100 {
				ne.PutUint64(p, id+1<<40)
				n++
			}
		}
		if n == 0 {
			ts.Fatalf("damage-state: no leaf page of classic accounts fd-20 to fd-29 in %s", args[0])
		}
	case "meta0":
		clear(b[:ps])
	case "meta1":
		clear(b[ps : 2*ps])
	default:
		ts.Fatalf("damage-state: unknown damage %q", args[1])
	}
	ts.Check(os.WriteFile(path, b, 0o600))
	fmt.Fprintf(ts.Stdout(), "damaged %s (%s): %d bytes, %d in use\n", args[0], args[1], len(b), used)
}
