package cue

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/convergehq/converge"
)

func TestLoadClassic(t *testing.T) {
	res, err := Load(os.DirFS("../examples/classic"), ".", Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Findings {
		t.Errorf("finding: %v", f)
	}
	if got, want := res.Documents, 21; got != want {
		t.Errorf("documents = %d, want %d", got, want)
	}
	var refs []string
	for _, k := range res.Desired.Kinds {
		refs = append(refs, k.Ref().String())
	}
	if got, want := strings.Join(refs, " "), "account/v1 classicbom/v1 route/v1 statussink/v1 tgw/v1 vpc/v1 vpc/v2"; got != want {
		t.Errorf("kinds = %s, want %s", got, want)
	}
	for _, k := range res.Desired.Kinds {
		if k.Name != "statussink" && !(k.Finalizer && k.Has(converge.ReactionTeardown)) {
			t.Errorf("%s: want a finalizer and a teardown reaction", k.Ref())
		}
		if _, ok := res.Schemas.Kind(k.Ref()); !ok {
			t.Errorf("%s: not in Schemas", k.Ref())
		}
	}
	var bom *converge.Resource
	var names []string
	for _, r := range res.Desired.Resources {
		names = append(names, string(r.ID()))
		if r.Origin != converge.OriginGit || string(r.Spec) != string(r.Declared) || r.Source == "" {
			t.Errorf("%s: origin %q, source %q, spec == declared %v", r.ID(), r.Origin, r.Source, string(r.Spec) == string(r.Declared))
		}
		if r.ID() == "classicbom/classic" {
			bom = r
		}
	}
	if got, want := strings.Join(names, " "), "account/sample-account classicbom/classic route/sample-route tgw/sample-tgw vpc/sample-vpc vpc/sample-vpc-tagged vpc/sample-vpc-v1-payments vpc/sample-vpc-v2"; got != want {
		t.Errorf("resources = %s, want %s", got, want)
	}
	if bom == nil {
		t.Fatal("no classicbom/classic")
	}
	fds, teams := bomShape(t, bom.Spec)
	if got, want := fds, 58; got != want {
		t.Errorf("functional domains = %d, want %d", got, want)
	}
	if got, want := teams, 1176; got != want {
		t.Errorf("service teams = %d, want %d", got, want)
	}
	if got, want := len(res.Desired.Configs), 5; got != want {
		t.Errorf("provider configs = %d, want %d", got, want)
	}
	if got, want := len(res.Desired.Bindings), 1; got != want {
		t.Fatalf("bindings = %d, want %d", got, want)
	}
	if b := res.Desired.Bindings[0]; b.Kind != "classicbom" || b.Transition != "synced" || b.Reactor != "statussink" || b.ReactorVersion != 1 {
		t.Errorf("binding = %+v", *b)
	}
	s := res.Desired.Settings
	if len(s.Workers) != 1 || s.Workers[0].Builtin != "classic" || s.Workers[0].Replicas != 2 {
		t.Errorf("settings workers = %+v", s.Workers)
	}
}

// bomShape counts functional domains and teams, checking names are
// DNS labels and unique within their domain.
func bomShape(t *testing.T, spec json.RawMessage) (fds, teams int) {
	t.Helper()
	var bom struct {
		FDs []struct {
			Name  string `json:"name"`
			Teams []struct {
				Name string `json:"name"`
			} `json:"service_teams"`
		} `json:"functional_domains"`
	}
	if err := json.Unmarshal(spec, &bom); err != nil {
		t.Fatal(err)
	}
	seenFD := map[string]bool{}
	for _, fd := range bom.FDs {
		if !ValidName(fd.Name) || seenFD[fd.Name] {
			t.Errorf("functional domain %q: invalid or repeated", fd.Name)
		}
		seenFD[fd.Name] = true
		seen := map[string]bool{}
		for _, tm := range fd.Teams {
			if !ValidName(tm.Name) || seen[tm.Name] {
				t.Errorf("%s: team %q invalid or repeated", fd.Name, tm.Name)
			}
			seen[tm.Name] = true
		}
		teams += len(fd.Teams)
	}
	return len(bom.FDs), teams
}

// TestBOMUpdated checks the updated-BOM fixture: one team fewer in
// fd-03, one more in fd-10, everything else equal.
func TestBOMUpdated(t *testing.T) {
	fsys := fstest.MapFS{}
	for _, p := range []string{"kinds/classicbom.cue"} {
		b, err := os.ReadFile("../examples/classic/" + p)
		if err != nil {
			t.Fatal(err)
		}
		fsys[p] = &fstest.MapFile{Data: b}
	}
	b, err := os.ReadFile("../testdata/fixtures/classic/bom-updated.cue")
	if err != nil {
		t.Fatal(err)
	}
	fsys["resources/bom.cue"] = &fstest.MapFile{Data: b}
	res, err := Load(fsys, ".", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Findings) > 0 || len(res.Desired.Resources) != 1 {
		t.Fatalf("findings %v, resources %d", res.Findings, len(res.Desired.Resources))
	}
	fds, teams := bomShape(t, res.Desired.Resources[0].Spec)
	if fds != 58 || teams != 1176 {
		t.Errorf("updated BOM: %d domains, %d teams; want 58, 1176", fds, teams)
	}
	spec := string(res.Desired.Resources[0].Spec)
	if !strings.Contains(spec, `{"name":"team-020"},{"name":"team-021"}]`) {
		t.Error("fd-10/team-021 not added")
	}
	if !strings.Contains(spec, `{"name":"team-004"},{"name":"team-006"}`) {
		t.Error("fd-03/team-005 not removed")
	}
}

// kindsFS holds a vpc v1 kind in each format, for the finding cases.
var kindsFS = map[string]string{
	"kinds/vpc.cue": `import "strings"
type: "kind"
kind: "vpc"
kind_version: 1
reactions: ["reconcile", "teardown"]
finalizer: true
#Tag: strings.MinRunes(1)
spec: {
	account_id: =~"^.{12}$"
	cidr: string
	tags?: [string]: #Tag
}
config: bucket: string
`,
	"kinds/bucket.json": `{
  "type": "kind",
  "kind": "bucket",
  "kind_version": 1,
  "reactions": ["reconcile", "react"],
  "spec": "{ tier: \"hot\" | \"cold\", size?: int & >0 }"
}`,
	"kinds/queue.yaml": `type: kind
kind: queue
kind_version: 2
reactions: [reconcile]
spec: |
  import "strings"
  name: strings.MinRunes(3)
`,
}

func TestLoadFindings(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		modes map[string]fs.FileMode
		opts  Options
		want  []string // "file:line:col RULE path"
	}{
		{name: "valid in every format", files: map[string]string{
			"resources/a.yaml": "type: resource\nkind: bucket\nkind_version: 1\nname: a\nspec: {tier: hot, size: 3}\n---\ntype: resource\nkind: queue\nkind_version: 2\nname: q\nspec: {name: abc}\n",
			"resources/v.json": `{"type": "resource", "kind": "vpc", "kind_version": 1, "name": "v", "spec": {"account_id": "123456789012", "cidr": "c", "tags": {"a": "b"}}}`,
		}},
		{name: "schemas from json and yaml strings", files: map[string]string{
			"r.yaml": "type: resource\nkind: bucket\nkind_version: 1\nname: a\nspec: {tier: warm}\n---\ntype: resource\nkind: queue\nkind_version: 2\nname: q\nspec: {name: ab}\n",
		}, want: []string{"r.yaml:5:8 SPEC_INVALID spec.tier", "r.yaml:11:14 SPEC_INVALID spec.name"}},
		{name: "helper definitions and imports travel with the schema", files: map[string]string{
			"r.cue": "type: \"resource\"\nkind: \"vpc\"\nkind_version: 1\nname: \"v\"\nspec: {account_id: \"123456789012\", cidr: \"c\", tags: {a: \"\"}}\n",
		}, want: []string{"r.cue:5:57 SPEC_INVALID spec.tags.a"}},
		{name: "symlink and irregular files are refused", files: map[string]string{
			"link.cue": "", "dir/pipe.yaml": "",
		}, modes: map[string]fs.FileMode{"link.cue": fs.ModeSymlink, "dir/pipe.yaml": fs.ModeNamedPipe},
			want: []string{"dir/pipe.yaml:0:0 SYMLINK ", "link.cue:0:0 SYMLINK "}},
		{name: "too large", files: map[string]string{"big.json": `{"type": "resource"}` + strings.Repeat(" ", 300)}, opts: Options{MaxFileSize: 300},
			want: []string{"big.json:0:0 FILE_TOO_LARGE "}},
		{name: "dot directories and other files are ignored", files: map[string]string{
			".git/x.cue": "{", ".converge/y.json": "[", "README.md": "# hi", "notes.txt": "{",
		}},
		{name: "empty files hold no documents", files: map[string]string{
			"a.yml": "", "b.cue": "// nothing yet\n", "c.yaml": "---\n# only a comment\n---\n",
		}},
		{name: "a document must be an object", files: map[string]string{"l.yaml": "- a\n- b\n", "n.json": "3"},
			want: []string{"l.yaml:1:1 DOCUMENT_INVALID ", "n.json:1:1 DOCUMENT_INVALID "}},
		{name: "too many documents", files: map[string]string{
			"c.yaml": "type: binding\nname: a\nkind: bucket\ntransition: synced\nreactor: bucket\n---\ntype: binding\nname: b\nkind: bucket\ntransition: synced\nreactor: bucket\n",
		}, opts: Options{MaxDocuments: 4}, want: []string{"kinds/vpc.cue:1:1 TOO_MANY_DOCUMENTS "}},
		{name: "metadata problems", files: map[string]string{
			"r.yaml": "type: resource\nkind: bucket\nkind_version: one\nname: a\nspec: {tier: hot}\nextra: 1\n",
			"b.yaml": "type: binding\nname: b\nkind: bucket\ntransition: done\nreactor: bucket\n",
			"k.cue":  "type: \"kind\"\nkind: \"k\"\nkind_version: 0\nfinalizer: true\nreactions: []\n",
		}, want: []string{
			"b.yaml:4:1 FIELD_INVALID transition",
			"k.cue:3:1 FIELD_INVALID kind_version",
			"k.cue:4:1 KIND_INVALID finalizer",
			"r.yaml:3:1 FIELD_INVALID kind_version",
			"r.yaml:6:1 FIELD_UNKNOWN extra",
		}},
		{name: "drift policy", files: map[string]string{
			"k.cue":  "type: \"kind\"\nkind: \"k\"\nkind_version: 1\nreactions: [\"reconcile\"]\ndrift_policy: \"report\"\n",
			"o.cue":  "type: \"kind\"\nkind: \"o\"\nkind_version: 1\nreactions: [\"reconcile\", \"observe\"]\ndrift_policy: \"ignore\"\n",
			"p.cue":  "type: \"kind\"\nkind: \"p\"\nkind_version: 1\nreactions: [\"reconcile\", \"observe\"]\ndrift_policy: \"report\"\n",
			"r.yaml": "type: resource\nkind: bucket\nkind_version: 1\nname: a\nspec: {tier: hot}\ndrift_policy: report\n---\ntype: resource\nkind: p\nkind_version: 1\nname: b\nspec: {}\ndrift_policy: heal\n",
		}, want: []string{
			"k.cue:5:1 KIND_INVALID drift_policy",
			"o.cue:5:1 FIELD_INVALID drift_policy",
			"r.yaml:6:1 FIELD_INVALID drift_policy",
		}},
		{name: "rollout", files: map[string]string{
			"c.cue": "type: \"kind\"\nkind: \"bom\"\nkind_version: 1\nreactions: [\"compose\"]\n",
			"r.yaml": "type: resource\nkind: bom\nkind_version: 1\nname: ok\nspec: {}\nrollout: {soak: 1m, timeout: 1h, waves: [{name: canary, rows: [fd-00]}, {percent: 10}, {}]}\n" +
				"---\ntype: resource\nkind: bom\nkind_version: 1\nname: typo\nspec: {}\nrollout: {waves: [{precent: 10}]}\n" +
				"---\ntype: resource\nkind: bom\nkind_version: 1\nname: order\nspec: {}\nrollout: {waves: [{percent: 50}, {percent: 10}]}\n" +
				"---\ntype: resource\nkind: bom\nkind_version: 1\nname: soak\nspec: {}\nrollout: {soak: soon, waves: [{}]}\n" +
				"---\ntype: resource\nkind: bom\nkind_version: 1\nname: early\nspec: {}\nrollout: {waves: [{}, {rows: [a]}]}\n" +
				"---\ntype: resource\nkind: bucket\nkind_version: 1\nname: leaf\nspec: {tier: hot}\nrollout: {waves: [{}]}\n",
		}, want: []string{
			"r.yaml:13:20 FIELD_INVALID rollout.waves[0].precent",
			"r.yaml:20:35 FIELD_INVALID rollout.waves[1].percent",
			"r.yaml:27:11 FIELD_INVALID rollout.soak",
			"r.yaml:34:19 FIELD_INVALID rollout.waves[0]",
			"r.yaml:41:1 FIELD_INVALID rollout",
		}},
		{name: "bad schema", files: map[string]string{
			"k.yaml": "type: kind\nkind: k\nkind_version: 1\nspec: '{ a: strin }'\n",
			"r.yaml": "type: resource\nkind: k\nkind_version: 1\nname: r\nspec: {a: x}\n",
		}, want: []string{"k.yaml:4:1 SCHEMA_INVALID spec.a", "r.yaml:2:1 KIND_INVALID kind"}},
		// Issue 11: each of these used to have no line, or 1:1.
		{name: "schema that does not compile, written as a string", files: map[string]string{
			"k.cue": "type: \"kind\"\nkind: \"k\"\nkind_version: 1\nreactions: []\nstatus: \"\"\"\n\tname: string\n\ty: undefined_ref\n\t\"\"\"\n",
		}, want: []string{"k.cue:5:1 SCHEMA_INVALID status.y"}},
		{name: "structural cycle", files: map[string]string{
			"r.cue": "type: \"resource\"\nkind: \"bucket\"\nkind_version: 1\nname: \"c\"\nspec: tier: \"hot\"\nspec: a: b: spec.a\n",
		}, want: []string{"r.cue:6:10 CUE_INVALID spec.a.b"}},
		{name: "not UTF-8", files: map[string]string{
			"r.yaml": "type: resource\nkind: bucket\nname: b\nspec:\n  tier: \"\xff\xfe\"\n",
			"r.json": "{\"type\": \"resource\",\n \"name\": \"\xc3\"}",
			"r.cue":  "type: \"resource\"\n// \xff\n",
		}, want: []string{"r.cue:2:4 SYNTAX ", "r.json:2:11 SYNTAX ", "r.yaml:5:10 SYNTAX "}},
		{name: "a YAML error worded without a line", files: map[string]string{
			"r.yaml": "type: resource\nkind: bucket\n@extern(embed)\n",
		}, want: []string{"r.yaml:3:1 SYNTAX "}},
		{name: "binary content", files: map[string]string{
			"b.yaml": "type: resource\nkind: bucket\x00\x01\x02\n",
		}, want: []string{"b.yaml:2:13 SYNTAX "}},
		{name: "embed outside a module", files: map[string]string{
			"e.cue": "@extern(embed)\npackage x\n\ntype: \"resource\"\nkind: \"bucket\"\nkind_version: 1\nname: \"e\"\nspec: _ @embed(file=\"x.json\")\n",
		}, want: []string{"e.cue:8:9 CUE_INVALID "}},
		{name: "settings", files: map[string]string{
			"converge.cue": "resync_interval: \"often\"\n",
		}, want: []string{"converge.cue:1:1 SETTINGS_INVALID resync_interval"}},
		// Issue 26: "1ns" validated, and an idle serve then dispatched
		// ~12,000 tasks a second; an empty name made the ID "bucket/".
		{name: "settings interval below the floor", files: map[string]string{
			"converge.cue": "resync_interval: \"1ns\"\n",
		}, want: []string{"converge.cue:1:1 SETTINGS_INVALID resync_interval"}},
		{name: "kind intervals below the floor", files: map[string]string{
			"k.cue": "type: \"kind\"\nkind: \"k\"\nkind_version: 1\nreactions: [\"reconcile\"]\nresync_interval: \"1ns\"\ntask_deadline: \"500ms\"\n",
		}, want: []string{"k.cue:5:1 FIELD_INVALID resync_interval", "k.cue:6:1 FIELD_INVALID task_deadline"}},
		{name: "empty name", files: map[string]string{
			"r.yaml": "type: resource\nkind: bucket\nkind_version: 1\nname: \"\"\nspec: {tier: hot}\n",
		}, want: []string{"r.yaml:4:1 NAME_INVALID name"}},
		{name: "git timeout", files: map[string]string{
			"converge.cue": "git_timeout: \"0s\"\n",
		}, want: []string{"converge.cue:1:1 SETTINGS_INVALID git_timeout"}},
		{name: "load timeout", files: map[string]string{
			"converge.cue": "load_timeout: \"soon\"\n",
		}, want: []string{"converge.cue:1:1 SETTINGS_INVALID load_timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for p, s := range kindsFS {
				fsys[p] = &fstest.MapFile{Data: []byte(s)}
			}
			for p, s := range tt.files {
				fsys[p] = &fstest.MapFile{Data: []byte(s), Mode: tt.modes[p]}
			}
			res, err := Load(fsys, ".", tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range res.Findings {
				got = append(got, fmt.Sprintf("%s:%d:%d %s %s", f.File, f.Line, f.Column, f.Rule, f.Path))
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("findings:\n got %q\nwant %q\n%v", got, tt.want, res.Findings)
			}
		})
	}
}

