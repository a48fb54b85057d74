package main

import (
	"testing"
	"time"
)

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
		if got := nearest(tt.in, names); got != tt.want {
			t.Errorf("nearest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestAge(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"},
		{45 * time.Second, "45s"},
		{3*time.Minute + 12*time.Second, "3m12s"},
		{5 * time.Minute, "5m"},
		{5*time.Hour + 4*time.Minute, "5h4m"},
		{51*time.Hour + 10*time.Minute, "2d3h"},
	} {
		if got := age(tt.d); got != tt.want {
			t.Errorf("age(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}
