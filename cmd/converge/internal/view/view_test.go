package view

import (
	"testing"
	"time"
)

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
		if got := Age(tt.d); got != tt.want {
			t.Errorf("Age(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}
