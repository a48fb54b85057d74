package view

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/convergehq/converge"
)

// This file is get's table view of one resource, a describe: what the
// resource is, how old, what it depends on and what depends on it with
// the values that flow, its newest events, and its spec and status
// summarised (one line per top-level field, nested values cut at a
// width, big ones as their keys and size). -o json keeps the whole.

// DescribeWidth is where a field's value is cut in the table (-o wide:
// never).
const DescribeWidth = 80

// describeMax caps the lines of one section (fields, dependencies,
// dependents); the rest is counted.
const describeMax = 25

// DescribeEvents is how many of the newest events get shows.
const DescribeEvents = 10

// Edge is one dependency of get's JSON: the other resource, and the
// values that flow (producer's status field From into the consumer's
// spec field To); no flows: an ordering only (depends_on).
type Edge struct {
	Resource converge.ID          `json:"resource"`
	Flows    []converge.ValueFlow `json:"flows"`
}

// Edges is es as get's JSON lists them, other naming the resource at
// the far end of each (the producer, or the consumer).
func Edges(es []converge.Edge, other func(converge.Edge) converge.ID) []Edge {
	out := make([]Edge, len(es))
	for i, e := range es {
		fl := e.Flows
		if fl == nil {
			fl = []converge.ValueFlow{}
		}
		out[i] = Edge{Resource: other(e), Flows: fl}
	}
	return out
}

// Event is an event as events and get print it.
type Event struct {
	Time     time.Time   `json:"time"`
	Resource converge.ID `json:"resource"`
	Type     string      `json:"type"`
	Message  string      `json:"message"`
}

// EventOf is e as Event.
func EventOf(e converge.Event) Event {
	return Event{Time: e.Time, Resource: e.Resource, Type: e.Type, Message: e.Message}
}

// Since is "3m ago (2026-12-01 22:40:01)", or "-" for a zero time.
func Since(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return Age(now.Sub(t)) + " ago (" + t.Local().Format("2006-01-02 15:04:05") + ")"
}

