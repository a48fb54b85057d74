package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"testing/fstest"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/cue"
	gitsync "github.com/convergehq/converge/sync"
)

// HeadSettings reads converge.cue below path at src's head, without
// loading (or applying) anything else: the workers to start and the
// timeouts to set before the first revision is loaded. It is evaluated
// in sb, under the load budget, like every document; none is the zero
// Settings.
func HeadSettings(src *gitsync.Source, path string, sb *cue.Sandbox) (converge.Settings, error) {
	rev, err := src.Head()
	if err != nil {
		return converge.Settings{}, err
	}
	fsys, err := src.FS(rev, path)
	if err != nil {
		return converge.Settings{}, err
	}
	b, err := fs.ReadFile(fsys, cue.SettingsFile)
	if errors.Is(err, fs.ErrNotExist) {
		return converge.Settings{}, nil
	}
	if err != nil {
		return converge.Settings{}, fmt.Errorf("read %s: %w", cue.SettingsFile, err)
	}
	res, err := sb.Load(context.Background(), fstest.MapFS{cue.SettingsFile: {Data: b}}, ".", cue.Options{})
	if err != nil {
		return converge.Settings{}, fmt.Errorf("load %s: %w", cue.SettingsFile, err)
	}
	if !res.Valid() {
		return converge.Settings{}, fmt.Errorf("%s at %s: %s", cue.SettingsFile, rev, res.Findings[0])
	}
	return res.Desired.Settings, nil
}
