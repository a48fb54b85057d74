package classic

import (
	"context"
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
// stands in for an object store bucket.
type StatusSinkConfig struct {
	BucketDir string `json:"bucket_dir"`
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
	if cfg.BucketDir == "" {
		return sdk.Permanent(errors.New("statussink config: bucket_dir: empty"))
	}
	bucket := cfg.BucketDir
	if !filepath.IsAbs(bucket) && s.stateDir != "" {
		bucket = filepath.Join(s.stateDir, bucket)
	}
	kind, name := r.Subject.Resource.Kind(), r.Subject.Resource.Name()
	for _, p := range []string{kind, name, r.Subject.Transition} {
		if p == "" || !filepath.IsLocal(p) || filepath.Base(p) != p {
			return sdk.Permanent(fmt.Errorf("statussink: subject %s %q: not a safe path element", r.Subject.Resource, p))
		}
	}
	rel := ObjectPath(kind, name, r.Subject.Generation, r.Subject.Transition)
	body, err := json.MarshalIndent(r.Subject, "", "  ")
	if err != nil {
		return sdk.Permanent(fmt.Errorf("encode subject: %w", err))
	}
	if err := writeAtomic(filepath.Join(bucket, rel), append(body, '\n')); err != nil {
		return sdk.Transient(fmt.Errorf("upload %s: %w", rel, err))
	}
	line := fmt.Sprintf("%s %s %s\n", r.Key, time.Now().UTC().Format(time.RFC3339Nano), filepath.ToSlash(rel))
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := os.OpenFile(filepath.Join(bucket, InvocationsLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
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

// writeAtomic writes b to path through a synced temporary file in the same
// directory and a rename, so readers see the old object or the new one,
// never a torn one.
func writeAtomic(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".upload-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
