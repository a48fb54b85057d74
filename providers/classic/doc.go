// Package classic is the example provider set of examples/classic: the
// classicbom composer and the fake cloud leaves it fans out into. It
// imports only the standard library, providers/sdk and the root converge
// package — exactly what an external team ships.
//
// Read first: [Providers], which lists every (kind, kind_version) served,
// and [Options], the chaos knobs the leaves consult.
//
// # Kinds
//
//   - classicbom v1: the composer. Per functional domain with networking it
//     emits a tgw and a tgw-host account (edge tgw → account); per service
//     team an account, a vpc (edge vpc → account flowing account_id) and,
//     when its domain has networking, a route (edges route → vpc and
//     route → tgw flowing vpc_id and tgw_id). See [ComposeBOM].
//   - account v1: status.account_id, 12 digits derived from team_name.
//   - vpc v1 and v2: status.vpc_id; v2 requires region and echoes it into
//     status.region. Verb enable_flow_logs records status.flow_logs using
//     the provider config's flow_logs_bucket.
//   - tgw v1: status.tgw_id. route v1: status.route_id.
//   - statussink v1: a reactor; it writes the subject's rolled-up status
//     into a local "object store" directory, once per delivery key.
//
// # Caveats
//
// Every fake id is a pure function of the spec (and name), so a reaction
// run twice yields the same status: all reactions are idempotent.
// The composer leaves out the fields value flows fill (a vpc's
// account_id, a route's vpc_id and tgw_id): they are "known after apply".
// The control plane validates a composed child without them, and the
// flowed values against the schema when the flow writes them, so a leaf
// never sees a spec without them.
//
// Fault injection ([Options.FaultRate]) hits only leaf reconciles, never
// the composer and never a teardown, unless [Options.TeardownFail] matches.
package classic