func TestLoadSubdirectoryAndErrors(t *testing.T) {
	fsys := fstest.MapFS{"repo/sub/bad.json": &fstest.MapFile{Data: []byte("{")}}
	res, err := Load(fsys, "repo", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(res.Findings), 1; got != want {
		t.Fatalf("findings = %v", res.Findings)
	}
	if got, want := res.Findings[0].File, "sub/bad.json"; got != want {
		t.Errorf("file = %q, want %q (relative to dir)", got, want)
	}
	if _, err := Load(fsys, "missing", Options{}); err == nil {
		t.Error("Load of a missing directory: want an error")
	}
}

func TestLoadDeterministic(t *testing.T) {
	fsys := os.DirFS("../examples/classic")
	a, err := Load(fsys, ".", Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(fsys, ".", Options{})
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a.Desired)
	jb, _ := json.Marshal(b.Desired)
	if string(ja) != string(jb) {
		t.Error("two loads of the same tree differ")
	}
}

func TestSchemasValidate(t *testing.T) {
	res, err := Load(os.DirFS("../examples/classic"), ".", Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Rebuild from the stored form, as after a restart.
	s, err := Compile(res.Desired.Kinds)
	if err != nil {
		t.Fatal(err)
	}
	v1 := converge.KindRef{Kind: "vpc", Version: 1}
	tests := []struct {
		name    string
		ref     converge.KindRef
		part    string
		data    string
		wantErr string // "" for valid
	}{
		{"valid", v1, "spec", `{"account_id": "123456789012", "cidr": "10.0.0.0/16"}`, ""},
		{"regex", v1, "spec", `{"account_id": "x", "cidr": "c"}`, `spec.account_id: invalid value "x" (out of bound =~"^.{12}$")`},
		{"missing", v1, "spec", `{"account_id": "123456789012"}`, `spec.cidr: field is required but not present`},
		{"unknown field", v1, "spec", `{"account_id": "123456789012", "cidr": "c", "region": "r"}`, `spec.region: field not allowed`},
		{"unknown field beside another error", v1, "spec", `{"account_id": "x", "cidr": "c", "region": "r"}`, `spec.account_id: invalid value "x" (out of bound =~"^.{12}$"); spec.region: field not allowed`},
		{"map value", v1, "spec", `{"account_id": "123456789012", "cidr": "c", "tags": {"a.b": 1}}`, `spec.tags["a.b"]: conflicting values 1 and string (mismatched types int and string)`},
		{"list path", converge.KindRef{Kind: "classicbom", Version: 1}, "spec", `{"functional_domains": [{"name": "a", "networking": true, "service_teams": [{"name": "ok"}, {"name": "Bad"}]}]}`, `spec.functional_domains[0].service_teams[1].name: invalid value "Bad"`},
		{"status open", converge.KindRef{Kind: "classicbom", Version: 1}, "status", `{"rollup": {"total": 3, "ready": 3}, "anything": true}`, ""},
		{"status int", converge.KindRef{Kind: "classicbom", Version: 1}, "status", `{"rollup": {"total": 1.5}}`, `status.rollup.total: conflicting values int and 1.5`},
		{"status closed", v1, "status", `{"vpc_id": "v", "extra": 1}`, `status.extra: field not allowed`},
		{"config", v1, "config", `{"flow_logs_bucket": "b"}`, ""},
		{"config v2 needs region", converge.KindRef{Kind: "vpc", Version: 2}, "config", `{"flow_logs_bucket": "b"}`, `config.default_region: field is required but not present`},
		{"not json", v1, "spec", `{"account_id": `, `spec: decode json`},
		{"unknown kind", converge.KindRef{Kind: "vpc", Version: 3}, "spec", `{}`, `unknown kind vpc/v3`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			switch tt.part {
			case "spec":
				err = s.ValidateSpec(tt.ref, json.RawMessage(tt.data))
			case "status":
				err = s.ValidateStatus(tt.ref, json.RawMessage(tt.data))
			case "config":
				err = s.ValidateConfig(tt.ref, json.RawMessage(tt.data))
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("err = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.wantErr)):
				t.Errorf("err = %v, want prefix %q", err, tt.wantErr)
			}
		})
	}
	if err := s.ValidateSpec(converge.KindRef{Kind: "nope", Version: 1}, nil); !errors.Is(err, ErrUnknownKind) {
		t.Errorf("unknown kind: err = %v, want ErrUnknownKind", err)
	}
}

func TestCompileReportsBadSchemas(t *testing.T) {
	good := &converge.Kind{Name: "a", Version: 1, SpecSchema: "{x: int}"}
	bad := &converge.Kind{Name: "b", Version: 1, SpecSchema: "{x: nosuchthing}"}
	s, err := Compile([]*converge.Kind{good, bad})
	if err == nil || !strings.Contains(err.Error(), "b/v1 spec") {
		t.Errorf("err = %v, want one naming b/v1 spec", err)
	}
	if _, ok := s.Kind(good.Ref()); !ok {
		t.Error("the good kind is missing")
	}
	if _, ok := s.Kind(bad.Ref()); ok {
		t.Error("the bad kind is present")
	}
	if s, err := Compile([]*converge.Kind{bad}); s != nil || err == nil {
		t.Errorf("only bad kinds: got %v, %v; want nil and an error", s, err)
	}
}

// TestValidateConcurrent validates from many goroutines at once (run it
// with -race): each uses its own evaluator.
func TestValidateConcurrent(t *testing.T) {
	s := classicSchemas(t)
	defer func(old int) { recycleAfter = old }(recycleAfter)
	recycleAfter = 50 // exercise recycling too
	refs, specs := childSpecs(400)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range specs {
				if err := s.ValidateSpec(refs[i], specs[i]); err != nil {
					t.Error(err)
					return
				}
			}
			if err := s.ValidateSpec(refs[2], json.RawMessage(`{"account_id": "x", "cidr": "c"}`)); err == nil {
				t.Error("bad spec passed")
			}
		}()
	}
	wg.Wait()
}

