package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/sync/controlplane"
)

// daemonAPI is what the changing commands ask of the converge running a
// state (controlplane.RunningAPI).
type daemonAPI = controlplane.RunningAPI

// daemon is the converge running a state, as a changing command reaches
// it (controlplane.FindRunning).
type daemon struct {
	api daemonAPI
	// rd reads the state: the admin API, or the etcd store itself.
	rd      controlplane.RunningReader
	running *controlplane.Running
	state   string // --state, for messages
	errOut  io.Writer
}

// done says which leader carried the command out, if one did, and closes
// what findDaemon opened.
func (d *daemon) done() {
	if l := d.running.Leader; l != nil {
		if name := l.Answered(); name != "" {
			fmt.Fprintf(d.errOut, "note: carried out by %s, the replica leading %s\n", name, d.state)
		}
	}
	d.running.Close()
}

// findDaemon returns the converge running the state, nil when none does
// (controlplane.FindRunning): the daemon whose admin socket is in dir
// (when socketOK; dir "" is none), else, with --state etcd://…, the
// replica leading it when replicas serve it, or whenever this machine
// has no state directory to start an engine in. The leader's client
// waits --leader-wait for a leader to take each request.
func findDaemon(ctx context.Context, g *globals, dir string, socketOK bool, errOut io.Writer) (*daemon, error) {
	r, err := controlplane.FindRunning(ctx, controlplane.FindOptions{Dir: dir, Socket: socketOK, Etcd: g.etcd, LeaderWait: g.leaderWait})
	if err != nil || r == nil {
		return nil, err
	}
	return &daemon{api: r.API, rd: r.Reader, running: r, state: g.state, errOut: errOut}, nil
}

// changeDir is a changing command's state directory: stateDir's, or ""
// with --state etcd://… on a machine where there is none (no repository
// here: the command goes through the leader).
func changeDir(g *globals) (string, error) {
	dir, err := stateDir(g)
	if err != nil && g.etcd != nil {
		return "", nil
	}
	return dir, err
}

// notTaken reports whether err says no leader took the request (exit 2:
// the environment, not the thing asked, failed).
func notTaken(err error) bool {
	var nt *etcdstate.NotTakenError
	return errors.As(err, &nt)
}
