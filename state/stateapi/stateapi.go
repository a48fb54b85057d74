package stateapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	gosync "sync"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
)

// SocketName is the admin socket's file name inside the state directory.
const SocketName = "admin.sock"

// Reader is the read side of the state, as the read commands use it.
// *state.Store and *Client implement it.
type Reader interface {
	Resource(ctx context.Context, id converge.ID) (*converge.Resource, error)
	Resources(ctx context.Context, f state.Filter) ([]*converge.Resource, error)
	Children(ctx context.Context, owner converge.ID) ([]converge.ID, error)
	ChildCount(ctx context.Context, owner converge.ID) (int, error)
	EdgesOf(ctx context.Context, id converge.ID) (consumes, producedFor []converge.Edge, err error)
	Events(ctx context.Context, resource converge.ID, limit int) ([]converge.Event, error)
}

// HeadScanner is implemented by a Reader that pages through resources
// in ID order without their specs and statuses (state.Backend's
// ResourceHeadsAfter), for completion by prefix.
type HeadScanner interface {
	ResourceHeadsAfter(ctx context.Context, kind string, after converge.ID, limit int) ([]state.ResourceRow, error)
}

// Loader is implemented by a Reader that can return the whole state
// (*state.Store), for plan.
type Loader interface {
	Load(ctx context.Context) (*converge.Snapshot, error)
}

// Sourcer is implemented by a Reader that knows where the applied
// revision came from (*state.Store), for commands run without --repo or
// --path.
type Sourcer interface {
	Source(ctx context.Context) (*converge.AppliedSource, error)
}

// Definer is implemented by a Reader that holds the kinds and provider
// configs (*state.Store), for redacting secret fields from what the read
// commands print.
type Definer interface {
	Kinds(ctx context.Context) ([]*converge.Kind, error)
	Configs(ctx context.Context) ([]*converge.ProviderConfig, error)
}

// Revisioner is implemented by a Reader that keeps the verdicts of the
// revisions it saw (*state.Store), for `converge status BRANCH@dirty`.
type Revisioner interface {
	// Revisions returns the newest limit records, newest first (0: all).
	Revisions(ctx context.Context, limit int) ([]*converge.RevisionRecord, error)
	// Revision returns the record of the commit hash, or
	// converge.ErrNotFound (wrapped).
	Revision(ctx context.Context, hash string) (*converge.RevisionRecord, error)
}

// ControlReader is implemented by a Reader that keeps the operator's pin
// and suspensions (*state.Store).
type ControlReader interface {
	Control(ctx context.Context) (*converge.Control, error)
}

// ControlSetter is implemented by a Controller that takes the operator's
// pin and suspensions (a daemon: converge rollback, unpin, suspend and
// resume): it records c in its store and follows it from then on. It is
// a compare-and-set: base is the Control the change was made to, and
// when the daemon's is no longer that (another operator changed it
// meanwhile) nothing is written and the error is ErrControlChanged, so
// the caller reads again and redoes its change instead of losing the
// other one.
type ControlSetter interface {
	SetControl(ctx context.Context, base, c *converge.Control) error
}

// ErrControlChanged is SetControl's refusal of a change made to a
// Control that another operator changed meanwhile (HTTP 409).
var ErrControlChanged = errors.New("the pin and suspensions changed meanwhile (another operator)")

// controlChange is the body of POST /v1/control.
type controlChange struct {
	Base    *converge.Control `json:"base"`
	Control *converge.Control `json:"control"`
}

// Reconciler is implemented by a Controller that reconciles on demand
// (a daemon: `converge reconcile`, and `sync` while a daemon holds the
// store). With id "" it fetches the repository now and applies what is
// new, as its next poll would, and answers the head it followed; with an
// id it resyncs that resource now.
type Reconciler interface {
	Reconcile(ctx context.Context, id converge.ID) (*ReconcileReply, error)
}

