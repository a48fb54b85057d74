package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// memStore is an in-memory Store that deep-copies every batch. crash()
// makes it refuse commits, like a process that died before its next
// flush; restart() accepts them again.
type memStore struct {
	// mu guards every field below.
	mu         sync.Mutex
	resources  map[converge.ID]*converge.Resource
	edges      map[[2]converge.ID]converge.Edge
	kinds      map[converge.KindRef]*converge.Kind
	configs    map[string]*converge.ProviderConfig
	bindings   map[string]*converge.Binding
	deliveries map[string]*converge.Delivery
	applied    *converge.Revision
	events     []converge.Event
	lastSeq    uint64
	crashed    bool
	failNext   int // the next failNext commits fail
	// failedCommits counts the commits refused (crashed, failNext).
	failedCommits int
	// crashAt, when set, crashes the store right after its crashAt-th
	// commit (that one is kept): a kill mid-way through a drain.
	crashAt int
	// commitDelay makes every commit take this long: a slow disk.
	commitDelay time.Duration
	// refuse, when set, is asked about every resource put: an error
	// refuses the row, as the real store refuses one it cannot keep.
	refuse func(r *converge.Resource) error
	// check, when set, is called after every commit with mu held; what
	// it returns is kept in violations (an invariant of what a crash
	// right after that commit would leave).
	check      func(m *memStore) string
	violations []string

	commits int
	maxRows int // the most resource rows one commit held
	// maxDeleted is the most rows one commit deleted.
	maxDeleted int
	// maxRowsBig is the most rows a commit held along with a row over
	// 1 MiB (its declared spec and spec), bigCommits how many did.
	maxRowsBig, bigCommits int
	puts                   int
	putsByID               map[converge.ID]int
	maxAttempts            map[converge.ID]int
	uidsEver               map[string]converge.ID
	// deliveriesDeleted counts the delivery keys deleted.
	deliveriesDeleted int
	// streamed counts LoadStream's calls; restartLoads (LoadStream)
	// makes that many reads start again half-way.
	streamed, restartLoads int
}

func newMemStore() *memStore {
	return &memStore{
		resources:   map[converge.ID]*converge.Resource{},
		edges:       map[[2]converge.ID]converge.Edge{},
		kinds:       map[converge.KindRef]*converge.Kind{},
		configs:     map[string]*converge.ProviderConfig{},
		bindings:    map[string]*converge.Binding{},
		deliveries:  map[string]*converge.Delivery{},
		putsByID:    map[converge.ID]int{},
		maxAttempts: map[converge.ID]int{},
		uidsEver:    map[string]converge.ID{},
	}
}

