package scheduler

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/convergehq/converge"
)

// A rollout (converge.Rollout, declared on a composer) holds back the
// changes of a composition from the children of later waves; the
// composer itself is not changed and composes in full as always. Each
// compose of the rollout's generation is applied in part: the changed
// children (created, updated, flipped, pruned, or with other edges) of
// the waves let through get their change, the rest keep what they have.
// A consumer's change never lands before its changed producer's: it
// takes the later of their waves. When the composer's whole subtree is
// Ready (the held children are Ready at their previous specs) the wave
// soaks; a soak that ends with the subtree still Ready lets the next
// wave through and recomposes. A child of a wave let through that fails
// permanently, or a wave not Ready within the timeout, halts the
// rollout: the composer fails permanently, naming the wave and why, and
// only a new generation (a new revision) starts over. The rollout's
// progress is the composer's status "rollout" (converge.RolloutStatus),
// so it is durable with the row and resumes after a restart.
//
// While a rollout holds children back, the children are not one
// composition: the composer's composition is forgotten (its next compose
// carries no delta base), and a composer that declares a rollout is
// never sent a base at all.

// rollout is a composer's rollout (subtree.rollout); loop only.
type rollout struct {
	st converge.RolloutStatus
	// rows finds a child's row in the composer's spec of rowsGen.
	rows    *RowIndex
	rowsGen int64
	// timer is the seq of the pending soak or timeout timer, 0 if none.
	timer uint64
	// composeOwed: a wave was let through and its compose has not been
	// applied yet; the subtree's Ready then says nothing of that wave.
	composeOwed bool
	// soakSaid is 1 + the wave whose soak the events announced: a soak
	// that starts over (the subtree left Ready a moment, a flowed value
	// moving on) is not announced again.
	soakSaid int
}

func (ro *rollout) active() bool {
	return ro.st.Phase == converge.RolloutProgressing || ro.st.Phase == converge.RolloutSoaking
}

// rolloutOf returns n's rollout of its current generation while it is
// active, or nil.
func rolloutOf(n *node) *rollout {
	if n.sub == nil || n.sub.rollout == nil {
		return nil
	}
	if ro := n.sub.rollout; ro.active() && ro.st.Generation == n.res().Generation {
		return ro
	}
	return nil
}

