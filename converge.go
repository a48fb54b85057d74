package converge

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ID is a resource's identity within a store: "kind/name". It does not
// carry the kind version: a resource keeps its ID (and its UID) when it
// flips from one kind version to another.
type ID string

// NewID returns the ID of the resource kind/name.
func NewID(kind, name string) ID { return ID(kind + "/" + name) }

// ParseID splits "kind/name"; it returns an error if s is not of that form.
func ParseID(s string) (ID, error) {
	k, n, ok := strings.Cut(s, "/")
	if !ok || k == "" || n == "" || strings.Contains(n, "/") {
		return "", fmt.Errorf("resource %q: want KIND/NAME", s)
	}
	return ID(s), nil
}

// Kind returns the kind part of the ID.
func (id ID) Kind() string { k, _, _ := strings.Cut(string(id), "/"); return k }

// Name returns the name part of the ID.
func (id ID) Name() string { _, n, _ := strings.Cut(string(id), "/"); return n }

// KindRef names one version of a kind. Routing, schemas, provider configs,
// max_inflight and task_deadline are all keyed by KindRef: strict equality of
// kind and version, never "the nearest version".
type KindRef struct {
	Kind    string
	Version int
}

// String returns "kind/vN", the form used in every message.
func (r KindRef) String() string { return r.Kind + "/v" + strconv.Itoa(r.Version) }

// Phase is where a resource is in its life.
type Phase string

// The phases. A resource starts Pending, is Running while a task for it is
// leased to a worker, and ends Ready or Failed; Deleting marks a resource in
// a teardown tree until its row is removed.
const (
	PhasePending  Phase = "Pending"
	PhaseRunning  Phase = "Running"
	PhaseReady    Phase = "Ready"
	PhaseFailed   Phase = "Failed"
	PhaseDeleting Phase = "Deleting"
)

// Phases lists every phase in display order.
var Phases = []Phase{PhasePending, PhaseRunning, PhaseReady, PhaseFailed, PhaseDeleting}

// The reactions the engine itself dispatches. Any other reaction a kind
// declares is an operator verb (for example "enable_flow_logs").
const (
	ReactionReconcile = "reconcile"
	ReactionCompose   = "compose"
	ReactionTeardown  = "teardown"
	ReactionReact     = "react"
	// ReactionObserve reads the real object without changing it: whether
	// it exists and its actual fields (Result.Observed), so the engine
	// can tell drift from health (see Drift).
	ReactionObserve = "observe"
)

// IsVerb reports whether reaction is an operator verb rather than one of
// the engine's own reactions.
func IsVerb(reaction string) bool {
	switch reaction {
	case ReactionReconcile, ReactionCompose, ReactionTeardown, ReactionReact, ReactionObserve:
		return false
	}
	return true
}

// Transitions a binding can subscribe to.
const (
	// TransitionSynced fires when a resource and its whole subtree reach
	// Ready for the resource's current generation.
	TransitionSynced = "synced"
	// TransitionFailed fires when a resource fails permanently.
	TransitionFailed = "failed"
	// TransitionDeleted fires when a resource's row is removed.
	TransitionDeleted = "deleted"
)

