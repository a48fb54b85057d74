// Package sdktest is the conformance suite for workers written with
// providers/sdk, and a harness for testing providers against a real
// control plane.
//
// Read first: Run (the suite), Case (an author's own expectations),
// Harness (a providers.Server on a unix socket with sdk workers connected).
//
// # Basics
//
// A provider package adds one test:
//
//	func TestConformance(t *testing.T) {
//		sdktest.Run(t, []sdk.Provider{vpcV1(), vpcV2()},
//			sdktest.Case{Name: "vpc v2 echoes region",
//				Task:        converge.Task{Kind: "vpc", KindVersion: 2, Reaction: "reconcile", Spec: json.RawMessage(`{"region":"eu"}`)},
//				WantStatus:  json.RawMessage(`{"vpc_id":"…","region":"eu"}`)},
//		)
//	}
//
// Everything is real: gRPC over a unix socket, the production Server and
// the production SDK client. No mocks.
package sdktest
