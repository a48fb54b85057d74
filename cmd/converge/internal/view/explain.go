package view

import (
	"fmt"
	"io"
	"strings"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cue"
)

// Explain is explain -o json|yaml: the kind, and the field explained.
type Explain struct {
	Kind        string        `json:"kind"`
	KindVersion int           `json:"kind_version"`
	Source      string        `json:"source,omitempty"`
	Field       *cue.FieldDoc `json:"field"`
}

// WriteExplain prints d, a field of kind k, as explain's table: kind,
// field and type, default, description, then the fields below it.
func WriteExplain(w io.Writer, k *converge.Kind, d *cue.FieldDoc) {
	fmt.Fprintf(w, "KIND:     %s/v%d", k.Name, k.Version)
	if k.Source != "" {
		fmt.Fprintf(w, " (%s)", k.Source)
	}
	fmt.Fprintf(w, "\nFIELD:    %s <%s>%s\n", d.Path, d.Type, explainFlags(d))
	if d.Default != "" {
		fmt.Fprintf(w, "DEFAULT:  %s\n", d.Default)
	}
	if d.Doc != "" {
		fmt.Fprintf(w, "\nDESCRIPTION:\n")
		for _, l := range strings.Split(d.Doc, "\n") {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	if len(d.Fields) == 0 {
		return
	}
	fmt.Fprintf(w, "\nFIELDS:\n")
	width := 0
	for _, f := range d.Fields {
		width = max(width, len(f.Path)-len(d.Path)-1)
	}
	for _, f := range d.Fields {
		name := strings.TrimPrefix(f.Path, d.Path+".")
		fmt.Fprintf(w, "  %-*s  <%s>%s\n", width, name, f.Type, explainFlags(&f))
		if f.Doc != "" {
			fmt.Fprintf(w, "  %-*s    %s\n", width, "", strings.ReplaceAll(f.Doc, "\n", " "))
		}
	}
}

// explainFlags is a field's " -required-", " (optional)" and " (secret)".
func explainFlags(d *cue.FieldDoc) string {
	var s string
	switch {
	case d.Must:
		s = " -required-"
	case d.Optional:
		s = " (optional)"
	}
	if d.Default != "" && !strings.Contains(s, "default") {
		s += " (default " + d.Default + ")"
	}
	if d.Secret {
		s += " (secret)"
	}
	return s
}
