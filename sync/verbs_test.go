package sync_test

import (
	"strings"
	"testing"

	"github.com/convergehq/converge"
	gitsync "github.com/convergehq/converge/sync"
)

func TestUnservedVerbs(t *testing.T) {
	kinds := []*converge.Kind{
		{Name: "vpc", Version: 1, Reactions: []string{"reconcile", "teardown", "enable_flow_logs", "rotate_keys"}},
		{Name: "db", Version: 1, Reactions: []string{"reconcile", "backup"}}, // no worker at all: parked, not warned
	}
	serves := func(ref converge.KindRef, r string) bool {
		return ref.Kind == "vpc" && r != "rotate_keys"
	}
	got := gitsync.UnservedVerbs(kinds, serves)
	if len(got) != 1 || !strings.Contains(got[0], "kind vpc/v1 declares the verb rotate_keys, which no connected worker serves") {
		t.Errorf("UnservedVerbs = %q, want one warning for vpc/v1 rotate_keys", got)
	}
}