// deep copies v through JSON.
func deep[T any](v T) T {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

var errCrashed = errors.New("store crashed")

func (m *memStore) crash()   { m.mu.Lock(); m.crashed = true; m.mu.Unlock() }
func (m *memStore) restart() { m.mu.Lock(); m.crashed = false; m.mu.Unlock() }

// crashThenRestart waits for the crash store.crashAt arms, stops h (the
// process "dies"), and makes the store usable again for the next start.
func crashThenRestart(t *testing.T, store *memStore, h *harness) {
	t.Helper()
	waitFor(t, 5*time.Second, "the crash", func() bool { store.mu.Lock(); defer store.mu.Unlock(); return store.crashed })
	h.stop()
	store.mu.Lock()
	store.crashAt = 0
	store.mu.Unlock()
	store.restart()
}

func (m *memStore) Load(ctx context.Context) (*converge.Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := &converge.Snapshot{LastEventSeq: m.lastSeq}
	for _, r := range m.resources {
		s.Resources = append(s.Resources, deep(r))
	}
	for _, e := range m.edges {
		s.Edges = append(s.Edges, deep(e))
	}
	for _, k := range m.kinds {
		s.Kinds = append(s.Kinds, deep(k))
	}
	for _, c := range m.configs {
		s.Configs = append(s.Configs, deep(c))
	}
	for _, b := range m.bindings {
		s.Bindings = append(s.Bindings, deep(b))
	}
	for _, d := range m.deliveries {
		s.Deliveries = append(s.Deliveries, deep(d))
	}
	if m.applied != nil {
		a := *m.applied
		s.Applied = &a
	}
	return s, nil
}

// LoadStream hands Load's resources over one at a time in ID order, as
// the real stores do (scheduler.StreamLoader). With restartLoads set, a
// read starts again half-way through that many times (etcd's, when its
// revision is compacted under it): begin is called again, and an error
// of begin's ends the read.
func (m *memStore) LoadStream(ctx context.Context, begin func(*converge.Snapshot, int) error, each func(*converge.Resource) error) (*converge.Snapshot, error) {
	m.mu.Lock()
	m.streamed++
	m.mu.Unlock()
	for {
		snap, err := m.Load(ctx)
		if err != nil {
			return nil, err
		}
		rows := snap.Resources
		snap.Resources = nil
		slices.SortFunc(rows, func(a, b *converge.Resource) int { return strings.Compare(string(a.ID()), string(b.ID())) })
		if err := begin(snap, len(rows)); err != nil {
			return nil, fmt.Errorf("load state: %w", err)
		}
		m.mu.Lock()
		again := m.restartLoads > 0
		if again {
			m.restartLoads--
		}
		m.mu.Unlock()
		for i, r := range rows {
			if again && i == len(rows)/2 {
				break
			}
			if err := each(r); err != nil {
				return nil, fmt.Errorf("load state: %w", err)
			}
		}
		if !again {
			return snap, nil
		}
	}
}

func (m *memStore) Commit(ctx context.Context, b *converge.Batch) error {
	m.mu.Lock()
	delay := m.commitDelay
	m.mu.Unlock()
	time.Sleep(delay) // a slow disk, outside the lock so reads go on
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.crashed {
		m.failedCommits++
		return errCrashed
	}
	if m.failNext > 0 {
		m.failNext--
		m.failedCommits++
		return errors.New("disk full")
	}
	if m.refuse != nil {
		var rej converge.RejectedError
		for _, r := range b.Resources {
			if err := m.refuse(r); err != nil {
				rej.Rows = append(rej.Rows, converge.RowError{ID: r.ID(), Err: err})
			}
		}
		if len(rej.Rows) > 0 {
			return fmt.Errorf("commit: %w", &rej)
		}
	}
	put := map[string]bool{}
	for _, d := range b.Deliveries {
		put[d.Key] = true
	}
	for _, k := range b.DeletedDeliveries {
		if put[k] {
			return fmt.Errorf("commit: delivery %s: both put and deleted", k)
		}
	}
	m.commits++
	if m.crashAt > 0 && m.commits >= m.crashAt {
		m.crashed = true
	}
	m.maxRows = max(m.maxRows, len(b.Resources))
	m.maxDeleted = max(m.maxDeleted, len(b.DeletedResources))
	for _, r := range b.Resources {
		if len(r.Declared)+len(r.Spec) >= 1<<20 {
			m.maxRowsBig = max(m.maxRowsBig, len(b.Resources))
			m.bigCommits++
			break
		}
	}
	for _, r := range b.Resources {
		c := deep(r)
		m.resources[c.ID()] = c
		m.puts++
		m.putsByID[c.ID()]++
		if c.Attempts > m.maxAttempts[c.ID()] {
			m.maxAttempts[c.ID()] = c.Attempts
		}
		if prev, ok := m.uidsEver[c.UID]; ok && prev != c.ID() {
			panic(fmt.Sprintf("uid %s reused by %s and %s", c.UID, prev, c.ID()))
		}
		m.uidsEver[c.UID] = c.ID()
	}
	for _, id := range b.DeletedResources {
		delete(m.resources, id)
		for k := range m.edges {
			if k[0] == id {
				delete(m.edges, k) // a row's edges go with it
			}
		}
	}
	for _, e := range b.Edges {
		m.edges[[2]converge.ID{e.Consumer, e.Producer}] = deep(e)
	}
	for _, e := range b.DeletedEdges {
		delete(m.edges, [2]converge.ID{e.Consumer, e.Producer})
	}
	for _, e := range b.Events {
		if e.Seq <= m.lastSeq {
			panic(fmt.Sprintf("event seq %d after %d", e.Seq, m.lastSeq))
		}
		m.lastSeq = e.Seq
		m.events = append(m.events, e)
	}
	for _, k := range b.Kinds {
		m.kinds[k.Ref()] = deep(k)
	}
	for _, r := range b.DeletedKinds {
		delete(m.kinds, r)
	}
	for _, c := range b.Configs {
		m.configs[c.Name] = deep(c)
	}
	for _, n := range b.DeletedConfigs {
		delete(m.configs, n)
	}
	for _, x := range b.Bindings {
		m.bindings[x.Name] = deep(x)
	}
	for _, n := range b.DeletedBindings {
		delete(m.bindings, n)
	}
	for _, d := range b.Deliveries {
		m.deliveries[d.Key] = deep(d)
	}
	for _, k := range b.DeletedDeliveries {
		// The retention policy, checked on every commit of every test:
		// a delivery goes only once this batch leaves its subject
		// deleted or at a newer generation, so no restart can fire its
		// transition again. (It may be stored owed: a delivery done
		// since the last batch is deleted without its done put.)
		if d := m.deliveries[k]; d != nil {
			if r := m.resources[d.Subject.Resource]; r != nil && r.UID == d.Subject.UID && r.Generation <= d.Subject.Generation {
				panic(fmt.Sprintf("delivery %s deleted while its subject is stored at generation %d", k, r.Generation))
			}
		}
		delete(m.deliveries, k)
		m.deliveriesDeleted++
	}
	if b.Applied != nil {
		a := *b.Applied
		m.applied = &a
	}
	if m.check != nil {
		if v := m.check(m); v != "" {
			m.violations = append(m.violations, fmt.Sprintf("commit %d: %s", m.commits, v))
		}
	}
	return nil
}

// refused returns how many commits the store refused.
func (m *memStore) refused() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failedCommits
}