// Kind is one (kind, kind_version) manifest: its schemas as CUE source and
// the operational settings the scheduler honours.
type Kind struct {
	Name    string `json:"kind"`
	Version int    `json:"kind_version"`
	// Reactions the kind's worker implements: reconcile, compose, teardown,
	// react, and operator verbs.
	Reactions []string `json:"reactions"`
	// Finalizer: deleting a resource of this kind runs its teardown
	// reaction before the row is removed.
	Finalizer        bool          `json:"finalizer"`
	ResyncInterval   time.Duration `json:"resync_interval"`
	ResyncRecomposes bool          `json:"resync_recomposes"`
	MaxInflight      int           `json:"max_inflight"`
	// MaxChildren bounds one composition of a composer kind (0: no
	// limit); a bigger one fails the composer permanently, naming it.
	MaxChildren  int           `json:"max_children,omitempty"`
	TaskDeadline time.Duration `json:"task_deadline"`
	// SpecSchema, StatusSchema and ConfigSchema are CUE source, each the
	// body of a definition (`{ cidr: string, ... }`).
	SpecSchema   string `json:"spec_schema"`
	StatusSchema string `json:"status_schema"`
	ConfigSchema string `json:"config_schema"`
	// Secret lists spec, status and config field paths (dotted,
	// "spec.password", "config.bucket"; see SecretPaths) whose values
	// converge never shows: the kind's explicit list plus every schema
	// field marked @converge(secret) (cue.SecretList).
	Secret []string `json:"secret,omitempty"`
	// Source is "file:line" of the manifest in the repository.
	Source string `json:"source,omitempty"`
	// Compose is a CUE expression over spec that yields the kind's
	// composition ({children: [...], edges: [...]}): the control plane
	// evaluates it, so the kind's compose (and teardown) needs no worker.
	// ComposeAt is "file:line:col" of the expression in the repository.
	Compose   string `json:"compose,omitempty"`
	ComposeAt string `json:"compose_at,omitempty"`
	// ComposeImports are the import specs the expression uses, as
	// written in the kind's file (`"strings"`, `h "encoding/hex"`).
	ComposeImports []string `json:"compose_imports,omitempty"`
	// DriftPolicy says what a resync that observes drift does (kinds
	// with the observe reaction): DriftPolicyHeal (the default, "") reconciles
	// the object back, DriftPolicyReport only reports it. A resource's own
	// drift_policy wins.
	DriftPolicy string `json:"drift_policy,omitempty"`
}

// The drift policies (Kind.DriftPolicy, Resource.DriftPolicy).
const (
	// DriftPolicyHeal reconciles a drifted object back to its declaration.
	DriftPolicyHeal = "heal"
	// DriftPolicyReport reports drift and leaves the object as it is
	// found (a break-glass edit stays until someone decides).
	DriftPolicyReport = "report"
)

// Ref returns the kind's KindRef.
func (k *Kind) Ref() KindRef { return KindRef{k.Name, k.Version} }

// Has reports whether the kind declares reaction.
func (k *Kind) Has(reaction string) bool {
	for _, r := range k.Reactions {
		if r == reaction {
			return true
		}
	}
	return false
}

// Origin says who declared a resource.
type Origin string

const (
	// OriginGit: declared by a document in the repository.
	OriginGit Origin = "git"
	// OriginComposed: emitted by its owner's compose reaction.
	OriginComposed Origin = "composed"
)

