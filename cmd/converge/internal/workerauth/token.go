package workerauth

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
)

// minWorkerToken is the shortest worker token a token file may hold: a
// bearer token is the listener's only secret.
const minWorkerToken = 16

// TokenFile is --workers-token-file: the external workers' tokens, one per
// line ('#' starts a comment), read again when the file's size or time
// changes (or on SIGHUP), so a token rotates without a restart: add the
// new line, move the workers to it, drop the old line. A change that does
// not load (no token left, one too short) keeps the tokens in use, said
// once.
type TokenFile struct {
	path string

	mu     sync.Mutex
	toks   []string
	sig    string
	failed string
	Warn   func(msg string, args ...any)
	Note   func(msg string)
}

// OpenTokenFile reads path's tokens; a file that holds none is a usage
// error naming it.
func OpenTokenFile(path string) (*TokenFile, error) {
	f := &TokenFile{path: path}
	toks, err := readTokens(path)
	if err != nil {
		return nil, fmt.Errorf("--workers-token-file %v", err)
	}
	f.toks, f.sig = toks, fileSignature(path)
	return f, nil
}

// Tokens returns the tokens accepted now (providers.ServerOptions.Tokens).
func (f *TokenFile) Tokens() []string {
	f.Reload(false)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.toks
}

// Reload reads the file again when it changed (or always, force).
func (f *TokenFile) Reload(force bool) {
	sig := fileSignature(f.path)
	f.mu.Lock()
	same := sig == f.sig || sig == f.failed
	f.mu.Unlock()
	if same && !force {
		return
	}
	toks, err := readTokens(f.path)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		if f.failed != sig && f.Warn != nil {
			f.Warn("workers token file: the change does not load; the tokens in use stay", "err", err)
		}
		f.failed = sig
		return
	}
	if f.Note != nil && (sig != f.sig || force) {
		f.Note(fmt.Sprintf("workers token file: reloaded %s (%d tokens)", f.path, len(toks)))
	}
	f.toks, f.sig, f.failed = toks, sig, ""
}

// readTokens returns the tokens of the file at path.
func readTokens(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err // names the file
	}
	var toks []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if len(line) < minWorkerToken {
			return nil, fmt.Errorf("%s:%d: a token of %d characters; want at least %d", path, n, len(line), minWorkerToken)
		}
		toks = append(toks, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("%s: no token in it (one per line)", path)
	}
	return toks, nil
}

// fileSignature is path's size and modification time, or "missing".
func fileSignature(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return "missing"
	}
	return fmt.Sprintf("%d %d", fi.Size(), fi.ModTime().UnixNano())
}

// ReloadOnHangup reloads tlsFiles and tokens (either may be nil) at once
// on every SIGHUP until ctx ends or stop is called.
func ReloadOnHangup(ctx context.Context, tlsFiles *TLSReloader, tokens *TokenFile) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for {
			select {
			case <-hup:
				if tlsFiles != nil {
					tlsFiles.Reload(true)
				}
				if tokens != nil {
					tokens.Reload(true)
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() { signal.Stop(hup) }
}