func (m *memStore) edgeCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.edges)
}

func (m *memStore) get(id converge.ID) *converge.Resource {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.resources[id]; r != nil {
		return deep(r)
	}
	return nil
}

func (m *memStore) all() []*converge.Resource {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*converge.Resource
	for _, r := range m.resources {
		out = append(out, deep(r))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID() < out[j].ID() })
	return out
}

func (m *memStore) eventsOf(id converge.ID) []converge.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []converge.Event
	for _, e := range m.events {
		if id == "" || e.Resource == id {
			out = append(out, e)
		}
	}
	return out
}

func (m *memStore) deletedDeliveries() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deliveriesDeleted
}

func (m *memStore) deliveryList() []*converge.Delivery {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*converge.Delivery
	for _, d := range m.deliveries {
		out = append(out, deep(d))
	}
	return out
}

// handler is a fake worker's reaction code.
type handler func(t *converge.Task) *converge.Result

// fakeWorker serves some (KindRef, reaction) pairs with a capacity.
type fakeWorker struct {
	name   string
	serves map[converge.KindRef][]string // nil: everything
	cap    int
	busy   int
	gone   bool
	delay  time.Duration
}

func (w *fakeWorker) servesRef(ref converge.KindRef, reaction string) bool {
	if w.serves == nil {
		return true
	}
	for _, r := range w.serves[ref] {
		if r == reaction {
			return true
		}
	}
	return false
}

// fakeDisp runs a handler per task in a goroutine on a chosen worker.
type fakeDisp struct {
	// mu guards every field below.
	mu      sync.Mutex
	workers []*fakeWorker
	h       handler
	// hook, when set, may replace the handler's result (fault injection);
	// returning drop=true loses the result as if the worker vanished.
	hook     func(t *converge.Task) (res *converge.Result, drop bool)
	log      []converge.Task
	inflight map[converge.KindRef]int
	maxInfl  map[converge.KindRef]int
	instant  bool
	refused  int // Dispatch calls answered ErrNoWorker

	results chan *converge.Result
	changed chan struct{}
}

func newFakeDisp(h handler, workers ...*fakeWorker) *fakeDisp {
	return &fakeDisp{
		workers:  workers,
		h:        h,
		inflight: map[converge.KindRef]int{},
		maxInfl:  map[converge.KindRef]int{},
		results:  make(chan *converge.Result, 1024),
		changed:  make(chan struct{}, 1),
	}
}

func (d *fakeDisp) Serves(ref converge.KindRef, reaction string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, w := range d.workers {
		if !w.gone && w.servesRef(ref, reaction) {
			return true
		}
	}
	return false
}

func (d *fakeDisp) Results() <-chan *converge.Result { return d.results }
func (d *fakeDisp) Changed() <-chan struct{}         { return d.changed }

