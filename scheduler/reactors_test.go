package scheduler

import (
	"testing"

	"github.com/convergehq/converge"
)

// The reactors part on its own: bindings and owed deliveries.

func newTestReactors() *reactors {
	return &reactors{
		bindings:   map[string]*converge.Binding{},
		byKind:     map[string][]*converge.Binding{},
		deliveries: map[string]*converge.Delivery{},
		fired:      map[firedKey]int64{},
		delivLease: map[string]string{},
	}
}

func TestReactorsOweParkSettle(t *testing.T) {
	r := newTestReactors()
	a, b := &converge.Delivery{Key: "bind/u1/1/synced"}, &converge.Delivery{Key: "bind/u2/1/synced"}
	r.owe(a)
	r.owe(b)
	if r.owedDeliv != 2 || r.deliveries[a.Key] != a || r.deliveries[b.Key] != b {
		t.Fatalf("owed %d, want 2, both held", r.owedDeliv)
	}
	if r.nextDelivery() != a || r.nextDelivery() != b || r.nextDelivery() != nil {
		t.Fatal("the dispatch queue does not hold a, then b, then nothing")
	}
	r.parkDelivery(b)
	r.parkDelivery(b)
	if len(r.parkedDel) != 1 || !r.delivParked(b) || r.delivParked(a) {
		t.Fatalf("parked %d deliveries, want b once", len(r.parkedDel))
	}
	if !r.delivWorkPending(false) {
		t.Fatal("no work pending while a, owed and not parked, can still be dispatched")
	}
	r.settle(a)
	if !a.Done || r.owedDeliv != 1 {
		t.Fatalf("settled a: done %v, owed %d; want done, 1", a.Done, r.owedDeliv)
	}
	if r.delivWorkPending(false) {
		t.Fatal("work pending while the only owed delivery is parked")
	}
	r.unparkDeliveries()
	if len(r.parkedDel) != 0 || r.nextDelivery() != b || !r.delivWorkPending(false) {
		t.Fatal("unparking does not queue b again")
	}
}

func TestReactorsBindingsByKind(t *testing.T) {
	r := newTestReactors()
	r.bindings["a"] = &converge.Binding{Name: "a", Kind: "vpc"}
	r.bindings["b"] = &converge.Binding{Name: "b", Kind: "vpc"}
	r.bindings["c"] = &converge.Binding{Name: "c", Kind: "subnet"}
	r.rebuildByKind()
	if len(r.byKind["vpc"]) != 2 || len(r.byKind["subnet"]) != 1 || len(r.byKind) != 2 {
		t.Fatalf("byKind %v, want two vpc bindings and one subnet", r.byKind)
	}
	delete(r.bindings, "c")
	r.rebuildByKind()
	if _, ok := r.byKind["subnet"]; ok {
		t.Fatal("a removed binding is still indexed")
	}
}
