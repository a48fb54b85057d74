package scheduler_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The scheduler imports the standard library, the root converge package
// and converge's JSON layer (proto/rawjson, itself standard library only)
// only (STYLE.md, practice 3).
func TestImportsNoThirdPartyModule(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		switch p {
		case "github.com/convergehq/converge", "github.com/convergehq/converge/scheduler", "github.com/convergehq/converge/proto/rawjson":
		default:
			t.Errorf("scheduler depends on %s", p)
		}
	}
}
