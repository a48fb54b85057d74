package classic

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers/sdk"
)

func reactRequest(t *testing.T, bucket string, gen int64) *sdk.Request {
	t.Helper()
	return &sdk.Request{
		TaskID: "t1", Key: "uid-org/" + string(rune('0'+gen)) + "/synced/statussink", Reaction: "react",
		UID: "uid-sink", Kind: "statussink", KindVersion: 1, Name: "sink",
		Config: mustJSON(t, StatusSinkConfig{BucketDir: bucket}),
		Subject: &converge.Subject{
			Resource: "classicbom/org", UID: "uid-org", Generation: gen, Transition: converge.TransitionSynced,
			Status: json.RawMessage(`{"total":3644,"ready":3644}`),
		},
	}
}

func TestStatusSinkIdempotent(t *testing.T) {
	state := t.TempDir()
	dir := filepath.Join(state, "bucket")
	sink := find(t, Providers(Options{StateDir: state}), "statussink", 1)
	if sink.React == nil {
		t.Fatal("statussink has no React")
	}
	r := reactRequest(t, "bucket", 1)
	for range 2 {
		if err := sink.React(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	var objects []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Base(p) != InvocationsLog {
			rel, _ := filepath.Rel(dir, p)
			objects = append(objects, rel)
		}
		return err
	})
	if want := ObjectPath("classicbom", "org", 1, "synced"); len(objects) != 1 || objects[0] != want {
		t.Fatalf("objects = %q, want only %q", objects, want)
	}
	b, err := os.ReadFile(filepath.Join(dir, objects[0]))
	if err != nil {
		t.Fatal(err)
	}
	var got converge.Subject
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("object is not a subject: %v\n%s", err, b)
	}
	var status bytes.Buffer
	if err := json.Compact(&status, got.Status); err != nil {
		t.Fatal(err)
	}
	if got.Resource != "classicbom/org" || got.Generation != 1 || status.String() != `{"total":3644,"ready":3644}` {
		t.Errorf("object = %+v, want the subject with its status", got)
	}
	log, err := os.ReadFile(filepath.Join(dir, InvocationsLog))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	if got, want := len(lines), 2; got != want {
		t.Fatalf("invocations.log has %d lines, want %d:\n%s", got, want, log)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, r.Key+" ") {
			t.Errorf("log line %q does not start with the key %q", l, r.Key)
		}
	}
	// A new generation is a new object.
	if err := sink.React(context.Background(), reactRequest(t, "bucket", 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ObjectPath("classicbom", "org", 2, "synced"))); err != nil {
		t.Errorf("generation 2 object: %v", err)
	}
}

func TestStatusSinkRelativeBucket(t *testing.T) {
	state := t.TempDir()
	sink := find(t, Providers(Options{StateDir: state}), "statussink", 1)
	if err := sink.React(context.Background(), reactRequest(t, "bucket", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(state, "bucket", ObjectPath("classicbom", "org", 1, "synced"))); err != nil {
		t.Errorf("relative bucket_dir not under StateDir: %v", err)
	}
}

func TestStatusSinkErrors(t *testing.T) {
	dir := t.TempDir()
	sink := find(t, Providers(Options{StateDir: dir}), "statussink", 1)
	tests := []struct {
		name   string
		modify func(r *sdk.Request)
	}{
		{"no subject", func(r *sdk.Request) { r.Subject = nil }},
		{"no bucket", func(r *sdk.Request) { r.Config = nil }},
		{"escaping transition", func(r *sdk.Request) { r.Subject.Transition = "../../x" }},
		{"dot-dot name", func(r *sdk.Request) { r.Subject.Resource = "classicbom/.." }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := reactRequest(t, ".", 1)
			tt.modify(r)
			if err := sink.React(context.Background(), r); !isPermanent(err) {
				t.Errorf("err = %v, want permanent", err)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("bad deliveries wrote %d entries into the bucket", len(entries))
	}
}

// TestStatusSinkStaysInside: a provider config comes from the repository,
// which may be remote: whatever its bucket_dir says, statussink writes
// nothing outside the worker's state directory. An absolute or climbing
// bucket_dir fails permanently naming the field; a symbolic link inside
// the directory that leads out of it is not followed.
func TestStatusSinkStaysInside(t *testing.T) {
	state, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(state, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(state, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(state, "sub", "objects")); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(state, outside)
	if err != nil {
		t.Fatal(err)
	}
	sink := find(t, Providers(Options{StateDir: state}), "statussink", 1)
	for _, tt := range []struct {
		bucket    string
		permanent bool
	}{
		{outside, true},
		{rel, true},
		{"statussink/../../x", true},
		{"..", true},
		{"link", false},
		{"link/deeper", false},
	} {
		t.Run(tt.bucket, func(t *testing.T) {
			err := sink.React(context.Background(), reactRequest(t, tt.bucket, 1))
			if err == nil {
				t.Fatalf("bucket_dir %q: delivered, want refused", tt.bucket)
			}
			if tt.permanent && (!isPermanent(err) || !strings.Contains(err.Error(), "bucket_dir")) {
				t.Errorf("bucket_dir %q: %v; want a permanent error naming bucket_dir", tt.bucket, err)
			}
		})
	}
	// A subject's object path through a link inside the bucket.
	if err := sink.React(context.Background(), reactRequest(t, "sub", 1)); err != nil {
		t.Errorf("bucket_dir sub: %v", err)
	}
	r := reactRequest(t, "sub", 1)
	r.Subject.Resource = "objects/x"
	if err := sink.React(context.Background(), r); err == nil {
		t.Errorf("an object path through a link that leads out was written")
	}
	entries, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("written outside the state directory: %s", e.Name())
	}
}

// TestStatusSinkConcurrentRepeats: eight concurrent deliveries of the same
// key (a retried react racing the original) leave one whole object and
// eight whole log lines.
func TestStatusSinkConcurrentRepeats(t *testing.T) {
	dir := t.TempDir()
	sink := find(t, Providers(Options{StateDir: dir}), "statussink", 1)
	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() { errs <- sink.React(context.Background(), reactRequest(t, ".", 1)) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(filepath.Join(dir, "classicbom", "org"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("object directory holds %q, want one object and no temporary files", names)
	}
	log, err := os.ReadFile(filepath.Join(dir, InvocationsLog))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(log), "\n"), "\n")
	if got, want := len(lines), n; got != want {
		t.Fatalf("invocations.log has %d lines, want %d", got, want)
	}
	for _, l := range lines {
		if got, want := len(strings.Fields(l)), 3; got != want {
			t.Errorf("log line %q has %d fields, want %d (key time object)", l, got, want)
		}
	}
}
