package scheduler

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"sync"
	"time"
	"unsafe"

	"github.com/convergehq/converge"
)

// Packed rows. A node at rest needs none of its row's fields to be
// scheduled, so its decoded Resource is dropped and the row kept as one
// byte slice (pack): at a million rows that is about half the heap, and
// the collector scans one pointer-free object instead of a struct of
// twenty pointers and the strings and JSON behind them. At rest is Ready
// at its generation (settled), or Pending with no task out: a child a
// composition just made, one waiting for its producers or queued for a
// worker slot. A million children of one compose wait so for most of a
// converge, and decoded they were the heap's peak. A teardown waiting for
// its consumers and children (or for a worker slot) is at rest too: a
// cascade of a million marks them all at once. The first access
// through node.res decodes the row again (unpack); node.peek reads it
// without keeping the decoded copy; phase, readiness and status are read
// without decoding. Kind, name and owner are not in the bytes: the node
// holds them already.
//
// A row is packed at a few points where no caller holds its decoded
// Resource: once a batch holding it is durable (batchDropped), after the
// loop considered it (pump), when a composition made it (createChild),
// when a cascade marked it (cascade) and at load. A dirty or queued row
// may be packed: the batch reads it with peek, and consider decodes it.

// packable reports whether n's row may be packed: decoded, at rest
// (Ready at its generation, Pending, or waiting in a teardown), with no
// task out and nothing that only a decoded row keeps (a lease, a drift
// report, a rollout, a subtree, a failed attempt).
func packable(n *node) bool {
	// A teardown reason waiting for the next batch (mReasonDirty) does
	// not keep the row decoded: buildBatch reads it again. A wave of a
	// cascade (333,000 teams' VPCs freed at once) marks a third of the
	// graph between two batches, and decoded they were 190 MB more heap
	// for a second or two, the 1M delete's peak.
	const busy = mRollupDirty | mResync | mStuck | mUnstorable | mDeferred | mRecomposeOwner | mRecomposeOwed
	r := n.r
	return r != nil && n.marks&busy == 0 && ownerLinked(n) && atRest(n)
}

// ownerLinked reports whether n's decoded row names as its owner the
// node n is linked to (or none): a packed row keeps no owner, it is
// n.owner's on decoding.
func ownerLinked(n *node) bool {
	o := n.r.Owner
	return o == "" || n.owner != nil && o == n.owner.id
}

// atRest reports whether n's decoded row and lifecycle state are at rest:
// packable, but for the busy marks and the owner's link.
func atRest(n *node) bool {
	r := n.r
	if n.sub != nil || n.rs.composer || r.Lease != nil || r.Drift != nil || r.Rollout != nil {
		return false
	}
	switch {
	case r.Deleting:
		// A teardown waiting for its consumers and children, or for a
		// worker slot: a million of them wait so in a cascade. One
		// whose attempts failed stays decoded (teardownReason prefers
		// it, and reads its attempts).
		return r.Phase == converge.PhaseDeleting && r.Attempts == 0 &&
			(n.is(stateFree) || n.is(stateBlocked) || n.is(stateParked))
	case r.Phase == converge.PhasePending:
		return n.is(stateFree) || n.is(stateBlocked) || n.is(stateParked)
	case r.Phase == converge.PhaseReady && r.ObservedGeneration == r.Generation:
		return n.is(stateFree) && !n.has(mFlowsDirty)
	}
	return false
}

// pack packs n's row if packable.
func (n *node) pack() {
	if packable(n) {
		n.packNow()
	}
}

// packScratch holds the buffers rows are packed into before their bytes
// are copied out, at their exact size: a row packed straight into a new
// buffer would first take its size estimate (the slack, and a second
// allocation, at every pack of a million rows).
var packScratch = sync.Pool{New: func() any { return new([]byte) }}

// packNow packs n's decoded row.
func (n *node) packNow() {
	scratch := packScratch.Get().(*[]byte)
	*scratch = packResource(n.r, (*scratch)[:0])
	b := append(make([]byte, 0, len(*scratch)), *scratch...) // exactly its size, in each of a million rows
	packScratch.Put(scratch)
	// A string is 8 bytes less in each of a million nodes; the bytes
	// are never written after this.
	n.packed = unsafe.String(unsafe.SliceData(b), len(b))
	switch {
	case n.r.Deleting:
		n.pk = pkDeleting
	case n.r.Phase == converge.PhasePending:
		n.pk = pkPending
	default:
		n.pk = pkReady
	}
	n.r = nil
}

