package rules_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/internal/rules"
)

// TestEventsTrimWholeChunks checks that trimming drops whole chunks and
// never rewrites one: five batches of three events under MaxEvents 10
// leave the chunks of seqs 4, 7, 10 and 13 stored as they were written
// (12 events, the meta counting them), while Events shows the newest 10.
func TestEventsTrimWholeChunks(t *testing.T) {
	s := memOpener(rules.Chunked, 0)(t, state.Options{MaxEvents: 10}).(memStore)
	ctx := context.Background()
	for i := range 5 {
		var evs []converge.Event
		for j := range 3 {
			evs = append(evs, converge.Event{Resource: converge.ID(fmt.Sprintf("vpc/%d", j)), Type: "T", Message: fmt.Sprint(i)})
		}
		if err := s.Commit(ctx, &converge.Batch{Events: evs}); err != nil {
			t.Fatal(err)
		}
	}
	var keys []uint64
	for k := range s.kv.data[rules.Events] {
		keys = append(keys, binary.BigEndian.Uint64([]byte(k)))
	}
	slices.Sort(keys)
	if got, want := fmt.Sprint(keys), "[4 7 10 13]"; got != want {
		t.Errorf("stored chunks %s, want %s (whole chunks, none cut)", got, want)
	}
	meta := s.kv.data[rules.Meta][string(rules.MetaEvents)]
	if got, want := binary.BigEndian.Uint64(meta[8:]), uint64(12); got != want {
		t.Errorf("meta counts %d events, want %d", got, want)
	}
	evs, err := s.Events(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 10 || evs[0].Seq != 6 || evs[9].Seq != 15 {
		t.Errorf("Events: %d events from seq %d, want 10 from 6", len(evs), evs[0].Seq)
	}
	// One resource's events outside the window are not shown, even in a
	// chunk partly inside it: vpc/0's seq 4 is stored, seq 7 is shown.
	one, err := s.Events(ctx, "vpc/0", 0)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, e := range one {
		seqs = append(seqs, e.Seq)
	}
	if got, want := fmt.Sprint(seqs), "[7 10 13]"; got != want {
		t.Errorf("Events(vpc/0) seqs %s, want %s", got, want)
	}
}

// TestSpecApart checks where a big declared spec is stored: apart from
// its row (the row stays small), written once while it is unchanged (a
// row rewritten for its phase leaves the stored spec as it was), and
// deleted with the row.
func TestSpecApart(t *testing.T) {
	s := memOpener(rules.Chunked, 0)(t, state.Options{}).(memStore)
	ctx := context.Background()
	spec := append(append([]byte(`{"teams":["`), bytes.Repeat([]byte("t"), rules.ApartSize)...), `"]}`...)
	r := &converge.Resource{UID: "u1", Kind: "bom", KindVersion: 1, Name: "big", Declared: spec, Spec: spec,
		Phase: converge.PhasePending, Generation: 1, Origin: converge.OriginGit}
	if err := s.Commit(ctx, &converge.Batch{Resources: []*converge.Resource{r}}); err != nil {
		t.Fatal(err)
	}
	row := s.kv.data[rules.Resources]["bom/big"]
	stored := s.kv.data[rules.Specs]["bom/big"]
	if len(row) > 1024 || !bytes.Equal(stored, spec) {
		t.Fatalf("row of %d bytes, spec apart of %d bytes: want a small row and the spec apart", len(row), len(stored))
	}
	ready := *r
	ready.Phase, ready.ObservedGeneration, ready.Status = converge.PhaseReady, 1, json.RawMessage(`{"rollup":{"total":1}}`)
	if err := s.Commit(ctx, &converge.Batch{Resources: []*converge.Resource{&ready}}); err != nil {
		t.Fatal(err)
	}
	if again := s.kv.data[rules.Specs]["bom/big"]; len(again) == 0 || &again[0] != &stored[0] {
		t.Errorf("a commit of the same spec wrote it again")
	}
	got, err := s.Resource(ctx, "bom/big")
	if err != nil || !bytes.Equal(got.Declared, spec) || !bytes.Equal(got.Spec, spec) || got.Phase != converge.PhaseReady {
		t.Fatalf("Resource(bom/big): %v, declared %d bytes, spec %d bytes, phase %s", err, len(got.Declared), len(got.Spec), got.Phase)
	}
	if err := s.Commit(ctx, &converge.Batch{DeletedResources: []converge.ID{"bom/big"}}); err != nil {
		t.Fatal(err)
	}
	if n := len(s.kv.data[rules.Specs]); n != 0 {
		t.Errorf("%d specs apart left after the delete", n)
	}
}
