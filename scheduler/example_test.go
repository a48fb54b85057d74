package scheduler_test

import (
	"encoding/json"
	"fmt"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/scheduler"
)

// Diff shows what applying a desired state would do, without a store or
// a running scheduler: `converge plan` is built on it.
func ExampleDiff() {
	stored := &converge.Snapshot{Resources: []*converge.Resource{
		{Kind: "vpc", KindVersion: 1, Name: "a", Origin: converge.OriginGit, Declared: json.RawMessage(`{"cidr":"10.0.0.0/16"}`)},
		{Kind: "vpc", KindVersion: 1, Name: "b", Origin: converge.OriginGit, Declared: json.RawMessage(`{"cidr":"10.1.0.0/16"}`)},
		{Kind: "vpc", KindVersion: 1, Name: "old", Origin: converge.OriginGit},
	}}
	desired := &converge.Desired{Resources: []*converge.Resource{
		{Kind: "vpc", KindVersion: 2, Name: "a", Declared: json.RawMessage(`{"cidr":"10.0.0.0/16","region":"eu-west-1"}`)},
		{Kind: "vpc", KindVersion: 1, Name: "b", Declared: json.RawMessage(`{"cidr":"10.2.0.0/16"}`)},
		{Kind: "account", KindVersion: 1, Name: "new"},
	}}
	p := scheduler.Diff(stored, desired)
	for _, it := range p.Create {
		fmt.Println("create", it.ID, it.To)
	}
	for _, it := range p.Update {
		fmt.Println("update", it.ID, it.Fields)
	}
	for _, it := range p.Flip {
		fmt.Println("flip", it.ID, it.From, "->", it.To, it.Fields)
	}
	for _, it := range p.Delete {
		fmt.Println("delete", it.ID)
	}
	// Output:
	// create account/new account/v1
	// update vpc/b [cidr]
	// flip vpc/a vpc/v1 -> vpc/v2 [region]
	// delete vpc/old
}
