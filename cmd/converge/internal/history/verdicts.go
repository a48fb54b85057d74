package history

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// The verdict states a read can return besides a final one: no record
// of the revision yet, and a record whose converge/sync status is
// pending (or missing).
const (
	Absent  = "absent"
	Pending = "pending"
)

// VerdictRead is one read of one revision's converge/sync verdict by a
// polling client: State is Absent, Pending or the final state (success,
// failure, error), Description the status's description for a final
// one. Call and Return bracket the read (Unix nanoseconds).
type VerdictRead struct {
	Client      int    `json:"client"`
	Revision    string `json:"revision"`
	State       string `json:"state"`
	Description string `json:"description,omitempty"`
	Call        int64  `json:"call"`
	Return      int64  `json:"return"`
}

// verdict is what a read returned: the register's value.
type verdict struct{ state, description string }

func (v verdict) final() bool { return v.state != Absent && v.state != Pending }

func (v verdict) String() string {
	if v.final() {
		return v.state + ": " + v.description
	}
	return v.state
}

// stepVerdict is VerdictModel's Step: a read of v after the register
// holds s.
func stepVerdict(s, v verdict) (bool, verdict) {
	switch {
	case s.final():
		return v == s, s // a final verdict never changes
	case s.state == Pending && v.state == Absent:
		return false, s // a record read once never vanishes
	case v.state == Pending:
		return true, verdict{state: Pending}
	default:
		return true, v
	}
}

// KnownErrorVerdictRevised names an issue fixed since
// (docs/ARCHITECTURE.md, "Histories checked"): a revision whose apply
// failed (a commit refused while etcd changed leaders) was given the
// verdict error, which sync.FinalVerdict calls final (converge reconcile
// returns it), yet the next pass applied the revision again and replaced
// the verdict with pending, then success. A failed apply is pending now
// (sync.Syncer.Apply).
const KnownErrorVerdictRevised = "known issue: an error verdict revised"

// errorRevisable is VerdictModel with error not final: what readers see
// if an error verdict only says "not yet". Check files a partition that
// only it accepts under KnownErrorVerdictRevised.
var errorRevisable = func() porcupine.Model {
	m := VerdictModel
	m.Step = func(state, _, output any) (bool, any) {
		s, v := state.(verdict), output.(verdict)
		if s.state == "error" {
			s = verdict{state: Pending}
		}
		return stepVerdict(s, v)
	}
	return m
}()

// VerdictModel is the porcupine model of one revision's verdict: a
// register that only moves forward, absent → pending → final, and stays
// final. Inputs are the revision (for Partition), outputs the verdict
// read.
var VerdictModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		return partition(h, func(op porcupine.Operation) string { return op.Input.(string) })
	},
	Init: func() any { return verdict{state: Absent} },
	Step: func(state, _, output any) (bool, any) {
		return stepVerdict(state.(verdict), output.(verdict))
	},
	Equal: func(a, b any) bool { return a.(verdict) == b.(verdict) },
	DescribeOperation: func(input, output any) string {
		return fmt.Sprintf("read %.7s → %s", input.(string), output.(verdict))
	},
	DescribeState: func(state any) string { return state.(verdict).String() },
}

// VerdictOperations turns reads into porcupine operations.
func VerdictOperations(reads []VerdictRead) []porcupine.Operation {
	ops := make([]porcupine.Operation, 0, len(reads))
	for _, r := range reads {
		v := verdict{state: r.State}
		if v.final() {
			v.description = r.Description
		}
		ops = append(ops, porcupine.Operation{ClientId: r.Client, Input: r.Revision, Output: v, Call: r.Call, Return: r.Return})
	}
	return ops
}

// KnownVerdictLostAtTermStart names an issue fixed since
// (docs/ARCHITECTURE.md, "Histories checked"): a verdict was lost across
// a term that ended while its leader wrote. The revision a leader
// applied was recorded in two writes, the scheduler's batch that made it
// the applied one (its meta.Applied) and then its revision record
// ("applied, converging"); a term that ended between them, or whose
// apply failed though its batch journal had passed its commit point
// (the next leader replays it), left the store an applied revision
// without a record, and the next leader forgot the revision that was
// awaiting its verdict (pending for good); a new term whose first reads
// failed ("resume pending verdict") forgot it too. The two are one batch
// now (converge.Batch.Record), and the follow loop reads a pending
// verdict again until a read succeeds and writes a verdict again until
// its write lands.
const KnownVerdictLostAtTermStart = "known issue: a verdict lost across a term change"

// CheckSettled checks the verdicts of a run that ended converged: every
// revision's last read (by any client) is final. converge never leaves
// a verdict pending (an applied revision replaced before it converged
// is told so: sync/controlplane/follow.go), and Syncer.Advance records
// every commit between the applied one and the head (superseded, held,
// invalid or applied), so none is left absent either. termErrors are
// the replicas' log lines of the known issue's two ways: with one, what
// it finds is filed under known.
func CheckSettled(reads []VerdictRead, termErrors []string) (violations, known []string) {
	last := map[string]VerdictRead{}
	var order []string
	for _, r := range reads {
		l, ok := last[r.Revision]
		if !ok {
			order = append(order, r.Revision)
		}
		if !ok || r.Return > l.Return {
			last[r.Revision] = r
		}
	}
	for _, rev := range order {
		r := last[rev]
		if (verdict{state: r.State}).final() {
			continue
		}
		msg := fmt.Sprintf("revision %.7s has no final verdict at the end of a converged run: its last read (%s) says %s", rev, stamp(r.Return), r.State)
		if len(termErrors) > 0 {
			known = append(known, KnownVerdictLostAtTermStart+": "+msg+"; a replica logged: "+termErrors[0])
			continue
		}
		violations = append(violations, msg)
	}
	return violations, known
}
