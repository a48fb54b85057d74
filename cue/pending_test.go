package cue

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/convergehq/converge"
)

// TestValidateSpecPending: a field a value flow fills may be absent,
// and only that one; everything else, and a present flowed field, is
// checked. Both the fast check and CUE (a schema outside the fast subset)
// decide alike.
func TestValidateSpecPending(t *testing.T) {
	kinds := []*converge.Kind{
		{Name: "vpc", Version: 1, SpecSchema: `account_id: =~"^.{12}$"
cidr: string
tags?: [string]: string`},
		// A default makes the schema CUE-only (no fast check).
		{Name: "slow", Version: 1, SpecSchema: `account_id: =~"^.{12}$"
cidr: string | *"10.0.0.0/8"
net: {tgw_id: string, name: string}`},
	}
	s, err := Compile(kinds)
	if err != nil {
		t.Fatal(err)
	}
	vpc, slow := converge.KindRef{Kind: "vpc", Version: 1}, converge.KindRef{Kind: "slow", Version: 1}
	if s.fast[schemaKey{vpc, "spec"}] == nil || s.fast[schemaKey{slow, "spec"}] != nil {
		t.Fatal("the test wants vpc fast-checked and slow not")
	}
	tests := []struct {
		ref     converge.KindRef
		spec    string
		pending []string
		want    string // "" valid, else a substring of the error
	}{
		{vpc, `{"cidr":"10.0.0.0/24"}`, []string{"account_id"}, ""},
		{vpc, `{"cidr":"10.0.0.0/24"}`, nil, "spec.account_id: field is required but not present"},
		{vpc, `{"cidr":"10.0.0.0/24"}`, []string{"cidr"}, "spec.account_id: field is required but not present"},
		{vpc, `{}`, []string{"account_id"}, "spec.cidr: field is required but not present"},
		{vpc, `{"cidr":"10.0.0.0/24","account_id":"short"}`, []string{"account_id"}, "spec.account_id: invalid value"},
		{vpc, `{"cidr":"10.0.0.0/24","bogus":1}`, []string{"account_id"}, "spec.bogus: field not allowed"},
		{slow, `{"cidr":"x","net":{"name":"n"}}`, []string{"account_id", "net.tgw_id"}, ""},
		{slow, `{"cidr":"x","net":{"name":"n"}}`, []string{"account_id"}, "spec.net.tgw_id: field is required but not present"},
		{slow, `{"cidr":"x"}`, []string{"account_id", "net.tgw_id"}, "spec.net.name: field is required but not present"},
		{slow, `{"cidr":"x"}`, []string{"account_id", "net"}, ""},
		{slow, `{"cidr":1,"net":{"name":"n"}}`, []string{"account_id", "net.tgw_id"}, "spec.cidr"},
	}
	for _, tt := range tests {
		err := s.ValidateSpecPending(tt.ref, json.RawMessage(tt.spec), tt.pending)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s %s pending %v: %v", tt.ref, tt.spec, tt.pending, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s %s pending %v: err %v, want %q", tt.ref, tt.spec, tt.pending, err, tt.want)
		}
	}
}
