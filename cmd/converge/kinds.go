package main

import (
	"context"
	"fmt"
	"sort"

	"github.com/convergehq/converge"
)

// kindLister is what a missing-resource message asks for the kinds the
// state knows: a reader, or the engine's store.
type kindLister interface {
	Kinds(ctx context.Context) ([]*converge.Kind, error)
}

// notFound is the exit-1 error for a resource id that is not in the
// state. When its kind is not one the state knows either, it says so and
// suggests the nearest kind ("get acount/x": did you mean account?).
func notFound(ctx context.Context, kl kindLister, id converge.ID) error {
	if err := checkKind(ctx, kl, id.Kind()); err != nil {
		return err
	}
	return failed("resource %s not found", id)
}

// checkKind returns nil if the state knows kind (at any version), or
// cannot say; otherwise an exit-1 error naming the nearest known kind.
func checkKind(ctx context.Context, kl kindLister, kind string) error {
	ks, err := kl.Kinds(ctx)
	if err != nil || len(ks) == 0 {
		return nil // the caller's own answer stands
	}
	names := make([]string, 0, len(ks))
	seen := map[string]bool{}
	for _, k := range ks {
		if k.Name == kind {
			return nil
		}
		if !seen[k.Name] {
			seen[k.Name] = true
			names = append(names, k.Name)
		}
	}
	sort.Strings(names)
	msg := fmt.Sprintf("kind %q does not exist", kind)
	if near := nearest(kind, names); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	} else {
		msg += fmt.Sprintf(" (the state knows: %v)", names)
	}
	return failed("%s", msg)
}

// nearest returns the name closest to s by edit distance, if it is close
// enough to be a typo (at most a third of the longer word), else "".
func nearest(s string, names []string) string {
	best, bestD := "", -1
	for _, n := range names {
		d := editDistance(s, n)
		if bestD < 0 || d < bestD {
			best, bestD = n, d
		}
	}
	if bestD < 0 || bestD*3 > max(len(s), len(best)) {
		return ""
	}
	return best
}

// editDistance is the Damerau–Levenshtein distance (with adjacent
// transpositions) between a and b, in bytes.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
