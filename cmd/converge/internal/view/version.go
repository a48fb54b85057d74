package view

import (
	"runtime"
	"runtime/debug"
)

// Version is what this binary knows of its own build: the module
// version, the commit and its time when the build stamped them (go build
// in a git checkout does; GOFLAGS=-buildvcs=false and go run do not), and
// the Go toolchain.
type Version struct {
	Version    string `json:"version"`
	Commit     string `json:"commit"`
	CommitTime string `json:"commit_time"`
	Modified   bool   `json:"modified"`
	Go         string `json:"go"`
}

// BuildVersion reads this binary's build info.
func BuildVersion() Version {
	v := Version{Version: "(devel)", Go: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.CommitTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// String is the one line `converge version` and `converge --version`
// print.
func (v Version) String() string {
	s := "converge " + v.Version
	switch {
	case v.Commit == "":
		s += " (commit unknown: built without VCS stamping)"
	default:
		c := v.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		s += " (commit " + c
		if v.CommitTime != "" {
			s += " of " + v.CommitTime
		}
		if v.Modified {
			s += ", with uncommitted changes"
		}
		s += ")"
	}
	return s + " " + v.Go
}
