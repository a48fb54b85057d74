package rules_test

import (
	"context"
	"encoding/binary"
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
