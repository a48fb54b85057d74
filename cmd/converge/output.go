package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/convergehq/converge"
)

// addOutputFlag registers -o/--output on c, defaulting to def.
func addOutputFlag(c *cobra.Command, output *string, def string) {
	c.Flags().StringVarP(output, "output", "o", def, "output format: table|json|yaml")
}

// checkOutput returns a usage error unless output is one of allowed.
func checkOutput(output string, allowed ...string) error {
	for _, a := range allowed {
		if output == a {
			return nil
		}
	}
	return fmt.Errorf("output %q: want one of %v", output, allowed)
}

// writeData prints v as indented JSON or, for "yaml", as block YAML with
// the same keys in the same order.
func writeData(w io.Writer, format string, v any) error {
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

// resourceView is the stable JSON shape of a resource (see "Stable JSON
// output" in docs/ARCHITECTURE.md): fields may be added, never renamed.
type resourceView struct {
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

func viewOf(r *converge.Resource) resourceView {
	v := resourceView{
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
func table(w io.Writer, rows [][]string) error {
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
