package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/state/stateapi"
)

// RunningAPI is what an operator's changing command (delete, do,
// reconcile, rollback, suspend, sync) asks of the converge running a
// state: a daemon's admin socket (*stateapi.Client) or the leader of a
// replicated etcd state (*LeaderClient, through operators' intents in
// etcd).
type RunningAPI interface {
	Delete(ctx context.Context, id converge.ID) error
	Do(ctx context.Context, id converge.ID, verb string, args map[string]string) (*converge.Result, error)
	stateapi.ControlReader
	stateapi.ControlSetter
	stateapi.Reconciler
	stateapi.Sourcer
	stateapi.Revisioner
}

var (
	_ RunningAPI = (*stateapi.Client)(nil)
	_ RunningAPI = (*LeaderClient)(nil)
)

// RunningReader reads a running converge's state: the admin API, or the
// etcd store itself (a look at a resource or a verdict is not a round
// trip through the leader).
type RunningReader interface {
	stateapi.Reader
	stateapi.Revisioner
	Kinds(ctx context.Context) ([]*converge.Kind, error)
}

// Running is the converge running a state, as FindRunning reached it.
type Running struct {
	API    RunningAPI
	Reader RunningReader
	// Leader is the leader's client (its Answered names who carried a
	// request out), nil for a daemon's socket.
	Leader *LeaderClient
	close  func()
}

// Close closes what FindRunning opened.
func (r *Running) Close() { r.close() }

// FindOptions say where FindRunning looks.
type FindOptions struct {
	// Dir is the local state directory whose admin socket is asked
	// ("" for none); Socket says whether to ask it.
	Dir    string
	Socket bool
	// Etcd is the etcd state (nil for a directory state); LeaderWait is
	// how long the leader's client waits for a leader to take each
	// request.
	Etcd       *etcdstate.Options
	LeaderWait time.Duration
}

// FindRunning returns the converge running the state, nil when none
// does: the daemon whose admin socket is in o.Dir (when o.Socket), else,
// with an etcd state, the replica leading it when replicas serve it, or
// whenever this machine has no state directory to start an engine in
// (o.Dir "": there the command never looks for a lock or a repository).
// An error opening etcd says "open state:" once (OpenError).
func FindRunning(ctx context.Context, o FindOptions) (*Running, error) {
	if o.Dir != "" && o.Socket {
		if c, err := stateapi.Dial(filepath.Join(o.Dir, stateapi.SocketName)); err == nil {
			return &Running{API: c, Reader: c, close: func() {}}, nil
		}
	}
	if o.Etcd == nil {
		return nil, nil
	}
	lc, err := DialLeader(o.Etcd, o.LeaderWait)
	if err != nil {
		return nil, OpenError(err)
	}
	if o.Dir != "" {
		replicated, err := servedByReplicas(ctx, lc.Operator())
		if err != nil || !replicated {
			lc.Close()
			return nil, err
		}
	}
	st, err := OpenEtcd(o.Etcd, true, 0)
	if err != nil {
		lc.Close()
		return nil, OpenError(err)
	}
	return &Running{API: lc, Reader: st, Leader: lc, close: func() {
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

// UpdateControl reads api's Control, lets change edit a copy, and
// compares-and-sets it: another operator's change made meanwhile is read
// and change redone on top of it, never lost (up to five tries). It
// returns change's message and the pin before and after.
func UpdateControl(ctx context.Context, api RunningAPI, change func(c *converge.Control) (string, error)) (msg string, before, after *converge.Pin, err error) {
	for try := 1; ; try++ {
		base, err := api.Control(ctx)
		if err != nil {
			return "", nil, nil, fmt.Errorf("read control: %w", err)
		}
		ctl, err := cloneControl(base)
		if err != nil {
			return "", nil, nil, err
		}
		before = ctl.Pin
		if msg, err = change(ctl); err != nil {
			return "", nil, nil, err
		}
		err = api.SetControl(ctx, base, ctl)
		if errors.Is(err, stateapi.ErrControlChanged) && try < 5 {
			continue
		}
		if err != nil {
			return "", nil, nil, fmt.Errorf("write control: %w", err)
		}
		return msg, before, ctl.Pin, nil
	}
}

// cloneControl returns a deep copy of c.
func cloneControl(c *converge.Control) (*converge.Control, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	out := new(converge.Control)
	return out, json.Unmarshal(b, out)
}
