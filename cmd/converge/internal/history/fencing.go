package history

import (
	"fmt"
	"sort"
	"time"
)

// Write is one transaction a replica sent to etcd that writes the
// store's data (anything under the prefix but the lock, the election
// and the sync request), as its etcd client saw it: the create
// revisions its comparisons required of the lock key and of an election
// key (0 when it had no such comparison), and, once answered, the
// revision it committed at.
type Write struct {
	Replica string `json:"replica"`
	PID     int    `json:"pid"`
	Seq     int64  `json:"seq"`
	// Lock and Election are the create revisions the transaction was
	// conditioned on; ElectionKey the election key compared.
	Lock        int64  `json:"lock"`
	Election    int64  `json:"election"`
	ElectionKey string `json:"election_key,omitempty"`
	Keys        int    `json:"keys"`
	FirstKey    string `json:"first_key"`
	Call        int64  `json:"call"`
	// Return is 0 when no answer was recorded (the process died first);
	// Succeeded and Rev are then unknown.
	Return    int64  `json:"return,omitempty"`
	Succeeded bool   `json:"succeeded,omitempty"`
	Rev       int64  `json:"rev,omitempty"`
	Err       string `json:"err,omitempty"`
}

func (w Write) String() string {
	return fmt.Sprintf("%s (pid %d) txn %d at rev %d: %d keys from %s, fenced on lock %d and election %d",
		w.Replica, w.PID, w.Seq, w.Rev, w.Keys, w.FirstKey, w.Lock, w.Election)
}

// Observed is a revision at which a watcher of the prefix saw the
// store's data change, and the keys it changed.
type Observed struct {
	Rev  int64    `json:"rev"`
	Keys []string `json:"keys"`
}

// FenceReport is what CheckFencing found.
type FenceReport struct {
	Terms, Writes int
	// Unrecorded counts observed revisions no recorded answer explains
	// but a call left unanswered by a process that died can.
	Unrecorded int
	Violations []string
}

// CheckFencing checks the writes (every recorded call, answered or not)
// and the revisions a watcher saw against the fencing promise (package
// doc). A term is an election key's create revision.
func CheckFencing(writes []Write, seen []Observed) FenceReport {
	var rep FenceReport
	type term struct {
		election   int64
		replica    string
		firstWrite int64
	}
	terms := map[int64]*term{}
	byRev := map[int64]bool{}
	unanswered := map[string]int{} // first key → calls never answered
	for _, w := range writes {
		if w.Return == 0 {
			unanswered[w.FirstKey]++
			continue
		}
		if !w.Succeeded {
			continue
		}
		rep.Writes++
		byRev[w.Rev] = true
		if w.Lock == 0 || w.Election == 0 {
			rep.Violations = append(rep.Violations, "an unfenced write: "+w.String())
			continue
		}
		t := terms[w.Election]
		if t == nil {
			t = &term{election: w.Election, replica: w.Replica, firstWrite: w.Rev}
			terms[w.Election] = t
		}
		if t.replica != w.Replica {
			rep.Violations = append(rep.Violations, fmt.Sprintf("term %d written by two replicas, %s and %s: %s", w.Election, t.replica, w.Replica, w))
		}
		t.firstWrite = min(t.firstWrite, w.Rev)
	}
	rep.Terms = len(terms)
	order := make([]*term, 0, len(terms))
	for _, t := range terms {
		order = append(order, t)
	}
	sort.Slice(order, func(i, j int) bool { return order[i].election < order[j].election })
	// newerFirst[i] is the earliest first write of a term after order[i].
	newerFirst := make([]int64, len(order))
	next := int64(1<<63 - 1)
	for i := len(order) - 1; i >= 0; i-- {
		newerFirst[i] = next
		next = min(next, order[i].firstWrite)
	}
	pos := map[int64]int{}
	for i, t := range order {
		pos[t.election] = i
	}
	for _, w := range writes {
		if w.Return == 0 || !w.Succeeded || w.Election == 0 || w.Lock == 0 {
			continue
		}
		if i := pos[w.Election]; w.Rev > newerFirst[i] {
			rep.Violations = append(rep.Violations, fmt.Sprintf("a deposed leader's write: %s landed after a newer term's first write at rev %d", w, newerFirst[i]))
		}
	}
	// Every observed revision is a recorded write, or the unanswered
	// call of a process that died (matched by a key it wrote first).
	explained := map[int64]bool{}
	for _, o := range seen {
		if byRev[o.Rev] || explained[o.Rev] {
			continue
		}
		if k := matchUnanswered(unanswered, o.Keys); k != "" {
			unanswered[k]--
			explained[o.Rev] = true
			rep.Unrecorded++
			continue
		}
		rep.Violations = append(rep.Violations, fmt.Sprintf("a write nobody recorded: rev %d changed %d keys from %s", o.Rev, len(o.Keys), first(o.Keys)))
		explained[o.Rev] = true
	}
	return rep
}

// matchUnanswered returns the first key of an unanswered call that could
// have written keys: a call whose first key is one of them.
func matchUnanswered(unanswered map[string]int, keys []string) string {
	for _, k := range keys {
		if unanswered[k] > 0 {
			return k
		}
	}
	return ""
}

func first(keys []string) string {
	if len(keys) == 0 {
		return "(none)"
	}
	return keys[0]
}

func stamp(ns int64) string { return time.Unix(0, ns).UTC().Format("15:04:05.000") }
