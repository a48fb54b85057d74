package cue

import (
	"strings"
	"testing"

	"github.com/convergehq/converge"
)

func TestExplain(t *testing.T) {
	k := &converge.Kind{Name: "vpc", Version: 1,
		SpecSchema: `
// The AWS account the VPC lives in.
account_id!: string & =~"^[0-9]{12}$"
cidr: string | *"10.0.0.0/16"
tags?: [string]: string
subnets?: [...{cidr: string, zone?: string}]
password?: string @converge(secret)
`,
		StatusSchema: `vpc_id?: string`}
	tests := []struct {
		name, path string
		want       string // "path type must optional default secret"
		wantFields []string
		wantErr    string
	}{
		{name: "the spec", path: "", want: "spec {…} (5 fields) false false  false",
			wantFields: []string{"spec.account_id", "spec.cidr", "spec.tags", "spec.subnets", "spec.password"}},
		{name: "a required field with its doc", path: "spec.account_id", want: `spec.account_id =~"^[0-9]{12}$" true false  false`},
		{name: "a default", path: "spec.cidr", want: `spec.cidr string | *"10.0.0.0/16" false false "10.0.0.0/16" false`},
		{name: "a secret", path: "spec.password", want: "spec.password string false true  true"},
		{name: "through a list", path: "spec.subnets.[].zone", want: "spec.subnets.[].zone string false true  false"},
		{name: "status", path: "status.vpc_id", want: "status.vpc_id string false true  false"},
		{name: "unknown field", path: "spec.nope", wantErr: `spec has no field "nope" (it has: account_id, cidr, tags, subnets, password)`},
		{name: "unknown part", path: "meta", wantErr: "a path starts with spec, status or config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Explain(k, tt.path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Explain(%q) error = %v, want it to say %q", tt.path, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join([]string{d.Path, d.Type, bstr(d.Must), bstr(d.Optional), d.Default, bstr(d.Secret)}, " ")
			if got != tt.want {
				t.Errorf("Explain(%q) = %s, want %s", tt.path, got, tt.want)
			}
			if tt.wantFields != nil {
				var names []string
				for _, f := range d.Fields {
					names = append(names, f.Path)
				}
				if strings.Join(names, " ") != strings.Join(tt.wantFields, " ") {
					t.Errorf("fields %v, want %v", names, tt.wantFields)
				}
			}
			if tt.path == "spec.account_id" && d.Doc != "The AWS account the VPC lives in." {
				t.Errorf("doc = %q", d.Doc)
			}
		})
	}
}

func bstr(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
