package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/bench"
	"github.com/convergehq/converge/state/stateapi"
)

// The script commands of the crash-in-a-composition scenarios
// (sync_crash_compose*, issue 22).

// cmdBOMTeams rewrites the `_teams:` line of a classic BOM file (as
// `converge bench --teams` does): bom-teams FILE N.
func cmdBOMTeams(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: bom-teams FILE N")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil || n < 1 {
		ts.Fatalf("bom-teams: N %q: want a positive number", args[1])
	}
	file := ts.MkAbs(args[0])
	b, err := os.ReadFile(file)
	ts.Check(err)
	if !bench.BOMTeams.Match(b) {
		ts.Fatalf("bom-teams: %s has no _teams line", args[0])
	}
	ts.Check(os.WriteFile(file, bench.BOMTeams.ReplaceAll(b, []byte("_teams: "+strconv.Itoa(n))), 0o644))
}

// cmdWaitChildren waits up to 2 minutes until the store of STATE holds
// at least N children of ID, and prints how many it saw. A bbolt store
// is asked through the admin API of the converge that holds it (every
// few milliseconds: a kill is to land between two of its commits; once
// that converge has answered, its going away fails the wait at once),
// an etcd one directly; either answers from committed batches only.
func cmdWaitChildren(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: wait-children STATE ID N")
	}
	n, err := strconv.Atoi(args[2])
	ts.Check(err)
	id := converge.ID(args[1])
	answered := false
	// An etcd reader is opened once and kept: opening one per poll
	// (a client, its connections, the store's header) takes longer
	// than a batch's commit on a loaded machine, and the kill would
	// land batches late.
	var etcdReader reader
	etcdDone := func() {}
	defer func() { etcdDone() }()
	count := func() (int, error) {
		if !isEtcd(args[0]) {
			c, err := stateapi.Dial(filepath.Join(ts.MkAbs(args[0]), stateapi.SocketName))
			if err != nil {
				return 0, err
			}
			n, err := c.ChildCount(context.Background(), id)
			answered = answered || err == nil
			return n, err
		}
		if etcdReader == nil {
			rd, done, err := openReader(scriptGlobals(ts, args[0]), io.Discard)
			if err != nil {
				return 0, err
			}
			etcdReader, etcdDone = rd, done
		}
		return etcdReader.ChildCount(context.Background(), id)
	}
	deadline := time.Now().Add(2 * time.Minute)
	var got int
	var last error
	for {
		if c, err := count(); err == nil {
			got, last = c, nil
		} else if last = err; answered {
			ts.Fatalf("%s: the converge holding %s went away with %d children stored, want %d: %v", id, args[0], got, n, err)
		}
		if got >= n {
			fmt.Fprintf(ts.Stdout(), "%s: %d children stored\n", id, got)
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("%s: %d children stored after 2m, want %d (last error: %v)", id, got, n, last)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// cmdWaitUnlocked waits up to a minute until no writer holds the etcd
// store STATE: a writer killed with SIGKILL holds its lock until the
// lock's lease expires (10s). A bbolt store's lock goes with its
// process, so there is nothing to wait for.
func cmdWaitUnlocked(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: wait-unlocked STATE")
	}
	if !isEtcd(args[0]) {
		return
	}
	o, err := parseEtcdState(args[0], "", "", "", os.Getenv)
	ts.Check(err)
	cli, err := clientv3.New(clientv3.Config{Endpoints: o.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	ts.Check(err)
	defer cli.Close()
	key := strings.TrimSuffix(o.Prefix, "/") + "/lock"
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := cli.Get(ctx, key, clientv3.WithCountOnly())
		cancel()
		if err == nil && resp.Count == 0 {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("wait-unlocked: %s still held after 1m (%v)", key, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