// rolloutHold decides which changes of n's checked composition res
// (ids, emitted from checkComposition) wait for a later wave, starting
// the rollout of n's generation if it is the first compose of one. It
// returns the held children (nil: none, and no rollout applies).
func (s *Scheduler) rolloutHold(n *node, res *converge.Result, ids []converge.ID, emitted *childIndex) map[converge.ID]bool {
	pol := n.res().Rollout
	if pol == nil {
		return nil
	}
	t := n.tree()
	ro := t.rollout
	if ro == nil || ro.st.Generation != n.res().Generation {
		live := 0
		for _, ch := range n.kids() {
			if !ch.deleting() {
				live++
			}
		}
		if live == 0 {
			return nil // the first composition: nothing to protect yet
		}
		ro = &rollout{st: converge.RolloutStatus{Generation: n.res().Generation, Waves: pol.Count(), Phase: converge.RolloutProgressing,
			Started: s.now}}
		t.rollout = ro
		s.rollouts[n.id] = n
	} else if !ro.active() {
		return nil // complete (a resync recomposing), or halted
	}
	ro.composeOwed = false
	ro.st.Waves = pol.Count()
	if ro.rows == nil || ro.rowsGen != n.res().Generation {
		ro.rows, ro.rowsGen = NewRowIndex(SpecRows(n.res().Declared)), n.res().Generation
	}
	waveOf := func(id converge.ID) int {
		row, _ := ro.rows.Of(id.Name())
		return pol.WaveOf(row.Label(), string(id))
	}
	// The changed children and their waves.
	wave := map[converge.ID]int{}
	for i := range res.Children {
		c := &res.Children[i]
		id := ids[i]
		ex := s.graph.nodes[id]
		if ex == nil {
			wave[id] = waveOf(id)
			continue
		}
		if h := ex.head(); h.Ref.Version != c.KindVersion || h.ProviderConfigRef != c.ProviderConfigRef || !jsonEqual(h.Declared, c.Spec) {
			wave[id] = waveOf(id)
		}
	}
	sent := map[converge.ID][]*converge.Edge{}
	for i := range res.Edges {
		e := &res.Edges[i]
		sent[e.Consumer] = append(sent[e.Consumer], e)
	}
	for _, id := range ids {
		if _, ok := wave[id]; ok {
			continue
		}
		if !sameEdges(s.graph.producersOf(id), sent[id]) {
			wave[id] = waveOf(id)
		}
	}
	for _, ch := range n.kids() {
		if !emitted.has(ch.id) && !ch.deleting() {
			wave[ch.id] = waveOf(ch.id) // pruned
		}
	}
	// A consumer's change waits for its changed producer's.
	for grew := true; grew; {
		grew = false
		for i := range res.Edges {
			e := &res.Edges[i]
			wc, okc := wave[e.Consumer]
			wp, okp := wave[e.Producer]
			if okc && okp && wp > wc {
				wave[e.Consumer], grew = wp, true
			}
		}
	}
	if len(wave) == 0 {
		if ro.st.Wave == 0 && ro.st.Held == 0 {
			s.dropRollout(n) // nothing changed: no rollout to run
		} else {
			s.completeRollout(n, ro)
		}
		return nil
	}
	// A wave with nothing to change is passed over: it has nothing to
	// soak.
	first := -1
	for _, w := range wave {
		if first < 0 || w < first {
			first = w
		}
	}
	if first > ro.st.Wave {
		s.event(n.id, "RolloutWave", fmt.Sprintf("rollout of generation %d: waves %d–%d change nothing; wave %d/%d (%s) starts",
			n.res().Generation, ro.st.Wave+1, first, first+1, ro.st.Waves, pol.Name(first)))
		ro.st.Wave, ro.st.Started = first, s.now
		s.armRolloutTimeout(n, ro)
	} else if ro.st.Wave == 0 && ro.st.Held == 0 && ro.timer == 0 {
		s.event(n.id, "RolloutWave", fmt.Sprintf("rollout of generation %d: wave 1/%d (%s) starts", n.res().Generation, ro.st.Waves, pol.Name(0)))
		s.armRolloutTimeout(n, ro)
	}
	ro.st.Name = pol.Name(ro.st.Wave)
	held := map[converge.ID]bool{}
	for id, w := range wave {
		if w > ro.st.Wave {
			held[id] = true
		}
	}
	ro.st.Held = len(held)
	if len(held) == 0 {
		s.completeRollout(n, ro)
		return nil
	}
	s.batch.markRollup(n, s.now)
	return held
}

// sameEdges reports whether the edges a consumer has equal the ones sent
// for it (same producers, same flows).
func sameEdges(have []*converge.Edge, sent []*converge.Edge) bool {
	if len(have) != len(sent) {
		return false
	}
	by := make(map[converge.ID]*converge.Edge, len(have))
	for _, e := range have {
		by[e.Producer] = e
	}
	for _, e := range sent {
		h := by[e.Producer]
		if h == nil || !flowsEqual(h.Flows, e.Flows) {
			return false
		}
	}
	return true
}

// completeRollout ends n's rollout: every wave has its change.
func (s *Scheduler) completeRollout(n *node, ro *rollout) {
	ro.st.Phase, ro.st.Held, ro.st.Reason = converge.RolloutComplete, 0, ""
	ro.st.Wave = ro.st.Waves - 1
	ro.st.Name = n.res().Rollout.Name(ro.st.Wave)
	ro.st.ReadySince, ro.st.SoakUntil = time.Time{}, time.Time{}
	ro.timer = 0
	delete(s.rollouts, n.id)
	s.event(n.id, "RolloutComplete", fmt.Sprintf("rollout of generation %d: every wave has its change", n.res().Generation))
	s.batch.markRollup(n, s.now)
}

// dropRollout forgets n's rollout.
func (s *Scheduler) dropRollout(n *node) {
	if n.sub != nil && n.sub.rollout != nil {
		n.sub.rollout = nil
		delete(s.rollouts, n.id)
		s.batch.markRollup(n, s.now)
	}
}

