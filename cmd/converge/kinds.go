package main

import (
	"context"
	"fmt"
	"sort"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/view"
)

// kindLister is what a missing-resource message asks for the kinds the
// state knows: a reader, or the engine's store.
type kindLister interface {
	Kinds(ctx context.Context) ([]*converge.Kind, error)
}

// notFound is the exit-1 error for a resource id that is not in the
// state. When its kind is not one the state knows either, it says so and
// suggests the view.Nearest kind ("get acount/x": did you mean account?).
func notFound(ctx context.Context, kl kindLister, id converge.ID) error {
	if err := checkKind(ctx, kl, id.Kind()); err != nil {
		return err
	}
	return failed("resource %s not found", id)
}

// checkKind returns nil if the state knows kind (at any version), or
// cannot say; otherwise an exit-1 error naming the view.Nearest known kind.
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
	if near := view.Nearest(kind, names); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	} else {
		msg += fmt.Sprintf(" (the state knows: %v)", names)
	}
	return failed("%s", msg)
}
