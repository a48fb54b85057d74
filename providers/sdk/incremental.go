package sdk

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/convergehq/converge"
)

// Part is one independent piece of a composer's spec (Provider.Parts):
// Key names it stably from one spec to the next (a domain's name, say),
// Spec is its raw JSON, compared byte for byte, and Index is its
// position among the spec's parts, for error messages (not compared: a
// part that moves is the same part).
type Part struct {
	Key   string
	Spec  json.RawMessage
	Index int
}

// revision identifies this worker's code. The same spec composed by the
// same executable yields the same composition, which is what lets a
// compose be answered as a delta against a base spec (see composeParts).
// It is the build ID the go command wrote into the executable, whose
// last part digests the executable's content (read in microseconds),
// or, for an executable without one, a digest of the whole file (a
// 50 MB converge took 30-60 ms to hash, on the first compose of every
// worker started). Empty when the executable cannot be read: every
// compose is then answered in full.
var revision = sync.OnceValue(func() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if id := goBuildID(exe); id != "" {
		return "go-" + id
	}
	f, err := os.Open(exe)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return "exe-" + hex.EncodeToString(h.Sum(nil)[:12])
})

// goBuildID returns the build ID in the ELF executable at path when the
// go command wrote it (four parts, actionID/contentID of the main
// package and of the link, the last a digest of the linked file), else
// "": a build ID set by hand (-ldflags=-buildid=…) names no content.
func goBuildID(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	s := f.Section(".note.go.buildid")
	if s == nil {
		return ""
	}
	b, err := s.Data()
	if err != nil || len(b) < 12 {
		return ""
	}
	// One ELF note: name size, description size, type (4: the Go build
	// ID), the name "Go" padded to 4 bytes, then the description.
	namesz, descsz, typ := f.ByteOrder.Uint32(b), f.ByteOrder.Uint32(b[4:]), f.ByteOrder.Uint32(b[8:])
	off := 12 + (uint64(namesz)+3)&^3
	if typ != 4 || namesz != 4 || string(b[12:15]) != "Go\x00" || off+uint64(descsz) > uint64(len(b)) {
		return ""
	}
	id := string(b[off : off+uint64(descsz)])
	parts := strings.Split(id, "/")
	if len(parts) != 4 || slices.Contains(parts, "") {
		return ""
	}
	return id
}

// composeParts answers r, whose base spec is of this worker's revision,
// with a delta: it composes only the parts that differ between
// r.BaseSpec and r.Spec, old and new, and sends the difference to out
// (added and changed children with every edge they consume, and the
// removed children's IDs). It reports false, having sent nothing, when
// the base cannot be cut into parts: the caller then answers in full.
func (p *Provider) composeParts(ctx context.Context, r *Request, out *Emitter) (bool, error) {
	parts, err := p.Parts(r.Spec)
	if err != nil {
		return false, err
	}
	if err := uniqueKeys(parts); err != nil {
		return false, Permanent(fmt.Errorf("%s/%s: %w", r.Kind, r.Name, err))
	}
	base, err := p.Parts(r.BaseSpec)
	if err != nil || uniqueKeys(base) != nil {
		return false, nil
	}
	return true, p.composeDelta(ctx, r, base, parts, out)
}

func uniqueKeys(parts []Part) error {
	seen := make(map[string]bool, len(parts))
	for _, part := range parts {
		if seen[part.Key] {
			return fmt.Errorf("two parts of the spec have the key %q", part.Key)
		}
		seen[part.Key] = true
	}
	return nil
}