// Resource is one node of the resource graph, as stored.
type Resource struct {
	UID         string `json:"uid"`
	Kind        string `json:"kind"`
	KindVersion int    `json:"kind_version"`
	Name        string `json:"name"`
	// Declared is the spec as its author wrote it (a repository document
	// or the owner's composer), without flowed values.
	Declared json.RawMessage `json:"declared,omitempty"`
	// Spec is Declared with every value flow applied: what workers see.
	Spec   json.RawMessage `json:"spec"`
	Status json.RawMessage `json:"status,omitempty"`
	Phase  Phase           `json:"phase"`
	Reason string          `json:"reason,omitempty"`
	// Generation counts changes of Spec; ObservedGeneration is the
	// generation the last successful reconcile saw.
	Generation         int64  `json:"generation"`
	ObservedGeneration int64  `json:"observed_generation"`
	Owner              ID     `json:"owner,omitempty"`
	Origin             Origin `json:"origin"`
	ProviderConfigRef  string `json:"provider_config_ref,omitempty"`
	// Attempts counts tries of the current generation's task; LastError
	// is the newest failure message.
	Attempts    int       `json:"attempts"`
	LastError   string    `json:"last_error,omitempty"`
	NextAttempt time.Time `json:"next_attempt,omitzero"`
	// Deleting is set once the resource is in a teardown tree.
	Deleting  bool      `json:"deleting,omitempty"`
	DeletedAt time.Time `json:"deleted_at,omitzero"`
	// Lease is the claim of a worker on the resource's current task.
	Lease *Lease `json:"lease,omitempty"`
	// Source is "file:line" of the declaring document (git resources).
	Source    string    `json:"source,omitempty"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// ComposedBy is set on a composer whose children are exactly its
	// last applied composition, of the spec at ObservedGeneration: the
	// composing worker's revision and a digest of the provider config
	// it composed with ("REVISION CONFIG"). The next compose may then be
	// answered as a delta against that spec (Task.Base). Empty: the
	// next compose is answered in full.
	ComposedBy string `json:"composed_by,omitempty"`
	// DriftPolicy is the resource's own drift policy (DriftPolicyHeal,
	// DriftPolicyReport; "" follows its kind's).
	DriftPolicy string `json:"drift_policy,omitempty"`
	// Drift is what the last observe found different from Spec, while
	// it is so: kept by a report-only policy, or until a heal's
	// reconcile succeeds. Nil: no drift known.
	Drift *DriftReport `json:"drift,omitempty"`
	// Rollout is a composer's progressive rollout (git resources): a
	// change of its composition reaches its children wave by wave. Nil:
	// all at once.
	Rollout *Rollout `json:"rollout,omitempty"`
}

// DriftReport is a drift the engine observed: a difference between the
// declared object (Spec) and the real one. It names fields, never
// values, so a secret field can be reported too.
type DriftReport struct {
	// Fields are the dotted spec paths whose actual value differs
	// (Drift), sorted.
	Fields []string `json:"fields,omitempty"`
	// Gone: the object no longer exists.
	Gone bool `json:"gone,omitempty"`
	// Unmarked: the object exists without converge's mark.
	Unmarked bool `json:"unmarked,omitempty"`
	// Policy is the drift policy that applied (DriftPolicyHeal,
	// DriftPolicyReport).
	Policy string `json:"policy"`
	// Since is when this drift was first observed.
	Since time.Time `json:"since,omitzero"`
	// Generation is the generation observed drifted.
	Generation int64 `json:"generation"`
}

// Summary says what differs, in words: "the object is gone",
// "connection_limit, owner differ".
func (d *DriftReport) Summary() string {
	if d == nil {
		return ""
	}
	var parts []string
	if d.Gone {
		parts = append(parts, "the object is gone")
	}
	if d.Unmarked {
		parts = append(parts, "converge's mark is gone")
	}
	if len(d.Fields) > 0 {
		f := make([]string, len(d.Fields))
		for i, x := range d.Fields {
			if x == "" {
				x = "(the whole object)"
			}
			f[i] = x
		}
		verb := " differs"
		if len(f) > 1 {
			verb = " differ"
		}
		parts = append(parts, strings.Join(f, ", ")+verb)
	}
	return strings.Join(parts, "; ")
}

// Same reports whether d and o report the same difference (fields, gone,
// unmarked, policy).
func (d *DriftReport) Same(o *DriftReport) bool {
	if d == nil || o == nil {
		return d == o
	}
	return d.Gone == o.Gone && d.Unmarked == o.Unmarked && d.Policy == o.Policy && slices.Equal(d.Fields, o.Fields)
}

// ID returns the resource's identity.
func (r *Resource) ID() ID { return NewID(r.Kind, r.Name) }

// Ref returns the resource's KindRef.
func (r *Resource) Ref() KindRef { return KindRef{r.Kind, r.KindVersion} }

// Lease is a worker's time-bounded claim on a task. A lease that expires
// (worker or control plane gone) makes the task eligible again.
type Lease struct {
	TaskID   string    `json:"task_id"`
	Reaction string    `json:"reaction"`
	Worker   string    `json:"worker"`
	Expires  time.Time `json:"expires"`
}

// ValueFlow copies producer.status.From into consumer.spec.To. Paths are
// dotted field paths ("account_id", "net.vpc_id").
type ValueFlow struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Edge says Consumer depends on Producer: the consumer is gated until the
// producer is Ready at its current generation, then Flows are applied.
type Edge struct {
	Consumer ID          `json:"consumer"`
	Producer ID          `json:"producer"`
	Flows    []ValueFlow `json:"flows,omitempty"`
}

// EdgesByConsumer groups es by consumer, in their order.
func EdgesByConsumer(es []Edge) map[ID][]Edge {
	m := make(map[ID][]Edge)
	for _, e := range es {
		m[e.Consumer] = append(m[e.Consumer], e)
	}
	return m
}

// SameEdges reports whether a and b, edges of one consumer, are the same
// producers with the same flows, in any order: what a delta compose
// compares to tell a changed child from a kept one.
func SameEdges(a, b []Edge) bool {
	if len(a) != len(b) {
		return false
	}
	key := func(e Edge) string {
		k := string(e.Producer)
		for _, f := range e.Flows {
			k += "\x00" + f.From + "\x01" + f.To
		}
		return k
	}
	x := make([]string, len(a))
	y := make([]string, len(b))
	for i := range a {
		x[i], y[i] = key(a[i]), key(b[i])
	}
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// ProviderConfig is an operator-owned document a worker receives with each
// task of a resource that uses it. Names are globally unique; a config
// belongs to exactly one KindRef.
type ProviderConfig struct {
	Name        string          `json:"name"`
	Kind        string          `json:"kind"`
	KindVersion int             `json:"kind_version"`
	IsDefault   bool            `json:"is_default"`
	Config      json.RawMessage `json:"config"`
	Source      string          `json:"source,omitempty"`
}

// Ref returns the KindRef the config belongs to.
func (c *ProviderConfig) Ref() KindRef { return KindRef{c.Kind, c.KindVersion} }

// Binding subscribes a reactor kind to a transition of resources of a kind.
type Binding struct {
	Name       string `json:"name"`
	Kind       string `json:"kind"`
	Transition string `json:"transition"`
	Reactor    string `json:"reactor"`
	// ReactorVersion is the reactor kind's version (default 1).
	ReactorVersion int    `json:"reactor_version"`
	Source         string `json:"source,omitempty"`
}

// Settings are a repository's converge.cue.
type Settings struct {
	// ResyncInterval is the default for kinds that set none.
	ResyncInterval time.Duration `json:"resync_interval"`
	// PruneLimit is the largest share (0..1) of resources one revision may
	// delete before the prune guard holds it; 0 means the default.
	PruneLimit float64 `json:"prune_limit"`
	// AllowPruneAll lets a revision delete every resource.
	AllowPruneAll bool `json:"allow_prune_all"`
	// ChangeLimit is the most resources one revision may change
	// (create, update, flip, and tear down, composed children included)
	// before the change guard holds it; 0 means no limit.
	ChangeLimit int `json:"change_limit,omitempty"`
	// Workers are the worker processes a local repository asks for.
	Workers []WorkerSpec `json:"workers"`
	// GitTimeout bounds each fetch of the repository and each push of
	// its notes (git_timeout); 0 leaves the default. A --git-timeout
	// flag wins.
	GitTimeout time.Duration `json:"git_timeout,omitempty"`
	// LoadTimeout bounds loading one revision's documents
	// (load_timeout); 0 leaves the default. A --load-timeout flag wins.
	LoadTimeout time.Duration `json:"load_timeout,omitempty"`
	// ForgeTimeout bounds each request posting a commit status to a
	// forge (forge_timeout); 0 leaves the default. --forge-timeout wins.
	ForgeTimeout time.Duration `json:"forge_timeout,omitempty"`
}

// WorkerSpec is a worker process converge starts for a local repository.
type WorkerSpec struct {
	Name string `json:"name"`
	// Builtin names a worker compiled into the converge binary
	// ("classic"); it is started as `converge worker NAME`.
	Builtin string `json:"builtin,omitempty"`
	// Command is argv of an external worker, relative to the repository.
	Command  []string          `json:"command,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Replicas int               `json:"replicas"`
}

