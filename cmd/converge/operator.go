package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/state/stateapi"
	"github.com/convergehq/converge/sync/controlplane"
)

// daemonAPI is what the changing commands ask of the converge running a
// state: a daemon's admin socket (*stateapi.Client) or the leader of a
// replicated etcd state (*controlplane.LeaderClient, through operators'
// intents in etcd).
type daemonAPI interface {
	controller
	stateapi.ControlReader
	stateapi.ControlSetter
	stateapi.Reconciler
	stateapi.Sourcer
	stateapi.Revisioner
}

var (
	_ daemonAPI = (*stateapi.Client)(nil)
	_ daemonAPI = (*controlplane.LeaderClient)(nil)
)

// daemon is the converge running a state, as a changing command reaches
// it.
type daemon struct {
	api daemonAPI
	// rd reads the state: the admin API, or the etcd store itself (a
	// look at a resource or a verdict is not a round trip through the
	// leader).
	rd interface {
		reader
		stateapi.Revisioner
	}
	// leader is the leader's client, nil for a daemon's socket.
	leader *controlplane.LeaderClient
	state  string // --state, for messages
	errOut io.Writer
	close  func()
}

// done says which leader carried the command out, if one did, and closes
// what findDaemon opened.
func (d *daemon) done() {
	if d.leader != nil {
		if name := d.leader.Answered(); name != "" {
			fmt.Fprintf(d.errOut, "note: carried out by %s, the replica leading %s\n", name, d.state)
		}
	}
	d.close()
}

// findDaemon returns the converge running the state, nil when none
// does: the daemon whose admin socket is in dir (when socketOK; dir ""
// is none), else, with --state etcd://…, the replica leading it when
// replicas serve it, or whenever this machine has no state directory to
// start an engine in (there the command never looks for a lock or a
// repository). The leader's client waits --leader-wait for a leader to
// take each request.
func findDaemon(ctx context.Context, g *globals, dir string, socketOK bool, errOut io.Writer) (*daemon, error) {
	if dir != "" && socketOK {
		if c, err := dialAdmin(dir); err == nil {
			return &daemon{api: c, rd: c, errOut: errOut, close: func() {}}, nil
		}
	}
	if g.etcd == nil {
		return nil, nil
	}
	lc, err := controlplane.DialLeader(g.etcd, g.leaderWait)
	if err != nil {
		return nil, controlplane.OpenError(err)
	}
	if dir != "" {
		replicated, err := servedByReplicas(ctx, lc.Operator())
		if err != nil || !replicated {
			lc.Close()
			return nil, err
		}
	}
	st, err := controlplane.OpenEtcd(g.etcd, true, 0)
	if err != nil {
		lc.Close()
		return nil, controlplane.OpenError(err)
	}
	return &daemon{api: lc, rd: st, leader: lc, state: g.state, errOut: errOut, close: func() {
		st.Close() // read only: a failed close loses nothing
		lc.Close()
	}}, nil
}

// etcdAnswerTimeout bounds the look at who serves an etcd state: a
// cluster that does not answer fails the command instead of holding it.
const etcdAnswerTimeout = 10 * time.Second

// servedByReplicas reports whether replicas serve the prefix: one leads,
// or one ever campaigned for it (and may lead again soon).
func servedByReplicas(ctx context.Context, op *etcdstate.Operator) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, etcdAnswerTimeout)
	defer cancel()
	if _, err := op.Leader(ctx); err == nil {
		return true, nil
	} else if !errors.Is(err, etcdstate.ErrNoLeader) {
		return false, err
	}
	names, err := op.Replicas(ctx)
	return len(names) > 0, err
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