func (d *fakeDisp) signal() {
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

func (d *fakeDisp) Dispatch(ctx context.Context, t *converge.Task) error {
	d.mu.Lock()
	var w *fakeWorker
	for _, x := range d.workers {
		if !x.gone && x.servesRef(t.Ref(), t.Reaction) && (x.cap == 0 || x.busy < x.cap) {
			w = x
			break
		}
	}
	if w == nil {
		d.refused++
		d.mu.Unlock()
		return fmt.Errorf("dispatch %s: %w", t.Ref(), converge.ErrNoWorker)
	}
	w.busy++
	cp := *t
	if !d.instant {
		d.log = append(d.log, cp)
	}
	ref := t.Ref()
	d.inflight[ref]++
	if d.inflight[ref] > d.maxInfl[ref] {
		d.maxInfl[ref] = d.inflight[ref]
	}
	delay := w.delay
	d.mu.Unlock()
	run := func() {
		if delay > 0 {
			time.Sleep(delay)
		}
		res := d.h(&cp)
		drop := false
		d.mu.Lock()
		hook := d.hook
		d.mu.Unlock()
		if hook != nil {
			if r, dr := hook(&cp); dr {
				drop = true
			} else if r != nil {
				res = r
			}
		}
		d.mu.Lock()
		w.busy--
		d.inflight[ref]--
		gone := w.gone
		d.mu.Unlock()
		if gone || drop {
			return
		}
		res.TaskID = cp.ID
		res.Worker = w.name
		d.results <- res
		d.signal()
	}
	if d.instant {
		run()
	} else {
		go run()
	}
	return nil
}

// vanish makes worker name disappear: its tasks never get a result.
func (d *fakeDisp) vanish(name string) {
	d.mu.Lock()
	for _, w := range d.workers {
		if w.name == name {
			w.gone = true
		}
	}
	d.mu.Unlock()
	d.signal()
}

func (d *fakeDisp) addWorker(w *fakeWorker) {
	d.mu.Lock()
	d.workers = append(d.workers, w)
	d.mu.Unlock()
	d.signal()
}

func (d *fakeDisp) setHook(h func(t *converge.Task) (*converge.Result, bool)) {
	d.mu.Lock()
	d.hook = h
	d.mu.Unlock()
}

// idle reports whether no dispatched task's handler is still to run.
func (d *fakeDisp) idle() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range d.inflight {
		if n > 0 {
			return false
		}
	}
	return true
}

func (d *fakeDisp) tasks() []converge.Task {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]converge.Task(nil), d.log...)
}

func (d *fakeDisp) resetLog() {
	d.mu.Lock()
	d.log = nil
	d.mu.Unlock()
}

// ---- the classic world ----

type bomFD struct {
	Name       string    `json:"name"`
	Networking bool      `json:"networking"`
	Teams      []bomTeam `json:"teams"`
}

type bomTeam struct {
	Name string `json:"name"`
	Rev  string `json:"rev,omitempty"`
}

type bomSpec struct {
	FDs []bomFD `json:"fds"`
}

func makeBOM(fds, teams int) bomSpec {
	var b bomSpec
	for f := 1; f <= fds; f++ {
		fd := bomFD{Name: fmt.Sprintf("fd-%02d", f), Networking: true}
		for t := 1; t <= teams; t++ {
			fd.Teams = append(fd.Teams, bomTeam{Name: fmt.Sprintf("team-%03d", t)})
		}
		b.FDs = append(b.FDs, fd)
	}
	return b
}

