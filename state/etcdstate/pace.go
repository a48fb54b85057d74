package etcdstate

import (
	"sync"
	"time"
)

// A journal's transactions are bounded in flight by time as well as by
// bytes (writeInFlight). etcd applies transactions in order, one member
// at a time, and what it has not applied yet holds up everything behind
// it: a leader's lease renewal waits for etcd's applied index to catch
// up (etcd's waitAppliedIndex, a second at most, then it fails), and so
// does every read. A backlog of a hundred transactions on a loaded
// machine is many seconds; the leader then loses its election lease
// with nothing wrong but its own write (issue 28: at a million rows on
// a loaded machine, after a 7 s commit). So the window of transactions
// in flight halves whenever one takes longer than paceTarget (at most
// once per paceTarget: one slow stretch halves it once) and grows by one
// after each that takes under half of it, between 1 and the bytes'
// bound. A loaded etcd then gets a short queue, an idle one full raft
// rounds.

// paceTarget is the round trip of one transaction the window aims
// under: well inside the lease renewal's wait and the default lease's
// third (a renewal is sent every TTL/3).
const paceTarget = 500 * time.Millisecond

// pacer is a store's window of journal transactions in flight. Its zero
// value starts at paceStart.
type pacer struct {
	mu    sync.Mutex
	width int       // transactions allowed in flight; 0 means paceStart
	cut   time.Time // when width was last halved
}

// paceStart is the window before any transaction was measured.
const paceStart = 16

// allowed returns the window, at most limit.
func (p *pacer) allowed(limit int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.width == 0 {
		p.width = paceStart
	}
	return max(1, min(p.width, limit))
}

// observe takes one transaction's round trip d, ended at now, into the
// window (at most limit).
func (p *pacer) observe(d time.Duration, now time.Time, limit int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.width == 0 {
		p.width = paceStart
	}
	switch {
	case d > paceTarget:
		if now.Sub(p.cut) >= paceTarget {
			p.width = max(1, p.width/2)
			p.cut = now
		}
	case d < paceTarget/2:
		p.width = min(limit, p.width+1)
	}
}

// paced runs fn(0..n-1) with at most limit (and the pacer's window) in
// flight at once, and returns the first error; once one failed, no more
// are started.
func (p *pacer) paced(n, limit int, fn func(i int) error) error {
	if n == 1 {
		start := time.Now()
		err := fn(0)
		if err == nil { // as below: a failure's round trip says nothing of the queue
			p.observe(time.Since(start), time.Now(), limit)
		}
		return err
	}
	var (
		mu       sync.Mutex
		cond     = sync.NewCond(&mu)
		inflight int
		firstErr error
		wg       sync.WaitGroup
	)
	for i := range n {
		mu.Lock()
		for inflight >= p.allowed(limit) && firstErr == nil {
			cond.Wait()
		}
		if firstErr != nil {
			mu.Unlock()
			break
		}
		inflight++
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := fn(i)
			end := time.Now()
			if err == nil {
				p.observe(end.Sub(start), end, limit)
			}
			mu.Lock()
			inflight--
			if err != nil && firstErr == nil {
				firstErr = err
			}
			cond.Broadcast()
			mu.Unlock()
		}()
	}
	wg.Wait()
	return firstErr
}