// ReconcileReply is what a Reconciler did.
type ReconcileReply struct {
	// Revision is the head the daemon followed ("main@sha1:…"), and
	// Hash its commit; empty for a resource's resync.
	Revision string `json:"revision,omitempty"`
	Hash     string `json:"hash,omitempty"`
	// Message says what was done, for a person.
	Message string `json:"message"`
}

// Controller is the write side a daemon offers: cascade delete and
// operator verbs, carried out by its running scheduler.
type Controller interface {
	Delete(ctx context.Context, id converge.ID) error
	Do(ctx context.Context, id converge.ID, verb string, args map[string]string) (*converge.Result, error)
}

// Warner is implemented by a Controller that knows why the answers may be
// behind what it did: a daemon whose engine cannot commit its state
// answers reads from the store, which lacks everything since the last
// good commit. Warning returns that reason, or "" when the store is
// current. Every reply carries it in the WarningHeader.
type Warner interface {
	Warning() string
}

// WarningHeader carries a Warner's warning on every reply that has one.
const WarningHeader = "Converge-Warning"

// DryComposer is implemented by a Controller that can dry-run a compose
// on its workers (*scheduler.Scheduler), for plan: the answer is returned,
// never applied.
type DryComposer interface {
	DryCompose(ctx context.Context, t *converge.Task) (*converge.Result, error)
}

// Observer is implemented by a Controller that can run a resource's
// observe reaction on its workers (*scheduler.Scheduler), for plan
// --refresh: the answer is returned, never applied.
type Observer interface {
	Observe(ctx context.Context, t *converge.Task) (*converge.Result, error)
}

type edgesReply struct {
	Consumes    []converge.Edge `json:"consumes"`
	ProducedFor []converge.Edge `json:"produced_for"`
}

type doRequest struct {
	Verb string            `json:"verb"`
	Args map[string]string `json:"args"`
}

type doReply struct {
	Outcome string          `json:"outcome"`
	Message string          `json:"message"`
	Status  json.RawMessage `json:"status,omitempty"`
}

type errorReply struct {
	Error    string `json:"error"`
	NotFound bool   `json:"not_found,omitempty"`
	// Conflict: the error is ErrControlChanged.
	Conflict bool `json:"conflict,omitempty"`
}