// unpackOrphan decodes the packed row of n, packed as owned by owner
// (loadRow), once it turns out owner is not in the graph: the row keeps
// the owner's ID, and stays decoded.
func (n *node) unpackOrphan(owner converge.ID) {
	n.owner = &node{id: owner} // for unpackInto's owner only
	n.res()
	n.owner = nil
}

// res returns n's row, decoding a packed one (which stays decoded until
// it is packed again).
func (n *node) res() *converge.Resource {
	if n.r == nil {
		n.r = unpackResource(n, n.packed)
		n.packed = ""
	}
	return n.r
}

// peek returns n's row to read, decoding a packed one into a copy that
// n does not keep: a walk over a million packed rows (a view, a site)
// leaves them packed.
func (n *node) peek() *converge.Resource {
	if n.r != nil {
		return n.r
	}
	return unpackResource(n, n.packed)
}

// phase returns n's phase without decoding a packed row (Ready or
// Pending).
func (n *node) phase() converge.Phase {
	if n.r == nil {
		switch n.pk {
		case pkPending:
			return converge.PhasePending
		case pkDeleting:
			return converge.PhaseDeleting
		}
		return converge.PhaseReady
	}
	return n.r.Phase
}

// readyAtGeneration reports whether n is Ready at its generation, without
// decoding a packed row.
func (n *node) readyAtGeneration() bool {
	r := n.r
	if r == nil {
		return n.pk == pkReady
	}
	return r.Phase == converge.PhaseReady && r.ObservedGeneration == r.Generation
}

// readInto copies n's row into r, decoding a packed row into it without
// keeping the decoded copy: a batch's snapshot of a row at rest.
func (n *node) readInto(r *converge.Resource) {
	if n.r != nil {
		*r = *n.r
		return
	}
	unpackInto(n, n.packed, r)
}

// specSize is the size of n's declared spec and spec together, or, for a
// packed row, of the whole packed row (which holds them): what decides a
// big row (bigRow) without decoding.
func (n *node) specSize() int {
	if n.r == nil {
		return len(n.packed)
	}
	return len(n.r.Declared) + len(n.r.Spec)
}

// uid returns n's uid without decoding a packed row (its first field).
func (n *node) uid() string {
	if n.r != nil {
		return n.r.UID
	}
	f := readPacked(n.packed)
	u := f.field(false)
	if f.flags()&packUIDHex != 0 {
		return hex.EncodeToString(u)
	}
	return unsafe.String(unsafe.SliceData(u), len(u)) // the row's bytes, never written
}

// status returns n's status (to read) without decoding a packed row: a
// producer's status flows to its consumers, and a million producers stay
// packed.
func (n *node) status() json.RawMessage {
	if n.r != nil {
		return n.r.Status
	}
	_, st := packedJSON(n.packed)
	return st
}

// spec returns n's spec (to read) without decoding a packed row: a
// loaded consumer's spec is checked against its producers' statuses.
func (n *node) spec() json.RawMessage {
	if n.r != nil {
		return n.r.Spec
	}
	sp, _ := packedJSON(n.packed)
	return sp
}

// packedPhase is what a node keeps of its packed row's phase.
type packedPhase uint8

const (
	pkReady    packedPhase = iota // Ready at its generation
	pkPending                     // Pending
	pkDeleting                    // Deleting: waiting in a teardown
)

// packVersion is the first byte of a packed row.
const packVersion = 1

// Flag bits of a packed row.
const (
	packSpecIsDeclared = 1 << iota // Spec holds Declared's bytes (no flows)
	packOwned                      // the owner is the node's owner
	packDeleting                   // Deleting: the row is in a teardown
	packUIDHex                     // the UID is 32 lowercase hex digits, kept as 16 bytes
)

// The known values of a packed row's phase and origin: one byte each
// (packEnum).
var (
	packPhases  = []converge.Phase{converge.PhaseReady, converge.PhasePending, converge.PhaseFailed, converge.PhaseRunning, converge.PhaseDeleting}
	packOrigins = []converge.Origin{converge.OriginComposed, converge.OriginGit}
)

