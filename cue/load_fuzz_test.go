package cue

import (
	"bytes"
	"encoding/json"
	"testing"
	"testing/fstest"
)

// FuzzLoadDocument loads one document file of any content, as CUE, JSON
// or YAML, beside the test kinds: Load never panics, every finding about
// the file names a line and column (issue 11), and every resource it
// accepts has a spec that is a JSON object.
func FuzzLoadDocument(f *testing.F) {
	for _, s := range []string{
		"type: resource\nkind: bucket\nkind_version: 1\nname: a\nspec: {tier: hot, size: 3}\n---\ntype: resource\nkind: queue\nkind_version: 2\nname: q\nspec: {name: abc}\n",
		`{"type": "resource", "kind": "vpc", "kind_version": 1, "name": "v", "spec": {"account_id": "123456789012", "cidr": "c", "tags": {"a": "b"}}}`,
		"type: \"resource\"\nkind: \"bucket\"\nkind_version: 1\nname: \"c\"\nspec: tier: \"hot\"\nspec: a: b: spec.a\n",
		"@extern(embed)\npackage x\ntype: \"resource\"\nspec: _ @embed(file=\"x.json\")\n",
		"type: kind\nkind: k\nkind_version: 1\nspec: '{ a: strin }'\n",
		"type: resource\nkind: bucket\x00\xff\n",
	} {
		for ext := range uint8(3) {
			f.Add([]byte(s), ext)
		}
	}
	exts := [...]string{".cue", ".json", ".yaml"}
	f.Fuzz(func(t *testing.T, data []byte, ext uint8) {
		// Comprehensions and builtins can ask for any amount of work:
		// that is the Sandbox's job (TestSandboxBudget), not this one's.
		for _, w := range []string{"for", "list", "strings", "Repeat", "Range", "import"} {
			if bytes.Contains(data, []byte(w)) {
				t.Skip("may evaluate for long")
			}
		}
		name := "r/doc" + exts[int(ext)%len(exts)]
		if bytes.ContainsRune(data, '*') && name != "r/doc.json" {
			t.Skip("YAML aliases and CUE defaults can multiply work")
		}
		fsys := fstest.MapFS{name: {Data: data}}
		for p, s := range kindsFS {
			fsys[p] = &fstest.MapFile{Data: []byte(s)}
		}
		res, err := Load(fsys, ".", Options{MaxFileSize: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range res.Findings {
			if fd.File == name && fd.Rule != "FILE_TOO_LARGE" && (fd.Line < 1 || fd.Column < 1) {
				t.Errorf("finding without a position: %+v", fd)
			}
		}
		for _, r := range res.Desired.Resources {
			var m map[string]any
			if err := json.Unmarshal(r.Spec, &m); err != nil && string(r.Spec) != "null" {
				t.Errorf("%s: spec %q is not a JSON object: %v", r.ID(), r.Spec, err)
			}
		}
	})
}
