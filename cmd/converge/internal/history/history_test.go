package history

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// ms is a time in milliseconds, as Unix nanoseconds.
func ms(v int64) int64 { return v * 1e6 }

func apply(worker, uid string, gen int64, spec string, call, ret int64) Effect {
	return Effect{Worker: worker, Reaction: Reconcile, UID: uid, ID: "vpc/" + uid, Gen: gen,
		Key: uid + "/" + strconv.FormatInt(gen, 10) + "/reconcile", Spec: spec, Call: ms(call), Return: ms(ret)}
}

// goodRun is a legal run: retries of one task (concurrent and not), a
// new generation, a teardown and its retry, a verdict going absent →
// pending → final read by two clients, a delivery retried after a
// fault, and two terms, the second writing after the first's last.
func goodRun() Run {
	return Run{
		Effects: []Effect{
			apply("w0", "u1", 1, "s1", 0, 10),
			apply("w1", "u1", 1, "s1", 5, 12),  // a concurrent retry of the same task
			apply("w1", "u1", 1, "s1", 20, 25), // a retry after a takeover
			apply("w0", "u1", 2, "s2", 30, 40),
			apply("w0", "u2", 1, "t1", 0, 50),
			apply("w1", "u2", 2, "t2", 10, 20), // overlaps the older one: it may have applied first
			{Worker: "w0", Reaction: Teardown, UID: "u1", ID: "vpc/u1", Gen: 2, Key: "u1/2/teardown", Call: ms(50), Return: ms(55)},
			{Worker: "w1", Reaction: Teardown, UID: "u1", ID: "vpc/u1", Gen: 2, Key: "u1/2/teardown", Call: ms(60), Return: ms(65)},
		},
		Verdicts: []VerdictRead{
			{Client: 0, Revision: "r1", State: Absent, Call: ms(0), Return: ms(1)},
			{Client: 1, Revision: "r1", State: Pending, Call: ms(2), Return: ms(3)},
			{Client: 0, Revision: "r1", State: "success", Description: "converged", Call: ms(4), Return: ms(9)},
			{Client: 1, Revision: "r1", State: Pending, Call: ms(5), Return: ms(6)}, // concurrent with the final read
			{Client: 1, Revision: "r1", State: "success", Description: "converged", Call: ms(10), Return: ms(11)},
		},
		Deliveries: []Delivery{
			{Worker: "w0", Key: "sink/u9/3/synced", Resource: "classicbom/c", UID: "u9", Gen: 3, Transition: "synced", Status: "x", Call: ms(2), Return: ms(5)},
			{Worker: "w1", Key: "sink/u9/3/synced", Resource: "classicbom/c", UID: "u9", Gen: 3, Transition: "synced", Status: "x", Call: ms(20), Return: ms(25)},
		},
		Settled: true,
		Faults:  []Fault{{What: "SIGKILL worker w0", At: ms(10), LosesResults: true}},
		Writes: []Write{
			{Replica: "a", Seq: 1, Lock: 10, Election: 9, FirstKey: "/p/r/x", Call: ms(0), Return: ms(1), Succeeded: true, Rev: 11},
			{Replica: "a", Seq: 2, Lock: 10, Election: 9, FirstKey: "/p/r/y", Call: ms(2), Return: ms(3), Succeeded: true, Rev: 12},
			{Replica: "a", Seq: 3, Lock: 10, Election: 9, FirstKey: "/p/r/z", Call: ms(4), Return: ms(5), Err: "fenced"}, // refused
			{Replica: "a", Seq: 4, Lock: 10, Election: 9, FirstKey: "/p/e/1", Call: ms(4)},                               // never answered: a died
			{Replica: "b", Seq: 1, Lock: 20, Election: 15, FirstKey: "/p/r/x", Call: ms(6), Return: ms(7), Succeeded: true, Rev: 21},
		},
		// The delivery's outbox row is in rev 11, answered before the
		// delivery's first call.
		Seen: []Observed{{Rev: 11, Keys: []string{"/p/r/x", "/p/d/sink/u9/3/synced"}}, {Rev: 12, Keys: []string{"/p/r/y"}},
			{Rev: 13, Keys: []string{"/p/e/1"}}, {Rev: 21, Keys: []string{"/p/r/x"}}},
	}
}