// Tags of a packed time (the byte before it): 0 is the zero time, 1 to
// 127 the length of its MarshalBinary form (an instant outside UTC or
// the years packNanos covers), packNanos an instant in UTC as varint
// nanoseconds after the field's base (the creation time for the update
// time, else the Unix epoch).
const packNanos = 0x80

// packNanosFirst and packNanosLast bound the years packed as packNanos
// (well inside those UnixNano holds).
const packNanosFirst, packNanosLast = 1700, 2200

// nanosBase is what a packNanos time counts from, in Unix nanoseconds:
// base when it is set and in the years packNanos covers, else the epoch.
// Packing and unpacking read the same base (a field decoded before).
func nanosBase(base time.Time) int64 {
	if base.IsZero() || base.Year() < packNanosFirst || base.Year() > packNanosLast {
		return 0
	}
	return base.UnixNano()
}

// packResource appends r's fields but kind, name and owner to buf.
func packResource(r *converge.Resource, buf []byte) []byte {
	var flags byte
	spec := r.Spec
	if len(spec) == len(r.Declared) && string(spec) == string(r.Declared) && (spec == nil) == (r.Declared == nil) {
		flags |= packSpecIsDeclared
		spec = nil
	}
	if r.Owner != "" {
		flags |= packOwned
	}
	if r.Deleting {
		flags |= packDeleting
	}
	uid := r.UID
	if isHexUID(uid) {
		flags |= packUIDHex
	}
	n := 2 + len(r.UID) + len(r.Declared) + len(spec) + len(r.Status) + len(r.Phase) + len(r.Reason) + len(r.Origin) +
		len(r.ProviderConfigRef) + len(r.LastError) + len(r.Source) + len(r.ComposedBy) + len(r.DriftPolicy) + 16*5 + 4*16
	if cap(buf) < n {
		buf = make([]byte, 0, n)
	}
	buf = append(buf, packVersion, flags)
	str := func(s string) { buf = binary.AppendUvarint(buf, uint64(len(s))); buf = append(buf, s...) }
	raw := func(b json.RawMessage) {
		if b == nil {
			buf = append(buf, 0)
			return
		}
		buf = binary.AppendUvarint(buf, uint64(len(b))+1)
		buf = append(buf, b...)
	}
	tm := func(t, base time.Time) {
		if t.IsZero() {
			buf = append(buf, 0)
			return
		}
		if _, off := t.Zone(); off == 0 && packNanosFirst <= t.Year() && t.Year() <= packNanosLast {
			buf = append(buf, packNanos)
			buf = binary.AppendVarint(buf, t.UnixNano()-nanosBase(base))
			return
		}
		b, err := t.MarshalBinary()
		if err != nil { // a year outside what Time encodes: keep the instant in UTC
			b, _ = t.UTC().MarshalBinary()
		}
		buf = append(buf, byte(len(b)))
		buf = append(buf, b...)
	}
	if flags&packUIDHex != 0 {
		buf = append(buf, 16)
		buf, _ = hex.AppendDecode(buf, []byte(uid)) // isHexUID: it decodes
	} else {
		str(uid)
	}
	buf = binary.AppendVarint(buf, int64(r.KindVersion))
	raw(r.Declared)
	if flags&packSpecIsDeclared == 0 {
		raw(spec)
	}
	raw(r.Status)
	buf = packEnum(buf, r.Phase, packPhases)
	str(r.Reason)
	buf = binary.AppendVarint(buf, r.Generation)
	buf = binary.AppendVarint(buf, r.ObservedGeneration)
	buf = packEnum(buf, r.Origin, packOrigins)
	str(r.ProviderConfigRef)
	buf = binary.AppendVarint(buf, int64(r.Attempts))
	str(r.LastError)
	tm(r.NextAttempt, time.Time{})
	tm(r.DeletedAt, time.Time{})
	str(r.Source)
	tm(r.CreatedAt, time.Time{})
	tm(r.UpdatedAt, r.CreatedAt)
	str(r.ComposedBy)
	str(r.DriftPolicy)
	return buf
}

