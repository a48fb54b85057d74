package view

import "testing"

func TestNearestKind(t *testing.T) {
	names := []string{"account", "classicbom", "route", "statussink", "tgw", "vpc"}
	for _, tt := range []struct{ in, want string }{
		{"acount", "account"},
		{"acconut", "account"}, // a transposition
		{"vcp", "vpc"},
		{"rout", "route"},
		{"classicbomm", "classicbom"},
		{"zzzzzz", ""}, // nothing close: no guess
		{"x", ""},
	} {
		if got := Nearest(tt.in, names); got != tt.want {
			t.Errorf("Nearest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