// AppliedSource is where the applied revision came from: the repository,
// the sub-directory of its documents and the workers it declares. The
// store keeps it next to the applied revision, so a later command run
// without --repo or --path (delete, do, plan, sync) reads the same tree
// and starts the same workers.
type AppliedSource struct {
	// Repo is a local repository's work-tree root (absolute), or a
	// remote repository's URL.
	Repo string `json:"repo"`
	// Remote marks Repo as a URL: its workers are never started.
	Remote bool `json:"remote,omitempty"`
	// Path is the sub-directory holding the documents, slash-separated
	// and relative to the repository root ("" for the root).
	Path string `json:"path,omitempty"`
	// Ref is the branch followed.
	Ref string `json:"ref,omitempty"`
	// Revision is the applied revision it describes.
	Revision Revision `json:"revision"`
	// Workers are the worker processes the revision's converge.cue
	// declares.
	Workers []WorkerSpec `json:"workers,omitempty"`
	// Declared is how many resources the revision declares: a sync of
	// the same revision can tell one was deleted out from under it.
	Declared int `json:"declared,omitempty"`
	// ResyncInterval is the revision's default resync interval
	// (Settings.ResyncInterval). A new process arms the loaded rows'
	// resyncs with it, so its first Apply of the same settings has no
	// resync to re-arm.
	ResyncInterval time.Duration `json:"resync_interval,omitempty"`
}

