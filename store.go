package converge

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Snapshot is the whole durable state, as loaded when a scheduler starts.
type Snapshot struct {
	Resources  []*Resource
	Edges      []Edge
	Kinds      []*Kind
	Configs    []*ProviderConfig
	Bindings   []*Binding
	Deliveries []*Delivery
	// Applied is the revision whose desired state is applied, if any.
	Applied *Revision
	// LastEventSeq is the highest event sequence number ever written.
	LastEventSeq uint64
}

// Batch is one atomic change to the store: everything in it is committed in
// one transaction or not at all. Puts replace by key; deletes of absent
// keys are no-ops.
type Batch struct {
	Resources []*Resource // keyed by ID
	// DeletedResources go with the edges they consume (no DeletedEdges
	// needed). A resource that still owns one not deleted in the same
	// batch is refused.
	DeletedResources []ID
	Edges            []Edge // keyed by (Consumer, Producer)
	DeletedEdges     []Edge // only Consumer and Producer are read
	Events           []Event
	Kinds            []*Kind // keyed by Ref
	DeletedKinds     []KindRef
	Configs          []*ProviderConfig // keyed by Name
	DeletedConfigs   []string
	Bindings         []*Binding // keyed by Name
	DeletedBindings  []string
	Deliveries       []*Delivery // keyed by Key
	// DeletedDeliveries are delivery keys to remove: done deliveries the
	// dedup no longer needs (see the retention policy in
	// docs/ARCHITECTURE.md). A key both put and deleted is refused.
	DeletedDeliveries []string
	Applied           *Revision
	// Record is a revision record to store (replacing one of its hash,
	// the records then trimmed) as PutRevision stores it: the applied
	// revision's, in the batch that makes it Applied, so that the store
	// never holds an applied revision without its record, nor a record
	// saying applied for a revision that is not.
	Record *RevisionRecord
}

// Empty reports whether the batch changes nothing.
func (b *Batch) Empty() bool {
	return len(b.Resources) == 0 && len(b.DeletedResources) == 0 && len(b.Edges) == 0 &&
		len(b.DeletedEdges) == 0 && len(b.Events) == 0 && len(b.Kinds) == 0 &&
		len(b.DeletedKinds) == 0 && len(b.Configs) == 0 && len(b.DeletedConfigs) == 0 &&
		len(b.Bindings) == 0 && len(b.DeletedBindings) == 0 && len(b.Deliveries) == 0 &&
		len(b.DeletedDeliveries) == 0 && b.Applied == nil && b.Record == nil
}

// Delivery is one reactor invocation owed for one transition: the outbox
// row that makes reactors at-least-once and deduplicated. Key is
// binding/uid/generation/transition; a delivery is kept after Done so the
// same transition never fires twice, until its subject's generation is
// superseded or its subject is deleted (docs/ARCHITECTURE.md, "Retention").
type Delivery struct {
	Key         string    `json:"key"`
	Binding     string    `json:"binding"`
	Reactor     KindRef   `json:"reactor"`
	Subject     Subject   `json:"subject"`
	Done        bool      `json:"done"`
	Attempts    int       `json:"attempts"`
	LastError   string    `json:"last_error,omitempty"`
	NextAttempt time.Time `json:"next_attempt,omitzero"`
	Created     time.Time `json:"created"`
}

// Finding is one problem with a document or a schema change, positioned in
// the repository. Validation errors and lint findings share this shape,
// which is also the stable JSON of `validate -o json` and `lint -o json`.
type Finding struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Path    string `json:"path"`
	Rule    string `json:"rule"`
	Message string `json:"message"`
}

// String renders "file:line:col: path: message" (the house error form).
func (f Finding) String() string {
	pos := f.File
	if f.Line > 0 {
		pos = fmt.Sprintf("%s:%d:%d", f.File, f.Line, f.Column)
	}
	if pos == "" {
		pos = "<repository>"
	}
	if f.Path != "" {
		return pos + ": " + f.Path + ": " + f.Message
	}
	return pos + ": " + f.Message
}

// Commit-status contexts converge reports on every commit.
const (
	ContextValidate = "converge/validate"
	ContextLint     = "converge/lint"
	ContextSync     = "converge/sync"
)

// Commit-status states (GitHub's vocabulary; reporters map to others).
const (
	StatePending = "pending"
	StateSuccess = "success"
	StateFailure = "failure"
	StateError   = "error"
)

// CommitStatus is one context's verdict on a commit.
type CommitStatus struct {
	Context     string    `json:"context"`
	State       string    `json:"state"`
	Description string    `json:"description"`
	TargetURL   string    `json:"target_url,omitempty"`
	Time        time.Time `json:"time"`
}

// RevisionRecord is what converge concluded about one commit.
type RevisionRecord struct {
	Revision Revision       `json:"revision"`
	Parent   string         `json:"parent,omitempty"`
	Statuses []CommitStatus `json:"statuses"`
	Errors   []Finding      `json:"errors,omitempty"`
	Findings []Finding      `json:"findings,omitempty"`
	Applied  bool           `json:"applied"`
	// Held is why a valid revision was not applied (prune guard,
	// superseded), or "".
	Held string `json:"held,omitempty"`
	// Override says which guard an applied revision went past and who
	// asked for it (a Converge-Override trailer in its commit message,
	// or sync --override-change-limit), or "".
	Override string    `json:"override,omitempty"`
	Seen     time.Time `json:"seen"`
}

// Status returns the record's status for context, or false.
func (r *RevisionRecord) Status(context string) (CommitStatus, bool) {
	for _, s := range r.Statuses {
		if s.Context == context {
			return s, true
		}
	}
	return CommitStatus{}, false
}

// Clone returns a copy of r that shares no memory with it.
func (r *RevisionRecord) Clone() *RevisionRecord {
	if r == nil {
		return nil
	}
	c := *r
	c.Statuses = slices.Clone(r.Statuses)
	c.Errors = slices.Clone(r.Errors)
	c.Findings = slices.Clone(r.Findings)
	return &c
}

// SetStatus replaces (or adds) the status of s.Context.
func (r *RevisionRecord) SetStatus(s CommitStatus) {
	for i := range r.Statuses {
		if r.Statuses[i].Context == s.Context {
			r.Statuses[i] = s
			return
		}
	}
	r.Statuses = append(r.Statuses, s)
}

// CloneJSON returns a copy of b that shares no memory with it.
func CloneJSON(b json.RawMessage) json.RawMessage {
	if b == nil {
		return nil
	}
	return append(json.RawMessage(nil), b...)
}
