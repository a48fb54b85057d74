package history

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Delivery is one react task a reactor target completed successfully:
// its key (binding/uid/generation/transition, scheduler/reactor.go) and
// the subject it was about, as the target saw them.
type Delivery struct {
	Worker     string `json:"worker"`
	Key        string `json:"key"`
	Resource   string `json:"resource"`
	UID        string `json:"uid"`
	Gen        int64  `json:"gen"`
	Transition string `json:"transition"`
	// Status is a digest of the subject's status.
	Status string `json:"status"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
}

// Fault is one fault the run injected, at At (Unix nanoseconds).
// LosesResults marks one that can lose a task's result after the worker
// completed it and before the leader recorded it (a worker killed: its
// results not yet sent), so that the task runs again; a leader's fault
// does so through the term that follows it, which Check finds in the
// writes.
type Fault struct {
	What         string `json:"what"`
	At           int64  `json:"at"`
	LosesResults bool   `json:"loses_results,omitempty"`
}

// DeliveryReport is what CheckDeliveries found: Violations, Known
// violations (of an open issue, named by their prefix), and the retries
// it allowed (a key completed again after a fault).
type DeliveryReport struct {
	Keys       int
	Retries    []string
	Violations []string
	Known      []string
}

// KnownDispatchBeforeDurable names an issue the histories found, fixed
// since (docs/ARCHITECTURE.md, "Histories checked"): the scheduler
// dispatched a reactor delivery as soon as its transition fired, before
// the batch that records the transition and its outbox row was
// committed. When the leader lost its term before that commit, the
// target had a delivery the store never recorded, and the next leader
// fired the transition again, with the status of its own time: one key,
// two bodies. A delivery now waits for that commit (scheduler/reactor.go);
// the evidence is still filed under this name should it come back.
const KnownDispatchBeforeDurable = "known issue: a delivery dispatched before its outbox row was durable"

// outboxRow is the first observed revision that wrote a delivery's
// outbox row: At when the write landing at it was sent (else when it
// was seen), Durable when that write's success was answered (0 when its
// writer never learned it: an answer lost, an error though it landed).
type outboxRow struct {
	Rev, At, Durable int64
}

// outboxRows returns, by delivery key, the first observed revision
// that wrote its outbox row (a key ending in /d/KEY).
func outboxRows(seen []Observed, writes []Write) map[string]outboxRow {
	byRev := map[int64]Write{}
	for _, w := range writes {
		if w.Rev != 0 {
			byRev[w.Rev] = w
		}
	}
	out := map[string]outboxRow{}
	for _, o := range seen {
		for _, k := range o.Keys {
			i := strings.LastIndex(k, "/d/")
			if i < 0 {
				continue
			}
			key := k[i+len("/d/"):]
			if f, ok := out[key]; !ok || o.Rev < f.Rev {
				row := outboxRow{Rev: o.Rev, At: o.At}
				if w, ok := byRev[o.Rev]; ok {
					row.At = w.Call
					if w.Succeeded {
						row.Durable = w.Return
					}
				}
				out[key] = row
			}
		}
	}
	return out
}

// CheckDeliveries checks the deliveries against the outbox's promise:
// one key per transition (the key names its subject), one subject per
// key, and a key completed again only if its first completion's result
// could have been lost: a new term began (the last one had not recorded
// it done), or a fault that loses results came, between the first
// completion's call and the repeat's. Terms begin at their first write
// (TermStarts); writes and seen also date each outbox row.
//
// A delivery is dispatched only once its outbox row is durable: its key
// never delivered without a row in the store, nor its first delivery
// called before the write that first stored its row was answered (when
// that answer is recorded).
//
// A key with two subjects is the outbox's dedup failing: the transition
// fired twice. When its first completion came before the transaction
// that first wrote its outbox row (d/KEY) was sent, the report files it
// under Known: the delivery was dispatched before it was durable, and a
// later term fired the transition again (KnownDispatchBeforeDurable).
func CheckDeliveries(ds []Delivery, faults []Fault, writes []Write, seen []Observed) DeliveryReport {
	var rep DeliveryReport
	durable := outboxRows(seen, writes)
	at := TermStarts(writes)
	for _, f := range faults {
		if f.LosesResults {
			at = append(at, f.At)
		}
	}
	sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
	byKey := map[string][]Delivery{}
	var keys []string
	for _, d := range ds {
		if _, ok := byKey[d.Key]; !ok {
			keys = append(keys, d.Key)
		}
		byKey[d.Key] = append(byKey[d.Key], d)
	}
	rep.Keys = len(keys)
	for _, k := range keys {
		l := byKey[k]
		sort.Slice(l, func(i, j int) bool { return l[i].Call < l[j].Call })
		first := l[0]
		switch row, ok := durable[k]; {
		case !ok:
			rep.Violations = append(rep.Violations, fmt.Sprintf("delivery %s was delivered (by %s at %s) with no outbox row d/%s in the store",
				k, first.Worker, stamp(first.Call), k))
		case row.Durable != 0 && first.Call < row.Durable:
			rep.Violations = append(rep.Violations, fmt.Sprintf("delivery %s was dispatched before its outbox row was durable: delivered by %s at %s, its row d/%s first written at rev %d, answered at %s",
				k, first.Worker, stamp(first.Call), k, row.Rev, stamp(row.Durable)))
		}
		if want := "/" + first.UID + "/" + strconv.FormatInt(first.Gen, 10) + "/" + first.Transition; !strings.HasSuffix(k, want) {
			rep.Violations = append(rep.Violations, fmt.Sprintf("delivery %s is about %s uid %s gen %d %s: its key does not name its subject (want …%s)",
				k, first.Resource, first.UID, first.Gen, first.Transition, want))
		}
		for _, d := range l[1:] {
			if d.UID != first.UID || d.Gen != first.Gen || d.Transition != first.Transition || d.Status != first.Status {
				msg := fmt.Sprintf("delivery %s carried two subjects: %s gen %d %s status %.8s (worker %s, %s), then %s gen %d %s status %.8s (worker %s, %s)",
					k, first.Resource, first.Gen, first.Transition, first.Status, first.Worker, stamp(first.Return),
					d.Resource, d.Gen, d.Transition, d.Status, d.Worker, stamp(d.Return))
				if row, ok := durable[k]; !ok || first.Return < row.At {
					when := "never seen in the store"
					if ok {
						when = fmt.Sprintf("first written at rev %d by a transaction sent at %s", row.Rev, stamp(row.At))
					}
					rep.Known = append(rep.Known, KnownDispatchBeforeDurable+": "+msg+"; the first completion came before its outbox row d/"+k+" was durable ("+when+")")
					continue
				}
				rep.Violations = append(rep.Violations, msg)
				continue
			}
			// A term or a fault in (first.Call, d.Call] may have lost
			// the first completion's result; none there means a
			// delivery already done was dispatched again.
			i := sort.Search(len(at), func(i int) bool { return at[i] > first.Call })
			if i < len(at) && at[i] <= d.Call {
				rep.Retries = append(rep.Retries, fmt.Sprintf("%s again %.2fs after its first completion (a new term or a lost worker between)", k, float64(d.Call-first.Return)/1e9))
				continue
			}
			rep.Violations = append(rep.Violations, fmt.Sprintf("delivery %s completed twice with no new term and no lost worker between: by %s at %s, again by %s at %s",
				k, first.Worker, stamp(first.Return), d.Worker, stamp(d.Call)))
		}
	}
	return rep
}
