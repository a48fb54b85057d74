package scheduler

import (
	"errors"
	"fmt"
	"strings"

	"github.com/convergehq/converge"
)

// Retention. A delivery's key (binding/uid/generation/transition) is
// what makes a reactor fire once per transition, so a done delivery is
// kept as long as its transition could happen again: while its subject
// lives at its generation. It goes once the subject is deleted (a uid
// never comes back) or a newer generation of the same binding and
// transition fires (generations only grow); a done delivery of an older
// generation than its subject's goes at once. The store thus keeps, per
// binding and live subject, the newest done delivery and every owed one.
//
// In memory, deliveries holds only owed ones; a done one is a fired
// entry: binding/uid/transition -> generation, no status, no key.
//
// A delete reaches the store only with or after the row that makes it
// safe (goneDeliveries): were it committed before the subject's newer
// generation, a crash could restart the subject at the old generation
// with nothing to stop that generation's transition from firing again.

// reactors is the loop's reactor part: the bindings and the deliveries
// their transitions owe, with the dedup of done ones. Its methods touch
// only this state.
type reactors struct {
	bindings   map[string]*converge.Binding
	byKind     map[string][]*converge.Binding
	deliveries map[string]*converge.Delivery
	// fired is the dedup of done deliveries (deliveries holds owed ones):
	// the generation of the done delivery kept per binding, subject uid
	// and transition ("Retention" above).
	fired     map[firedKey]int64
	owedDeliv int
	// unstored are the deliveries fired whose outbox row is not yet
	// durable, oldest first; the first inBatch of them are in the batch
	// with the store (in flight, or failed and kept). A delivery is
	// dispatched only once its row is committed (outboxStored): were it
	// sent before, a process or term ending before the commit would
	// leave the receiver a delivery the store never recorded, and the
	// next one would fire the transition again with another body.
	unstored   []*converge.Delivery
	inBatch    int
	delivQueue []*converge.Delivery
	parkedDel  []*converge.Delivery
	delivLease map[string]string // delivery key -> task id
}

// firedKey names the deliveries of one binding, subject uid and
// transition; only their generation differs.
type firedKey struct{ binding, uid, transition string }

// goneDelivery is a done delivery to delete from the store once n's row
// is committed (n nil or removed: the subject is gone).
type goneDelivery struct {
	key string
	n   *node
}

func deliveryKey(binding, uid string, gen int64, transition string) string {
	return binding + "/" + uid + "/" + itoa(gen) + "/" + transition
}

// fire records the deliveries owed for n's transition. A delivery whose
// key (binding/uid/generation/transition) exists already, owed or done,
// is not created again: that is the dedup that makes reactors fire once
// per transition.
func (s *Scheduler) fire(n *node, transition string) {
	bs := s.react.byKind[n.res().Kind]
	if len(bs) == 0 {
		return
	}
	gen := n.res().Generation
	for _, b := range bs {
		if b.Transition != transition {
			continue
		}
		key := deliveryKey(b.Name, n.res().UID, gen, transition)
		if _, ok := s.react.deliveries[key]; ok {
			continue
		}
		fk := firedKey{b.Name, n.res().UID, transition}
		if g, ok := s.react.fired[fk]; ok {
			if g == gen {
				continue
			}
			// A newer generation fired: the older one can never
			// fire again.
			s.batch.dropDelivery(deliveryKey(b.Name, n.res().UID, g, transition), n, s.now)
			delete(s.react.fired, fk)
		}
		status := n.res().Status
		if s.isComposer(n) {
			status = s.rollupStatus(n)
		}
		v := b.ReactorVersion
		if v == 0 {
			v = 1
		}
		d := &converge.Delivery{
			Key:     key,
			Binding: b.Name,
			Reactor: converge.KindRef{Kind: b.Reactor, Version: v},
			Subject: converge.Subject{
				Resource:   n.id,
				UID:        n.res().UID,
				Generation: gen,
				Transition: transition,
				Status:     converge.CloneJSON(status),
			},
			Created: s.now,
		}
		s.react.oweUnstored(d)
		s.batch.delivDirty[key] = d
		s.batch.armFlush(s.now)
		s.event(n.id, "Transition", transition+": delivery to "+d.Reactor.String()+" via "+b.Name)
	}
	if transition == converge.TransitionDeleted {
		s.forgetFired(n)
	}
}