// Describe writes v's table view on w: width 0 cuts no value.
func Describe(w io.Writer, v Get, lease *converge.Lease, now time.Time, width int) error {
	owner := "-"
	if v.Owner != nil {
		owner = *v.Owner
	}
	rows := [][]string{
		{"RESOURCE", v.Kind + "/" + v.Name},
		{"VERSION", "v" + strconv.Itoa(v.KindVersion)},
		{"UID", v.UID},
		{"PHASE", PhaseShown(v.Phase, v.Drift)},
		{"REASON", OrDash(v.Reason)},
		{"GENERATION", fmt.Sprintf("%d (observed %d)", v.Generation, v.ObservedGeneration)},
		{"ATTEMPTS", strconv.Itoa(v.Attempts)},
		{"OWNER", owner},
		{"CREATED", Since(now, deref(v.CreatedAt))},
		{"UPDATED", Since(now, deref(v.UpdatedAt))},
	}
	if v.Source != "" {
		rows = append(rows, []string{"SOURCE", v.Source})
	}
	if v.LastError != "" && v.LastError != v.Reason {
		rows = append(rows, []string{"LAST ERROR", Cut(v.LastError, width)})
	}
	if v.NextAttempt != nil {
		rows = append(rows, []string{"NEXT ATTEMPT", "in " + Age(v.NextAttempt.Sub(now))})
	}
	if lease != nil {
		rows = append(rows, []string{"LEASE", leaseLine(lease, now)})
	}
	if d := v.Drift; d != nil {
		rows = append(rows, []string{"DRIFT", DriftLine(d)})
	}
	if s := v.Suspended; s != nil {
		rows = append(rows, []string{"SUSPENDED", SuspensionText(s)})
	}
	if v.Rollout != nil {
		rows = append(rows, []string{"WAVES", v.Rollout.String()})
	}
	if st := converge.RolloutOf(v.Status); st != nil {
		line := st.String()
		if st.Generation != v.Generation {
			line += fmt.Sprintf(" (of generation %d)", st.Generation)
		}
		rows = append(rows, []string{"ROLLOUT", Cut(line, width)})
	}
	if err := Table(w, rows); err != nil {
		return err
	}
	var b bytes.Buffer
	section(&b, "SPEC", summarize(v.Spec, width))
	section(&b, "STATUS", summarize(v.Status, width))
	section(&b, "DEPENDS ON", edgeLines(v.DependsOn, "status.%s → spec.%s"))
	section(&b, "USED BY", edgeLines(v.UsedBy, "status.%s → their spec.%s"))
	if len(v.Events) == 0 {
		b.WriteString("\nEVENTS: none\n")
	} else {
		if len(v.Events) < DescribeEvents {
			b.WriteString("\nEVENTS:\n")
		} else {
			fmt.Fprintf(&b, "\nEVENTS (the newest %d; converge events %s/%s for all):\n", len(v.Events), v.Kind, v.Name)
		}
		rows := [][]string{{"  AGE", "TYPE", "MESSAGE"}}
		for _, e := range v.Events {
			rows = append(rows, []string{"  " + Age(now.Sub(e.Time)), e.Type, Cut(e.Message, width)})
		}
		if err := Table(&b, rows); err != nil {
			return err
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// leaseLine says what a lease is in words: "a compose task in flight
// until 22:41:03 (in 12s)", naming the worker when the lease records one.
func leaseLine(l *converge.Lease, now time.Time) string {
	when := "in " + Age(l.Expires.Sub(now))
	if l.Expires.Before(now) {
		when = "expired " + Age(now.Sub(l.Expires)) + " ago"
	}
	on := ""
	if l.Worker != "" {
		on = " on worker " + l.Worker
	}
	return fmt.Sprintf("a %s task in flight%s until %s (%s)", l.Reaction, on, l.Expires.Local().Format("15:04:05"), when)
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// section writes a titled block of "  key  value" lines (table-aligned);
// nothing but the title for an empty one.
func section(b *bytes.Buffer, title string, lines [][2]string) {
	if len(lines) == 0 {
		fmt.Fprintf(b, "\n%s: none\n", title)
		return
	}
	fmt.Fprintf(b, "\n%s:\n", title)
	rows := make([][]string, len(lines))
	for i, l := range lines {
		rows[i] = []string{"  " + l[0], l[1]}
	}
	_ = Table(b, rows) // a bytes.Buffer does not fail
}

// edgeLines are one line per other resource, with its flows in format
// (from, to); at most describeMax, then a count of the rest.
func edgeLines(es []Edge, format string) [][2]string {
	var out [][2]string
	for i, e := range es {
		if i == describeMax {
			out = append(out, [2]string{fmt.Sprintf("… %d more", len(es)-i), "(-o json lists all)"})
			break
		}
		fl := "(ordering only)"
		if len(e.Flows) > 0 {
			parts := make([]string, len(e.Flows))
			for j, f := range e.Flows {
				parts[j] = fmt.Sprintf(format, f.From, f.To)
			}
			fl = strings.Join(parts, ", ")
		}
		out = append(out, [2]string{string(e.Resource), fl})
	}
	return out
}

// summarize is one line per top-level field of a JSON object (a value
// that is not an object is one line, "value"): the field, and its value
// as compact JSON cut at width, or for a big object or list its size
// and first keys. At most describeMax fields, then a count of the rest.
func summarize(raw json.RawMessage, width int) [][2]string {
	if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return [][2]string{{"value", value(raw, width)}}
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out [][2]string
	for i, k := range keys {
		if width > 0 && i == describeMax {
			out = append(out, [2]string{fmt.Sprintf("… %d more fields", len(keys)-i), "(-o json for the whole, " + Size(len(raw)) + ")"})
			break
		}
		out = append(out, [2]string{k, value(obj[k], width)})
	}
	return out
}

// value is v as compact JSON, or, when longer than width (0: no limit),
// a summary: an object's key count, first keys and size, a list's item
// count and size, anything else cut with "…".
func value(v json.RawMessage, width int) string {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		b.Reset()
		b.Write(v)
	}
	s := b.String()
	if width <= 0 || len(s) <= width {
		return s
	}
	switch s[0] {
	case '{':
		var m map[string]json.RawMessage
		if json.Unmarshal(v, &m) == nil {
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			return fmt.Sprintf("{%s} (%s, %s)", Cut(strings.Join(keys, ", "), width/2), converge.Plural(len(keys), "key"), Size(len(s)))
		}
	case '[':
		var l []json.RawMessage
		if json.Unmarshal(v, &l) == nil {
			return fmt.Sprintf("[%s] (%s, %s)", Cut(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"), width/2), converge.Plural(len(l), "item"), Size(len(s)))
		}
	}
	return Cut(s, width) + " (" + Size(len(s)) + ")"
}

// Cut shortens s to about width runes, ending it with "…" (0: never).
func Cut(s string, width int) string {
	if width <= 0 {
		return s
	}
	r := []rune(s)
	if len(r) <= width {
		return s
	}
	return string(r[:width-1]) + "…"
}

// Size is a byte count as people read it: 812 B, 4.1 KB, 26.6 MB.
func Size(n int) string {
	switch {
	case n < 1000:
		return strconv.Itoa(n) + " B"
	case n < 1000*1000:
		return strconv.FormatFloat(float64(n)/1000, 'f', 1, 64) + " KB"
	default:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + " MB"
	}
}