func ExampleLoad() {
	fsys := fstest.MapFS{
		"kinds/tgw.cue":    {Data: []byte("type: \"kind\"\nkind: \"tgw\"\nkind_version: 1\nreactions: [\"reconcile\"]\nspec: name: string\n")},
		"resources/t.yaml": {Data: []byte("type: resource\nkind: tgw\nkind_version: 1\nname: t\nspec:\n  name: 7\n")},
	}
	res, err := Load(fsys, ".", Options{})
	if err != nil {
		panic(err)
	}
	for _, f := range res.Findings {
		fmt.Println(f)
	}
	// Output:
	// resources/t.yaml:6:9: spec.name: conflicting values string and 7 (mismatched types string and int)
}

func ExampleSchemas_ValidateSpec() {
	s, err := Compile([]*converge.Kind{{
		Name: "vpc", Version: 1,
		SpecSchema: `{account_id: =~"^.{12}$", cidr: string, tags?: [string]: string}`,
	}})
	if err != nil {
		panic(err)
	}
	ref := converge.KindRef{Kind: "vpc", Version: 1}
	fmt.Println(s.ValidateSpec(ref, json.RawMessage(`{"account_id": "123456789012", "cidr": "10.0.0.0/16"}`)))
	fmt.Println(s.ValidateSpec(ref, json.RawMessage(`{"account_id": "x", "cidr": "10.0.0.0/16"}`)))
	fmt.Println(s.ValidateSpec(ref, json.RawMessage(`{"account_id": "123456789012"}`)))
	// Output:
	// <nil>
	// spec.account_id: invalid value "x" (out of bound =~"^.{12}$")
	// spec.cidr: field is required but not present
}

