package state_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/statetest"
)

// TestKilledMidCommit runs a second process that commits batches (fsync
// on) and prints each acknowledged one, kills it with SIGKILL mid-run, and
// reopens the store: every acknowledged batch is there, and every batch
// is there whole or not at all.
func TestKilledMidCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process and kills it; skipped with -short")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCommitterProcess$")
	cmd.Env = append(os.Environ(), "STATE_COMMITTER_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "committed "); ok {
			acked, _ = strconv.Atoi(n)
		}
		if acked >= 20 {
			break
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if acked < 20 {
		t.Fatalf("committer acknowledged %d batches before it ended, want 20", acked)
	}

	s := statetest.OpenDir(t, dir, state.Options{LockTimeout: 5 * time.Second})
	snap := load(t, s)
	batches := (len(snap.Resources) - 1) / committerBatch
	if got := len(snap.Resources) - 1; got != batches*committerBatch {
		t.Errorf("%d team resources after the kill: not a whole number of %d-resource batches", got, committerBatch)
	}
	if batches < acked {
		t.Errorf("%d batches survived the kill, %d were acknowledged", batches, acked)
	}
	if got, want := len(snap.Edges), batches*committerBatch; got != want {
		t.Errorf("%d edges for %d batches, want %d", got, batches, want)
	}
	if got, want := snap.LastEventSeq, uint64(batches*committerBatch); got != want {
		t.Errorf("LastEventSeq = %d, want %d", got, want)
	}
}

const committerBatch = 50

// TestCommitterProcess is not a test: TestKilledMidCommit runs it in a
// second process and kills it.
func TestCommitterProcess(t *testing.T) {
	dir := os.Getenv("STATE_COMMITTER_DIR")
	if dir == "" {
		t.Skip("helper process for TestKilledMidCommit; runs only when re-executed by it")
	}
	s, err := state.Open(dir, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, &converge.Batch{Resources: []*converge.Resource{res("bom", "r", "")}})
	for i := 1; ; i++ {
		b := &converge.Batch{}
		for j := range committerBatch {
			name := fmt.Sprintf("b%05d-%02d", i, j)
			b.Resources = append(b.Resources, res("vpc", name, "bom/r"))
			b.Edges = append(b.Edges, edge(converge.NewID("vpc", name), converge.NewID("account", name)))
			b.Events = append(b.Events, converge.Event{Resource: converge.NewID("vpc", name), Type: "Created"})
		}
		commit(t, s, b)
		fmt.Printf("committed %d\n", i)
	}
}