// bomSize is the number of children makeBOM(fds, teams) composes.
func bomSize(fds, teams int) int { return fds*2 + fds*teams*3 }

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// compose is the classic composer.
func compose(spec json.RawMessage) ([]converge.Child, []converge.Edge) {
	var b bomSpec
	if err := json.Unmarshal(spec, &b); err != nil {
		panic(err)
	}
	var ch []converge.Child
	var ed []converge.Edge
	for _, fd := range b.FDs {
		tgw := converge.NewID("tgw", fd.Name+"-tgw")
		if fd.Networking {
			host := fd.Name + "-tgw-host"
			ch = append(ch,
				converge.Child{Kind: "account", KindVersion: 1, Name: host, Spec: mustJSON(map[string]string{"team_name": host})},
				converge.Child{Kind: "tgw", KindVersion: 1, Name: fd.Name + "-tgw", Spec: mustJSON(map[string]string{"name": fd.Name})})
			ed = append(ed, converge.Edge{Consumer: tgw, Producer: converge.NewID("account", host),
				Flows: []converge.ValueFlow{{From: "account_id", To: "account_id"}}})
		}
		for _, t := range fd.Teams {
			n := fd.Name + "-" + t.Name
			acct := map[string]string{"team_name": n}
			if t.Rev != "" {
				acct["rev"] = t.Rev
			}
			ch = append(ch,
				converge.Child{Kind: "account", KindVersion: 1, Name: n, Spec: mustJSON(acct)},
				converge.Child{Kind: "vpc", KindVersion: 1, Name: n, Spec: mustJSON(map[string]string{"cidr": "10.0.0.0/16"})})
			ed = append(ed, converge.Edge{Consumer: converge.NewID("vpc", n), Producer: converge.NewID("account", n),
				Flows: []converge.ValueFlow{{From: "account_id", To: "account_id"}}})
			if !fd.Networking {
				continue // as the real classic composer: a route needs the domain's tgw
			}
			ch = append(ch, converge.Child{Kind: "route", KindVersion: 1, Name: n, Spec: mustJSON(map[string]string{"dest": "0.0.0.0/0"})})
			ed = append(ed,
				converge.Edge{Consumer: converge.NewID("route", n), Producer: converge.NewID("vpc", n),
					Flows: []converge.ValueFlow{{From: "vpc_id", To: "vpc_id"}}},
				converge.Edge{Consumer: converge.NewID("route", n), Producer: tgw,
					Flows: []converge.ValueFlow{{From: "tgw_id", To: "net.tgw_id"}}})
		}
	}
	return ch, ed
}

// classicHandler is the classic example's worker code.
func classicHandler(t *converge.Task) *converge.Result {
	var spec map[string]any
	_ = json.Unmarshal(t.Spec, &spec)
	str := func(k string) string { s, _ := spec[k].(string); return s }
	ok := func(st any) *converge.Result {
		return &converge.Result{Outcome: converge.OutcomeOK, Status: mustJSON(st)}
	}
	perm := func(msg string) *converge.Result {
		return &converge.Result{Outcome: converge.OutcomePermanent, Message: msg}
	}
	switch t.Reaction {
	case converge.ReactionTeardown:
		return &converge.Result{Outcome: converge.OutcomeOK}
	case converge.ReactionReact:
		return &converge.Result{Outcome: converge.OutcomeOK}
	case converge.ReactionCompose:
		ch, ed := compose(t.Spec)
		return &converge.Result{Outcome: converge.OutcomeOK, Children: ch, Edges: ed, Status: mustJSON(map[string]int{"children": len(ch)})}
	case "enable_flow_logs":
		return &converge.Result{Outcome: converge.OutcomeOK, Message: "bucket " + t.Args["bucket"],
			Status: mustJSON(map[string]any{"vpc_id": "vpc-" + t.Name, "account_id": str("account_id"), "flow_logs": true})}
	}
	switch t.Kind {
	case "account":
		id := "acct-" + t.Name
		if r := str("rev"); r != "" {
			id += "-" + r
		}
		return ok(map[string]string{"account_id": id})
	case "vpc":
		if str("account_id") == "" {
			return perm("spec.account_id: missing")
		}
		st := map[string]string{"vpc_id": "vpc-" + t.Name, "account_id": str("account_id")}
		if t.KindVersion == 2 {
			st["region"] = str("region")
		}
		return ok(st)
	case "tgw":
		if str("account_id") == "" {
			return perm("spec.account_id: missing")
		}
		return ok(map[string]string{"tgw_id": "tgw-" + t.Name})
	case "route":
		net, _ := spec["net"].(map[string]any)
		if str("vpc_id") == "" || net == nil || net["tgw_id"] == nil {
			return perm("route without vpc_id or tgw_id")
		}
		return ok(map[string]string{"route_id": "rt-" + t.Name})
	}
	return perm("no such kind " + t.Kind)
}

func leafKind(name string, version int, extra ...string) *converge.Kind {
	return &converge.Kind{Name: name, Version: version, Finalizer: true,
		Reactions: append([]string{"reconcile", "teardown"}, extra...)}
}

func classicKinds() []*converge.Kind {
	return []*converge.Kind{
		{Name: "classicbom", Version: 1, Finalizer: true, Reactions: []string{"compose", "teardown"}},
		leafKind("account", 1),
		leafKind("vpc", 1, "enable_flow_logs"),
		leafKind("vpc", 2, "enable_flow_logs"),
		leafKind("tgw", 1),
		leafKind("route", 1),
		{Name: "statussink", Version: 1, Reactions: []string{"react"}},
	}
}