// setRollout changes the rollout a git resource declares. A rollout in
// progress goes on with the new waves from the wave it is in; with none
// declared any more, its composer composes again and every held child
// gets its change.
func (s *Scheduler) setRollout(n *node, pol *converge.Rollout) {
	n.res().Rollout = pol
	s.markDirty(n)
	ro := rolloutOf(n)
	if ro == nil {
		return
	}
	if pol == nil {
		s.dropRollout(n)
	} else {
		ro.st.Waves = pol.Count()
		ro.st.Wave = min(ro.st.Wave, ro.st.Waves-1)
		ro.st.Name = pol.Name(ro.st.Wave)
	}
	n.set(mResync)
	s.lease.enqueue(n)
}

// rolloutGate is evalComposer's part for a composer with an active
// rollout: ready says whether its whole subtree is Ready. It reports
// whether the composer must stay Pending (some children are held).
func (s *Scheduler) rolloutGate(n *node, ready bool) bool {
	ro := rolloutOf(n)
	if ro == nil || ro.st.Held == 0 {
		return false
	}
	switch {
	case ro.composeOwed:
	case ready && ro.st.Phase == converge.RolloutProgressing:
		soak := n.res().Rollout.SoakOf(ro.st.Wave)
		ro.st.Phase, ro.st.ReadySince, ro.st.SoakUntil = converge.RolloutSoaking, s.now, s.now.Add(soak)
		ro.timer = s.lease.addTimer(ro.st.SoakUntil, timerRollout, n.id, "")
		if ro.soakSaid != ro.st.Wave+1 {
			ro.soakSaid = ro.st.Wave + 1
			s.event(n.id, "RolloutSoaking", fmt.Sprintf("wave %d/%d (%s) is Ready; the next wave starts at %s if it stays so",
				ro.st.Wave+1, ro.st.Waves, ro.st.Name, ro.st.SoakUntil.UTC().Format(time.RFC3339)))
		}
		s.batch.markRollup(n, s.now)
	case !ready && ro.st.Phase == converge.RolloutSoaking:
		// Something of the subtree left Ready: the soak starts over
		// once it is back.
		ro.st.Phase, ro.st.ReadySince, ro.st.SoakUntil = converge.RolloutProgressing, time.Time{}, time.Time{}
		s.armRolloutTimeout(n, ro)
		s.batch.markRollup(n, s.now)
	}
	return true
}

// armRolloutTimeout arms the timeout of ro's current wave, if it has one.
func (s *Scheduler) armRolloutTimeout(n *node, ro *rollout) {
	ro.timer = 0
	if to := n.res().Rollout.Timeout; to > 0 {
		ro.timer = s.lease.addTimer(ro.st.Started.Add(to), timerRollout, n.id, "")
	}
}

// rolloutTimer handles a rollout timer of composer id: a soak that ended
// lets the next wave through; a wave past its timeout halts the rollout.
func (s *Scheduler) rolloutTimer(id converge.ID, seq uint64) {
	n := s.graph.nodes[id]
	if n == nil {
		return
	}
	ro := rolloutOf(n)
	if ro == nil || ro.timer != seq {
		return // stale: the rollout moved on
	}
	ro.timer = 0
	switch ro.st.Phase {
	case converge.RolloutSoaking:
		if s.now.Before(ro.st.SoakUntil) {
			return
		}
		pol := n.res().Rollout
		ro.st.Wave++
		ro.st.Name, ro.st.Phase, ro.st.Started = pol.Name(ro.st.Wave), converge.RolloutProgressing, s.now
		ro.st.ReadySince, ro.st.SoakUntil = time.Time{}, time.Time{}
		ro.composeOwed = true
		s.event(n.id, "RolloutWave", fmt.Sprintf("wave %d/%d (%s) starts: the previous wave stayed Ready for %s",
			ro.st.Wave+1, ro.st.Waves, ro.st.Name, pol.SoakOf(ro.st.Wave-1)))
		s.armRolloutTimeout(n, ro)
		s.batch.markRollup(n, s.now)
		n.set(mResync) // compose again: the new wave gets its change
		s.lease.enqueue(n)
	case converge.RolloutProgressing:
		if ro.composeOwed {
			s.armRolloutTimeout(n, ro) // the wave has not started for real
			return
		}
		c := n.tree().counts
		s.haltRollout(n, ro, fmt.Sprintf("not Ready within %s: %d/%d Ready", n.res().Rollout.Timeout, c.Ready, c.Total))
	}
}

