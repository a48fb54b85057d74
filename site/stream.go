package site

// Build's resource pages, written from one scan of the store in ID order
// instead of a read by ID per page: a page's resources are spread over
// its kind's whole ID range (the shard is a hash of the name), so reading
// them page by page costs a B+tree descent per resource, which was most
// of a million-resource Build's reading. Update, which rewrites a few
// pages, reads by ID (writeShards).

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state"
	"golang.org/x/sync/errgroup"
)

// flushAt is how many bytes of a page streamShards holds before it
// hands them to the page's file: it bounds the memory of the pages being
// written at once (a kind's Shards pages) to about Shards × flushAt.
var flushAt = 32 << 10

// pageStream is one resource page being written by streamShards.
type pageStream struct {
	k    shardKey
	ids  []converge.ID // the page's resources in the model, sorted
	next int           // index in ids of the next section to write
	buf  *bytes.Buffer // bytes not yet handed to the file
	tail []byte        // the layout after the sections
	// off is how many bytes of the page went to the file: written, or
	// found there already; size is the file's size when first opened.
	off, size int64
	opened    bool
	f         *os.File // the page's file while held open between flushes
	// wrote is set once a byte differed from the file's, which is then
	// written from there on; a page never written was unchanged.
	wrote bool
	// missed is set when a resource of ids was not in the scan (deleted
	// since the model's scan): the page is written again by ID.
	missed bool
}

// streamShards writes every resource page of the model: for each kind,
// one paged scan of its resources (Reader.ResourcesAfter, in ID order)
// whose rows are rendered on every core (each worker owns the pages
// whose shard number is its index modulo the workers) and appended to
// their page, which goes to its file flushAt bytes at a time. A page
// whose resources the scan did not all return (a live Build racing a
// commit) is written again by writeShards; a resource the model does not
// hold (created since) is left out, as writeShards leaves it.
func (b *Builder) streamShards(ctx context.Context, w *writer, keep map[string]bool) error {
	m := b.m
	byKind := make(map[string][]shardKey)
	for k := range m.shards {
		byKind[k.kind] = append(byKind[k.kind], k)
	}
	workers := min(runtime.GOMAXPROCS(0), 4)
	// Pages keep their file open between flushes while the process has
	// file descriptors to spare: half its limit, shared by the workers.
	holdOpen := openFileLimit() / 2 / workers
	ws := make([]*writer, workers)
	for i := range ws {
		ws[i] = &writer{dir: b.dir}
	}
	var missed []shardKey
	pool := make([][]*bytes.Buffer, workers) // each worker's spare buffers
	for _, kind := range m.kindNames {
		keys := byKind[kind]
		if len(keys) == 0 {
			continue
		}
		pages := make([]*pageStream, Shards)
		for _, k := range keys {
			pages[k.n] = &pageStream{k: k, ids: m.shards[k]}
		}
		g, gctx := errgroup.WithContext(ctx)
		feeds := make([]chan []state.ResourceRow, workers)
		for i := range feeds {
			feeds[i] = make(chan []state.ResourceRow, 2)
		}
		g.Go(func() error {
			defer func() {
				for _, f := range feeds {
					close(f)
				}
			}()
			var after converge.ID
			for {
				rows, err := b.r.ResourcesAfter(gctx, kind, after, scanPage)
				if err != nil {
					return fmt.Errorf("build site: %w", err)
				}
				for _, f := range feeds {
					select {
					case f <- rows:
					case <-gctx.Done():
						return gctx.Err()
					}
				}
				if len(rows) < scanPage {
					return nil
				}
				after = rows[len(rows)-1].Resource.ID()
			}
		})
		for i := range workers {
			g.Go(func() error {
				sw := &streamWriter{b: b, w: ws[i], pool: pool[i], holdOpen: holdOpen}
				defer func() { pool[i] = sw.pool }()
				for rows := range feeds[i] {
					for _, row := range rows {
						r := row.Resource
						id := r.ID()
						k := shardOf(id)
						if int(k.n)%workers != i {
							continue
						}
						if err := sw.add(pages[k.n], r); err != nil {
							return err
						}
					}
				}
				return nil
			})
		}
		err := g.Wait()
		for _, p := range pages {
			if p != nil && p.f != nil {
				p.f.Close() // the page was not finished: err is set
				p.f = nil
			}
		}
		if err != nil {
			return err
		}
		for _, p := range pages {
			switch {
			case p == nil:
			case p.missed || p.next < len(p.ids):
				missed = append(missed, p.k)
			default:
				keep[p.k.path()] = true
			}
		}
	}
	for _, x := range ws {
		w.add(x)
	}
	if len(missed) > 0 {
		if _, err := b.writeShards(ctx, w, missed, nil, keep); err != nil {
			return err
		}
	}
	return nil
}

