package scheduler

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/proto/rawjson"
)

// pump dispatches everything eligible: reactor deliveries first (a
// transition's reaction must not wait behind thousands of resyncs for a
// free worker slot), then the ready queue, then the waiters of KindRefs
// that got room.
func (s *Scheduler) pump() {
	for {
		for d := s.react.nextDelivery(); d != nil; d = s.react.nextDelivery() {
			s.considerDelivery(d)
		}
		for n := s.lease.dequeue(); n != nil; n = s.lease.dequeue() {
			s.consider(n)
			n.pack() // one left waiting (gated, blocked) waits packed
		}
		if len(s.lease.roomy) == 0 {
			s.startChunk()
			return
		}
		for _, rs := range s.lease.takeRoomy() {
			for w, ok := rs.nextWaiting(); ok; w, ok = rs.nextWaiting() {
				if w.n != nil {
					w.n.leave(stateBlocked)
					s.consider(w.n)
					w.n.pack()
				} else {
					s.considerDelivery(w.d)
				}
			}
		}
		if s.lease.queueHead == len(s.lease.queue) && len(s.react.delivQueue) == 0 && len(s.lease.roomy) == 0 {
			s.startChunk()
			return
		}
	}
}

// startChunk considers the next chunk of the nodes loaded at start
// (startQueue): a million of them would hold the loop for seconds.
func (s *Scheduler) startChunk() {
	s.rearmChunk()
	const chunk = 4096
	k := min(chunk, len(s.startQueue))
	for _, n := range s.startQueue[:k] {
		if !n.is(stateRemoved) && !n.has(mQueued) {
			s.consider(n)
			n.pack()
		}
	}
	clear(s.startQueue[:k])
	s.startQueue = s.startQueue[k:]
	if len(s.startQueue) == 0 {
		s.startQueue = nil
	}
}

// rearmChunk re-arms the resyncs of the next chunk of rearmQueue.
func (s *Scheduler) rearmChunk() {
	const chunk = 16384
	k := min(chunk, len(s.rearmQueue))
	for _, n := range s.rearmQueue[:k] {
		if !n.is(stateRemoved) && n.phase() == converge.PhaseReady && !n.deleting() {
			s.scheduleResync(n)
		}
	}
	clear(s.rearmQueue[:k])
	s.rearmQueue = s.rearmQueue[k:]
	if len(s.rearmQueue) == 0 {
		s.rearmQueue = nil
	}
}

// onChanged reacts to workers connecting, leaving or freeing capacity:
// routing is re-checked for every parked resource.
func (s *Scheduler) onChanged() {
	clear(s.lease.serves)
	for _, rs := range s.lease.refs {
		rs.noWorker = false
		s.lease.room(rs)
	}
	s.lease.unpark()
	s.react.unparkDeliveries()
}

func (s *Scheduler) servesRef(ref converge.KindRef, reaction string) bool {
	if s.localServes(ref, reaction) {
		return true
	}
	k := servesKey{ref, reaction}
	v, ok := s.lease.serves[k]
	if !ok {
		v = s.disp.Serves(ref, reaction)
		s.lease.serves[k] = v
	}
	return v
}

// permanent reports whether n failed permanently at its generation.
func permanent(r *converge.Resource) bool {
	return r.Phase == converge.PhaseFailed && r.NextAttempt.IsZero()
}

// needsRun reports whether n's main reaction must run.
func (s *Scheduler) needsRun(n *node) bool {
	r := n.res()
	if n.has(mResync) || r.ObservedGeneration < r.Generation || r.Phase == converge.PhaseFailed {
		return true
	}
	return r.Phase != converge.PhaseReady && !s.isComposer(n)
}

