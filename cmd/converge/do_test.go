package main

import (
	"maps"
	"testing"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name    string
		pairs   []string
		want    map[string]string
		wantErr bool
	}{
		{name: "none", pairs: nil, want: nil},
		{name: "one", pairs: []string{"reason=audit"}, want: map[string]string{"reason": "audit"}},
		{name: "empty value", pairs: []string{"k="}, want: map[string]string{"k": ""}},
		{name: "value with =", pairs: []string{"q=a=b"}, want: map[string]string{"q": "a=b"}},
		{name: "last wins", pairs: []string{"k=1", "k=2"}, want: map[string]string{"k": "2"}},
		{name: "no =", pairs: []string{"oops"}, wantErr: true},
		{name: "empty key", pairs: []string{"=v"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseArgs(tt.pairs)
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Fatalf("parseArgs(%q) error = %v, want error %v", tt.pairs, err, tt.wantErr)
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("parseArgs(%q) = %v, want %v", tt.pairs, got, tt.want)
			}
		})
	}
}
