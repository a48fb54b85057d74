package cue

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/convergehq/converge"
)

// secretKindCUE marks fields secret in all three schemas, nested, in a
// list, under a pattern, and in a disjunction, and keeps an explicit
// list.
const secretKindCUE = `type: "kind"
kind: "db"
kind_version: 1
reactions: ["reconcile"]
secret: ["spec.legacy"]
spec: {
	user:      string
	password?: =~"^[a-z]{8}$" @converge(secret)
	legacy?:   string
	replicas?: [...{host: string, key: string @converge(secret)}]
	tokens?: [string]: {value: string @converge(secret,other)}
	tls?: {cert: string, key: string @converge(secret)} | null
	pin?: int @converge(secret)
}
status: {
	conn?: string @converge(secret)
	...
}
config: {
	bucket: string @converge(secret)
	region: string @other(secret)
}
`

// secretKindYAML is the same idea in YAML, its schemas as CUE strings.
const secretKindYAML = `type: kind
kind: cache
kind_version: 1
reactions: [reconcile]
spec: |
  {
  	auth: string @converge(secret)
  	size: int
  }
`

func TestSecretList(t *testing.T) {
	fsys := fstest.MapFS{
		"kinds/db.cue":     {Data: []byte(secretKindCUE)},
		"kinds/cache.yaml": {Data: []byte(secretKindYAML)},
	}
	res, err := Load(fsys, ".", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Findings) > 0 {
		t.Fatalf("findings: %v", res.Findings)
	}
	got := map[string][]string{}
	for _, k := range res.Desired.Kinds {
		got[k.Name] = k.Secret
	}
	want := map[string][]string{
		"db": {"config.bucket", "spec.legacy", "spec.password", "spec.pin", "spec.replicas.key",
			"spec.tls.key", "spec.tokens.*.value", "status.conn"},
		"cache": {"spec.auth"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("secret lists:\n got %q\nwant %q", got, want)
	}
	// A stored kind (the exported schema) keeps its attributes: compiled
	// again, its validations still hide the values.
	s, err := Compile(res.Desired.Kinds)
	if err != nil {
		t.Fatal(err)
	}
	ref := converge.KindRef{Kind: "db", Version: 1}
	for _, tc := range []struct {
		part, data, secret, path string
	}{
		{"spec", `{"user": "u", "password": "NOT-LOWER-9"}`, "NOT-LOWER-9", "spec.password"},
		// user is known after apply (a value flow fills it): still hidden.
		{"pending", `{"password": "NOT-LOWER-9"}`, "NOT-LOWER-9", "spec.password"},
		{"spec", `{"user": "u", "pin": "p1n-c0de"}`, "p1n-c0de", "spec.pin"},
		{"spec", `{"user": "u", "replicas": [{"host": "h", "key": 12345}]}`, "12345", "spec.replicas[0].key"},
		{"spec", `{"user": "u", "tokens": {"a": {"value": 77}}, "password": "sh"}`, "sh", "spec.password"},
		{"status", `{"conn": 42424242}`, "42424242", "status.conn"},
		{"config", `{"bucket": ["s3-bucket-7"], "region": "r"}`, "s3-bucket-7", "config.bucket"},
	} {
		var err error
		switch tc.part {
		case "spec":
			err = s.ValidateSpec(ref, json.RawMessage(tc.data))
		case "pending":
			err = s.ValidateSpecPending(ref, json.RawMessage(tc.data), []string{"user"})
		case "status":
			err = s.ValidateStatus(ref, json.RawMessage(tc.data))
		case "config":
			err = s.ValidateConfig(ref, json.RawMessage(tc.data))
		}
		if err == nil {
			t.Errorf("%s %s: valid, want an error", tc.part, tc.data)
			continue
		}
		if strings.Contains(err.Error(), tc.secret) || !strings.Contains(err.Error(), tc.path+":") {
			t.Errorf("%s %s: error %q shows the secret %q or does not name %s", tc.part, tc.data, err, tc.secret, tc.path)
		}
	}
}

// TestLoadHidesSecrets: an invalid secret field's finding names the field
// and the constraint, never the value, in a resource and in a provider
// config; a value of another field is still shown.
func TestLoadHidesSecrets(t *testing.T) {
	fsys := fstest.MapFS{
		"kinds/db.cue": {Data: []byte(secretKindCUE)},
		"res.cue": {Data: []byte(`type: "resource", kind: "db", kind_version: 1, name: "d"
spec: {user: 7, password: "PLANTED-Secret-1", tls: {cert: "c", key: 5}}
`)},
		"cfg.yaml": {Data: []byte("type: providerconfig\nname: c\nkind: db\nkind_version: 1\nconfig:\n  bucket: 99\n  region: 3\n")},
	}
	res, err := Load(fsys, ".", Options{})
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, f := range res.Findings {
		all = append(all, f.String())
	}
	text := strings.Join(all, "\n")
	for _, want := range []string{"res.cue:2:", "spec.password: invalid value (secret) (out of bound", "spec.user: conflicting values string and 7",
		"config.bucket:", "config.region: conflicting values string and 3"} {
		if !strings.Contains(text, want) {
			t.Errorf("findings lack %q:\n%s", want, text)
		}
	}
	if !strings.Contains(text, "conflicting values {cert:\"c\",key:(secret)} and null") {
		t.Errorf("the finding about spec.tls shows its secret key:\n%s", text)
	}
	for _, secret := range []string{"PLANTED-Secret-1", "99"} {
		if strings.Contains(text, secret) {
			t.Errorf("findings show the secret %q:\n%s", secret, text)
		}
	}
}

// TestLintHidesSecretDefaults: lint names a secret field's changed
// default or narrowed constraint without showing either side.
func TestLintHidesSecretDefaults(t *testing.T) {
	kind := func(spec string) []*converge.Kind {
		return []*converge.Kind{{Name: "db", Version: 1, Reactions: []string{"reconcile"}, SpecSchema: spec, StatusSchema: "{...}", ConfigSchema: "{}"}}
	}
	for _, tc := range []struct{ old, new, rule string }{
		{`{pw: *"old-default-1" | string @converge(secret)}`, `{pw: *"new-default-2" | string @converge(secret)}`, "DEFAULT_CHANGED"},
		{`{pw: *"old-default-1" | string @converge(secret)}`, `{pw: string @converge(secret)}`, "DEFAULT_CHANGED"},
		{`{pw: "old-default-1" | "new-default-2" @converge(secret)}`, `{pw: "new-default-2" @converge(secret)}`, "CONSTRAINT_NARROWED"},
	} {
		fs := Lint(kind(tc.old), kind(tc.new))
		if len(fs) == 0 || fs[0].Rule != tc.rule || fs[0].Path != "db/v1 spec.pw" {
			t.Errorf("%s -> %s: findings %v, want %s on db/v1 spec.pw", tc.old, tc.new, fs, tc.rule)
		}
		for _, f := range fs {
			if strings.Contains(f.Message, "default-") {
				t.Errorf("%s -> %s: finding shows a secret field's value: %s", tc.old, tc.new, f)
			}
		}
	}
}