// consider dispatches n's next task if it is eligible, or records why
// not.
func (s *Scheduler) consider(n *node) {
	if n.is(stateRemoved) || n.is(stateParked) || n.is(stateBlocked) {
		return
	}
	r := n.res()
	if r.Deleting {
		s.considerTeardown(n)
		return
	}
	if s.holdSuspended(n) {
		return
	}
	if r.Lease != nil || n.is(stateBackoff) || n.has(mUnstorable) {
		// An unstorable row stays Failed: a new generation (a flowed
		// value) must not make Ready what the store cannot hold.
		return
	}
	// A permanent failure waits for a new generation, which a changed
	// flowed value also brings: flows are recomputed first.
	if prods := n.adj.prod(); len(prods) > 0 {
		var first converge.ID
		waiting := 0
		for _, e := range prods {
			p := s.graph.nodes[e.Producer]
			if p == nil || p.deleting() || !p.readyAtGeneration() {
				if waiting == 0 {
					first = e.Producer
				}
				waiting++
			}
		}
		if waiting > 0 {
			// A due resync of a Ready resource waits quietly, Ready.
			quiet := r.Phase == converge.PhaseReady && r.ObservedGeneration == r.Generation
			if s.needsRun(n) && !permanent(r) && !quiet {
				reason := "waiting for " + string(first)
				if waiting > 1 {
					reason += " (+" + strconv.Itoa(waiting-1) + " more)"
				}
				s.setReason(n, reason)
				s.setPhase(n, converge.PhasePending)
			}
			return
		}
	}
	// Flows are dirty also when the last edge with flows went: the spec
	// is Declared again.
	if n.has(mFlowsDirty) {
		n.unset(mFlowsDirty)
		if !n.has(mFlowsLoaded) || !s.graph.flowsApplied(n) {
			changed := s.applyFlows(n)
			// A flowed value is checked when it is written, or
			// before the first run of a spec composed with it.
			var err error
			if changed || r.ObservedGeneration == 0 && r.Attempts == 0 && len(n.adj.prod()) > 0 {
				err = s.checkFlowed(n)
			}
			if err != nil {
				if !permanent(r) || r.LastError != err.Error() {
					s.failPermanent(n, err.Error())
				}
				n.unset(mFlowsLoaded)
				return
			}
		}
		n.unset(mFlowsLoaded)
	}
	if permanent(r) || !s.needsRun(n) {
		return
	}
	s.dispatchMain(n)
}

// applyFlows recomputes n's Spec from Declared and its producers'
// statuses. A changed spec of a resource that ran before bumps its
// generation, so it runs again. It reports whether the spec changed.
func (s *Scheduler) applyFlows(n *node) bool {
	spec := s.computeSpec(n)
	if bytes.Equal(spec, n.res().Spec) {
		return false
	}
	n.res().Spec = spec
	if n.res().ObservedGeneration > 0 || n.res().Attempts > 0 {
		s.bumpGeneration(n)
	}
	s.markDirty(n)
	return true
}

// bumpGeneration starts a new generation of n: attempts reset, Pending.
func (s *Scheduler) bumpGeneration(n *node) {
	n.res().Generation++
	n.res().Attempts = 0
	n.res().NextAttempt = timeZero
	s.lease.endBackoff(n)
	if n.res().Lease == nil && !n.deleting() {
		s.setReason(n, "")
		s.setPhase(n, converge.PhasePending)
	}
	s.markDirty(n)
	s.lease.enqueue(n)
}

// computeSpec is Declared with every value flow of n's edges applied.
func (s *Scheduler) computeSpec(n *node) []byte {
	prods := n.adj.prod()
	hasFlows := false
	for _, e := range prods {
		if len(e.Flows) > 0 {
			hasFlows = true
			break
		}
	}
	if !hasFlows {
		return n.res().Declared
	}
	var sets []flowSet
	for _, e := range prods {
		if len(e.Flows) == 0 {
			continue
		}
		p := s.graph.nodes[e.Producer]
		if p == nil {
			continue
		}
		st := p.status()
		if len(st) == 0 {
			continue
		}
		for _, f := range e.Flows {
			if v, ok := getField(st, f.From); ok {
				sets = append(sets, flowSet{f.To, v})
			}
		}
	}
	if len(sets) == 0 {
		return n.res().Declared
	}
	out, err := setFields(n.res().Declared, sets)
	if err != nil {
		s.log.Warn("apply value flows", "resource", n.id, "err", err)
		return n.res().Declared
	}
	return out
}

func (s *Scheduler) mainReaction(n *node) string {
	if s.isComposer(n) {
		return converge.ReactionCompose
	}
	if r := n.res(); n.has(mResync) && r.Phase == converge.PhaseReady && r.ObservedGeneration == r.Generation && s.observes(n) {
		return converge.ReactionObserve
	}
	return converge.ReactionReconcile
}

// park records that no worker serves n's KindRef and reaction.
func (s *Scheduler) park(n *node) {
	s.lease.parkNode(n)
	if n.res().Phase == converge.PhaseReady && !n.deleting() {
		return // a resync waits quietly
	}
	s.setReason(n, "no worker serves "+n.res().Ref().String())
	if !n.deleting() {
		s.setPhase(n, converge.PhasePending)
	}
}