func TestCheckPassesALegalRun(t *testing.T) {
	rep := Check(goodRun(), t.TempDir())
	if len(rep.Violations) > 0 {
		t.Fatalf("a legal run was rejected:\n%s", strings.Join(rep.Violations, "\n"))
	}
	if rep.Resources != 2 || rep.Retries != 3 || rep.Revisions != 1 || len(rep.Deliveries.Retries) != 1 || rep.Fencing.Terms != 2 || rep.Fencing.Unrecorded != 1 {
		t.Errorf("report %s; retries %q", rep, rep.Deliveries.Retries)
	}
	t.Log(rep)
}

// TestCheckRejectsBadHistories breaks the legal run once per promise:
// each must be rejected, naming what broke.
func TestCheckRejectsBadHistories(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Run)
		want   string // in a violation
		html   string // the visualization written, if any
	}{
		{"a second apply of one generation with another spec", func(r *Run) {
			r.Effects = append(r.Effects, apply("w1", "u2", 2, "t2-other", 60, 70))
		}, "effects: not linearizable", "effects.html"},
		{"a second apply of one generation under another key", func(r *Run) {
			e := apply("w1", "u2", 2, "t2", 60, 70)
			e.Key = "u2/2/reconcile/again"
			r.Effects = append(r.Effects, e)
		}, "effects: not linearizable", "effects.html"},
		{"a stale generation applied after a newer one returned", func(r *Run) {
			r.Effects = append(r.Effects, apply("w1", "u2", 1, "t1", 60, 70))
		}, "u2/1/reconcile", "effects.html"},
		{"an apply after the teardown of its generation", func(r *Run) {
			r.Effects = append(r.Effects, apply("w0", "u1", 2, "s2", 70, 80))
		}, "effects: not linearizable", "effects.html"},
		{"a final verdict reverted to pending", func(r *Run) {
			r.Verdicts = append(r.Verdicts, VerdictRead{Client: 0, Revision: "r1", State: Pending, Call: ms(20), Return: ms(21)})
		}, "verdicts: not linearizable", "verdicts.html"},
		{"a final verdict changed", func(r *Run) {
			r.Verdicts = append(r.Verdicts, VerdictRead{Client: 1, Revision: "r1", State: "failure", Description: "stuck", Call: ms(20), Return: ms(21)})
		}, "read r1 → failure: stuck", "verdicts.html"},
		{"an error verdict revised", func(r *Run) {
			r.Verdicts = append(r.Verdicts, VerdictRead{Client: 0, Revision: "r5", State: "error", Description: "apply: commit state: unavailable", Call: ms(1), Return: ms(2)},
				VerdictRead{Client: 1, Revision: "r5", State: Pending, Call: ms(3), Return: ms(4)},
				VerdictRead{Client: 0, Revision: "r5", State: "success", Description: "converged", Call: ms(5), Return: ms(6)})
		}, KnownErrorVerdictRevised + ": verdicts: not linearizable", "verdicts.html"},
		{"an error verdict revised, and a success one too", func(r *Run) {
			r.Verdicts = append(r.Verdicts, VerdictRead{Client: 0, Revision: "r5", State: "error", Description: "apply: commit state: unavailable", Call: ms(1), Return: ms(2)},
				VerdictRead{Client: 0, Revision: "r5", State: "success", Description: "converged", Call: ms(5), Return: ms(6)},
				VerdictRead{Client: 1, Revision: "r1", State: Pending, Call: ms(30), Return: ms(31)})
		}, "verdicts: not linearizable", "verdicts.html"},
		{"a verdict's record vanished", func(r *Run) {
			r.Verdicts = append(r.Verdicts, VerdictRead{Client: 1, Revision: "r2", State: Pending, Call: ms(1), Return: ms(2)},
				VerdictRead{Client: 0, Revision: "r2", State: Absent, Call: ms(3), Return: ms(4)})
		}, "verdicts: not linearizable", "verdicts.html"},
		{"a verdict left pending at the end of a converged run", func(r *Run) {
			r.Verdicts = append(r.Verdicts, VerdictRead{Client: 1, Revision: "r3", State: Pending, Call: ms(1), Return: ms(2)})
		}, "revision r3 has no final verdict at the end of a converged run", ""},
		{"a verdict left pending after a term could not resume it", func(r *Run) {
			r.Verdicts = append(r.Verdicts, VerdictRead{Client: 1, Revision: "r3", State: Pending, Call: ms(1), Return: ms(2)})
			r.TermErrors = []string{`level=ERROR msg="resume pending verdict" err="etcd has lost its quorum"`}
		}, KnownVerdictLostAtTermStart + ": revision r3 has no final verdict", ""},
		{"a revision never recorded in a converged run", func(r *Run) {
			r.Verdicts = append(r.Verdicts, VerdictRead{Client: 1, Revision: "r4", State: Absent, Call: ms(1), Return: ms(2)})
		}, "revision r4 has no final verdict at the end of a converged run: its last read (00:00:00.002) says absent", ""},
		{"a delivery completed twice with no fault between", func(r *Run) {
			r.Faults = nil
			r.Deliveries[1].Call, r.Deliveries[1].Return = ms(3), ms(4) // before b's term began (6)
		}, "completed twice with no new term and no lost worker between", ""},
		{"a delivery completed twice with only a fault that loses no result between", func(r *Run) {
			r.Faults[0].LosesResults = false
			r.Deliveries[1].Call, r.Deliveries[1].Return = ms(3), ms(4)
		}, "completed twice with no new term and no lost worker between", ""},
		{"a delivery key with two subjects", func(r *Run) {
			r.Deliveries[1].Status = "y"
			r.Seen[1].Keys = append(r.Seen[1].Keys, "/p/d/sink/u9/3/synced") // rev 12, sent at 2ms: before it was delivered (5ms)
		}, "carried two subjects", ""},
		{"a delivery delivered before its outbox row was durable, fired again", func(r *Run) {
			r.Deliveries[1].Status = "y"
			r.Seen[0].Keys = r.Seen[0].Keys[:1]
			r.Seen[3].Keys = append(r.Seen[3].Keys, "/p/d/sink/u9/3/synced") // rev 21, sent at 6ms: after (5ms)
		}, KnownDispatchBeforeDurable + ": delivery sink/u9/3/synced carried two subjects", ""},
		{"a delivery dispatched before its outbox row was durable", func(r *Run) {
			r.Deliveries[0].Call = ms(0) // rev 11's write was answered at 1ms
		}, "delivery sink/u9/3/synced was dispatched before its outbox row was durable: delivered by w0 at 00:00:00.000, its row d/sink/u9/3/synced first written at rev 11", ""},
		{"a delivery with no outbox row", func(r *Run) {
			r.Seen[0].Keys = r.Seen[0].Keys[:1]
		}, "delivery sink/u9/3/synced was delivered (by w0 at 00:00:00.002) with no outbox row d/sink/u9/3/synced in the store", ""},
		{"a delivery key that does not name its subject", func(r *Run) {
			r.Deliveries[0].Gen, r.Deliveries[1].Gen = 4, 4
		}, "does not name its subject", ""},
		{"a deposed leader's write after its successor's first", func(r *Run) {
			r.Writes = append(r.Writes, Write{Replica: "a", Seq: 5, Lock: 10, Election: 9, FirstKey: "/p/r/q", Call: ms(8), Return: ms(9), Succeeded: true, Rev: 22})
			r.Seen = append(r.Seen, Observed{Rev: 22, Keys: []string{"/p/r/q"}})
		}, "a deposed leader's write", ""},
		{"a dead leader's unanswered write landing after its successor's first", func(r *Run) {
			r.Seen[2].Rev = 22
		}, "a deposed leader's write: a (pid 0) txn 4 at rev 22", ""},
		{"a write fenced on the lock alone", func(r *Run) {
			r.Writes[4].Election = 0
		}, "an unfenced write", ""},
		{"a term written by two replicas", func(r *Run) {
			r.Writes[1].Replica = "c"
		}, "written by two replicas", ""},
		{"a write nobody recorded", func(r *Run) {
			r.Seen = append(r.Seen, Observed{Rev: 30, Keys: []string{"/p/r/ghost"}})
		}, "a write nobody recorded: rev 30", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := goodRun()
			tc.mutate(&run)
			dir := t.TempDir()
			rep := Check(run, dir)
			all := strings.Join(rep.Violations, "\n")
			if strings.HasPrefix(tc.want, "known issue") {
				all = strings.Join(rep.Known, "\n")
			}
			if !strings.Contains(all, tc.want) {
				t.Fatalf("violations (known: %v) do not say %q:\n%s", rep.Known, tc.want, all)
			}
			if html := strings.Join(append(rep.Violations, rep.Known...), "\n"); tc.html != "" && !strings.Contains(html, dir+"/"+tc.html) {
				t.Errorf("the report does not name the visualization %s:\n%s", tc.html, html)
			}
			if tc.html != "" {
				if b, err := os.ReadFile(dir + "/" + tc.html); err != nil || !strings.Contains(string(b), "<html") {
					t.Errorf("the visualization: %v (%d bytes)", err, len(b))
				}
			}
			t.Log(all)
		})
	}
}
