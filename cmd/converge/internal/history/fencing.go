package history

import (
	"fmt"
	"sort"
	"strings"
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
	// CreateOnly: the transaction was conditioned on its only key not
	// existing (the store's format key, written once): it can overwrite
	// nothing, so it needs no fence.
	CreateOnly bool   `json:"create_only,omitempty"`
	Keys       int    `json:"keys"`
	FirstKey   string `json:"first_key"`
	Call       int64  `json:"call"`
	// Return is 0 when no answer was recorded (the process died first);
	// Succeeded and Rev are then unknown, as they are after an Err.
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
	// At is when the watcher received it (Unix nanoseconds): after the
	// revision was committed.
	At int64 `json:"at,omitempty"`
}

// FenceReport is what CheckFencing found.
type FenceReport struct {
	Terms, Writes int
	// Unrecorded counts observed revisions no successful answer
	// explains but a call whose outcome its writer never learned does:
	// no answer (the process died) or an error such as a connection
	// reset, after which etcd may still have committed it. Such a call
	// is judged as a write at that revision.
	Unrecorded int
	Violations []string
}

// CheckFencing checks the writes (every recorded call, answered or not,
// failed or not)
// and the revisions a watcher saw against the fencing promise (package
// doc). A term is an election key's create revision.
func CheckFencing(writes []Write, seen []Observed) FenceReport {
	var rep FenceReport
	var landed []Write // the writes that committed: answered, or seen
	byRev := map[int64]bool{}
	var unanswered []Write
	for _, w := range writes {
		switch {
		case w.Return == 0 || w.Err != "":
			// No answer (its process died) or an error (a connection
			// reset mid-call): it may have landed all the same.
			unanswered = append(unanswered, w)
		case w.Succeeded:
			landed = append(landed, w)
			byRev[w.Rev] = true
		}
	}
	// Every observed revision is a recorded write, or a call whose
	// outcome its writer never learned (one whose first key it changed):
	// that call landed, at that revision, and is judged with the rest.
	explained := map[int64]bool{}
	for _, o := range seen {
		if byRev[o.Rev] || explained[o.Rev] {
			continue
		}
		explained[o.Rev] = true
		if i := matchUnanswered(unanswered, o); i >= 0 {
			w := unanswered[i]
			unanswered = append(unanswered[:i], unanswered[i+1:]...)
			w.Succeeded, w.Rev = true, o.Rev
			landed = append(landed, w)
			rep.Unrecorded++
			continue
		}
		rep.Violations = append(rep.Violations, fmt.Sprintf("a write nobody recorded: rev %d changed %d keys from %s", o.Rev, len(o.Keys), first(o.Keys)))
	}
	rep.Writes = len(landed)

	type term struct {
		replica    string
		firstWrite int64
	}
	terms := map[int64]*term{}
	for _, w := range landed {
		if w.CreateOnly {
			continue
		}
		if w.Lock == 0 || w.Election == 0 {
			rep.Violations = append(rep.Violations, "an unfenced write: "+w.String())
			continue
		}
		t := terms[w.Election]
		if t == nil {
			t = &term{replica: w.Replica, firstWrite: w.Rev}
			terms[w.Election] = t
		}
		if t.replica != w.Replica {
			rep.Violations = append(rep.Violations, fmt.Sprintf("term %d written by two replicas, %s and %s: %s", w.Election, t.replica, w.Replica, w))
		}
		t.firstWrite = min(t.firstWrite, w.Rev)
	}
	rep.Terms = len(terms)
	elections := make([]int64, 0, len(terms))
	for e := range terms {
		elections = append(elections, e)
	}
	sort.Slice(elections, func(i, j int) bool { return elections[i] < elections[j] })
	// newerFirst[e] is the earliest first write of a term newer than e.
	newerFirst := map[int64]int64{}
	next := int64(1<<63 - 1)
	for i := len(elections) - 1; i >= 0; i-- {
		newerFirst[elections[i]] = next
		next = min(next, terms[elections[i]].firstWrite)
	}
	for _, w := range landed {
		if w.CreateOnly || w.Election == 0 || w.Lock == 0 {
			continue
		}
		if f := newerFirst[w.Election]; w.Rev > f {
			rep.Violations = append(rep.Violations, fmt.Sprintf("a deposed leader's write: %s landed after a newer term's first write at rev %d", w, f))
		}
	}
	return rep
}

// matchUnanswered returns the index of an unanswered call that could
// have written o's keys (its first key is one of them, or, for a range
// delete such as the journal's, a prefix of one), sent before o was
// seen, or -1. Of several, the newest term's: a revision is a
// violation only if no call that could have made it is legal.
func matchUnanswered(unanswered []Write, o Observed) int {
	best := -1
	for i, w := range unanswered {
		if o.At != 0 && w.Call > o.At {
			continue
		}
		for _, k := range o.Keys {
			if w.FirstKey == k || strings.HasSuffix(w.FirstKey, "/") && strings.HasPrefix(k, w.FirstKey) {
				if best < 0 || w.Election > unanswered[best].Election {
					best = i
				}
				break
			}
		}
	}
	return best
}

func first(keys []string) string {
	if len(keys) == 0 {
		return "(none)"
	}
	return keys[0]
}

func stamp(ns int64) string { return time.Unix(0, ns).UTC().Format("15:04:05.000") }
