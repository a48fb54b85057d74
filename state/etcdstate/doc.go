// Package etcdstate is converge's state in etcd: the same facts as the
// bbolt store (package state), under one key prefix of an etcd cluster,
// for a control plane that outgrew one machine. It is the only package
// that imports go.etcd.io/etcd/client/v3 (state/etcdtest, for tests, the
// only one that imports the etcd server).
//
// Read first: Store (Open, Commit, Load) and Options. Store implements
// state.Backend, so the scheduler, the commands and the site use it as
// they use the bbolt store, and it passes the same conformance suite
// (statetest.Run). Its rules are the bbolt store's, written once
// (state/internal/rules: Commit, every read, Check) over a small
// key-value interface this package implements over the prefix (kv.go):
// a read is one etcd revision, a write an overlay of its own changes
// committed in one transaction or through the batch journal (journal.go),
// a value too big for one request in parts (parts.go). So both stores
// refuse and store the same things; what differs (the owner index's
// layout, the size of an event chunk) is rules.Options.
//
// # Keys
//
// Under PREFIX/ (Options.Prefix), one sub-space per bbolt bucket:
//
//	r/ID                       the resource's row (owner, consumed edges, JSON), as in bbolt
//	o/OWNER\x00CHILD           the owner index, one key per child; roots under the empty owner
//	p/PRODUCER\x00CONSUMER     the reverse edge index
//	k/KIND\x00VERSION          JSON kind (version 8 bytes big-endian)
//	c/NAME, b/NAME, d/KEY      JSON provider configs, bindings, reactor deliveries
//	v/HASH                     JSON revision records
//	e/SEQ                      one chunk of events per batch (first Seq, 8 bytes big-endian)
//	m/format, m/applied, m/source, m/events   meta
//	s/ID                       a big declared spec kept apart from its row (rules.ApartSize)
//	j/p/N, j/commit            the batch journal (below)
//	x/KEY\x00ID                a part of a value too big for one request (below)
//	lock                       the writer's lock, under its lease
//	election/LEASE             a replica's candidacy (the oldest leads), its Advert as JSON
//	sync                       a follower's request that the leader fetch now
//	replica/NAME               a replica that ever campaigned here (operators then go through the leader)
//	intent/ID                  an operator's admin API call for the leader, under the operator's lease
//	intent/ID/claim            the leader's claim of it (once, fenced on its election key)
//	intent/ID/reply            the leader's answer (status, warning, JSON body, its name)
//
// The owner index has one key per child rather than bbolt's chunks:
// etcd counts a prefix's keys without reading them (ChildCount), and a
// batch's writes are counted in operations, not pages.
//
// # Writers and readers
//
// One writer per prefix: Open takes the lock key under a lease it keeps
// alive, waiting Options.LockTimeout before returning state.ErrLocked.
// Every write transaction is conditioned on the lock key still having
// the create revision this writer got (and on Options.Fence's
// comparisons), so a writer that was paused past its lease and resumed
// has its writes refused with ErrFenced instead of overwriting its
// successor's. A store opened with Options.ReadOnly takes no lock and
// reads beside the writer. Every read (Load, Resources, Check, …) reads
// one etcd revision: one consistent snapshot, as a bbolt read
// transaction is.
//
// # Replicas and the leader
//
// Replicas of a control plane (serve --replica) share one prefix. Each
// is a Replica; Campaign blocks until it wins the prefix's election
// (go.etcd.io/etcd/client/v3/concurrency, a session whose lease lives
// the replica's TTL) and returns a Term. Term.Open opens the store as
// the term's writer: the lock is taken under the session's lease (the
// lock and the leadership expire together), every write is also
// conditioned on the election key's create revision, and writes stop at
// once when the session is lost (Term.Done). Leader reads the leader's
// Advert without campaigning; RequestSync and Term.SyncRequests carry
// a follower's webhook to the leader; Store.Watch lets a follower's
// reader follow the writer.
//
// # Operators' intents
//
// An operator's changing command on a machine without a replica reaches
// the leader through the prefix (intent.go): Operator.Submit writes an
// Intent (an admin API call) under a lease of its own and waits for its
// reply; the leader's Term.Intents lists and watches them, Term.Claim
// takes one at most once (a transaction fenced on the election key, no
// claim yet), Term.Answer writes the reply. Whoever may write the prefix
// is trusted with the state: etcd's TLS and auth authenticate operators.
//
// # Big batches
//
// etcd refuses a transaction of more than --max-txn-ops operations (128
// by default) or --max-request-bytes (1.5 MiB), and the scheduler's
// batches hold up to 6,144 resources. A batch that fits one transaction
// is one transaction. A bigger one is made atomic with a journal, not
// split: the scheduler's batches carry invariants across their rows (a
// transition and its reactor delivery, a row and its owner, the last
// child's delete and its owner's recompose) that an arbitrary cut
// between two halves would break, so a crash between chunks must never
// show a prefix of a batch. The writer
//
//  1. writes the batch's operations, encoded, as journal parts j/p/N
//     (each one transaction under the byte limit);
//  2. writes j/commit: the commit point. Before it the batch does not
//     exist (the next writer deletes stray parts); after it the batch
//     is durable and will be applied whole;
//  3. applies the operations in transactions of at most MaxTxnOps, up to
//     128 of them and 16 MiB in flight at once (they touch distinct keys, and no
//     reader looks at them yet; etcd batches them into few raft rounds);
//  4. deletes the journal.
//
// Every operation is an absolute put or delete, so replaying the
// journal after a crash in step 3 (the next writer's Open, or this
// store's next write after a failed step 3) is idempotent. Readers never
// see step 3 half done: while j/commit exists they read the revision
// just before it was written, which is the whole state before the batch
// (steps 1 and 2 touch only journal keys). A big batch costs its bytes
// twice (journal and data) plus one round trip per 128 operations;
// small batches cost neither. The alternative of raising the servers'
// --max-txn-ops is not ours to make on a platform team's cluster; set
// Options.MaxTxnOps to match a cluster that has raised it.
//
// # Big values
//
// etcd refuses a request over --max-request-bytes (1.5 MiB), and a
// root whose spec is a 333,000-team BOM is a row of ~15 MB. A value
// whose key and bytes exceed Options.MaxTxnBytes less 1 KiB is stored
// in parts (parts.go), below the rules, which never see one: the key
// holds a header (a magic prefix, the value's SHA-256 and size, and its
// parts' ids in order) and each part lives under x/KEY\x00ID, ID the
// hex of the first 8 bytes of the part's SHA-256. Parts are cut where
// a rolling hash of the content says (64 KiB to 512 KiB, ~128 KiB on
// average with the default MaxTxnBytes), so an edit moves only the cut
// points near it: the scheduler rewrites a big root for its rollup every
// few seconds, and each rewrite stores the header and a part or two,
// not 15 MB (fixed 512 KiB parts named by the whole value's hash cost
// 10–18 s commits at 1M, twice the journal's bytes each). The writer
// turns each put into the header and the parts not stored already and
// deletes the stored parts the new header does not list, all in the
// same write: atomic in one transaction or through the journal, so at
// any revision a key's parts are exactly its header's. A reader reads
// them at the revision it read the header at and checks the hash. Check
// adds what the rules cannot see: a part no header lists. A small value
// that starts with the magic prefix is stored in parts too, so a stored
// value that starts with it is always a header. Keeping this below the
// KV, rather than in the rules, keeps the rules identical on both
// stores.
//
// # Compaction
//
// etcd keeps every revision of every key until it is compacted, and a
// default etcd 3.4 never compacts: a 100,000-resource converge added
// 226 MB to each member, and a cluster at its quota (2 GiB by default)
// refuses every write ("mvcc: database space exceeded") until someone
// compacts, defragments and disarms the alarm. So the writer compacts
// (compact.go): it samples each write's revision with its time and,
// once a sample is Options.CompactRetention old (1 minute by default),
// at most every quarter of that, compacts etcd to it, off the commit
// path. A read started before lasts a minute before its revision can
// go; one that outlives it reads again (view retries ErrCompacted).
// Nothing is compacted while a batch journal is committed but not
// applied (readers read the revision before its marker). etcd's
// compaction is the cluster's, every prefix's: a cluster that compacts
// itself or shares its history with others sets CompactRetention below
// 0 (serve --etcd-compact-retention 0). Compaction frees pages inside
// each member's database, which etcd reuses; it does not shrink the
// file: that is `etcdctl defrag`, the operator's (it blocks the member
// it runs on; docs/ARCHITECTURE.md, "What etcd needs from its
// operator"), or the writer's with Options.DefragSlack (defrag.go).
//
// # Lease and commit bounds
//
// A leader's lease is renewed by the etcd client in the background,
// over the replica's own connection (Replica.sessCli): on the store's
// connection a big batch's transactions in flight queue the renewals
// behind megabytes. A journal keeps at most 16 MiB of transactions in
// flight (writeInFlight), and fewer when etcd is slow (pace.go): etcd
// makes a leader's lease renewal wait until it has applied what is
// queued, so the window halves when a transaction's round trip passes
// half a second and grows back by one after each fast one. None of it
// keeps a lease whose member or leader is starved of CPU for its TTL
// (docs/BENCHMARKS.md, "etcd at a million").
//
// # Caveats
//
// A reader during step 3 reads a revision that etcd's compaction may
// remove; the read then starts again (a few times). If a writer died in
// step 3 and none has opened the store since, readers keep reading the
// state before that batch, and fail once etcd compacts its revision: a
// writer's Open (sync, serve) finishes the batch. A writer whose step
// 2 fails ambiguously (a timeout) returns the error, though the batch
// may be committed; the scheduler's retry then applies it again, which
// is harmless but for its events, which are stored twice.
package etcdstate