// block queues n until its KindRef has room.
func (s *Scheduler) block(n *node, rs *refState) {
	s.lease.blockNode(n, rs)
	if n.res().Phase == converge.PhasePending {
		if rs.queuedReason == "" {
			rs.queuedReason = "queued for a " + rs.ref.String() + " worker"
		}
		s.setReason(n, rs.queuedReason)
	}
}

func (s *Scheduler) dispatchMain(n *node) {
	s.dispatchNode(n, s.mainReaction(n), taskMain)
}

// dispatchNode hands n's reaction to a worker, leasing it.
func (s *Scheduler) dispatchNode(n *node, reaction string, kind taskKind) {
	r := n.res()
	ref := r.Ref()
	if !s.servesRef(ref, reaction) {
		s.park(n)
		return
	}
	rs := n.rs
	if rs.noWorker || rs.inflight >= rs.max {
		s.block(n, rs)
		return
	}
	resync := kind == taskMain && r.Phase == converge.PhaseReady && r.ObservedGeneration == r.Generation
	ttl := s.leaseTTL(ref)
	t := s.newTask(r, reaction, r.UID+"/"+itoa(r.Generation)+"/"+reaction, ttl)
	var config string
	if reaction == converge.ReactionCompose {
		config = composeContext(r.KindVersion, t.Config)
		t.BaseSpec, t.BaseRevision = s.composeBase(n, config)
	}
	// The kind version is known to the result stage before the task
	// leaves: a fast worker's result can arrive before Dispatch returns.
	if reaction != converge.ReactionTeardown {
		s.lease.taskRefs.Store(t.ID, ref)
	}
	if s.localServes(ref, reaction) {
		s.dispatchLocal(t)
	} else if err := s.disp.Dispatch(s.ctx, t); err != nil {
		s.lease.taskRefs.Delete(t.ID)
		if errors.Is(err, converge.ErrNoWorker) {
			rs.noWorker = true
			s.block(n, rs)
			return
		}
		if s.ctx.Err() != nil {
			return // Run is stopping: n stays as it is, for the next to dispatch
		}
		s.failTransient(n, "dispatch: "+err.Error())
		return
	}
	s.lease.dispatched++
	rs.inflight++
	s.lease.inflight++
	n.unset(mResync)
	s.track(t.ID, &taskRec{kind: kind, id: n.id, gen: r.Generation, ref: ref, reaction: reaction, resync: resync, counted: true,
		config: config, base: t.BaseSpec != nil})
	r.Lease = &converge.Lease{TaskID: t.ID, Reaction: reaction, Expires: t.Deadline}
	s.lease.addTimer(t.Deadline, timerLease, n.id, t.ID)
	if kind == taskMain && !resync {
		if r.Reason != "" {
			r.Reason = ""
		}
		s.setPhase(n, converge.PhaseRunning)
		s.markDirty(n)
	}
}

// release frees the inflight slot a task held.
func (s *Scheduler) release(rec *taskRec) {
	if !rec.counted {
		return
	}
	rec.counted = false
	rs := s.refState(rec.ref)
	rs.inflight--
	s.lease.inflight--
	s.lease.room(rs)
}

// dropTask forgets a task: its result, if any comes, is ignored.
func (s *Scheduler) dropTask(taskID string) {
	s.lease.taskRefs.Delete(taskID)
	if rec := s.lease.tasks[taskID]; rec != nil {
		s.release(rec)
		delete(s.lease.tasks, taskID)
	}
}

// failTransient schedules a retry of n's current task with backoff.
func (s *Scheduler) failTransient(n *node, msg string) {
	msg = s.scrubMessage(n.id, "", msg)
	r := n.res()
	r.Attempts++
	r.LastError = msg
	d := s.backoff(r.Attempts)
	r.NextAttempt = s.now.Add(d)
	s.lease.backOff(n, r.NextAttempt)
	if r.Deleting {
		s.setReason(n, "teardown retrying in "+fmtDelay(d)+": "+msg)
		s.markDirty(n)
		s.blockersChanged(n)
		return
	}
	r.Reason = "retrying in " + fmtDelay(d) + ": " + msg
	if r.Phase == converge.PhaseFailed {
		s.event(n.id, "Retrying", r.Reason)
	}
	s.setPhase(n, converge.PhaseFailed)
	s.markDirty(n)
}

// failPermanent stops n until its spec changes.
func (s *Scheduler) failPermanent(n *node, msg string) {
	msg = s.scrubMessage(n.id, "", msg)
	r := n.res()
	r.Attempts++
	r.LastError = msg
	r.NextAttempt = timeZero
	s.lease.endBackoff(n)
	r.Reason = "permanent: " + msg
	s.markDirty(n)
	if r.Deleting {
		n.set(mStuck)
		s.event(n.id, "TeardownFailed", r.Reason)
		s.blockersChanged(n)
		return
	}
	s.setPhase(n, converge.PhaseFailed)
	s.fire(n, converge.TransitionFailed)
	if len(s.rollouts) > 0 {
		s.rolloutFailed(n, msg)
	}
}

