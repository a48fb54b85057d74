package site

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/statetest"
)

// TestConfigSecretEchoed: a worker echoes its provider config's secret
// bucket into a status field that is not itself secret. Neither Build
// nor Update after the config's bucket changed writes it anywhere.
func TestConfigSecretEchoed(t *testing.T) {
	const bucket1, bucket2 = "cfg-bucket-ONE-4f2", "cfg-bucket-TWO-9c1"
	s := statetest.Open(t)
	kind := &converge.Kind{Name: "vpc", Version: 1, Reactions: []string{"reconcile"}, Secret: []string{"config.bucket"}}
	cfg := func(b string) *converge.ProviderConfig {
		return &converge.ProviderConfig{Name: "vpc-default", Kind: "vpc", KindVersion: 1, IsDefault: true,
			Config: json.RawMessage(`{"bucket":"` + b + `","region":"eu"}`)}
	}
	vpc := func(b string) *converge.Resource {
		return &converge.Resource{UID: "u1", Kind: "vpc", KindVersion: 1, Name: "a", Origin: converge.OriginGit,
			Phase: converge.PhaseReady, Generation: 1, ObservedGeneration: 1,
			Spec: json.RawMessage(`{"cidr":"10.0.0.0/16"}`), Declared: json.RawMessage(`{"cidr":"10.0.0.0/16"}`),
			Status: json.RawMessage(`{"flow_logs":{"bucket":"s3://` + b + `/logs"}}`)}
	}
	if err := s.Commit(context.Background(), &converge.Batch{Kinds: []*converge.Kind{kind}, Configs: []*converge.ProviderConfig{cfg(bucket1)},
		Resources: []*converge.Resource{vpc(bucket1)}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	b := NewBuilder(s, dir, Options{Now: fixedNow})
	if _, err := b.Build(context.Background()); err != nil {
		t.Fatal(err)
	}
	check := func(when, secret string) {
		t.Helper()
		files := readSite(t, dir)
		for name, body := range files {
			if bytes.Contains(body, []byte(secret)) {
				t.Errorf("%s: %s holds the config's secret %q", when, name, secret)
			}
		}
		if page := files[pageOf("vpc/a")]; !bytes.Contains(page, []byte("s3://(secret)/logs")) {
			t.Errorf("%s: vpc/a's page lacks the scrubbed status:\n%s", when, page)
		}
	}
	check("build", bucket1)
	if err := s.Commit(context.Background(), &converge.Batch{Configs: []*converge.ProviderConfig{cfg(bucket2)}, Resources: []*converge.Resource{vpc(bucket2)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Update(context.Background(), []converge.ID{"vpc/a"}); err != nil {
		t.Fatal(err)
	}
	check("update", bucket2)
}