// rolloutFailed halts every rollout above n whose wave let n's change
// through: n failed permanently with msg.
func (s *Scheduler) rolloutFailed(n *node, msg string) {
	for child, a := n, n.owner; a != nil; child, a = a, a.owner {
		ro := rolloutOf(a)
		if ro == nil || ro.rows == nil {
			continue
		}
		row, _ := ro.rows.Of(child.id.Name())
		if a.res().Rollout.WaveOf(row.Label(), string(child.id)) > ro.st.Wave {
			continue // a held child: its failure is not this rollout's
		}
		s.haltRollout(a, ro, string(n.id)+" failed: "+msg)
	}
}

// haltRollout stops n's rollout: the composer fails permanently and the
// remaining waves keep their previous specs until a new generation.
func (s *Scheduler) haltRollout(n *node, ro *rollout, why string) {
	ro.st.Phase, ro.st.Reason, ro.timer = converge.RolloutHalted, why, 0
	ro.st.ReadySince, ro.st.SoakUntil = time.Time{}, time.Time{}
	msg := fmt.Sprintf("rollout halted at wave %d/%d (%s): %s; %d held at their previous spec", ro.st.Wave+1, ro.st.Waves, ro.st.Name, why, ro.st.Held)
	s.event(n.id, "RolloutHalted", msg)
	s.batch.markRollup(n, s.now)
	s.failPermanent(n, msg)
}

// rolloutReason is the reason a composer with a rollout shows while it
// holds children back, or "".
func rolloutReason(n *node) string {
	ro := rolloutOf(n)
	if ro == nil || ro.st.Held == 0 {
		return ""
	}
	c := n.sub.counts
	s := "rollout wave " + strconv.Itoa(ro.st.Wave+1) + "/" + strconv.Itoa(ro.st.Waves) + " (" + ro.st.Name + ")"
	if ro.st.Phase == converge.RolloutSoaking {
		s += ": soaking until " + ro.st.SoakUntil.UTC().Format("15:04:05 UTC")
	} else {
		s += ": " + strconv.Itoa(c.Ready) + "/" + strconv.Itoa(c.Total) + " children ready"
	}
	return s + ", " + strconv.Itoa(ro.st.Held) + " held"
}

// loadRollout restores n's rollout from its stored status.
func (s *Scheduler) loadRollout(n *node) {
	if n.res().Rollout == nil || len(n.res().Status) == 0 {
		return
	}
	st := converge.RolloutOf(n.res().Status)
	if st == nil {
		return
	}
	ro := &rollout{st: *st}
	n.tree().rollout = ro
	if ro.st.Generation != n.res().Generation || ro.st.Phase == converge.RolloutComplete {
		return
	}
	s.rollouts[n.id] = n
	if !ro.active() {
		return // halted: shown until a new generation
	}
	if ro.st.Phase == converge.RolloutSoaking {
		ro.timer = s.lease.addTimer(ro.st.SoakUntil, timerRollout, n.id, "")
	} else {
		s.armRolloutTimeout(n, ro)
	}
}

// rolloutsWaiting reports whether some rollout waits for a timer (a
// soak, a wave's timeout): the graph is not stuck while it does.
func (s *Scheduler) rolloutsWaiting() bool {
	for _, n := range s.rollouts {
		if ro := rolloutOf(n); ro != nil && ro.timer != 0 {
			return true
		}
	}
	return false
}

// RolloutView is one composer's rollout as Rollouts reports it.
type RolloutView struct {
	ID     converge.ID
	Status converge.RolloutStatus
}

// Rollouts returns the rollouts in progress or halted, by composer ID.
func (s *Scheduler) Rollouts(ctx context.Context) ([]RolloutView, error) {
	var out []RolloutView
	err := s.exec(ctx, func(s *Scheduler) { out = s.rolloutViews() })
	return out, err
}

func (s *Scheduler) rolloutViews() []RolloutView {
	var out []RolloutView
	for id, n := range s.rollouts {
		if n.is(stateRemoved) || n.sub == nil || n.sub.rollout == nil {
			delete(s.rollouts, id)
			continue
		}
		ro := n.sub.rollout
		if ro.st.Generation != n.res().Generation {
			continue
		}
		out = append(out, RolloutView{ID: id, Status: ro.st})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