// Desired is the whole desired state read from one revision: what a sync
// applies.
type Desired struct {
	Revision Revision
	// Record, when set, is Revision's record as applied: the engine
	// stores it in the batch that makes Revision the applied one
	// (Batch.Record), one write for the two.
	Record    *RevisionRecord
	Settings  Settings
	Kinds     []*Kind
	Configs   []*ProviderConfig
	Bindings  []*Binding
	Resources []*Resource // Origin git, Declared and Source set
	// Edges are the depends_on entries of Resources: each consumer and
	// producer is one of Resources. Sorted by consumer, then producer.
	Edges []Edge
}

// Revision is one commit of the source (or a dirty working tree in dev
// mode).
type Revision struct {
	Ref  string `json:"ref"`  // branch, e.g. "main"
	Hash string `json:"hash"` // full hex
	// Dirty marks uncommitted working-tree content (sync --watch).
	Dirty   bool      `json:"dirty,omitempty"`
	Time    time.Time `json:"time,omitzero"`
	Subject string    `json:"subject,omitempty"`
}

// String returns "main@sha1:<hex>" (Flux's form), or "main@dirty" for a
// working tree.
func (r Revision) String() string {
	if r.Dirty {
		return r.Ref + "@dirty"
	}
	return r.Ref + "@sha1:" + r.Hash
}

// Event is one entry of a resource's history.
type Event struct {
	Seq      uint64    `json:"seq"`
	Time     time.Time `json:"time"`
	Resource ID        `json:"resource"`
	Type     string    `json:"type"`
	Message  string    `json:"message"`
}

// Outcome classifies a task result. The scheduler branches on it, never on
// message text.
type Outcome int

const (
	// OutcomeOK: the reaction succeeded.
	OutcomeOK Outcome = iota
	// OutcomeTransient: retry with backoff.
	OutcomeTransient
	// OutcomePermanent: stop until the spec changes.
	OutcomePermanent
)

