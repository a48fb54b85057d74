package main

import (
	"encoding/json"
	"os"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// cmdCreatedAfter checks that the resource in LATER (the output of
// `converge get -o json`) was created at least DUR after the one in
// EARLIER: a rollout's later wave came after the earlier one soaked.
func cmdCreatedAfter(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: created-after LATER.json EARLIER.json DUR")
	}
	created := func(file string) time.Time {
		b, err := os.ReadFile(ts.MkAbs(file))
		ts.Check(err)
		var v struct {
			CreatedAt time.Time `json:"created_at"`
		}
		ts.Check(json.Unmarshal(b, &v))
		if v.CreatedAt.IsZero() {
			ts.Fatalf("%s: no created_at", file)
		}
		return v.CreatedAt
	}
	d, err := time.ParseDuration(args[2])
	ts.Check(err)
	later, earlier := created(args[0]), created(args[1])
	if got := later.Sub(earlier); got < d {
		ts.Fatalf("%s was created %v after %s, want at least %v", args[0], got, args[1], d)
	}
}
