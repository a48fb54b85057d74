package providers

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/convergehq/converge"
	convergev1 "github.com/convergehq/converge/proto/converge/v1"
)

// FuzzResultFromProto decodes any bytes as the message a worker sends and
// converts its results as the server does: never a panic, and every
// result keeps its task, its children, edges and removals one for one,
// with one of the three outcomes.
func FuzzResultFromProto(f *testing.F) {
	seed := &convergev1.WorkerMessage{Msg: &convergev1.WorkerMessage_Results{Results: &convergev1.ResultBatch{
		Results: []*convergev1.Result{{
			TaskId: "t1", Outcome: convergev1.Outcome_OUTCOME_OK, Status: []byte(`{"id":"x"}`),
			Children: []*convergev1.Child{{Kind: "vpc", KindVersion: 1, Name: "a", Spec: []byte(`{}`)}},
			Edges:    []*convergev1.Edge{{Consumer: "vpc/a", Producer: "tgw/b", Flows: []*convergev1.ValueFlow{{From: "status.id", To: "spec.tgw"}}}},
			Removed:  []string{"vpc/old"}, Delta: true, More: true,
		}, {TaskId: "t2", Outcome: convergev1.Outcome_OUTCOME_PERMANENT, Message: "no"}},
	}}}
	b, err := proto.Marshal(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		var m convergev1.WorkerMessage
		if err := proto.Unmarshal(data, &m); err != nil {
			return
		}
		for _, p := range m.GetResults().GetResults() {
			r := resultFromProto(p, "w")
			if r.TaskID != p.GetTaskId() || r.Worker != "w" {
				t.Fatalf("task %q from %q, want %q", r.TaskID, r.Worker, p.GetTaskId())
			}
			if len(r.Children) != len(p.GetChildren()) || len(r.Edges) != len(p.GetEdges()) || len(r.Removed) != len(p.GetRemoved()) {
				t.Fatalf("children, edges, removed = %d, %d, %d, want %d, %d, %d", len(r.Children), len(r.Edges), len(r.Removed),
					len(p.GetChildren()), len(p.GetEdges()), len(p.GetRemoved()))
			}
			switch r.Outcome {
			case converge.OutcomeOK, converge.OutcomeTransient, converge.OutcomePermanent:
			default:
				t.Fatalf("outcome %q", r.Outcome)
			}
			if (r.Status == nil) != (len(p.GetStatus()) == 0) {
				t.Fatalf("status %q from %q", r.Status, p.GetStatus())
			}
			for i, e := range r.Edges {
				if len(e.Flows) != len(p.GetEdges()[i].GetFlows()) {
					t.Fatalf("edge %d: %d flows, want %d", i, len(e.Flows), len(p.GetEdges()[i].GetFlows()))
				}
			}
		}
	})
}
