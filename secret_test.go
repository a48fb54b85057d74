package converge_test

import (
	"encoding/json"
	"slices"
	"sort"
	"testing"

	"github.com/convergehq/converge"
)

func TestKindSecretPaths(t *testing.T) {
	k := &converge.Kind{Secret: []string{"spec.password", "status.keys.*.value", "config.bucket", "token", ""}}
	p := k.SecretPaths()
	want := converge.SecretPaths{
		Spec:   [][]string{{"password"}, {"token"}},
		Status: [][]string{{"keys", "*", "value"}, {"token"}},
		Config: [][]string{{"bucket"}},
	}
	if !slices.EqualFunc(p.Spec, want.Spec, slices.Equal) || !slices.EqualFunc(p.Status, want.Status, slices.Equal) ||
		!slices.EqualFunc(p.Config, want.Config, slices.Equal) {
		t.Errorf("SecretPaths = %v, want %v", p, want)
	}
}

func TestRedactJSON(t *testing.T) {
	raw := json.RawMessage(`{"user":"u","password":"hunter22","db":[{"pw":"a1b2"},{"pw":42}],"keys":{"k1":{"value":"v1"},"k2":{"value":"v2"}},"n":null}`)
	got, found := converge.RedactJSON(raw, [][]string{{"password"}, {"db", "pw"}, {"keys", "*", "value"}, {"absent"}})
	want := `{"db":[{"pw":"(secret)"},{"pw":"(secret)"}],"keys":{"k1":{"value":"(secret)"},"k2":{"value":"(secret)"}},"n":null,"password":"(secret)","user":"u"}`
	if string(got) != want {
		t.Errorf("RedactJSON =\n%s\nwant\n%s", got, want)
	}
	sort.Strings(found)
	if w := []string{"42", "a1b2", "hunter22", "v1", "v2"}; !slices.Equal(found, w) {
		t.Errorf("found %q, want %q", found, w)
	}
	// Nothing at the paths: the document is returned byte for byte.
	if got, _ := converge.RedactJSON(raw, [][]string{{"nope"}}); string(got) != string(raw) {
		t.Errorf("RedactJSON without a hit changed the document: %s", got)
	}
	if got, _ := converge.RedactJSON(json.RawMessage(`not json`), [][]string{{"a"}}); string(got) != "not json" {
		t.Errorf("RedactJSON of invalid JSON = %s", got)
	}
}

func TestScrub(t *testing.T) {
	vals := []string{"hunter22", "hunter2", "ab", `q"uote`}
	for _, tc := range []struct{ in, want string }{
		{`invalid value "hunter22" (out of bound)`, `invalid value (secret) (out of bound)`},
		{`pw hunter2 and hunter22`, `pw (secret) and (secret)`},
		{`about ab`, `about ab`}, // shorter than MinScrub: left alone
		{`got "q\"uote"`, `got (secret)`},
		{`got q\"uote`, `got (secret)`},
	} {
		if got := converge.Scrub(tc.in, vals, converge.MinScrub); got != tc.want {
			t.Errorf("Scrub(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := converge.Scrub(`value "ab"`, []string{"ab"}, 1); got != "value (secret)" {
		t.Errorf("Scrub with min 1 = %q", got)
	}
}

func TestScrubJSON(t *testing.T) {
	raw := json.RawMessage(`{"bucket":"s3://BUCKET-42/x","n":1,"BUCKET-42":true}`)
	got := converge.ScrubJSON(raw, []string{"BUCKET-42"}, converge.MinScrub)
	if want := `{"(secret)":true,"bucket":"s3://(secret)/x","n":1}`; string(got) != want {
		t.Errorf("ScrubJSON = %s, want %s", got, want)
	}
	if got := converge.ScrubJSON(raw, []string{"absent"}, converge.MinScrub); string(got) != string(raw) {
		t.Errorf("ScrubJSON without a hit = %s", got)
	}
}

func TestScrubShortValues(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`conflicting values {cert:"c",key:5} and null`, `conflicting values {cert:"c",key:(secret)} and null`},
		{`25 errors in 5.5 and 5`, `25 errors in 5.5 and (secret)`},
		{`value "5"`, `value (secret)`},
	} {
		if got := converge.Scrub(tc.in, []string{"5"}, 1); got != tc.want {
			t.Errorf("Scrub(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSecretPathRelations(t *testing.T) {
	paths := [][]string{{"tls", "key"}, {"tokens", "*", "value"}}
	for _, tc := range []struct {
		path         []string
		under, above bool
	}{
		{[]string{"tls"}, false, true},
		{[]string{"tls", "key"}, true, false},
		{[]string{"tokens", "a", "value", "x"}, true, false},
		{[]string{"tokens", "a"}, false, true},
		{[]string{"replicas", "3", "host"}, false, false},
		{nil, false, true},
	} {
		if u, a := converge.UnderSecret(tc.path, paths), converge.AboveSecret(tc.path, paths); u != tc.under || a != tc.above {
			t.Errorf("%v: under %v above %v, want %v %v", tc.path, u, a, tc.under, tc.above)
		}
	}
}