func classicDesired(b bomSpec, rev string) *converge.Desired {
	return &converge.Desired{
		Revision: converge.Revision{Ref: "main", Hash: rev},
		Kinds:    classicKinds(),
		Configs: []*converge.ProviderConfig{
			{Name: "statussink-default", Kind: "statussink", KindVersion: 1, IsDefault: true, Config: json.RawMessage(`{"dir":"/tmp/x"}`)},
		},
		Bindings: []*converge.Binding{{Name: "bom-synced", Kind: "classicbom", Transition: "synced", Reactor: "statussink", ReactorVersion: 1}},
		Resources: []*converge.Resource{{Kind: "classicbom", KindVersion: 1, Name: "org", Origin: converge.OriginGit,
			Declared: mustJSON(b), Source: "resources/bom.json:1"}},
	}
}

// validatorFunc adapts a func to scheduler.Validator.
type validatorFunc func(ref converge.KindRef, spec json.RawMessage) error

func (f validatorFunc) ValidateSpec(ref converge.KindRef, spec json.RawMessage) error {
	return f(ref, spec)
}

// ValidateStatus accepts any JSON object whose string fields ending in
// "_id" do not start with "NOT" and that has no field "bogus": enough
// of a schema to tell a worker's bad status from a good one.
func (f validatorFunc) ValidateStatus(ref converge.KindRef, status json.RawMessage) error {
	var m map[string]any
	if err := json.Unmarshal(status, &m); err != nil {
		return fmt.Errorf("status: %v", err)
	}
	for k, v := range m {
		if k == "bogus" {
			return errors.New("status.bogus: field not allowed")
		}
		if s, ok := v.(string); ok && strings.HasSuffix(k, "_id") && strings.HasPrefix(s, "NOT") {
			return fmt.Errorf("status.%s: invalid value %q", k, s)
		}
	}
	return nil
}

// classicValidator requires cidr on vpcs, and region on vpc/v2.
var classicValidator = validatorFunc(func(ref converge.KindRef, spec json.RawMessage) error {
	var m map[string]any
	if err := json.Unmarshal(spec, &m); err != nil {
		return fmt.Errorf("spec: %v", err)
	}
	if ref.Kind == "vpc" {
		if m["cidr"] == nil {
			return errors.New("spec.cidr: field is required but not present")
		}
		if ref.Version == 2 && m["region"] == nil {
			return errors.New("spec.region: field is required but not present")
		}
	}
	return nil
})

// ---- harness ----

type harness struct {
	t     *testing.T
	store scheduler.Store
	disp  *fakeDisp
	s     *scheduler.Scheduler
	stopF context.CancelFunc
	done  chan error
}

func testConfig() scheduler.Config {
	return scheduler.Config{
		FlushInterval: time.Millisecond,
		BackoffBase:   time.Millisecond,
		BackoffMax:    8 * time.Millisecond,
		LeaseTTL:      time.Second,
		Rand:          rand.New(rand.NewPCG(1, 2)),
	}
}

func start(t *testing.T, store scheduler.Store, disp *fakeDisp, cfg scheduler.Config) *harness {
	t.Helper()
	s, err := scheduler.New(context.Background(), store, disp, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, store: store, disp: disp, s: s, stopF: cancel, done: make(chan error, 1)}
	go func() { h.done <- s.Run(ctx) }()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) stop() {
	if h.stopF == nil {
		return
	}
	h.stopF()
	h.stopF = nil
	select {
	case <-h.done:
	case <-time.After(5 * time.Second):
		h.t.Errorf("Run did not return")
	}
}

func (h *harness) apply(d *converge.Desired, v scheduler.Validator) *scheduler.Plan {
	h.t.Helper()
	p, err := h.s.Apply(context.Background(), d, v)
	if err != nil {
		h.t.Fatalf("Apply: %v", err)
	}
	return p
}

// waitSettled waits until Progress reports want.
func (h *harness) waitSettled(want scheduler.Settled, timeout time.Duration) scheduler.Progress {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p := h.s.Progress()
		if p.Settled == want {
			return p
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("not %v after %v: progress %+v; problems %+v", want, timeout, p, h.s.Problems())
		}
		time.Sleep(time.Millisecond)
	}
}

// waitFor polls cond.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (h *harness) flush() {
	h.t.Helper()
	if err := h.s.Flush(context.Background()); err != nil {
		h.t.Fatalf("Flush: %v", err)
	}
}
