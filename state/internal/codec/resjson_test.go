package codec

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
)

// jsonKeys returns the JSON keys of struct type t, in field order.
func jsonKeys(t reflect.Type) []string {
	var keys []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		keys = append(keys, name)
	}
	return keys
}

// TestResourceJSONFieldsKnown fails when converge.Resource,
// converge.Lease or converge.Event changes shape: appendResourceJSON or
// appendEventsJSON must then learn the new field (and this list with it).
func TestResourceJSONFieldsKnown(t *testing.T) {
	tests := []struct {
		name     string
		typ      reflect.Type
		wantKeys string
	}{
		{name: "Resource", typ: reflect.TypeFor[converge.Resource](), wantKeys: "uid kind kind_version name declared spec status phase reason generation observed_generation owner origin provider_config_ref attempts last_error next_attempt deleting deleted_at lease source created_at updated_at composed_by drift_policy drift rollout"},
		{name: "Lease", typ: reflect.TypeFor[converge.Lease](), wantKeys: "task_id reaction worker expires"},
		{name: "Event", typ: reflect.TypeFor[converge.Event](), wantKeys: "seq time resource type message"},
	}
	for _, tt := range tests {
		if got := strings.Join(jsonKeys(tt.typ), " "); got != tt.wantKeys {
			t.Errorf("converge.%s JSON keys changed:\n got %s\nwant %s\nteach appendResourceJSON (state/internal/codec/resjson.go) the change, then update this list", tt.name, got, tt.wantKeys)
		}
	}
}

func fullResource() *converge.Resource {
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 123456789, time.UTC)
	return &converge.Resource{
		UID: "u-1", Kind: "vpc", KindVersion: 2, Name: "team-a",
		Declared: json.RawMessage("{\n  \"cidr\": \"10.0.0.0/16\",\n  \"list\": [1, 2.5, true, null]\n}"),
		Spec:     json.RawMessage(`{"cidr":"10.0.0.0/16", "account_id": "123"}`),
		Status:   json.RawMessage(`{"vpc_id":"vpc-1"}`),
		Phase:    converge.PhaseFailed, Reason: "waiting for account/team-a",
		Generation: 7, ObservedGeneration: -1, Owner: "bom/classic", Origin: converge.OriginComposed,
		ProviderConfigRef: "aws", Attempts: 3, LastError: `invalid value "x": want <int> & more`,
		NextAttempt: t0, Deleting: true, DeletedAt: t0.In(time.FixedZone("X", 5*3600+30*60)),
		Lease:  &converge.Lease{TaskID: "t", Reaction: "reconcile", Worker: "w"},
		Source: "resources/a.cue:3", CreatedAt: t0, UpdatedAt: t0.Add(time.Second),
		DriftPolicy: "report",
		Drift:       &converge.DriftReport{Fields: []string{"cidr", "tags.<a>"}, Gone: true, Policy: "report", Since: t0, Generation: 7},
		Rollout: &converge.Rollout{Waves: []converge.Wave{{Name: "canary", Rows: []string{"fd-00"}}, {Percent: 10, Soak: time.Minute}, {}},
			Soak: 30 * time.Second, Timeout: time.Hour},
	}
}

func TestResourceJSONMatchesEncodingJSON(t *testing.T) {
	tests := []struct {
		name   string
		change func(r *converge.Resource)
	}{
		{name: "full"},
		{name: "zero", change: func(r *converge.Resource) { *r = converge.Resource{} }},
		{name: "no lease, no times", change: func(r *converge.Resource) {
			r.Lease, r.NextAttempt, r.DeletedAt, r.CreatedAt, r.UpdatedAt = nil, time.Time{}, time.Time{}, time.Time{}, time.Time{}
		}},
		{name: "escapes", change: func(r *converge.Resource) {
			r.Name = "a\"b\\c\n\r\t\b\f\x01\x1f<>&"
			r.LastError = "ünïcödé \u2028 \u2029 \xff\xfe end"
			r.Reason = "日本語"
		}},
		{name: "extreme ints", change: func(r *converge.Resource) {
			r.Generation, r.ObservedGeneration, r.Attempts = 1<<63-1, -1<<63, -5
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := fullResource()
			if tt.change != nil {
				tt.change(r)
			}
			var buf bytes.Buffer
			if !appendResourceJSON(&buf, r) {
				t.Fatalf("appendResourceJSON refused %+v", r)
			}
			want, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if got := buf.String(); got != string(want) {
				t.Errorf("appendResourceJSON =\n%s\nencoding/json =\n%s", got, want)
			}
		})
	}
}

func TestResourceJSONFallsBack(t *testing.T) {
	tests := []struct {
		name   string
		change func(r *converge.Resource)
	}{
		{name: "invalid spec", change: func(r *converge.Resource) { r.Spec = json.RawMessage(`{`) }},
		{name: "year 10000", change: func(r *converge.Resource) { r.CreatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }},
		{name: "seconds in zone offset", change: func(r *converge.Resource) { r.UpdatedAt = r.UpdatedAt.In(time.FixedZone("odd", 17)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := fullResource()
			tt.change(r)
			var buf bytes.Buffer
			if appendResourceJSON(&buf, r) {
				t.Errorf("appendResourceJSON accepted what it must leave to encoding/json: %s", buf.String())
			}
		})
	}
}

func TestEventsJSONMatchesEncodingJSON(t *testing.T) {
	tm := time.Date(2026, 11, 30, 9, 0, 0, 5, time.FixedZone("Y", -3600))
	tests := []struct {
		name string
		evs  []converge.Event
	}{
		{name: "none", evs: []converge.Event{}},
		{name: "zero", evs: []converge.Event{{}}},
		{name: "several", evs: []converge.Event{
			{Seq: 1, Time: tm, Resource: "vpc/a", Type: "Ready", Message: `status "ok" <b>`},
			{Seq: 1<<64 - 1, Time: tm.UTC(), Resource: "route/b", Type: "Failed", Message: "é\n\x00"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if !appendEventsJSON(&buf, tt.evs) {
				t.Fatal("appendEventsJSON refused")
			}
			want, err := json.Marshal(tt.evs)
			if err != nil {
				t.Fatal(err)
			}
			if got := buf.String(); got != string(want) {
				t.Errorf("appendEventsJSON =\n%s\nencoding/json =\n%s", got, want)
			}
		})
	}
}

// FuzzResourceJSON checks string escaping against encoding/json.
func FuzzResourceJSON(f *testing.F) {
	for _, s := range []string{"", "plain", "<a href='x'>&amp;</a>", "\x00\x7f\x80\xff", "\u2028\u2029", "é\"\\"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, name, message string) {
		r := fullResource()
		r.Name, r.LastError = name, message
		var buf bytes.Buffer
		if !appendResourceJSON(&buf, r) {
			t.Fatal("refused")
		}
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if buf.String() != string(want) {
			t.Errorf("appendResourceJSON =\n%s\nencoding/json =\n%s", buf.String(), want)
		}
	})
}
