package cue

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing/fstest"
	"time"

	"github.com/convergehq/converge"
)

// The budget used when none is set (Budget zero values).
const (
	// DefaultDocumentTimeout bounds the time one file's documents may
	// take to evaluate: the 333,000-team classic BOM, one file, takes
	// ~11 s.
	DefaultDocumentTimeout = time.Minute
	// DefaultMemory bounds the evaluating process's memory.
	DefaultMemory = 4 << 30
	// DefaultOutput bounds the JSON the documents evaluate to, all
	// together (the 333,000-team BOM is 15 MB).
	DefaultOutput = 256 << 20
)

// RuleBudget is the rule of a finding that says a file's documents went
// over the Budget: they took too long or too much memory to evaluate, or
// evaluate to too much JSON.
const RuleBudget = "LOAD_BUDGET"

// Budget bounds what evaluating one repository's documents may take. The
// repository is untrusted (any committer, a pull request in CI): a small
// CUE file can ask for an exponential evaluation, and CUE cannot be
// interrupted, so the budget is enforced on a child process (Sandbox).
type Budget struct {
	// Document bounds the time one file's documents take to evaluate;
	// 0 means DefaultDocumentTimeout.
	Document time.Duration
	// Memory bounds the evaluating process's memory in bytes; 0 means
	// DefaultMemory.
	Memory int64
	// Output bounds the JSON the documents evaluate to, all together, in
	// bytes; 0 means DefaultOutput.
	Output int64
}

func (b Budget) withDefaults() Budget {
	if b.Document <= 0 {
		b.Document = DefaultDocumentTimeout
	}
	if b.Memory <= 0 {
		b.Memory = DefaultMemory
	}
	if b.Output <= 0 {
		b.Output = DefaultOutput
	}
	return b
}

// Sandbox loads documents as Load does, but evaluates them in a child
// process under a Budget: a file that goes over it is a finding
// (RuleBudget) naming it, the child is killed, and the caller's process
// has spent neither the time nor the memory.
//
// The parent reads the files (Load's walk: the size limit, symlinks and
// path checks apply there), sends them to the child, and gets back the
// Result; it compiles the kinds' schemas itself (Compile), since compiled
// CUE values do not cross a process boundary.
type Sandbox struct {
	// Command returns the child process, not started: one that calls
	// ServeSandbox with its standard input and output (`converge
	// internal-eval`). It is killed when ctx is done.
	Command func(ctx context.Context) *exec.Cmd
	Budget  Budget
}

// sandboxRequest is what the parent sends the child (gob on stdin).
type sandboxRequest struct {
	Opts   Options
	Budget Budget
	Files  []sandboxFile
}

type sandboxFile struct {
	Path string // relative to the loaded directory
	Data []byte
}

// sandboxMsg is one message of the child (gob on stdout): a file or
// document it starts evaluating, or its Result, or why it gave up.
type sandboxMsg struct {
	File         string
	Line, Column int
	Result       *sandboxResult
	OverMemory   int64  // the memory the child had when it gave up
	OverOutput   int64  // the JSON size it refused to send
	OverFindings int64  // the JSON and findings it refused to send
	Err          string // any other failure
}

type sandboxResult struct {
	Desired         converge.Desired
	Findings        []converge.Finding
	Files, Document int
}

