package etcdstate

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// TestPacerHalvesOnceASlowStretchAndGrowsBack: a transaction over
// paceTarget halves the window, the slow ones finishing in the same
// stretch do not halve it again, and fast ones grow it back by one
// each, up to the limit and never below 1.
func TestPacerHalvesOnceASlowStretchAndGrowsBack(t *testing.T) {
	var p pacer
	t0 := time.Unix(1000, 0)
	if got := p.allowed(128); got != paceStart {
		t.Fatalf("window before any measure = %d, want %d", got, paceStart)
	}
	p.observe(2*time.Second, t0, 128)
	for i := range 10 { // the rest of the stretch
		p.observe(2*time.Second, t0.Add(time.Duration(i)*10*time.Millisecond), 128)
	}
	if got := p.allowed(128); got != paceStart/2 {
		t.Fatalf("window after one slow stretch = %d, want %d", got, paceStart/2)
	}
	for i := range 20 { // a slow stretch each paceTarget
		p.observe(2*time.Second, t0.Add(time.Duration(i+1)*paceTarget), 128)
	}
	if got := p.allowed(128); got != 1 {
		t.Fatalf("window after a long slow time = %d, want 1", got)
	}
	p.observe(paceTarget*3/4, t0.Add(time.Hour), 128) // neither slow nor fast
	if got := p.allowed(128); got != 1 {
		t.Fatalf("window after a middling round trip = %d, want 1 still", got)
	}
	for range 200 {
		p.observe(10*time.Millisecond, t0.Add(time.Hour), 40)
	}
	if got := p.allowed(128); got != 40 {
		t.Fatalf("window after fast round trips = %d, want the limit 40", got)
	}
	if got := p.allowed(5); got != 5 {
		t.Fatalf("window under a limit of 5 = %d, want 5", got)
	}
}

// TestPacedKeepsTheWindowAndStopsOnError: paced never has more calls in
// flight than the window allows, runs every index once, and starts no
// more once one failed.
func TestPacedKeepsTheWindowAndStopsOnError(t *testing.T) {
	var p pacer
	var (
		mu            sync.Mutex
		inflight, top int
		seen          = map[int]int{}
	)
	err := p.paced(200, 4, func(i int) error {
		mu.Lock()
		inflight++
		top = max(top, inflight)
		seen[i]++
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		inflight--
		mu.Unlock()
		return nil
	})
	if err != nil || top > 4 || len(seen) != 200 {
		t.Fatalf("paced: err %v, %d in flight at most (want ≤ 4), %d indexes run (want 200)", err, top, len(seen))
	}
	for i, n := range seen {
		if n != 1 {
			t.Fatalf("index %d ran %d times", i, n)
		}
	}
	boom := errors.New("boom")
	ran := 0
	err = p.paced(1000, 2, func(i int) error {
		mu.Lock()
		ran++
		mu.Unlock()
		if i == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || ran > 10 {
		t.Fatalf("paced after a failure: err %v, %d started (want it to stop within a few)", err, ran)
	}
}