// streamWriter is one streamShards worker: it renders sections into
// their pages and writes the pages' files.
type streamWriter struct {
	b    *Builder
	w    *writer
	pool []*bytes.Buffer // spare page buffers
	old  []byte          // scratch for the file's bytes being compared
	// holdOpen is how many page files this worker may keep open between
	// flushes, open how many it does.
	holdOpen, open int
}

// add appends r's section to page p (nil when the model knows no
// resource on r's page), starting the page first and finishing it after
// its last resource.
func (s *streamWriter) add(p *pageStream, r *converge.Resource) error {
	if p == nil || p.missed {
		return nil
	}
	j, ok := slices.BinarySearch(p.ids[p.next:], r.ID())
	switch {
	case !ok:
		return nil // not in the model: created since its scan
	case j > 0:
		// Resources before r were deleted since the model's scan.
		p.missed = true
		s.release(p)
		if err := s.closeFile(p); err != nil {
			return fmt.Errorf("build site: %w", err)
		}
		return nil
	}
	if p.next == 0 {
		if n := len(s.pool); n > 0 {
			p.buf, s.pool = s.pool[n-1], s.pool[:n-1]
		} else {
			// Room for flushAt and a section: most never grow.
			p.buf = bytes.NewBuffer(make([]byte, 0, flushAt+8<<10))
		}
		tail, err := s.b.shardHead(p.buf, p.k, p.ids)
		if err != nil {
			return fmt.Errorf("build site: %w", err)
		}
		p.tail = bytes.Clone(tail)
	}
	s.b.renderSection(sw{p.buf}, r)
	p.next++
	last := p.next == len(p.ids)
	if last {
		p.buf.Write(p.tail)
	}
	if last || p.buf.Len() >= flushAt {
		if err := s.flush(p, last); err != nil {
			return fmt.Errorf("build site: write %s: %w", p.k.path(), err)
		}
	}
	if last {
		s.release(p)
	}
	return nil
}

// closeFile closes p's file if it is held open.
func (s *streamWriter) closeFile(p *pageStream) error {
	if p.f == nil {
		return nil
	}
	err := p.f.Close()
	p.f = nil
	s.open--
	return err
}

// release returns p's buffer to the pool.
func (s *streamWriter) release(p *pageStream) {
	if p.buf != nil {
		p.buf.Reset()
		s.pool = append(s.pool, p.buf)
		p.buf, p.tail = nil, nil
	}
}

// flush hands p's pending bytes to its file, which stays open until the
// page's last flush while the worker holds fewer than holdOpen files,
// and is otherwise opened for each flush (a kind's pages are written at
// once, which may be more than a process can hold open). Bytes the file
// already holds at their place are not written again, so a Build over an
// identical site writes nothing; once one differs, the rest is written.
// The last flush cuts what an earlier page left beyond the end, and
// counts the page.
func (s *streamWriter) flush(p *pageStream, last bool) (err error) {
	rel := p.k.path()
	f := p.f
	if f == nil {
		full := filepath.Join(s.w.dir, filepath.FromSlash(rel))
		if !p.opened {
			if err := s.w.mkdirFor(full); err != nil {
				return err
			}
		}
		if f, err = os.OpenFile(full, os.O_RDWR|os.O_CREATE, 0o644); err != nil {
			return err
		}
		if !last && s.open < s.holdOpen {
			p.f = f
			s.open++
		} else {
			defer func() {
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}()
		}
	} else if last {
		defer func() {
			if cerr := s.closeFile(p); err == nil {
				err = cerr
			}
		}()
	}
	if !p.opened {
		p.opened = true
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		p.size = fi.Size()
		p.wrote = p.size == 0
	}
	data := p.buf.Bytes()
	if !p.wrote {
		// Compare with the file's bytes at off, as far as it has them.
		n := int(min(int64(len(data)), p.size-p.off))
		s.old = slices.Grow(s.old[:0], n)[:n]
		if _, err := f.ReadAt(s.old, p.off); err != nil && err != io.EOF {
			return err
		}
		p.wrote = n < len(data) || !bytes.Equal(s.old, data)
	}
	if p.wrote {
		if _, err := f.WriteAt(data, p.off); err != nil {
			return err
		}
	}
	p.off += int64(len(data))
	p.buf.Reset()
	if !last {
		return nil
	}
	if p.size > p.off {
		if err := f.Truncate(p.off); err != nil {
			return err
		}
		p.wrote = true
	}
	s.w.count(rel, p.off, p.wrote)
	return nil
}