// packEnum appends s as one of known (its index) or as itself (its
// length after the known values', then its bytes).
func packEnum[S ~string](buf []byte, s S, known []S) []byte {
	for i, k := range known {
		if s == k {
			return append(buf, byte(i))
		}
	}
	buf = binary.AppendUvarint(buf, uint64(len(known)+len(s)))
	return append(buf, s...)
}

// isHexUID reports whether uid is 32 lowercase hex digits (what
// converge.NewUID makes), which pack as their 16 bytes.
func isHexUID(uid string) bool {
	if len(uid) != 32 {
		return false
	}
	for i := 0; i < len(uid); i++ {
		if c := uid[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// unpackResource decodes a row packResource packed for n. Its JSON
// fields share b's bytes (never changed in place); its strings are
// copies. A row that does not decode is a bug: it panics.
func unpackResource(n *node, packed string) *converge.Resource {
	r := new(converge.Resource)
	unpackInto(n, packed, r)
	return r
}

// unpackInto decodes a row packResource packed for n into r, replacing
// all of r.
func unpackInto(n *node, packed string, r *converge.Resource) {
	b := unsafe.Slice(unsafe.StringData(packed), len(packed))
	if len(b) < 2 || b[0] != packVersion {
		panic("scheduler: node " + string(n.id) + ": not a packed row")
	}
	flags := b[1]
	i := 2
	bad := func() { panic("scheduler: node " + string(n.id) + ": packed row damaged") }
	uv := func() uint64 {
		v, k := binary.Uvarint(b[i:])
		if k <= 0 {
			bad()
		}
		i += k
		return v
	}
	iv := func() int64 {
		v, k := binary.Varint(b[i:])
		if k <= 0 {
			bad()
		}
		i += k
		return v
	}
	str := func() []byte {
		l := int(uv())
		if l > len(b)-i {
			bad()
		}
		s := b[i : i+l]
		i += l
		return s
	}
	raw := func() json.RawMessage {
		l := int(uv())
		if l == 0 {
			return nil
		}
		l--
		if l > len(b)-i {
			bad()
		}
		v := b[i : i+l : i+l]
		i += l
		return v
	}
	tm := func(base time.Time) time.Time {
		if i >= len(b) {
			bad()
		}
		l := int(b[i])
		i++
		if l == 0 {
			return time.Time{}
		}
		if l == packNanos {
			return time.Unix(0, nanosBase(base)+iv()).UTC()
		}
		if l > len(b)-i {
			bad()
		}
		var t time.Time
		if t.UnmarshalBinary(b[i:i+l]) != nil {
			bad()
		}
		i += l
		return t
	}
	*r = converge.Resource{Kind: n.rs.ref.Kind, Name: string(n.id)[len(n.rs.ref.Kind)+1:]}
	if u := str(); flags&packUIDHex != 0 {
		r.UID = hex.EncodeToString(u)
	} else {
		r.UID = string(u)
	}
	r.KindVersion = int(iv())
	r.Declared = raw()
	if flags&packSpecIsDeclared != 0 {
		r.Spec = r.Declared
	} else {
		r.Spec = raw()
	}
	r.Status = raw()
	r.Phase = unpackEnum(b, &i, packPhases, bad)
	r.Reason = string(str())
	r.Generation = iv()
	r.ObservedGeneration = iv()
	r.Origin = unpackEnum(b, &i, packOrigins, bad)
	r.ProviderConfigRef = string(str())
	r.Attempts = int(iv())
	r.LastError = string(str())
	r.NextAttempt = tm(time.Time{})
	r.DeletedAt = tm(time.Time{})
	r.Source = string(str())
	r.CreatedAt = tm(time.Time{})
	r.UpdatedAt = tm(r.CreatedAt)
	r.ComposedBy = string(str())
	r.DriftPolicy = string(str())
	if flags&packOwned != 0 {
		r.Owner = n.owner.id
	}
	r.Deleting = flags&packDeleting != 0
	if i != len(b) {
		bad()
	}
}

// unpackEnum reads what packEnum appended at b[*i:], moving *i past it;
// a known value's string is the constant's, not a copy.
func unpackEnum[S ~string](b []byte, i *int, known []S, bad func()) S {
	v, k := binary.Uvarint(b[*i:])
	if k <= 0 {
		bad()
	}
	*i += k
	if v < uint64(len(known)) {
		return known[v]
	}
	l := v - uint64(len(known))
	if l > uint64(len(b)-*i) {
		bad()
	}
	s := S(b[*i : *i+int(l)])
	*i += int(l)
	return s
}

// packedFields walks a packed row's fields in packResource's order
// without decoding them: each read moves past one field, and a field's
// bytes are the row's own. A row that does not parse is a bug: it
// panics.
type packedFields struct {
	b []byte
	i int
}

// readPacked starts a walk over packed's fields, after its version and
// flags (flags returns them).
func readPacked(packed string) packedFields {
	b := unsafe.Slice(unsafe.StringData(packed), len(packed))
	if len(b) < 2 || b[0] != packVersion {
		panic("scheduler: not a packed row")
	}
	return packedFields{b: b, i: 2}
}

func (f *packedFields) flags() byte { return f.b[1] }

func (f *packedFields) damaged() { panic("scheduler: packed row damaged") }

// uvarint reads an unsigned varint.
func (f *packedFields) uvarint() uint64 {
	v, k := binary.Uvarint(f.b[f.i:])
	if k <= 0 {
		f.damaged()
	}
	f.i += k
	return v
}

// skipVarint moves past a signed varint.
func (f *packedFields) skipVarint() {
	_, k := binary.Varint(f.b[f.i:])
	if k <= 0 {
		f.damaged()
	}
	f.i += k
}

// field reads the next length-prefixed field; a raw one (JSON) is nil
// for a length of 0, else its bytes are one fewer.
func (f *packedFields) field(raw bool) []byte {
	l := f.uvarint()
	if raw {
		if l == 0 {
			return nil
		}
		l--
	}
	if l > uint64(len(f.b)-f.i) {
		f.damaged()
	}
	v := f.b[f.i : f.i+int(l) : f.i+int(l)]
	f.i += int(l)
	return v
}

// skipEnum moves past what packEnum appended for one of known values.
func (f *packedFields) skipEnum(known int) {
	if v := f.uvarint(); v >= uint64(known) {
		l := v - uint64(known)
		if l > uint64(len(f.b)-f.i) {
			f.damaged()
		}
		f.i += int(l)
	}
}

// specs reads the UID and kind version, then the declared spec and the
// spec (the declared one again when the flag says so).
func (f *packedFields) specs() (declared, spec json.RawMessage) {
	f.field(false) // UID
	f.skipVarint() // KindVersion
	declared, spec = f.field(true), nil
	if f.flags()&packSpecIsDeclared != 0 {
		return declared, declared
	}
	return declared, f.field(true)
}

// packedJSON returns the spec and status of a packed row, sharing its
// bytes: the fields before them are skipped, not decoded.
func packedJSON(packed string) (spec, status json.RawMessage) {
	f := readPacked(packed)
	_, spec = f.specs()
	return spec, f.field(true)
}

// head returns what a composition is checked and planned against of n
// (ChildHead) without decoding a packed row: a recompose of a million
// children reads a million of them, twice with its dry run, and a decoded
// copy of each was ~400 bytes of garbage.
func (n *node) head() ChildHead {
	if r := n.r; r != nil {
		return headOf(r)
	}
	h := ChildHead{Ref: n.rs.ref, Deleting: n.packed[1]&packDeleting != 0}
	if n.packed[1]&packOwned != 0 && n.owner != nil {
		h.Owner = n.owner.id
	}
	h.Declared, h.ProviderConfigRef = packedHead(n.packed)
	return h
}

// packedHead returns the declared spec and provider config of a packed
// row, sharing its bytes: the fields before them are skipped, not
// decoded.
func packedHead(packed string) (declared json.RawMessage, providerConfigRef string) {
	f := readPacked(packed)
	declared, _ = f.specs()
	f.field(true) // Status
	f.skipEnum(len(packPhases))
	f.field(false) // Reason
	f.skipVarint() // Generation
	f.skipVarint() // ObservedGeneration
	f.skipEnum(len(packOrigins))
	if pcr := f.field(false); len(pcr) > 0 {
		providerConfigRef = unsafe.String(unsafe.SliceData(pcr), len(pcr))
	}
	return declared, providerConfigRef
}
