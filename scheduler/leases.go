package scheduler

import (
	"strconv"
	"sync"
	"time"

	"github.com/convergehq/converge"
)

// leases is the loop's dispatch part: the work waiting to be dispatched
// (the ready queue, the parked, the KindRefs' waiting lists), the tasks
// out with workers and their leases, the timers (retries, lease expiry,
// delivery retries, rollouts, resync buckets) and the tallies Progress
// reads. Its methods touch only this state and the nodes it queues.
type leases struct {
	refs   map[converge.KindRef]*refState
	roomy  []*refState
	serves map[servesKey]bool

	queue     []*node
	queueHead int
	parked    []*node

	tasks    map[string]*taskRec
	taskPref string
	taskSeq  uint64
	// taskRefs maps a dispatched task's id to its KindRef for the
	// checker goroutines of Run's result stage.
	taskRefs sync.Map
	timers   timerHeap
	// leaseTimers counts the timerLease entries in timers, stale ones
	// (of tasks that already ended) included: see compactTimers.
	leaseTimers int
	resyncs     resyncBuckets
	timerSeq    uint64
	backoffN    int
	inflight    int

	dispatched, completed uint64
}

func (l *leases) enqueue(n *node) {
	if n == nil || n.has(mQueued) || n.is(stateRemoved) {
		return
	}
	n.set(mQueued)
	l.queue = append(l.queue, n)
}

// dequeue takes the ready queue's next node, or returns nil (the queue
// is then empty, and reset).
func (l *leases) dequeue() *node {
	if l.queueHead == len(l.queue) {
		l.queue = l.queue[:0]
		l.queueHead = 0
		return nil
	}
	n := l.queue[l.queueHead]
	l.queue[l.queueHead] = nil
	l.queueHead++
	n.unset(mQueued)
	return n
}

// takeRoomy returns the KindRefs that got room with work waiting, and
// forgets them.
func (l *leases) takeRoomy() []*refState {
	roomy := l.roomy
	l.roomy = nil
	for _, rs := range roomy {
		rs.inRoomy = false
	}
	return roomy
}

// nextWaiting takes the next item waiting for a slot of rs while rs has
// a worker and a free slot.
func (rs *refState) nextWaiting() (waitItem, bool) {
	if len(rs.waiting) == 0 || rs.noWorker || rs.inflight >= rs.max {
		return waitItem{}, false
	}
	w := rs.waiting[0]
	rs.waiting[0] = waitItem{}
	rs.waiting = rs.waiting[1:]
	return w, true
}

// room notes that rs has room: pump gives its waiting work a slot.
func (l *leases) room(rs *refState) {
	if rs.inRoomy || len(rs.waiting) == 0 {
		return
	}
	rs.inRoomy = true
	l.roomy = append(l.roomy, rs)
}

// waitingForSlot reports whether a served KindRef has work queued for
// capacity: a worker said it is full, which frees up without an outside
// change.
func (l *leases) waitingForSlot() bool {
	for _, rs := range l.refs {
		if len(rs.waiting) > 0 {
			return true
		}
	}
	return false
}

func (l *leases) newTaskID() string {
	l.taskSeq++
	b := make([]byte, 0, len(l.taskPref)+12)
	b = append(b, l.taskPref...)
	b = strconv.AppendUint(b, l.taskSeq, 36)
	return string(b)
}

// parkNode keeps n, whose reaction no connected worker serves, until the
// workers change (unpark).
func (l *leases) parkNode(n *node) {
	n.to(stateParked)
	l.parked = append(l.parked, n)
}

// unpark queues every parked node again: the workers changed. A node
// no longer parked (marked deleting since, then blocked) keeps its
// state.
func (l *leases) unpark() {
	parked := l.parked
	l.parked = nil
	for _, n := range parked {
		n.leave(stateParked)
		l.enqueue(n)
	}
}

// blockNode keeps n in rs's waiting list until rs has room (pump).
func (l *leases) blockNode(n *node, rs *refState) {
	n.to(stateBlocked)
	rs.waiting = append(rs.waiting, waitItem{n: n})
}

// backOff holds n back until at, its retry (a timerRetry entry).
func (l *leases) backOff(n *node, at time.Time) {
	if !n.is(stateBackoff) {
		n.to(stateBackoff)
		l.backoffN++
	}
	l.addTimer(at, timerRetry, n.id, "")
}

// endBackoff frees n if it is backing off; its retry timer, if still in
// the heap, finds it free and does nothing.
func (l *leases) endBackoff(n *node) {
	if n.is(stateBackoff) {
		n.to(stateFree)
		l.backoffN--
	}
}

type servesKey struct {
	ref      converge.KindRef
	reaction string
}

// refState is the dispatch state of one KindRef.
type refState struct {
	ref      converge.KindRef
	inflight int
	noWorker bool
	inRoomy  bool
	waiting  []waitItem
	count    int // resources of this ref
	// stats are this ref's counters for Metrics.
	stats refStats
	// cached from the kind (refreshKind)
	kind     *converge.Kind
	composer bool
	max      int

	queuedReason string
}

// waitItem is a node or a delivery waiting for a slot of its KindRef.
type waitItem struct {
	n *node
	d *converge.Delivery
}

// taskKind says what a task is for.
type taskKind uint8

const (
	taskMain taskKind = iota
	taskTeardown
	taskReact
	taskVerb
)

// taskRec is a task out with a worker (or a local composer).
type taskRec struct {
	kind     taskKind
	id       converge.ID
	gen      int64
	ref      converge.KindRef
	reaction string
	resync   bool
	key      string // delivery key
	verb     chan verbOutcome
	counted  bool // holds an inflight slot
	dry      bool // a dry-run compose (taskVerb): answered, never applied
	// config is the context a compose was sent in (composeContext), and
	// base whether it carried a base spec (a delta answer is only taken
	// then).
	config string
	base   bool
	// started is when the task was dispatched (its latency, Metrics);
	// stats are the counters it is counted in.
	started time.Time
	stats   *TaskStats
}

type verbOutcome struct {
	res *converge.Result
	err error
}