// forgetFired drops the done deliveries kept for n, which is being
// removed: its uid never fires again.
func (s *Scheduler) forgetFired(n *node) {
	for _, b := range s.react.byKind[n.res().Kind] {
		for _, tr := range []string{converge.TransitionSynced, converge.TransitionFailed, converge.TransitionDeleted} {
			fk := firedKey{b.Name, n.res().UID, tr}
			if g, ok := s.react.fired[fk]; ok {
				s.batch.dropDelivery(deliveryKey(b.Name, n.res().UID, g, tr), n, s.now)
				delete(s.react.fired, fk)
			}
		}
	}
}

// delivered retires d, which is done: it is kept for dedup (as a fired
// entry) while its subject lives at its generation, else deleted.
func (s *Scheduler) delivered(d *converge.Delivery) {
	n := s.graph.subject(d)
	gen := d.Subject.Generation
	switch {
	case n == nil || gen < n.res().Generation:
		delete(s.react.deliveries, d.Key)
		s.batch.dropDelivery(d.Key, n, s.now)
	case gen > n.res().Generation:
		// Written before a crash that lost its subject's newer
		// generation: kept whole until a restart finds it older.
	default:
		delete(s.react.deliveries, d.Key)
		fk := firedKey{d.Binding, n.res().UID, d.Subject.Transition}
		if g, ok := s.react.fired[fk]; ok && g != gen {
			s.batch.dropDelivery(deliveryKey(d.Binding, n.res().UID, g, d.Subject.Transition), n, s.now)
		}
		s.react.fired[fk] = gen
	}
}

// loadDelivery takes in a stored delivery at start.
func (s *Scheduler) loadDelivery(d *converge.Delivery) {
	if d.Done {
		s.react.deliveries[d.Key] = d
		s.delivered(d)
		return
	}
	if !d.NextAttempt.IsZero() && d.NextAttempt.After(s.now) {
		s.react.deliveries[d.Key] = d
		s.react.owedDeliv++
		s.lease.addTimer(d.NextAttempt, timerDelivRetry, "", d.Key)
	} else {
		s.react.owe(d)
	}
}

// considerDelivery dispatches a react task for d if it is owed now.
func (s *Scheduler) considerDelivery(d *converge.Delivery) {
	if d.Done || s.react.delivLease[d.Key] != "" || d.NextAttempt.After(s.now) {
		return
	}
	ref := d.Reactor
	if !s.servesRef(ref, converge.ReactionReact) {
		s.react.parkDelivery(d)
		return
	}
	rs := s.refState(ref)
	if rs.noWorker || rs.inflight >= rs.max {
		rs.waiting = append(rs.waiting, waitItem{d: d})
		return
	}
	subj := d.Subject
	var cfg []byte
	if c := s.defaults[ref]; c != nil {
		cfg = c.Config
	}
	t := &converge.Task{
		ID:          s.lease.newTaskID(),
		Key:         d.Key,
		Reaction:    converge.ReactionReact,
		UID:         d.Subject.UID,
		Kind:        ref.Kind,
		KindVersion: ref.Version,
		Name:        d.Binding,
		Generation:  d.Subject.Generation,
		Config:      cfg,
		Deadline:    s.now.Add(s.leaseTTL(ref)),
		Subject:     &subj,
	}
	if err := s.disp.Dispatch(s.ctx, t); err != nil {
		if errors.Is(err, converge.ErrNoWorker) {
			rs.noWorker = true
			rs.waiting = append(rs.waiting, waitItem{d: d})
			return
		}
		s.deliveryFailed(d, "dispatch: "+err.Error())
		return
	}
	s.lease.dispatched++
	rs.inflight++
	s.lease.inflight++
	s.track(t.ID, &taskRec{kind: taskReact, ref: ref, reaction: converge.ReactionReact, key: d.Key, counted: true})
	s.react.delivLease[d.Key] = t.ID
	s.lease.addTimer(t.Deadline, timerLease, "", t.ID)
}

