// Package sdk is what provider authors import to write a converge worker:
// plain Go handlers per kind and version, served over the worker protocol.
//
// Read first: Provider (the handlers of one kind version), Request (one
// task), Serve (the worker's main loop), Transient and Permanent (typed
// outcomes).
//
// # Basics
//
// A worker main is a handful of lines:
//
//	func main() {
//		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//		defer stop()
//		err := sdk.Serve(ctx, sdk.Provider{
//			Kind: "vpc", Version: 1,
//			Reconcile: func(ctx context.Context, r *sdk.Request) (any, error) {
//				var spec struct{ CIDR string `json:"cidr"` }
//				if err := r.DecodeSpec(&spec); err != nil {
//					return nil, err
//				}
//				return map[string]string{"vpc_id": "vpc-" + r.UID}, nil
//			},
//		})
//		if err != nil {
//			log.Fatal(err)
//		}
//	}
//
// Serve reads CONVERGE_ADDR, CONVERGE_TOKEN, CONVERGE_WORKER_NAME and
// CONVERGE_CONCURRENCY (the supervisor in package providers sets them),
// and for a control plane on TCP optionally CONVERGE_TLS_CA,
// CONVERGE_TLS_CERT and CONVERGE_TLS_KEY (PEM files, for mutual TLS),
// registers the (kind, version, reactions) derived from the non-nil
// handlers, and runs each task in its own goroutine, at most Concurrency at
// once, with the task's deadline on its context. It reconnects with backoff
// when the control plane goes away and returns nil when ctx is done.
// CONVERGE_ADDR may list a replicated control plane's replicas
// (host:port,host:port,…): the worker connects to whichever leads, and
// when a follower refuses it (naming the leader in LeaderTrailer) or the
// leader goes away, it moves to the leader or tries the next address.
//
// # Outcomes
//
// A nil error is OK. Wrap an error with Permanent to stop retrying until the
// resource's spec changes, or with Transient to retry with backoff; any
// other error is transient, and so is a panic (recovered and logged). A
// handler that outlives its deadline is answered transient at the deadline
// and its later return is ignored. A status of nil means "no change";
// anything else is JSON-encoded (json.RawMessage and []byte are sent as is).
//
// # Big compositions
//
// Compose returns the whole composition, which the SDK streams to the
// control plane in parts (protocol 2). A composer of hundreds of thousands
// of children should set ComposeStream instead: it hands each child and
// edge to an Emitter, which sends a part whenever one fills and waits while
// it is on its way, so the worker holds about two parts however big the
// composition. The control plane applies it once the last part arrives; an
// error returned midway fails the whole compose. Compose (the function)
// runs either handler into memory, for tests.
//
// # Incremental compositions
//
// A streamed composer whose spec falls into independent parts (a BOM's
// domains) also sets Parts and ComposePart. The control plane sends, with a
// compose, the spec of the composition it holds and the revision (a
// digest of the executable) that composed it; when that is this
// worker's own revision, the SDK composes only the parts whose JSON
// changed, old and new, and answers with the added and changed children
// and the removed ones (Result delta). Any other compose, the first one
// included, is answered in full. A part must compose to the same
// children from the same JSON, whatever the other parts say.
//
// # Write your own provider
//
// Everything a provider needs is in this package: Provider, Request, Serve,
// the outcomes, and the composition types (Child, Edge, ValueFlow, ID: the
// root package's, re-exported). Typed helpers decode for you:
//
//	type Spec struct{ AccountID string `json:"account_id"`; CIDR string `json:"cidr"` }
//	type Status struct{ VPCID string `json:"vpc_id"` }
//
//	sdk.Provider{Kind: "vpc", Version: 1,
//		Reconcile: sdk.Reconciler(func(ctx context.Context, r *sdk.Request, s Spec) (Status, error) {
//			return Status{VPCID: "vpc-" + r.UID}, nil
//		}),
//		Teardown: func(ctx context.Context, r *sdk.Request) error { return nil },
//	}
//
// Spec[S] and Config[C] decode a request's spec and config into a struct;
// Reconciler and Composer wrap a typed handler. A composer emits children
// with NewChild and edges with Flow(consumer, producer, "status_field",
// "spec_field"); a field a flow fills is left out of the child's spec (it
// is "known after apply": the control plane validates the child without
// it and the flowed value when the flow writes it), so no placeholder is
// ever needed.
//
// The status a handler returns replaces the resource's whole status; it is
// not merged with the previous one (a nil status leaves it as it was). Read
// the previous one with Request.DecodeStatus when a handler must keep some
// of it.
//
// Operator verbs are handlers by name in Provider.Verbs; the kind lists
// each among its reactions, and `converge do KIND/NAME VERB --arg k=v`
// runs it on the worker serving the resource's kind version, with the
// arguments in Request.Args. A verb that answers a status replaces the
// resource's status; its outcome is recorded as an event:
//
//	Verbs: map[string]func(ctx context.Context, r *sdk.Request) (any, error){
//		"enable_flow_logs": func(ctx context.Context, r *sdk.Request) (any, error) {
//			return Status{VPCID: r.Name, FlowLogs: r.Args["bucket"]}, nil
//		},
//	},
//
// Observe reads the real object without changing it (exists, its actual
// fields in the spec's shape, converge's mark): the engine calls it on a
// resync of a kind that declares observe, and reports the difference from
// the spec as drift (docs/REFERENCE.md, drift_policy).
// `converge init DIR` writes a repository and a worker to start from, and
// sdktest.RunAcceptance is the acceptance test every provider should pass.
//
// A repository declares its worker in converge.cue:
//
//	workers: [{name: "vpc", command: ["./bin/vpc-worker", "-v"], env: {REGION: "eu-west-1"}, replicas: 2}]
//
// A relative command path is relative to the repository's root (the root
// of its work tree, not the --path sub-directory holding the documents),
// which is also the worker's working directory. converge starts it with
// CONVERGE_ADDR, CONVERGE_TOKEN, CONVERGE_WORKER_NAME ("vpc-0", "vpc-1")
// and CONVERGE_STATE_DIR (the state directory, .converge/ at the root
// unless --state says otherwise: a place for a worker's own files). A
// remote repository's workers are never started (converge runs no command
// a remote names): run yours from local configuration with
// `converge sync --repo URL --start-worker NAME=PATH` (PATH relative to
// the current directory), or connect it yourself to `serve
// --workers-listen`.
//
// A kind's schemas are CUE. In a .cue kind document they are written as
// CUE values (spec: {cidr: string}); in JSON or YAML each is a string of
// CUE source ("spec": "cidr: string, tags?: [string]: string"). A kind may
// instead compose in CUE (compose: an expression over spec): then no worker
// serves its compose at all (docs/ARCHITECTURE.md, "Composition in CUE").
//
// # Caveats
//
// Delivery is at least once: the same Request.Key may arrive twice (after a
// lease expiry or a reconnect), so every handler must be safe to repeat.
// Tasks in flight when the stream breaks are abandoned (their contexts are
// cancelled); the control plane re-dispatches them when their leases expire.
// Serve and Connect return without waiting for a handler that ignores its
// context. Deadlines are absolute times from the control plane, so a worker
// on another machine needs a roughly synchronised clock.
// Package sdktest is the conformance suite every worker should run.
package sdk
