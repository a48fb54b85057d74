package workerauth

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A token file holds one token a line ('#' comments); a change is read
// at the next ask, and one that does not load keeps the tokens in use,
// said once.
func TestTokenFileReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("# workers\nold-token-0123456789\n\n")
	f, err := OpenTokenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var warned, noted int
	f.Warn = func(string, ...any) { warned++ }
	f.Note = func(string) { noted++ }
	if got := f.Tokens(); !slices.Equal(got, []string{"old-token-0123456789"}) {
		t.Fatalf("tokens = %q", got)
	}
	write("old-token-0123456789\nnew-token-0123456789abc\n")
	if got := f.Tokens(); len(got) != 2 || noted != 1 {
		t.Errorf("after adding a line: tokens %q, %d notes; want both, one note", got, noted)
	}
	write("short\n")
	for range 2 {
		if got := f.Tokens(); len(got) != 2 {
			t.Errorf("after a bad change: tokens %q, want the two in use", got)
		}
	}
	if warned != 1 {
		t.Errorf("a bad change warned %d times, want once", warned)
	}
	if _, err := OpenTokenFile(path); err == nil || !strings.Contains(err.Error(), path+":1:") {
		t.Errorf("opening a file with a short token: %v, want its file and line", err)
	}
	write("# nothing\n")
	if _, err := OpenTokenFile(path); err == nil || !strings.Contains(err.Error(), "no token") {
		t.Errorf("opening a file without tokens: %v", err)
	}
}
