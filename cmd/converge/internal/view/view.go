// Package view is what converge's commands print: the stable JSON shapes
// of resources, events, trees, statuses and reports, and their tables, as
// functions of data and an io.Writer (kubectl's printers), with secrets
// hidden (Redactor); and the reads that gather what get, list and tree
// show (read.go: ReadGet, ReadKind, ReadList, ReadTree) through a Reader
// the command opened. It parses no flag and opens no store: a command in
// package main does, and hands the reader, or what it read, here.
//
// Read first: Resource and Get (view.go, resource.go), the JSON every
// read command prints; WriteData and Table (view.go), what every -o
// json|yaml and every table goes through; then Describe (get KIND/NAME's
// table), WriteTree and read.go.
package view

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/convergehq/converge"
)

// WriteData prints v as indented JSON or, for "yaml", as block YAML with
// the same keys in the same order.
func WriteData(w io.Writer, format string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	if format != "yaml" {
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("encode yaml: %w", err)
	}
	blockStyle(&n)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return fmt.Errorf("encode yaml: %w", err)
	}
	_, err = w.Write(buf.Bytes())
	return err
}

// blockStyle turns JSON's flow style into YAML's block style.
func blockStyle(n *yaml.Node) {
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		if len(n.Content) > 0 {
			n.Style = 0
		}
	}
	if n.Kind == yaml.ScalarNode && n.Style == yaml.DoubleQuotedStyle {
		n.Style = 0
	}
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// Resource is the stable JSON shape of a resource (see "Stable JSON
// output" in docs/ARCHITECTURE.md): fields may be added, never renamed.
type Resource struct {
	UID                string          `json:"uid"`
	Kind               string          `json:"kind"`
	KindVersion        int             `json:"kind_version"`
	Name               string          `json:"name"`
	Phase              converge.Phase  `json:"phase"`
	Reason             string          `json:"reason"`
	Generation         int64           `json:"generation"`
	ObservedGeneration int64           `json:"observed_generation"`
	Spec               json.RawMessage `json:"spec"`
	Status             json.RawMessage `json:"status"`
	Owner              *string         `json:"owner"`
	Attempts           int             `json:"attempts"`
	LastError          string          `json:"last_error,omitempty"`
	NextAttempt        *time.Time      `json:"next_attempt,omitempty"`
	ProviderConfigRef  string          `json:"provider_config_ref,omitempty"`
	Deleting           bool            `json:"deleting,omitempty"`
	Source             string          `json:"source,omitempty"`
	Children           *int            `json:"children,omitempty"`
	// DriftPolicy is the resource's own drift policy, when it sets one;
	// Drift what the last observe found different, while it is so.
	DriftPolicy string                `json:"drift_policy,omitempty"`
	Drift       *converge.DriftReport `json:"drift,omitempty"`
	// Rollout is the composer's declared rollout (its waves); its
	// progress is in status.rollout.
	Rollout *converge.Rollout `json:"rollout,omitempty"`
}

// ResourceOf is r as the read commands print it (no secret hidden: see
// Redactor.Resource).
func ResourceOf(r *converge.Resource) Resource {
	v := Resource{
		UID: r.UID, Kind: r.Kind, KindVersion: r.KindVersion, Name: r.Name,
		Phase: r.Phase, Reason: r.Reason, Generation: r.Generation,
		ObservedGeneration: r.ObservedGeneration, Spec: r.Spec, Status: r.Status,
		Attempts: r.Attempts, LastError: r.LastError, ProviderConfigRef: r.ProviderConfigRef,
		Deleting: r.Deleting, Source: r.Source, DriftPolicy: r.DriftPolicy, Drift: r.Drift, Rollout: r.Rollout,
	}
	if len(v.Spec) == 0 {
		v.Spec = json.RawMessage("{}")
	}
	if len(v.Status) == 0 {
		v.Status = json.RawMessage("null")
	}
	if r.Owner != "" {
		o := string(r.Owner)
		v.Owner = &o
	}
	if !r.NextAttempt.IsZero() {
		t := r.NextAttempt
		v.NextAttempt = &t
	}
	return v
}

// table writes rows with aligned columns; the first row is the header.
func Table(w io.Writer, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		for i, c := range r {
			if i > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, c)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// RevisionLine is "main@sha1:<hex> (committed 3m ago: subject)".
func RevisionLine(r converge.Revision, now time.Time) string {
	out := r.String()
	if !r.Time.IsZero() {
		out += " (committed " + Age(now.Sub(r.Time)) + " ago"
		if r.Subject != "" {
			out += ": " + r.Subject
		}
		out += ")"
	}
	return out
}

// age renders how long ago something happened the way kubectl does, in
// its largest one or two units: 45s, 3m12s, 5h4m, 2d3h.
func Age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return strconv.FormatInt(s, 10) + "s"
	case s < 3600:
		return two(s/60, "m", s%60, "s")
	case s < 86400:
		return two(s/3600, "h", s%3600/60, "m")
	default:
		return two(s/86400, "d", s%86400/3600, "h")
	}
}

func two(a int64, ua string, b int64, ub string) string {
	out := strconv.FormatInt(a, 10) + ua
	if b > 0 {
		out += strconv.FormatInt(b, 10) + ub
	}
	return out
}