// onResult handles one worker result.
func (s *Scheduler) onResult(res *converge.Result) {
	if res == nil {
		return
	}
	s.lease.taskRefs.Delete(res.TaskID)
	rec := s.lease.tasks[res.TaskID]
	if rec == nil {
		return // unknown or stale task
	}
	delete(s.lease.tasks, res.TaskID)
	s.release(rec)
	s.lease.completed++
	res.Message = s.scrubMessage(rec.id, rec.key, res.Message)
	s.countResult(rec, res.Outcome)
	switch rec.kind {
	case taskReact:
		s.deliveryResult(rec, res)
		return
	case taskVerb:
		s.verbResult(rec, res)
		return
	}
	n := s.graph.nodes[rec.id]
	if n == nil || n.res().Lease == nil || n.res().Lease.TaskID != res.TaskID {
		return
	}
	n.res().Lease = nil
	if rec.kind == taskTeardown {
		s.teardownResult(n, res)
		return
	}
	if n.deleting() {
		return
	}
	switch res.Outcome {
	case converge.OutcomeOK:
		switch rec.reaction {
		case converge.ReactionCompose:
			s.composeResult(n, rec, res)
			return
		case converge.ReactionObserve:
			s.observeResult(n, rec, res)
			return
		}
		s.reconcileOK(n, rec, res)
	case converge.OutcomePermanent:
		if rec.gen != n.res().Generation {
			s.lease.enqueue(n)
			return
		}
		s.failPermanent(n, res.Message)
	default:
		msg := res.Message
		if msg == "" {
			msg = "transient error"
		}
		s.failTransient(n, msg)
	}
}

// reconcileOK records a successful reconcile of generation rec.gen. A
// status that is not a JSON object valid under the kind version's status
// schema fails the task permanently: the worker broke its contract, and
// nothing of the result is kept.
func (s *Scheduler) reconcileOK(n *node, rec *taskRec, res *converge.Result) {
	r := n.res()
	if err := s.resultStatusErr(rec.ref, res); err != nil {
		s.failPermanent(n, "worker result refused: "+err.Error())
		return
	}
	statusChanged := false
	if res.Status != nil && !bytes.Equal(res.Status, r.Status) {
		r.Status = res.Status
		statusChanged = true
		s.markDirty(n)
	}
	s.reconciled(n, rec)
	s.succeeded(n, rec)
	if statusChanged {
		s.consumersChanged(n)
	}
	// A Ready row waits for its commit packed: at 1M, ~130,000 rows
	// waited decoded for theirs (60 MB, and ten pointers each for the
	// collector to mark).
	n.pack()
}

// succeeded resets failure state after an OK result and moves a leaf to
// Ready (or to its next generation).
func (s *Scheduler) succeeded(n *node, rec *taskRec) {
	r := n.res()
	n.tries = int32(r.Attempts + 1)
	if r.ObservedGeneration != rec.gen || r.Attempts != 0 || r.LastError != "" || !r.NextAttempt.IsZero() {
		r.ObservedGeneration = rec.gen
		r.Attempts = 0
		r.LastError = ""
		r.NextAttempt = timeZero
		s.markDirty(n)
	}
	if rec.gen != r.Generation {
		// The spec changed meanwhile: run again.
		s.setPhase(n, converge.PhasePending)
		s.lease.enqueue(n)
		return
	}
	if s.isComposer(n) {
		return
	}
	s.setReason(n, "")
	if r.Phase != converge.PhaseReady {
		s.setPhase(n, converge.PhaseReady)
		s.becameReady(n)
	} else {
		s.scheduleResync(n)
	}
}

// becameReady runs after n reached Ready at its generation.
func (s *Scheduler) becameReady(n *node) {
	s.scheduleResync(n)
	s.consumersChanged(n)
	s.fire(n, converge.TransitionSynced)
}

// consumersChanged re-evaluates n's consumers' flows and gates.
func (s *Scheduler) consumersChanged(n *node) {
	for _, e := range n.adj.cons() {
		if c := s.graph.nodes[e.Consumer]; c != nil {
			if len(e.Flows) > 0 {
				c.markFlows()
			}
			s.lease.enqueue(c)
		}
	}
}