// composeDelta composes the parts that changed from base to parts, both
// versions, and sends what differs.
func (p *Provider) composeDelta(ctx context.Context, r *Request, base, parts []Part, out *Emitter) error {
	old := make(map[string]json.RawMessage, len(base))
	for _, b := range base {
		old[b.Key] = b.Spec
	}
	before := &Emitter{ctx: ctx, all: &Composition{}}
	after := &Emitter{ctx: ctx, all: &Composition{}}
	keep := make(map[string]bool, len(parts))
	for _, part := range parts {
		if o, ok := old[part.Key]; ok && bytes.Equal(o, part.Spec) {
			keep[part.Key] = true
			continue
		}
		if err := p.composePartChecked(ctx, r, part, after); err != nil {
			return err
		}
	}
	bctx := *r
	bctx.Spec = r.BaseSpec
	for _, b := range base {
		if keep[b.Key] {
			continue
		}
		if err := p.composePartChecked(ctx, &bctx, b, before); err != nil {
			// The base composed once; failing now is this code's
			// problem, not the spec's: say so and let it retry.
			return Transient(fmt.Errorf("compose the base spec's part %q again: %w", b.Key, err))
		}
	}
	oldChild := make(map[converge.ID]*converge.Child, len(before.all.Children))
	for i := range before.all.Children {
		c := &before.all.Children[i]
		oldChild[converge.NewID(c.Kind, c.Name)] = c
	}
	oldEdges := converge.EdgesByConsumer(before.all.Edges)
	newEdges := converge.EdgesByConsumer(after.all.Edges)
	emitted := make(map[converge.ID]bool, len(after.all.Children))
	for i := range after.all.Children {
		c := after.all.Children[i]
		id := converge.NewID(c.Kind, c.Name)
		emitted[id] = true
		o := oldChild[id]
		if o != nil && o.KindVersion == c.KindVersion && bytes.Equal(o.Spec, c.Spec) &&
			o.ProviderConfigRef == c.ProviderConfigRef && converge.SameEdges(oldEdges[id], newEdges[id]) {
			continue
		}
		c.Added = o == nil
		if err := out.Child(c); err != nil {
			return err
		}
		for _, e := range newEdges[id] {
			if err := out.Edge(e); err != nil {
				return err
			}
		}
	}
	for i := range before.all.Children {
		c := &before.all.Children[i]
		if id := converge.NewID(c.Kind, c.Name); !emitted[id] {
			if err := out.remove(id); err != nil {
				return err
			}
		}
	}
	return nil
}

// composePartChecked composes one part into the collecting emitter c
// and checks the part's contract: every edge's consumer is a child of
// the same part.
func (p *Provider) composePartChecked(ctx context.Context, r *Request, part Part, c *Emitter) error {
	from, edges := len(c.all.Children), len(c.all.Edges)
	if err := p.ComposePart(ctx, r, part, c); err != nil {
		return err
	}
	mine := make(map[converge.ID]bool, len(c.all.Children)-from)
	for _, ch := range c.all.Children[from:] {
		mine[converge.NewID(ch.Kind, ch.Name)] = true
	}
	for _, e := range c.all.Edges[edges:] {
		if !mine[e.Consumer] {
			return Permanent(fmt.Errorf("%s/%s: part %q emits edge %s -> %s, whose consumer is not a child of that part", r.Kind, r.Name, part.Key, e.Consumer, e.Producer))
		}
	}
	return nil
}

var errNoDelta = errors.New("the base spec cannot be cut into parts")

// ComposeDelta answers r, whose BaseSpec is set, as a delta the way a
// worker does (whatever r.BaseRevision says) and returns the children
// and removed names it would send: for tests and benchmarks of a
// composer's Parts, not for workers.
func ComposeDelta(ctx context.Context, p *Provider, r *Request) (*Composition, []converge.ID, error) {
	if p.Parts == nil || p.ComposePart == nil {
		return nil, nil, Permanent(fmt.Errorf("%s/v%d: no Parts and ComposePart", p.Kind, p.Version))
	}
	out := &Emitter{ctx: ctx, all: &Composition{}}
	delta, err := p.composeParts(ctx, r, out)
	if err == nil && !delta {
		err = Permanent(errNoDelta)
	}
	if err != nil {
		return nil, nil, err
	}
	return out.all, out.removed, nil
}