// Load reads every document under dir of fsys as Load does, evaluating
// them in a child process under s.Budget. The error is for an fsys that
// cannot be read, a child that cannot run, or ctx ending (the child is
// then killed); going over the budget is a finding.
func (s *Sandbox) Load(ctx context.Context, fsys fs.FS, dir string, opts Options) (*Result, error) {
	b := s.Budget.withDefaults()
	req := sandboxRequest{Opts: opts, Budget: b}
	walked, err := collect(fsys, dir, opts, func(rel string, data []byte) {
		req.Files = append(req.Files, sandboxFile{Path: rel, Data: data})
	})
	if err != nil {
		return nil, err
	}
	var in bytes.Buffer
	if err := gob.NewEncoder(&in).Encode(&req); err != nil {
		return nil, fmt.Errorf("encode documents: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := s.Command(ctx)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &limitedWriter{w: &stderr, n: 64 << 10}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("evaluate documents: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("evaluate documents: start %s: %w", cmd.Path, err)
	}
	// wait reaps the child once, on every way out (killed first, unless
	// it already ended).
	wait := sync.OnceValue(cmd.Wait)
	defer func() {
		cancel()
		_ = wait()
	}()
	// The child reports each file and document before it evaluates it;
	// each report restarts the clock.
	msgs := make(chan sandboxMsg)
	readErr := make(chan error, 1)
	// Findings and the settings travel beside the JSON: allow a little
	// over the output budget before refusing to read on.
	limited := &io.LimitedReader{R: out, N: b.Output + b.Output/4 + 1<<20}
	go func() {
		dec := gob.NewDecoder(limited)
		for {
			var m sandboxMsg
			if err := dec.Decode(&m); err != nil {
				readErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				readErr <- ctx.Err()
				return
			}
		}
	}()
	var (
		at     = converge.Finding{Rule: RuleBudget} // where the child is
		timer  = time.NewTimer(b.Document)
		result *sandboxResult
		over   *converge.Finding
	)
	defer timer.Stop()
	overAt := func(format string, args ...any) *converge.Finding {
		f := at
		f.Message = fmt.Sprintf(format, args...)
		return &f
	}
wait:
	for {
		select {
		case m := <-msgs:
			switch {
			case m.Result != nil:
				result = m.Result
				break wait
			case m.OverMemory > 0:
				over = overAt("evaluating this file took over %s of memory (budget %s, --load-memory); stopped", mib(m.OverMemory), mib(b.Memory))
				break wait
			case m.OverOutput > 0:
				at.File, at.Line, at.Column = m.File, m.Line, m.Column
				over = overAt("the documents evaluate to %s of JSON, over the budget of %s (--load-output); this one is the largest", mib(m.OverOutput), mib(b.Output))
				break wait
			case m.OverFindings > 0:
				at.File, at.Line, at.Column = m.File, m.Line, m.Column
				over = overAt("the documents evaluate to %s of JSON and findings, over the budget of %s (--load-output); this file has the most", mib(m.OverFindings), mib(b.Output))
				break wait
			case m.Err != "":
				return nil, fmt.Errorf("evaluate documents: %s", m.Err)
			}
			at.File, at.Line, at.Column = m.File, m.Line, m.Column
			timer.Reset(b.Document)
		case <-timer.C:
			over = overAt("evaluating this file took over %v (--load-document-timeout); stopped", b.Document)
			break wait
		case err := <-readErr:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// A child that wrote too much is blocked writing more:
			// kill it before waiting.
			cancel()
			werr := wait()
			switch {
			case limited.N <= 0:
				over = overAt("the documents evaluate to more than %s (--load-output); stopped", mib(b.Output))
				break wait
			case strings.Contains(stderr.String(), "out of memory"):
				over = overAt("evaluating this file ran out of memory (budget %s, --load-memory); stopped", mib(b.Memory))
				break wait
			}
			return nil, fmt.Errorf("evaluate documents (at %s): %v (%v): %s", at.File, err, werr, strings.TrimSpace(stderr.String()))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	cancel() // kills the child if it is still running
	_ = wait()
	res := &Result{Findings: walked}
	if over != nil {
		res.Findings = append(res.Findings, *over)
		sortFindings(res.Findings)
		return res, nil
	}
	res.Desired, res.Files, res.Documents = result.Desired, result.Files, result.Document
	for _, x := range res.Desired.Resources {
		x.Spec = x.Declared // sent once
	}
	res.Findings = append(res.Findings, result.Findings...)
	sortFindings(res.Findings)
	if len(res.Desired.Kinds) > 0 {
		sch, err := Compile(res.Desired.Kinds)
		if err != nil {
			return nil, fmt.Errorf("compile the schemas the child compiled: %w", err)
		}
		res.Schemas = sch
	}
	return res, nil
}

// collect walks dir of fsys as Load does and hands over every document
// file's contents; it returns the findings of the walk itself (symlinks,
// files too large, unreadable ones).
func collect(fsys fs.FS, dir string, opts Options, file func(rel string, data []byte)) ([]converge.Finding, error) {
	dir, entries, opts, err := openWalk(fsys, dir, opts)
	if err != nil {
		return nil, err
	}
	l := &loader{fsys: fsys, dir: dir, opts: opts, res: &Result{}, collect: file}
	l.walk(dir, entries)
	return l.res.Findings, nil
}

// ServeSandbox is the child's side of Sandbox: it reads the documents
// from r, evaluates them, and writes what it is doing and then the Result
// to w. It bounds its own memory (a soft limit, a watchdog that exits
// with status 3 over the budget, and RLIMIT_DATA as a backstop) and
// returns once the answer is written; the caller then exits.
func ServeSandbox(r io.Reader, w io.Writer) error {
	var req sandboxRequest
	if err := gob.NewDecoder(r).Decode(&req); err != nil {
		return fmt.Errorf("read documents: %w", err)
	}
	b := req.Budget.withDefaults()
	enc := &lockedEncoder{enc: gob.NewEncoder(w)}
	var at atomic.Pointer[sandboxMsg]
	at.Store(&sandboxMsg{})
	limitMemory(b.Memory)
	go watchMemory(b.Memory, func(used int64) {
		m := *at.Load()
		m.OverMemory = used
		_ = enc.Encode(&m)
		os.Exit(3)
	})
	fsys := fstest.MapFS{}
	for _, f := range req.Files {
		fsys[f.Path] = &fstest.MapFile{Data: f.Data}
	}
	req.Files = nil
	res, err := load(fsys, ".", req.Opts, func(file string, line, col int) {
		m := &sandboxMsg{File: file, Line: line, Column: col}
		at.Store(m)
		_ = enc.Encode(m)
	})
	if err != nil {
		return enc.Encode(&sandboxMsg{Err: err.Error()})
	}
	var size int64
	var largest *converge.Resource
	for _, x := range res.Desired.Resources {
		size += int64(len(x.Declared))
		if largest == nil || len(x.Declared) > len(largest.Declared) {
			largest = x
		}
	}
	if size > b.Output {
		m := sandboxMsg{OverOutput: size, Column: 1}
		m.File, m.Line = splitSource(largest.Source)
		return enc.Encode(&m)
	}
	// Findings travel too: blame the file with the most of them.
	var fsize int64
	perFile := map[string]int64{}
	first := map[string]converge.Finding{}
	for _, f := range res.Findings {
		n := int64(len(f.File) + len(f.Path) + len(f.Rule) + len(f.Message) + 16)
		fsize += n
		perFile[f.File] += n
		if _, ok := first[f.File]; !ok {
			first[f.File] = f
		}
	}
	if size+fsize > b.Output {
		worst := ""
		for file, n := range perFile {
			if worst == "" || n > perFile[worst] || n == perFile[worst] && file < worst {
				worst = file
			}
		}
		f := first[worst]
		return enc.Encode(&sandboxMsg{OverFindings: size + fsize, File: f.File, Line: f.Line, Column: f.Column})
	}
	// Spec is Declared (Load's contract): send it once.
	for _, x := range res.Desired.Resources {
		x.Spec = nil
	}
	return enc.Encode(&sandboxMsg{Result: &sandboxResult{Desired: res.Desired, Findings: res.Findings,
		Files: res.Files, Document: res.Documents}})
}

// splitSource splits a resource's Source, "file:line".
func splitSource(src string) (string, int) {
	i := strings.LastIndexByte(src, ':')
	if i < 0 {
		return src, 0
	}
	var line int
	if _, err := fmt.Sscanf(src[i+1:], "%d", &line); err != nil {
		return src, 0
	}
	return src[:i], line
}

// limitMemory sets a soft memory limit under the budget (the collector
// works harder before the watchdog gives up) and, as a backstop for one
// huge allocation the watchdog cannot see coming, RLIMIT_DATA at twice
// the budget: the runtime then fails with "out of memory".
func limitMemory(budget int64) {
	debug.SetMemoryLimit(budget * 9 / 10)
	lim := uint64(2*budget) + 512<<20
	_ = syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: lim, Max: lim})
}

// watchMemory calls over when the memory the runtime holds from the
// system (released pages left out) goes over budget.
func watchMemory(budget int64, over func(used int64)) {
	samples := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	for range time.Tick(10 * time.Millisecond) {
		metrics.Read(samples)
		used := int64(samples[0].Value.Uint64() - samples[1].Value.Uint64())
		if used > budget {
			over(used)
			return
		}
	}
}

// lockedEncoder lets the watchdog and the evaluation write messages.
type lockedEncoder struct {
	mu  sync.Mutex // guards enc
	enc *gob.Encoder
}

func (e *lockedEncoder) Encode(m *sandboxMsg) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.enc.Encode(m)
}

// limitedWriter keeps the first n bytes written to w and drops the rest.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.n -= k
		_, _ = l.w.Write(p[:k])
	}
	return len(p), nil
}

// mib renders a byte count: "40 bytes", "512 MiB", "4 GiB".
func mib(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d bytes", n)
	}
	if n >= 1<<30 && n%(1<<30) == 0 {
		return fmt.Sprintf("%d GiB", n>>30)
	}
	return fmt.Sprintf("%d MiB", (n+1<<19)>>20)
}
