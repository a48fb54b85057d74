package codec

import (
	"bytes"
	"testing"

	"github.com/convergehq/converge"
)

// TestResourceNeedle: a chunk holds an event of id exactly when it holds
// ResourceNeedle(id), for names encoding/json escapes and names that are
// prefixes of others.
func TestResourceNeedle(t *testing.T) {
	chunk, err := EncodeChunk([]converge.Event{
		{Seq: 1, Resource: "vpc/ab", Type: "Created"},
		{Seq: 2, Resource: "vpc/a<b>&c", Type: "Created"},
		{Seq: 3, Resource: "vpc/é\"q", Type: "Created", Message: `"resource":"vpc/in-message"`},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		id   converge.ID
		want bool
	}{
		{name: "held", id: "vpc/ab", want: true},
		{name: "prefix of a held one", id: "vpc/a"},
		{name: "escaped by encoding/json", id: "vpc/a<b>&c", want: true},
		{name: "unicode and quote", id: "vpc/é\"q", want: true},
		{name: "absent", id: "vpc/zz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := bytes.Contains(chunk, ResourceNeedle(tt.id)); got != tt.want {
				t.Errorf("chunk holds needle of %s: %v, want %v", tt.id, got, tt.want)
			}
		})
	}
}