// leaseExpired handles a lease timer for taskID.
func (s *Scheduler) leaseExpired(taskID string) {
	rec := s.lease.tasks[taskID]
	if rec == nil {
		return
	}
	s.countExpired(rec)
	switch rec.kind {
	case taskReact:
		s.dropTask(taskID)
		s.deliveryLeaseExpired(rec, taskID)
		return
	case taskVerb:
		delete(s.lease.tasks, taskID)
		s.lease.taskRefs.Delete(taskID)
		if rec.dry {
			rec.verb <- verbOutcome{err: errors.New("dry-run " + rec.reaction + ": timed out")}
			return
		}
		s.event(rec.id, "Verb", "verb "+rec.reaction+": timed out")
		rec.verb <- verbOutcome{err: errors.New("verb " + rec.reaction + ": timed out")}
		return
	}
	s.dropTask(taskID)
	n := s.graph.nodes[rec.id]
	if n == nil || n.res().Lease == nil || n.res().Lease.TaskID != taskID {
		return
	}
	n.res().Lease = nil
	s.failTransient(n, "lease expired")
}

// newTask builds the task running reaction on r: its current spec and
// status, its resolved provider config, a fresh task id, the given
// idempotency key and a deadline ttl from now.
func (s *Scheduler) newTask(r *converge.Resource, reaction, key string, ttl time.Duration) *converge.Task {
	t := &converge.Task{
		ID:          s.lease.newTaskID(),
		Key:         key,
		Reaction:    reaction,
		UID:         r.UID,
		Kind:        r.Kind,
		KindVersion: r.KindVersion,
		Name:        r.Name,
		Generation:  r.Generation,
		Spec:        r.Spec,
		Status:      r.Status,
		Config:      s.resolveConfig(r),
		Deadline:    s.now.Add(ttl),
	}
	if k := s.refState(r.Ref()).kind; reaction == converge.ReactionCompose && k != nil {
		t.MaxChildren = k.MaxChildren
	}
	return t
}

// checkStatus returns why status, returned by a worker for a resource of
// ref, cannot be kept: it is not a JSON object, or the kind version's
// status schema rejects it (the error names the field). A nil status
// (nothing returned) is fine.
func (s *Scheduler) checkStatus(ref converge.KindRef, status json.RawMessage) error {
	return checkStatusWith(s.validator, ref, status)
}

func checkStatusWith(v Validator, ref converge.KindRef, status json.RawMessage) error {
	if status == nil {
		return nil
	}
	if err := checkObject(status); err != nil {
		return fmt.Errorf("status: %w", err)
	}
	if v != nil {
		return v.ValidateStatus(ref, status)
	}
	return nil
}

// resultStatusErr is checkStatus of res's status, taken from the check a
// checker goroutine already made of res (Run's result stage) when there
// is one.
func (s *Scheduler) resultStatusErr(ref converge.KindRef, res *converge.Result) error {
	if s.pre.res == res && s.pre.done {
		return s.pre.err
	}
	return s.checkStatus(ref, res.Status)
}

// precheck is a result with its status already checked off the loop.
type precheck struct {
	res  *converge.Result
	done bool  // err is the status check's answer
	err  error // from checkStatusWith
}

// precheckResult checks r's status on a checker goroutine: the status
// schema is a CUE validation (tens of microseconds), and a million
// results checked on the loop would hold up everything else. It knows a
// result's kind version from taskRefs; one it does not know (a stale or
// unknown task, or no status) is left to the loop.
func (s *Scheduler) precheckResult(r *converge.Result) precheck {
	if r == nil || r.Outcome != converge.OutcomeOK || r.Status == nil {
		return precheck{res: r}
	}
	ref, ok := s.lease.taskRefs.Load(r.TaskID)
	if !ok {
		return precheck{res: r}
	}
	var v Validator
	if b := s.validatorP.Load(); b != nil {
		v = b.v
	}
	return precheck{res: r, done: true, err: checkStatusWith(v, ref.(converge.KindRef), r.Status)}
}

// validatorBox holds the Validator the checker goroutines use.
type validatorBox struct{ v Validator }

// setValidator makes v the validator of the loop and of the checkers.
func (s *Scheduler) setValidator(v Validator) {
	s.setLocal(v)
	s.validator = v
	s.validatorP.Store(&validatorBox{v})
}

// checkObject returns an error unless b is one valid JSON object with no
// key twice in any of its objects (rawjson.CheckObject: the boundary
// where a worker's status and composed specs enter, checked once; the
// error names a duplicate key and where it is).
func checkObject(b []byte) error { return rawjson.CheckObject(b) }