// Handler serves the admin API over rd and, if ctl is not nil, ctl.
func Handler(rd Reader, ctl Controller) http.Handler {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any, err error) {
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, converge.ErrNotFound) {
				code = http.StatusNotFound
			}
			if errors.Is(err, ErrControlChanged) {
				code = http.StatusConflict
			}
			w.WriteHeader(code)
			// An encoding error here is a client that went away: there
			// is no one left to tell.
			_ = json.NewEncoder(w).Encode(errorReply{Error: err.Error(), NotFound: code == http.StatusNotFound,
				Conflict: code == http.StatusConflict})
			return
		}
		_ = json.NewEncoder(w).Encode(v) // as above
	}
	id := func(r *http.Request) converge.ID { return converge.ID(r.URL.Query().Get("id")) }
	mux.HandleFunc("GET /v1/resource", func(w http.ResponseWriter, r *http.Request) {
		res, err := rd.Resource(r.Context(), id(r))
		reply(w, res, err)
	})
	mux.HandleFunc("GET /v1/resources", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		limit, _ := strconv.Atoi(q.Get("limit"))
		rs, err := rd.Resources(r.Context(), state.Filter{Kind: q.Get("kind"), Phase: converge.Phase(q.Get("phase")),
			Owner: converge.ID(q.Get("owner")), RootsOnly: q.Get("roots") == "true", Limit: limit, Head: q.Get("head") == "true"})
		reply(w, rs, err)
	})
	mux.HandleFunc("GET /v1/resource-heads", func(w http.ResponseWriter, r *http.Request) {
		hs, ok := rd.(HeadScanner)
		if !ok {
			reply(w, nil, errors.New("resource-heads: this store cannot scan by ID"))
			return
		}
		q := r.URL.Query()
		limit, _ := strconv.Atoi(q.Get("limit"))
		rows, err := hs.ResourceHeadsAfter(r.Context(), q.Get("kind"), converge.ID(q.Get("after")), limit)
		rs := make([]*converge.Resource, len(rows))
		for i, row := range rows {
			rs[i] = row.Resource
		}
		reply(w, rs, err)
	})
	mux.HandleFunc("GET /v1/children", func(w http.ResponseWriter, r *http.Request) {
		ids, err := rd.Children(r.Context(), id(r))
		reply(w, ids, err)
	})
	mux.HandleFunc("GET /v1/child-count", func(w http.ResponseWriter, r *http.Request) {
		n, err := rd.ChildCount(r.Context(), id(r))
		reply(w, n, err)
	})
	mux.HandleFunc("GET /v1/edges", func(w http.ResponseWriter, r *http.Request) {
		c, p, err := rd.EdgesOf(r.Context(), id(r))
		reply(w, edgesReply{c, p}, err)
	})
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		evs, err := rd.Events(r.Context(), id(r), limit)
		reply(w, evs, err)
	})
	mux.HandleFunc("GET /v1/snapshot", func(w http.ResponseWriter, r *http.Request) {
		l, ok := rd.(Loader)
		if !ok {
			reply(w, nil, errors.New("this daemon does not serve snapshots"))
			return
		}
		snap, err := l.Load(r.Context())
		reply(w, snap, err)
	})
	mux.HandleFunc("GET /v1/kinds", func(w http.ResponseWriter, r *http.Request) {
		d, ok := rd.(Definer)
		if !ok {
			reply(w, nil, errors.New("this daemon does not serve kinds"))
			return
		}
		ks, err := d.Kinds(r.Context())
		reply(w, ks, err)
	})
	mux.HandleFunc("GET /v1/configs", func(w http.ResponseWriter, r *http.Request) {
		d, ok := rd.(Definer)
		if !ok {
			reply(w, nil, errors.New("this daemon does not serve provider configs"))
			return
		}
		cs, err := d.Configs(r.Context())
		reply(w, cs, err)
	})
	mux.HandleFunc("GET /v1/source", func(w http.ResponseWriter, r *http.Request) {
		sr, ok := rd.(Sourcer)
		if !ok {
			reply(w, nil, errors.New("this daemon does not record its source"))
			return
		}
		src, err := sr.Source(r.Context())
		reply(w, src, err)
	})
	mux.HandleFunc("GET /v1/revisions", func(w http.ResponseWriter, r *http.Request) {
		rv, ok := rd.(Revisioner)
		if !ok {
			reply(w, nil, errors.New("this daemon does not keep revision records"))
			return
		}
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit")) // none or bad: all
		recs, err := rv.Revisions(r.Context(), limit)
		reply(w, recs, err)
	})
	mux.HandleFunc("GET /v1/revision", func(w http.ResponseWriter, r *http.Request) {
		rv, ok := rd.(Revisioner)
		if !ok {
			reply(w, nil, errors.New("this daemon does not keep revision records"))
			return
		}
		rec, err := rv.Revision(r.Context(), r.URL.Query().Get("hash"))
		reply(w, rec, err)
	})
	mux.HandleFunc("GET /v1/control", func(w http.ResponseWriter, r *http.Request) {
		cr, ok := rd.(ControlReader)
		if !ok {
			reply(w, nil, errors.New("this daemon keeps no pin or suspensions"))
			return
		}
		c, err := cr.Control(r.Context())
		reply(w, c, err)
	})
	mux.HandleFunc("POST /v1/control", func(w http.ResponseWriter, r *http.Request) {
		cs, ok := ctl.(ControlSetter)
		if !ok {
			reply(w, nil, errors.New("this daemon does not take pins or suspensions"))
			return
		}
		var c controlChange
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&c); err != nil {
			reply(w, nil, fmt.Errorf("decode request: %w", err))
			return
		}
		if c.Base == nil || c.Control == nil {
			reply(w, nil, errors.New("decode request: want {base, control}"))
			return
		}
		reply(w, map[string]bool{"ok": true}, cs.SetControl(r.Context(), c.Base, c.Control))
	})
	mux.HandleFunc("POST /v1/reconcile", func(w http.ResponseWriter, r *http.Request) {
		rc, ok := ctl.(Reconciler)
		if !ok {
			reply(w, nil, errors.New("this daemon does not reconcile on demand"))
			return
		}
		rep, err := rc.Reconcile(r.Context(), id(r))
		reply(w, rep, err)
	})
	mux.HandleFunc("POST /v1/delete", func(w http.ResponseWriter, r *http.Request) {
		if ctl == nil {
			reply(w, nil, errors.New("this daemon does not accept deletes"))
			return
		}
		reply(w, map[string]bool{"ok": true}, ctl.Delete(r.Context(), id(r)))
	})
	mux.HandleFunc("POST /v1/dry-compose", func(w http.ResponseWriter, r *http.Request) {
		dc, ok := ctl.(DryComposer)
		if !ok {
			reply(w, nil, errors.New("this daemon does not dry-run composes"))
			return
		}
		var t converge.Task
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&t); err != nil {
			reply(w, nil, fmt.Errorf("decode request: %w", err))
			return
		}
		res, err := dc.DryCompose(r.Context(), &t)
		reply(w, res, err)
	})
	mux.HandleFunc("POST /v1/observe", func(w http.ResponseWriter, r *http.Request) {
		ob, ok := ctl.(Observer)
		if !ok {
			reply(w, nil, errors.New("this daemon does not observe"))
			return
		}
		var t converge.Task
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&t); err != nil {
			reply(w, nil, fmt.Errorf("decode request: %w", err))
			return
		}
		res, err := ob.Observe(r.Context(), &t)
		reply(w, res, err)
	})
	mux.HandleFunc("POST /v1/do", func(w http.ResponseWriter, r *http.Request) {
		if ctl == nil {
			reply(w, nil, errors.New("this daemon does not accept verbs"))
			return
		}
		var req doRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
			reply(w, nil, fmt.Errorf("decode request: %w", err))
			return
		}
		res, err := ctl.Do(r.Context(), id(r), req.Verb, req.Args)
		if err != nil {
			reply(w, nil, err)
			return
		}
		reply(w, doReply{Outcome: res.Outcome.String(), Message: res.Message, Status: res.Status}, nil)
	})
	warner, ok := ctl.(Warner)
	if !ok {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if msg := warner.Warning(); msg != "" {
			w.Header().Set(WarningHeader, msg)
		}
		mux.ServeHTTP(w, r)
	})
}

