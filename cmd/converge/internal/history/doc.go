// Package history checks what the clients of a replicated converge saw
// during a run with faults injected against the promises converge makes
// (docs/ARCHITECTURE.md, "Replicas and the leader", "Crash safety",
// "Reactors are an outbox"), as etcd's robustness tests check a recorded
// history against a model of etcd. TestReplicasHistory (cmd/converge)
// records the run; this package only judges it, so each rule can be fed
// hand-made histories that break it (history_test.go).
//
// Read first: Effect and EffectModel, then Check. The four promises:
//
//   - Effects (EffectModel, checked for linearizability with porcupine,
//     one partition per resource UID): the effects a worker performs for
//     one resource are those of one sequence of generations. A task's
//     idempotency key is uid/generation/reaction (scheduler/dispatch.go),
//     so a retry (at-least-once: a takeover re-dispatches every lease,
//     which are never committed) repeats the same key with the same spec
//     and is one effect. Illegal: a second, different apply of one
//     generation (another key or another spec), an apply of a generation
//     after a newer one's effect returned, an apply of a generation after
//     its teardown.
//   - Verdicts (VerdictModel, porcupine, one partition per revision): a
//     revision's converge/sync verdict, read by polling clients, goes
//     absent → pending → final; once a reader saw it final (success,
//     failure, error: what sync.FinalVerdict calls final) every later read
//     returns the same state and description.
//   - Deliveries (CheckDeliveries, a plain check): a reactor delivery's
//     key is binding/uid/generation/transition and names its subject; it
//     is dispatched only once its outbox row (d/KEY) is durable; the
//     deliveries of one key all carry one subject; a key completed twice
//     is an at-least-once retry only if a fault (a term change, a killed
//     worker) came between the first completion and the repeat's call.
//   - Fencing (CheckFencing, a plain check): every successful write of
//     the store's data is fenced on both the writer's lock and its
//     election key (their create revisions are in the transaction's
//     comparisons), a term's writes come from one replica, and once a
//     term has written, no write of an older term lands after it. Every
//     data revision a watcher of the prefix saw is one of the recorded
//     writes, or one whose writer died before it could record it.
//
// Each check returns Violations naming what broke and where; Check also
// writes porcupine's visualization of an illegal partition (open it in a
// browser) and names the file.
package history
