package view

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cue"
)

// Validate is the JSON of `converge validate -o json` (see "Stable
// JSON output" in docs/ARCHITECTURE.md): add fields freely, never rename
// these.
type Validate struct {
	Errors    []converge.Finding `json:"errors"`
	Documents int                `json:"documents"`
	Kinds     int                `json:"kinds"`
	Files     int                `json:"files"`
	// Composers lists each kind that composes in CUE and how its
	// compose expression is evaluated.
	Composers []ComposerPath `json:"composers,omitempty"`
}

// ComposerPath is how a kind's compose expression is evaluated: on the
// fast path (compiled to Go, docs/ARCHITECTURE.md "Composition in CUE"),
// or by CUE's evaluator, Why saying what keeps it off the fast path.
type ComposerPath struct {
	Kind    string `json:"kind"`
	Version int    `json:"kind_version"`
	At      string `json:"at"`
	Fast    bool   `json:"fast"`
	// Deltas: a recompose composes only what changed (the parts shape).
	Deltas bool   `json:"deltas"`
	Why    string `json:"why,omitempty"`
}

// ComposerPaths returns how each kind of res that composes in CUE is
// evaluated.
func ComposerPaths(res *cue.Result) []ComposerPath {
	var out []ComposerPath
	for _, k := range res.Desired.Kinds {
		fast, why, ok := res.Schemas.ComposePath(k.Ref())
		if ok {
			out = append(out, ComposerPath{Kind: k.Name, Version: k.Version, At: k.ComposeAt, Fast: fast, Why: why,
				Deltas: res.Schemas.ComposeDeltas(k.Ref())})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// WriteValidate prints rep as validate does: JSON (format "json"), or
// each finding, how each composer composes, and the counts.
func WriteValidate(w io.Writer, format string, rep Validate) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	for _, f := range rep.Errors {
		fmt.Fprintln(w, f.String())
	}
	for _, c := range rep.Composers {
		if c.Fast && c.Deltas {
			fmt.Fprintf(w, "%s: note: %s v%d composes on the fast path, and a recompose composes only the changed elements of its list\n", c.At, c.Kind, c.Version)
		} else if c.Fast {
			fmt.Fprintf(w, "%s: note: %s v%d composes on the fast path\n", c.At, c.Kind, c.Version)
		} else {
			fmt.Fprintf(w, "%s: note: %s v%d composes through CUE's evaluator, ~30x slower than the fast path (outside its subset: %s)\n", c.At, c.Kind, c.Version, c.Why)
		}
	}
	_, err := fmt.Fprintf(w, "%s, %s, %s\n", converge.Plural(rep.Documents, "document"), converge.Plural(rep.Kinds, "kind"), converge.Plural(len(rep.Errors), "error"))
	return err
}