// Client talks to a daemon's admin API over its unix socket.
type Client struct {
	hc *http.Client

	mu      gosync.Mutex // guards warning
	warning string
}

// Warning returns the daemon's warning (Warner) on its newest reply, or
// "" if it had none: while it is set, the answers may be behind what the
// daemon's engine did.
func (c *Client) Warning() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.warning
}

// Dial returns a client for the socket at path after checking that a
// daemon answers there.
func Dial(path string) (*Client, error) {
	c := &Client{hc: &http.Client{
		Timeout: 5 * time.Minute,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}},
	}}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return nil, fmt.Errorf("dial admin api: %w", err)
	}
	conn.Close()
	return c, nil
}

// NewClient returns a client whose calls go through rt instead of a
// unix socket (controlplane.DialLeader's, which carries them to the
// leader of an etcd state as operators' intents).
func NewClient(rt http.RoundTripper) *Client {
	return &Client{hc: &http.Client{Transport: rt}}
}

func (c *Client) call(ctx context.Context, method, path string, q url.Values, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://converge"+path+"?"+q.Encode(), rd)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if _, socket := c.hc.Transport.(*http.Transport); !socket {
			// A transport of the caller's (NewClient) says what failed.
			if ue := (*url.Error)(nil); errors.As(err, &ue) {
				return ue.Err
			}
		}
		return fmt.Errorf("admin api: %w", err)
	}
	defer resp.Body.Close()
	c.mu.Lock()
	c.warning = resp.Header.Get(WarningHeader)
	c.mu.Unlock()
	if resp.StatusCode != http.StatusOK {
		var e errorReply
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Error == "" {
			return fmt.Errorf("admin api: %s", resp.Status)
		}
		if e.NotFound {
			return notFoundError(e.Error)
		}
		if e.Conflict {
			return ErrControlChanged
		}
		return fmt.Errorf("admin api: %s", e.Error)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// notFoundError is the daemon's message for a 404, which wraps
// converge.ErrNotFound there and so does here.
type notFoundError string

func (e notFoundError) Error() string { return string(e) }
func (e notFoundError) Unwrap() error { return converge.ErrNotFound }

// Resource implements Reader.
func (c *Client) Resource(ctx context.Context, id converge.ID) (*converge.Resource, error) {
	var r converge.Resource
	return &r, c.call(ctx, "GET", "/v1/resource", url.Values{"id": {string(id)}}, nil, &r)
}

// Resources implements Reader.
func (c *Client) Resources(ctx context.Context, f state.Filter) ([]*converge.Resource, error) {
	q := url.Values{"kind": {f.Kind}, "phase": {string(f.Phase)}, "owner": {string(f.Owner)},
		"roots": {strconv.FormatBool(f.RootsOnly)}, "limit": {strconv.Itoa(f.Limit)},
		"head": {strconv.FormatBool(f.Head)}}
	var rs []*converge.Resource
	if err := c.call(ctx, "GET", "/v1/resources", q, nil, &rs); err != nil {
		return nil, err
	}
	if f.Head { // JSON has them as null: nil, as the store returns them
		for _, r := range rs {
			r.Declared, r.Spec, r.Status = nil, nil, nil
		}
	}
	return rs, nil
}

// ResourceHeadsAfter implements HeadScanner (edges are not sent: every
// row's Consumes is nil).
func (c *Client) ResourceHeadsAfter(ctx context.Context, kind string, after converge.ID, limit int) ([]state.ResourceRow, error) {
	q := url.Values{"kind": {kind}, "after": {string(after)}, "limit": {strconv.Itoa(limit)}}
	var rs []*converge.Resource
	if err := c.call(ctx, "GET", "/v1/resource-heads", q, nil, &rs); err != nil {
		return nil, err
	}
	rows := make([]state.ResourceRow, len(rs))
	for i, r := range rs {
		r.Declared, r.Spec, r.Status = nil, nil, nil
		rows[i] = state.ResourceRow{Resource: r}
	}
	return rows, nil
}

// Children implements Reader.
func (c *Client) Children(ctx context.Context, owner converge.ID) ([]converge.ID, error) {
	var ids []converge.ID
	return ids, c.call(ctx, "GET", "/v1/children", url.Values{"id": {string(owner)}}, nil, &ids)
}

// ChildCount implements Reader.
func (c *Client) ChildCount(ctx context.Context, owner converge.ID) (int, error) {
	var n int
	return n, c.call(ctx, "GET", "/v1/child-count", url.Values{"id": {string(owner)}}, nil, &n)
}

// EdgesOf implements Reader.
func (c *Client) EdgesOf(ctx context.Context, id converge.ID) ([]converge.Edge, []converge.Edge, error) {
	var e edgesReply
	err := c.call(ctx, "GET", "/v1/edges", url.Values{"id": {string(id)}}, nil, &e)
	return e.Consumes, e.ProducedFor, err
}

// Events implements Reader.
func (c *Client) Events(ctx context.Context, resource converge.ID, limit int) ([]converge.Event, error) {
	var evs []converge.Event
	return evs, c.call(ctx, "GET", "/v1/events", url.Values{"id": {string(resource)}, "limit": {strconv.Itoa(limit)}}, nil, &evs)
}

// Kinds returns the daemon's stored kinds.
func (c *Client) Kinds(ctx context.Context) ([]*converge.Kind, error) {
	var ks []*converge.Kind
	return ks, c.call(ctx, "GET", "/v1/kinds", url.Values{}, nil, &ks)
}

// Configs returns the daemon's stored provider configs.
func (c *Client) Configs(ctx context.Context) ([]*converge.ProviderConfig, error) {
	var cs []*converge.ProviderConfig
	return cs, c.call(ctx, "GET", "/v1/configs", url.Values{}, nil, &cs)
}

// Snapshot returns the daemon's whole stored state.
func (c *Client) Snapshot(ctx context.Context) (*converge.Snapshot, error) {
	var snap converge.Snapshot
	return &snap, c.call(ctx, "GET", "/v1/snapshot", url.Values{}, nil, &snap)
}

// Source returns where the daemon's applied revision came from, or nil
// if it recorded none.
func (c *Client) Source(ctx context.Context) (*converge.AppliedSource, error) {
	var src *converge.AppliedSource
	return src, c.call(ctx, "GET", "/v1/source", url.Values{}, nil, &src)
}

// Revisions implements Revisioner.
func (c *Client) Revisions(ctx context.Context, limit int) ([]*converge.RevisionRecord, error) {
	var recs []*converge.RevisionRecord
	return recs, c.call(ctx, "GET", "/v1/revisions", url.Values{"limit": {strconv.Itoa(limit)}}, nil, &recs)
}

// Revision implements Revisioner.
func (c *Client) Revision(ctx context.Context, hash string) (*converge.RevisionRecord, error) {
	var rec *converge.RevisionRecord
	if err := c.call(ctx, "GET", "/v1/revision", url.Values{"hash": {hash}}, nil, &rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// Control returns the daemon's pin and suspensions.
func (c *Client) Control(ctx context.Context) (*converge.Control, error) {
	var ctl converge.Control
	if err := c.call(ctx, "GET", "/v1/control", nil, nil, &ctl); err != nil {
		return nil, err
	}
	return &ctl, nil
}

// SetControl replaces the daemon's pin and suspensions with ctl.
func (c *Client) SetControl(ctx context.Context, base, ctl *converge.Control) error {
	var ok map[string]bool
	return c.call(ctx, "POST", "/v1/control", nil, controlChange{Base: base, Control: ctl}, &ok)
}

// Reconcile asks the daemon to reconcile now: the repository with id "",
// else the resource id (Reconciler).
func (c *Client) Reconcile(ctx context.Context, id converge.ID) (*ReconcileReply, error) {
	var rep ReconcileReply
	if err := c.call(ctx, "POST", "/v1/reconcile", url.Values{"id": {string(id)}}, struct{}{}, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}

// Delete asks the daemon to cascade-delete id.
func (c *Client) Delete(ctx context.Context, id converge.ID) error {
	var out map[string]bool
	return c.call(ctx, "POST", "/v1/delete", url.Values{"id": {string(id)}}, struct{}{}, &out)
}

// Do asks the daemon to run verb on id and returns the worker's result.
func (c *Client) Do(ctx context.Context, id converge.ID, verb string, args map[string]string) (*converge.Result, error) {
	var out doReply
	if err := c.call(ctx, "POST", "/v1/do", url.Values{"id": {string(id)}}, doRequest{verb, args}, &out); err != nil {
		return nil, err
	}
	res := &converge.Result{Message: out.Message, Status: out.Status}
	switch out.Outcome {
	case "transient":
		res.Outcome = converge.OutcomeTransient
	case "permanent":
		res.Outcome = converge.OutcomePermanent
	}
	return res, nil
}

// Observe asks the daemon to observe the resource t names on its workers
// (its current spec and provider config) and returns the answer.
func (c *Client) Observe(ctx context.Context, t *converge.Task) (*converge.Result, error) {
	var res converge.Result
	if err := c.call(ctx, "POST", "/v1/observe", nil, t, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// DryCompose asks the daemon to dry-run the compose t on its workers and
// returns the worker's answer (scheduler.ComposeFunc).
func (c *Client) DryCompose(ctx context.Context, t *converge.Task) (*converge.Result, error) {
	var res converge.Result
	if err := c.call(ctx, "POST", "/v1/dry-compose", nil, t, &res); err != nil {
		return nil, err
	}
	return &res, nil
}