// TestLoadTimeoutSettings: git_timeout, load_timeout and forge_timeout in converge.cue
// are durations (what the flags override).
func TestLoadTimeoutSettings(t *testing.T) {
	fsys := fstest.MapFS{"converge.cue": {Data: []byte("git_timeout: \"45s\"\nload_timeout: \"3m\"\nforge_timeout: \"10s\"\n")}}
	res, err := Load(fsys, ".", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Findings) > 0 {
		t.Fatalf("findings: %v", res.Findings)
	}
	if got, want := res.Desired.Settings.GitTimeout, 45*time.Second; got != want {
		t.Errorf("GitTimeout = %v, want %v", got, want)
	}
	if got, want := res.Desired.Settings.LoadTimeout, 3*time.Minute; got != want {
		t.Errorf("LoadTimeout = %v, want %v", got, want)
	}
	if got, want := res.Desired.Settings.ForgeTimeout, 10*time.Second; got != want {
		t.Errorf("ForgeTimeout = %v, want %v", got, want)
	}
}

// Issue 26: one finding, one line, in every format; and a resource of a
// kind whose CUE file does not evaluate is told the kind is invalid, not
// unknown.
func TestFindingsOneLine(t *testing.T) {
	fsys := fstest.MapFS{
		"kinds/broken.yaml": {Data: []byte("type: kind\nkind: broken\nkind_version: 1\nreactions: [reconcile]\nspec: |\n  a: int & >\n")},
		"kinds/acct.cue":    {Data: []byte("type: \"kind\"\nkind: \"acct\"\nkind_version: 1\nreactions: [\"reconcile\"]\nspec: team: strin\n")},
		"r.yaml":            {Data: []byte("type: resource\nkind: acct\nkind_version: 1\nname: a\nspec: {team: x}\n")},
	}
	res, err := Load(fsys, ".", Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range res.Findings {
		if strings.ContainsAny(f.Message, "\n\r") {
			t.Errorf("%s: message spans lines: %q", f.File, f.Message)
		}
		got = append(got, fmt.Sprintf("%s:%d %s %s", f.File, f.Line, f.Rule, f.Message))
	}
	want := "r.yaml:2 KIND_INVALID kind acct/v1 is declared at kinds/acct.cue:2:1 but is invalid"
	if !slices.Contains(got, want) {
		t.Errorf("findings %q, want %q among them", got, want)
	}
}

func TestOneLine(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"plain", "plain"},
		{"compile x: expected operand, found 'EOF':\n    x spec:2:12\n", "compile x: expected operand, found 'EOF'; x spec:2:12"},
		{"a\r\n\r\nb", "a; b"},
	} {
		if got := OneLine(tt.in); got != tt.want {
			t.Errorf("OneLine(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