func (o Outcome) String() string {
	switch o {
	case OutcomeOK:
		return "ok"
	case OutcomeTransient:
		return "transient"
	case OutcomePermanent:
		return "permanent"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Task is one reaction the control plane asks a worker to run.
type Task struct {
	ID string
	// Key is the idempotency key: uid, generation and reaction. A worker
	// may see the same key twice (at-least-once); the reaction must be
	// safe to repeat.
	Key         string
	Reaction    string
	UID         string
	Kind        string
	KindVersion int
	Name        string
	Generation  int64
	Spec        json.RawMessage
	Status      json.RawMessage
	Config      json.RawMessage // the resolved provider config, or nil
	Args        map[string]string
	Deadline    time.Time
	// MaxChildren is the kind's max_children for a compose task (0: no
	// limit): a dispatcher may stop receiving a composition beyond it.
	MaxChildren int
	// Subject is set for react: the resource whose transition fired.
	Subject *Subject
	// DryRun marks a compose asked only for its answer (plan, the prune
	// guard): nothing of the result is applied, and the composer must not
	// cause side effects for it.
	DryRun bool
	// BaseSpec, for a compose, is the spec of the composition the
	// resource's children are now, composed by a worker of revision
	// BaseRevision (Resource.ComposedBy). A worker of that revision may
	// answer with only what changed since (Result.Delta); any other
	// answers in full. Nil: answer in full.
	BaseSpec     json.RawMessage
	BaseRevision string
}

// Ref returns the task's KindRef.
func (t *Task) Ref() KindRef { return KindRef{t.Kind, t.KindVersion} }

// Subject describes the transition a react task is about.
type Subject struct {
	Resource   ID              `json:"resource"`
	UID        string          `json:"uid"`
	Generation int64           `json:"generation"`
	Transition string          `json:"transition"`
	Status     json.RawMessage `json:"status,omitempty"`
}

// Result is a worker's answer to a Task.
type Result struct {
	TaskID  string
	Worker  string
	Outcome Outcome
	Message string
	// Status replaces the resource's status when non-nil.
	Status json.RawMessage
	// Children and Edges are a compose reaction's output.
	Children []Child
	Edges    []Edge
	// Delta marks a compose answered against the task's BaseSpec:
	// Children are only the added and changed children, each with every
	// edge it consumes, and Removed the children the spec no longer
	// yields; every other child stays as it is.
	Delta   bool
	Removed []ID
	// Revision identifies the composing worker's code: the same spec
	// composed by the same revision yields the same composition. Workers
	// that answer deltas set it.
	Revision string
	// Observed is an observe reaction's answer (nil for any other).
	Observed *Observation
}

// Observation is what an observe reaction found on the real system.
type Observation struct {
	// Exists says whether the object is there at all.
	Exists bool
	// Actual is the object's actual fields, a JSON object in the shape
	// of the spec, holding the spec fields the provider can read (never
	// a secret it cannot: a password is not read back). Drift compares
	// it with the spec.
	Actual json.RawMessage
	// Managed says the object carries converge's mark (it created or
	// adopted it); an existing object without it is not converge's to
	// change or delete until the resource asks to adopt it.
	Managed bool
}

// Child is one resource a composer emits.
type Child struct {
	Kind              string          `json:"kind"`
	KindVersion       int             `json:"kind_version"`
	Name              string          `json:"name"`
	Spec              json.RawMessage `json:"spec"`
	ProviderConfigRef string          `json:"provider_config_ref,omitempty"`
	// Added, in a delta (Result.Delta), marks a child the base
	// composition did not have: one of that name already there is a
	// duplicate.
	Added bool `json:"added,omitempty"`
}

// Counts tallies resources by phase; a composition root's rollup.
type Counts struct {
	Total    int `json:"total"`
	Ready    int `json:"ready"`
	Failed   int `json:"failed"`
	Pending  int `json:"pending"`
	Running  int `json:"running"`
	Deleting int `json:"deleting"`
}

// Add counts one resource in phase p.
func (c *Counts) Add(p Phase) {
	c.Total++
	switch p {
	case PhaseReady:
		c.Ready++
	case PhaseFailed:
		c.Failed++
	case PhasePending:
		c.Pending++
	case PhaseRunning:
		c.Running++
	case PhaseDeleting:
		c.Deleting++
	}
}

// ErrNotFound is returned (wrapped) when a command or a read names a
// resource, revision or other keyed record that does not exist. It is the
// one sentinel for that condition: the store, the scheduler and the admin
// API all return it, and the CLI maps it to exit 1 and the admin API to
// HTTP 404.
var ErrNotFound = errors.New("not found")

// ErrNoWorker is returned (wrapped) when no connected worker serves a
// task's kind version and reaction, or all that do are at capacity.
var ErrNoWorker = errors.New("no worker")

// RowError is one resource of a Batch that a Store cannot keep: a row
// the store refuses (an invalid name, invalid JSON, an owner that does not
// exist). It is the unit of RejectedError.
type RowError struct {
	ID  ID
	Err error
}

func (e RowError) Error() string { return string(e.ID) + ": " + e.Err.Error() }

// RejectedError is returned (wrapped) by a Store's Commit when some
// resources of a batch cannot be stored. Nothing of the batch was
// committed; the same batch without those resources can be. A scheduler
// takes the refused rows out and commits the rest, so one bad row never
// stops durable progress.
type RejectedError struct {
	Rows []RowError
}

func (e *RejectedError) Error() string {
	if len(e.Rows) == 1 {
		return "resource " + e.Rows[0].Error()
	}
	return "resource " + e.Rows[0].Error() + " (and " + strconv.Itoa(len(e.Rows)-1) + " more refused rows)"
}