func (s *Scheduler) deliveryResult(rec *taskRec, res *converge.Result) {
	d := s.react.deliveries[rec.key]
	if d == nil || s.react.delivLease[rec.key] != res.TaskID {
		return
	}
	delete(s.react.delivLease, rec.key)
	switch res.Outcome {
	case converge.OutcomeOK:
		d.LastError = ""
		s.react.settle(d)
		s.batch.delivDirty[d.Key] = d
		s.batch.armFlush(s.now)
		s.event(d.Subject.Resource, "Reacted", d.Reactor.String()+" via "+d.Binding+": ok")
		s.delivered(d)
	case converge.OutcomePermanent:
		d.Attempts++
		d.LastError = "permanent: " + res.Message
		s.react.settle(d)
		s.batch.delivDirty[d.Key] = d
		s.batch.armFlush(s.now)
		s.event(d.Subject.Resource, "ReactFailed", d.Reactor.String()+" via "+d.Binding+": "+d.LastError)
		s.delivered(d)
	default:
		s.deliveryFailed(d, res.Message)
	}
}

func (s *Scheduler) deliveryFailed(d *converge.Delivery, msg string) {
	d.Attempts++
	d.LastError = msg
	d.NextAttempt = s.now.Add(s.backoff(d.Attempts))
	s.batch.delivDirty[d.Key] = d
	s.batch.armFlush(s.now)
	s.lease.addTimer(d.NextAttempt, timerDelivRetry, "", d.Key)
}

func (s *Scheduler) deliveryLeaseExpired(rec *taskRec, taskID string) {
	d := s.react.deliveries[rec.key]
	if d == nil || s.react.delivLease[rec.key] != taskID {
		return
	}
	delete(s.react.delivLease, rec.key)
	d.Attempts++
	d.LastError = "lease expired"
	s.batch.delivDirty[d.Key] = d
	s.batch.armFlush(s.now)
	s.react.delivQueue = append(s.react.delivQueue, d)
}

// startVerb dispatches an operator verb; the returned channel receives
// its outcome.
func (s *Scheduler) startVerb(id converge.ID, verb string, args map[string]string) (chan verbOutcome, error) {
	n := s.graph.nodes[id]
	if n == nil {
		return nil, fmt.Errorf("do %s %s: %w", id, verb, converge.ErrNotFound)
	}
	r := n.res()
	ref := r.Ref()
	k := n.rs.kind
	if k == nil || !converge.IsVerb(verb) || !k.Has(verb) {
		var verbs []string
		if k != nil {
			for _, x := range k.Reactions {
				if converge.IsVerb(x) {
					verbs = append(verbs, x)
				}
			}
		}
		list := "none"
		if len(verbs) > 0 {
			list = strings.Join(verbs, ", ")
		}
		return nil, fmt.Errorf("do %s %s: %w: %s declares verbs: %s", id, verb, ErrUndeclaredVerb, ref, list)
	}
	if r.Deleting {
		return nil, fmt.Errorf("do %s %s: resource is being deleted", id, verb)
	}
	if !s.disp.Serves(ref, verb) {
		return nil, fmt.Errorf("do %s %s: %w serves %s %s", id, verb, converge.ErrNoWorker, ref, verb)
	}
	t := s.newTask(r, verb, r.UID+"/"+itoa(r.Generation)+"/"+verb+"/"+itoa(int64(s.lease.taskSeq)), s.leaseTTL(ref))
	t.Args = args
	s.lease.taskRefs.Store(t.ID, ref) // before it leaves: see dispatch
	if err := s.disp.Dispatch(s.ctx, t); err != nil {
		s.lease.taskRefs.Delete(t.ID)
		return nil, fmt.Errorf("do %s %s: %w", id, verb, err)
	}
	s.lease.dispatched++
	ch := make(chan verbOutcome, 1)
	s.track(t.ID, &taskRec{kind: taskVerb, id: id, ref: ref, reaction: verb, verb: ch})
	s.lease.addTimer(t.Deadline, timerLease, id, t.ID)
	return ch, nil
}

