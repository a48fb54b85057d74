package cue

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

// TestMain lets the test binary be a Sandbox's child: with
// CONVERGE_TEST_SANDBOX=1 it serves one evaluation and exits, as
// `converge internal-eval` does.
func TestMain(m *testing.M) {
	if os.Getenv("CONVERGE_TEST_SANDBOX") == "1" {
		if err := ServeSandbox(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testSandbox evaluates in a child process of this test binary.
func testSandbox(b Budget) *Sandbox {
	return &Sandbox{Budget: b, Command: func(ctx context.Context) *exec.Cmd {
		c := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		c.Env = append(os.Environ(), "CONVERGE_TEST_SANDBOX=1")
		return c
	}}
}

// explode is a small document whose evaluation takes minutes and
// gigabytes: 8e9 list elements.
const explode = `import "list"

type:         "resource"
kind:         "bucket"
kind_version: 1
name:         "boom"
spec: x: [for a in list.Range(0, 2000, 1) for b in list.Range(0, 2000, 1) for c in list.Range(0, 2000, 1) {a + b + c}]
`

// hog is a small document that asks for a gigabyte at once.
const hog = `import "strings"

type:         "resource"
kind:         "bucket"
kind_version: 1
name:         "hog"
_mb:  strings.Repeat("x", 1000000)
spec: x: strings.Repeat(_mb, 400)
`

func TestSandboxMatchesLoad(t *testing.T) {
	cases := map[string]fstest.MapFS{}
	classic := fstest.MapFS{}
	if err := copyDir(classic, "../examples/classic"); err != nil {
		t.Fatal(err)
	}
	cases["classic"] = classic
	bad := fstest.MapFS{}
	for p, s := range kindsFS {
		bad[p] = &fstest.MapFile{Data: []byte(s)}
	}
	bad["r.yaml"] = &fstest.MapFile{Data: []byte("type: resource\nkind: bucket\nkind_version: 1\nname: a\nspec: {tier: warm}\n")}
	bad["link.cue"] = &fstest.MapFile{Mode: os.ModeSymlink}
	bad["big.json"] = &fstest.MapFile{Data: []byte(`{"type": "resource"}` + strings.Repeat(" ", 2<<20))}
	cases["findings"] = bad
	sb := testSandbox(Budget{})
	for name, fsys := range cases {
		t.Run(name, func(t *testing.T) {
			want, err := Load(fsys, ".", Options{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := sb.Load(context.Background(), fsys, ".", Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Findings, want.Findings) {
				t.Errorf("findings:\n got %v\nwant %v", got.Findings, want.Findings)
			}
			if !reflect.DeepEqual(got.Desired, want.Desired) {
				t.Errorf("desired differs:\n got %+v\nwant %+v", got.Desired, want.Desired)
			}
			if got.Files != want.Files || got.Documents != want.Documents {
				t.Errorf("files, documents = %d, %d, want %d, %d", got.Files, got.Documents, want.Files, want.Documents)
			}
			if (got.Schemas == nil) != (want.Schemas == nil) {
				t.Fatalf("schemas = %v, want %v", got.Schemas, want.Schemas)
			}
			for _, r := range got.Desired.Resources {
				if err := got.Schemas.ValidateSpec(r.Ref(), r.Spec); err != nil {
					t.Errorf("%s: %v", r.ID(), err)
				}
			}
		})
	}
}

func TestSandboxBudget(t *testing.T) {
	base := func() fstest.MapFS {
		fsys := fstest.MapFS{}
		for p, s := range kindsFS {
			fsys[p] = &fstest.MapFile{Data: []byte(s)}
		}
		return fsys
	}
	tests := []struct {
		name   string
		files  map[string]string
		budget Budget
		want   string // "file:line:col RULE message part"
	}{
		{name: "memory", files: map[string]string{"r/hog.cue": hog}, budget: Budget{Memory: 300 << 20},
			want: "r/hog.cue:1:1 LOAD_BUDGET of memory (budget 300 MiB, --load-memory)"},
		{name: "time", files: map[string]string{"r/boom.cue": explode}, budget: Budget{Document: 500 * time.Millisecond},
			want: "r/boom.cue:1:1 LOAD_BUDGET took over 500ms (--load-document-timeout)"},
		{name: "output", files: map[string]string{
			"r/a.yaml": "type: resource\nkind: bucket\nkind_version: 1\nname: a\nspec: {tier: hot}\n---\ntype: resource\nkind: queue\nkind_version: 2\nname: q\nspec: {name: abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz}\n",
		}, budget: Budget{Output: 40},
			want: "r/a.yaml:7:1 LOAD_BUDGET over the budget of 40 bytes (--load-output); this one is the largest"},
		// Findings count too.
		{name: "output of findings", files: map[string]string{"r/many.yaml": strings.Repeat("---\nx: 1\n", 3)},
			budget: Budget{Output: 40}, want: "r/many.yaml:2:1 LOAD_BUDGET findings, over the budget of 40 bytes (--load-output); this file has the most"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := base()
			for p, s := range tt.files {
				fsys[p] = &fstest.MapFile{Data: []byte(s)}
			}
			start := time.Now()
			res, err := testSandbox(tt.budget).Load(context.Background(), fsys, ".", Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Findings) != 1 {
				t.Fatalf("findings = %v, want one", res.Findings)
			}
			f := res.Findings[0]
			got := fmt.Sprintf("%s:%d:%d %s %s", f.File, f.Line, f.Column, f.Rule, f.Message)
			file, msg, _ := strings.Cut(tt.want, " LOAD_BUDGET ")
			if !strings.HasPrefix(got, strings.TrimSuffix(file, ":")) || !strings.Contains(got, " LOAD_BUDGET ") || !strings.Contains(got, msg) {
				t.Errorf("finding = %s, want %s", got, tt.want)
			}
			if len(res.Desired.Resources) != 0 || res.Schemas != nil {
				t.Errorf("a load over budget returned documents: %d resources", len(res.Desired.Resources))
			}
			t.Logf("%v: %s", time.Since(start).Round(time.Millisecond), got)
		})
	}
}

// TestSandboxCancel: the child is killed when ctx ends, at once.
func TestSandboxCancel(t *testing.T) {
	fsys := fstest.MapFS{"boom.cue": {Data: []byte(explode)}}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := testSandbox(Budget{}).Load(ctx, fsys, ".", Options{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("returned after %v", d)
	}
}

// copyDir copies the files under dir into fsys.
func copyDir(fsys fstest.MapFS, dir string) error {
	src := os.DirFS(dir)
	return fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(src, p)
		fsys[p] = &fstest.MapFile{Data: b}
		return err
	})
}
