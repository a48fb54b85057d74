package classic

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/convergehq/converge/providers/sdk"
)

// StatusSinkConfig is statussink's provider config: the directory that
// stands in for an object store bucket, relative to the worker's own
// directory (Options.StateDir, else its working directory). A config
// comes from the repository, which may be remote and not trusted with the
// worker's file system: a bucket_dir that is absolute or climbs out with
// ".." is refused (a permanent failure naming the field), and every file
// is opened through an os.Root of the worker's directory, so a symbolic
// link cannot lead out of it either.
type StatusSinkConfig struct {
	BucketDir string `json:"bucket_dir"`
}

// Check says what is wrong with c, naming the field; nil if nothing.
func (c StatusSinkConfig) Check() error {
	switch {
	case c.BucketDir == "":
		return errors.New("statussink config: bucket_dir: empty")
	case filepath.IsAbs(c.BucketDir) || !filepath.IsLocal(c.BucketDir):
		return fmt.Errorf("statussink config: bucket_dir %q: must be a relative path inside the worker's state directory (no leading /, no ..)", c.BucketDir)
	}
	return nil
}

// InvocationsLog is the file, in the bucket directory, that gets one line
// per completed statussink delivery: "KEY TIME OBJECT".
const InvocationsLog = "invocations.log"

// sink is the statussink reactor.
type sink struct {
	stateDir string
	mu       sync.Mutex // serializes appends to invocations.log
}

// ObjectPath returns where statussink stores one delivery, relative to the
// bucket directory: KIND/NAME/GENERATION-TRANSITION.json.
func ObjectPath(kind, name string, generation int64, transition string) string {
	return filepath.Join(kind, name, strconv.FormatInt(generation, 10)+"-"+transition+".json")
}

// react uploads r.Subject (the resource, its generation, the transition
// and its rolled-up status) to BUCKET/ObjectPath(...). The object is
// written to a temporary file and renamed into place, so a repeated
// delivery of the same key replaces the same object with the same bytes:
// at-least-once delivery stays idempotent. After the object is in place
// one line is appended to BUCKET/invocations.log.
func (s *sink) react(_ context.Context, r *sdk.Request) error {
	if r.Subject == nil {
		return sdk.Permanent(errors.New("statussink: react task without a subject"))
	}
	var cfg StatusSinkConfig
	if err := r.DecodeConfig(&cfg); err != nil {
		return sdk.Permanent(fmt.Errorf("statussink: %w", err))
	}
	if err := cfg.Check(); err != nil {
		return sdk.Permanent(err)
	}
	kind, name := r.Subject.Resource.Kind(), r.Subject.Resource.Name()
	for _, p := range []string{kind, name, r.Subject.Transition} {
		if p == "" || !filepath.IsLocal(p) || filepath.Base(p) != p {
			return sdk.Permanent(fmt.Errorf("statussink: subject %s %q: not a safe path element", r.Subject.Resource, p))
		}
	}
	home := s.stateDir
	if home == "" {
		home = "."
	}
	root, err := os.OpenRoot(home)
	if err != nil {
		return sdk.Transient(fmt.Errorf("statussink: open the worker's directory: %w", err))
	}
	defer root.Close()
	if err := root.MkdirAll(cfg.BucketDir, 0o755); err != nil {
		return sdk.Transient(fmt.Errorf("statussink: bucket_dir %q: %w", cfg.BucketDir, err))
	}
	bucket, err := root.OpenRoot(cfg.BucketDir)
	if err != nil {
		return sdk.Transient(fmt.Errorf("statussink: bucket_dir %q: %w", cfg.BucketDir, err))
	}
	defer bucket.Close()
	rel := ObjectPath(kind, name, r.Subject.Generation, r.Subject.Transition)
	body, err := json.MarshalIndent(r.Subject, "", "  ")
	if err != nil {
		return sdk.Permanent(fmt.Errorf("encode subject: %w", err))
	}
	if err := writeAtomic(bucket, rel, append(body, '\n')); err != nil {
		return sdk.Transient(fmt.Errorf("upload %s: %w", rel, err))
	}
	line := fmt.Sprintf("%s %s %s\n", r.Key, time.Now().UTC().Format(time.RFC3339Nano), filepath.ToSlash(rel))
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := bucket.OpenFile(InvocationsLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return sdk.Transient(fmt.Errorf("open invocations log: %w", err))
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return sdk.Transient(fmt.Errorf("append invocations log: %w", err))
	}
	if err := f.Close(); err != nil {
		return sdk.Transient(fmt.Errorf("close invocations log: %w", err))
	}
	return nil
}

// writeAtomic writes b to path inside root through a synced temporary
// file in the same directory and a rename, so readers see the old object
// or the new one, never a torn one.
func writeAtomic(root *os.Root, path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(dir, ".upload-"+hex.EncodeToString(rnd[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, path)
	}
	if err != nil {
		root.Remove(tmp)
	}
	return err
}