func (s *Scheduler) verbResult(rec *taskRec, res *converge.Result) {
	if rec.dry {
		rec.verb <- verbOutcome{res: res}
		return
	}
	msg := "verb " + rec.reaction + ": " + res.Outcome.String()
	if res.Message != "" {
		msg += ": " + res.Message
	}
	var refused error
	if res.Outcome == converge.OutcomeOK {
		if refused = s.resultStatusErr(rec.ref, res); refused != nil {
			msg += ", status refused: " + refused.Error()
		}
	}
	s.event(rec.id, "Verb", msg)
	if refused != nil {
		rec.verb <- verbOutcome{res: res, err: fmt.Errorf("verb %s: worker result refused: %w", rec.reaction, refused)}
		return
	}
	if n := s.graph.nodes[rec.id]; n != nil && res.Outcome == converge.OutcomeOK && res.Status != nil && !s.isComposer(n) && !n.deleting() {
		n.res().Status = res.Status
		s.markDirty(n)
		s.consumersChanged(n)
	}
	var err error
	if res.Outcome != converge.OutcomeOK {
		err = fmt.Errorf("verb %s: %s: %s", rec.reaction, res.Outcome, res.Message)
	}
	rec.verb <- verbOutcome{res: res, err: err}
}

func (r *reactors) rebuildByKind() {
	clear(r.byKind)
	for _, b := range r.bindings {
		r.byKind[b.Kind] = append(r.byKind[b.Kind], b)
	}
}

func (r *reactors) delivParked(d *converge.Delivery) bool {
	for _, p := range r.parkedDel {
		if p == d {
			return true
		}
	}
	return false
}

// delivWorkPending reports whether an owed delivery can still progress
// without an outside change. One waiting for its outbox row to be
// committed cannot while the store refuses commits (commitFailing): it
// waits for the store, as the rows do.
func (r *reactors) delivWorkPending(commitFailing bool) bool {
	if r.owedDeliv == 0 {
		return false
	}
	var waiting map[*converge.Delivery]bool // for the row; one lookup each, not a scan
	if commitFailing && len(r.unstored) > 0 {
		waiting = make(map[*converge.Delivery]bool, len(r.unstored))
		for _, d := range r.unstored {
			waiting[d] = true
		}
	}
	for _, d := range r.deliveries {
		if d.Done || waiting[d] {
			continue
		}
		if r.delivParked(d) {
			continue
		}
		return true
	}
	return false
}

// nextDelivery takes the next delivery queued for dispatch, or nil.
func (r *reactors) nextDelivery() *converge.Delivery {
	if len(r.delivQueue) == 0 {
		return nil
	}
	d := r.delivQueue[0]
	r.delivQueue[0] = nil
	r.delivQueue = r.delivQueue[1:]
	return d
}

// owe records d, whose row is stored, as owed and queues it for
// dispatch.
func (r *reactors) owe(d *converge.Delivery) {
	r.deliveries[d.Key] = d
	r.owedDeliv++
	r.delivQueue = append(r.delivQueue, d)
}

// oweUnstored records d, just fired, as owed; it is queued for dispatch
// once the batch holding its row is committed (outboxSent, outboxStored).
func (r *reactors) oweUnstored(d *converge.Delivery) {
	r.deliveries[d.Key] = d
	r.owedDeliv++
	r.unstored = append(r.unstored, d)
}

// outboxSent records that every unstored delivery's row is in the batch
// just built (buildBatch takes every pending delivery).
func (r *reactors) outboxSent() { r.inBatch = len(r.unstored) }

// outboxStored queues for dispatch the deliveries whose rows the batch
// just committed holds.
func (r *reactors) outboxStored() {
	if r.inBatch == 0 {
		return
	}
	r.delivQueue = append(r.delivQueue, r.unstored[:r.inBatch]...)
	rest := copy(r.unstored, r.unstored[r.inBatch:])
	clear(r.unstored[rest:])
	r.unstored = r.unstored[:rest]
	r.inBatch = 0
}

// parkDelivery keeps d until the workers change: none serves its
// reactor.
func (r *reactors) parkDelivery(d *converge.Delivery) {
	if !r.delivParked(d) {
		r.parkedDel = append(r.parkedDel, d)
	}
}

// unparkDeliveries queues every parked delivery again (the workers
// changed).
func (r *reactors) unparkDeliveries() {
	pd := r.parkedDel
	r.parkedDel = nil
	r.delivQueue = append(r.delivQueue, pd...)
}

// settle records that d is done (reacted, or failed for good).
func (r *reactors) settle(d *converge.Delivery) {
	d.Done = true
	d.NextAttempt = timeZero
	r.owedDeliv--
}
