package converge_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/convergehq/converge"
)

func TestDrift(t *testing.T) {
	for _, tc := range []struct {
		name         string
		spec, actual string
		want         []string
	}{
		{name: "equal", spec: `{"name":"a","limit":5}`, actual: `{"name":"a","limit":5}`},
		{name: "no actual", spec: `{"name":"a"}`, actual: ``},
		{name: "one field", spec: `{"name":"a","limit":5}`, actual: `{"name":"a","limit":3}`, want: []string{"limit"}},
		{name: "numbers as values", spec: `{"limit":5.0}`, actual: `{"limit":5}`},
		{name: "undeclared field read", spec: `{"name":"a"}`, actual: `{"name":"a","limit":-1}`},
		{name: "nested, sorted", spec: `{"b":{"x":1,"y":2},"a":"q"}`, actual: `{"b":{"x":1,"y":3},"a":"r"}`, want: []string{"a", "b.y"}},
		{name: "list is a leaf", spec: `{"l":[1,2]}`, actual: `{"l":[2,1]}`, want: []string{"l"}},
		{name: "object became scalar", spec: `{"o":{"x":1}}`, actual: `{"o":7}`, want: []string{"o"}},
		{name: "invalid", spec: `{`, actual: `{}`, want: []string{""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := converge.Drift(json.RawMessage(tc.spec), json.RawMessage(tc.actual)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Drift = %q, want %q", got, tc.want)
			}
		})
	}
}
