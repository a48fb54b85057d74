package main

import (
	"context"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cmd/converge/internal/view"
)

// redactWithEdges is x.Resource, also hiding the spec fields a value
// flow fills from a producer's secret status field (rd's edges of r).
func redactWithEdges(ctx context.Context, x *view.Redactor, rd reader, r *converge.Resource) (view.Resource, error) {
	if !x.FlowsMatter(r) {
		return x.Resource(r, nil), nil
	}
	consumes, _, err := rd.EdgesOf(ctx, r.ID())
	if err != nil {
		return view.Resource{}, err
	}
	return x.Resource(r, x.FlowPaths(consumes)), nil
}
