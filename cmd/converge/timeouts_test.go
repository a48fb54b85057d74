package main

import (
	"testing"
	"time"

	"github.com/convergehq/converge"
	gitsync "github.com/convergehq/converge/sync"
	"github.com/convergehq/converge/sync/gittest"
)

// TestSetTimeouts: --git-timeout and --load-timeout win over git_timeout
// and load_timeout in converge.cue, which win over the defaults.
func TestSetTimeouts(t *testing.T) {
	src, err := gitsync.OpenLocal(gittest.Repo(t, map[string]string{"converge.cue": "git_timeout: \"45s\"\n"}), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flag time.Duration
		want time.Duration
	}{{0, 45 * time.Second}, {10 * time.Second, 10 * time.Second}} {
		setTimeouts(&globals{gitTimeout: tc.flag}, src, nil, headSettings(&globals{}, src, ""))
		if got := src.Timeout(); got != tc.want {
			t.Errorf("--git-timeout %v with git_timeout 45s: %v, want %v", tc.flag, got, tc.want)
		}
	}
	setTimeouts(&globals{}, src, nil, converge.Settings{})
	if got := src.Timeout(); got != gitsync.DefaultGitTimeout {
		t.Errorf("no flag, no setting: %v, want the default %v", got, gitsync.DefaultGitTimeout)
	}

	tests := []struct {
		name    string
		flag    time.Duration
		setting time.Duration
		want    time.Duration
	}{
		{name: "neither: the default", want: 0},
		{name: "converge.cue", setting: 3 * time.Minute, want: 3 * time.Minute},
		{name: "the flag wins", flag: time.Minute, setting: 3 * time.Minute, want: time.Minute},
		{name: "the flag alone", flag: 90 * time.Second, want: 90 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &globals{loadTimeout: tt.flag}
			s := &gitsync.Syncer{}
			setTimeouts(g, nil, s, converge.Settings{LoadTimeout: tt.setting})
			if got := s.LoadTimeout; got != tt.want {
				t.Errorf("LoadTimeout = %v, want %v", got, tt.want)
			}
			if got := g.headSettings.LoadTimeout; got != tt.setting {
				t.Errorf("remembered settings' load_timeout = %v, want %v", got, tt.setting)
			}
		})
	}
}
