package converge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"time"
)

// Rollout is a composer's progressive rollout: a change of its
// composition reaches its children wave by wave instead of all at once.
// The engine holds back the new specs of the children of later waves
// (the composer is not changed: it composes in full as always); every
// resource of the composer's subtree must be Ready for Soak before the
// next wave starts, and a wave's resource that fails permanently, or a
// wave not Ready within Timeout, halts the rollout: the remaining waves
// keep their previous specs until a new revision.
//
// A child belongs to the first wave that selects it, by its row (the
// list element of the composer's spec it comes from, RowOf) or, for a
// Percent wave, by a stable hash of that row; the last wave takes what
// is left. The first composition of a composer creates every child at
// once: there is nothing yet to protect.
type Rollout struct {
	Waves []Wave `json:"waves"`
	// Soak is how long the subtree stays Ready after a wave before the
	// next one starts (a wave's own Soak wins).
	Soak time.Duration `json:"soak,omitempty"`
	// Timeout bounds one wave from its start to Ready; 0 waits without
	// limit. A wave past it halts the rollout.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Wave is one step of a Rollout.
type Wave struct {
	// Name names the wave in every message; empty: "wave-N" (1-based).
	Name string `json:"name,omitempty"`
	// Rows selects the children whose row label is one of these or
	// below one ("fd-00" selects fd-00's own children and those of
	// fd-00/team-003).
	Rows []string `json:"rows,omitempty"`
	// Percent selects the children whose row's bucket (a stable hash,
	// 0..99) is below it: cumulative, so 10 then 50 is a tenth, then
	// half of the rows in all.
	Percent int `json:"percent,omitempty"`
	// Soak overrides the rollout's Soak after this wave.
	Soak time.Duration `json:"soak,omitempty"`
}

// WaveName is the name of wave i of r: its own, else "wave-N".
func (r *Rollout) WaveName(i int) string {
	if i >= 0 && i < len(r.Waves) && r.Waves[i].Name != "" {
		return r.Waves[i].Name
	}
	return "wave-" + fmt.Sprint(i+1)
}

// SoakOf is how long the subtree must stay Ready after wave i.
func (r *Rollout) SoakOf(i int) time.Duration {
	if i >= 0 && i < len(r.Waves) && r.Waves[i].Soak > 0 {
		return r.Waves[i].Soak
	}
	return r.Soak
}

// Check reports the first problem of r's declaration: no waves, a
// percent out of 1..100 or not above an earlier one, a wave that selects
// nothing before the last, two waves of one name. The field is named as
// in the document ("waves[1].percent").
func (r *Rollout) Check() (field string, err error) {
	if len(r.Waves) == 0 {
		return "waves", fmt.Errorf("a rollout needs at least one wave")
	}
	names := map[string]int{}
	last := 0
	for i, w := range r.Waves {
		at := fmt.Sprintf("waves[%d]", i)
		if w.Percent < 0 || w.Percent > 100 {
			return at + ".percent", fmt.Errorf("percent %d is not within 1..100", w.Percent)
		}
		if w.Percent > 0 && w.Percent <= last {
			return at + ".percent", fmt.Errorf("percent %d is not above the %d of an earlier wave (percents are cumulative)", w.Percent, last)
		}
		if w.Percent > 0 {
			last = w.Percent
		}
		if w.Percent == 0 && len(w.Rows) == 0 && i < len(r.Waves)-1 {
			return at, fmt.Errorf("a wave with neither rows nor percent takes every child left; only the last wave may")
		}
		for j, row := range w.Rows {
			if row == "" || strings.HasPrefix(row, "/") || strings.HasSuffix(row, "/") {
				return fmt.Sprintf("%s.rows[%d]", at, j), fmt.Errorf("row %q: want names joined by \"/\" (\"fd-00\", \"fd-00/team-003\")", row)
			}
		}
		if w.Soak < 0 {
			return at + ".soak", fmt.Errorf("negative soak")
		}
		n := r.WaveName(i)
		if prev, dup := names[n]; dup {
			return at + ".name", fmt.Errorf("wave name %q is also waves[%d]'s", n, prev)
		}
		names[n] = i
	}
	if r.Soak < 0 {
		return "soak", fmt.Errorf("negative soak")
	}
	if r.Timeout < 0 {
		return "timeout", fmt.Errorf("negative timeout")
	}
	return "", nil
}

// Count is how many waves r runs: its own, plus a last one ("rest")
// when its last wave does not take every child left.
func (r *Rollout) Count() int {
	if n := len(r.Waves); n > 0 && (r.Waves[n-1].Percent == 100 || r.Waves[n-1].Percent == 0 && len(r.Waves[n-1].Rows) == 0) {
		return n
	}
	return len(r.Waves) + 1
}

// Name is the name of wave i of the Count waves: WaveName, and "rest"
// for the implicit last one.
func (r *Rollout) Name(i int) string {
	if i == len(r.Waves) {
		return "rest"
	}
	return r.WaveName(i)
}

// WaveOf returns the wave (0 .. Count-1) of a child whose row label is
// row ("fd-00/team-003"; "" when it comes from no row, and then key, the
// child's ID, is hashed instead).
func (r *Rollout) WaveOf(row, key string) int {
	b := -1
	for i, w := range r.Waves {
		for _, sel := range w.Rows {
			if row == sel || strings.HasPrefix(row, sel+"/") {
				return i
			}
		}
		if w.Percent > 0 {
			if b < 0 {
				if row != "" {
					key = row
				}
				b = Bucket(key)
			}
			if b < w.Percent {
				return i
			}
		}
		if w.Percent == 0 && len(w.Rows) == 0 {
			return i
		}
	}
	return len(r.Waves)
}

// Bucket is key's stable bucket, 0..99: FNV-1a of its bytes.
func Bucket(key string) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % 100)
}

// RolloutStatus is where a composer's rollout stands: the engine keeps it
// in the composer's status ("rollout"), so it is durable with the row and
// shown wherever the status is.
type RolloutStatus struct {
	// Generation is the composer's generation the rollout applies.
	Generation int64 `json:"generation"`
	// Wave is the newest wave let through (0-based); Waves how many
	// there are, Name the wave's name.
	Wave  int    `json:"wave"`
	Waves int    `json:"waves"`
	Name  string `json:"name"`
	// Phase is RolloutProgressing, RolloutSoaking, RolloutHalted or
	// RolloutComplete.
	Phase string `json:"phase"`
	// Held counts the children whose change waits for a later wave, as
	// of the newest composition.
	Held int `json:"held"`
	// Started is when the wave started; ReadySince when the subtree
	// last became Ready in it (soaking since); SoakUntil when the next
	// wave starts if it stays so.
	Started    time.Time `json:"started,omitzero"`
	ReadySince time.Time `json:"ready_since,omitzero"`
	SoakUntil  time.Time `json:"soak_until,omitzero"`
	// Reason says why a halted rollout halted.
	Reason string `json:"reason,omitempty"`
}

// The phases of a rollout (RolloutStatus.Phase).
const (
	RolloutProgressing = "progressing"
	RolloutSoaking     = "soaking"
	RolloutHalted      = "halted"
	RolloutComplete    = "complete"
)

// String is the rollout as one line: "wave 2/3 (ten-percent) soaking
// until 12:03:04 UTC, 1,003 held", "halted at wave 2/3 (ten-percent): …".
func (s *RolloutStatus) String() string {
	w := fmt.Sprintf("wave %d/%d (%s)", s.Wave+1, s.Waves, s.Name)
	switch s.Phase {
	case RolloutHalted:
		return "halted at " + w + ": " + s.Reason
	case RolloutComplete:
		return fmt.Sprintf("complete: %d waves", s.Waves)
	case RolloutSoaking:
		return fmt.Sprintf("%s soaking until %s, %d held", w, s.SoakUntil.UTC().Format("15:04:05 UTC"), s.Held)
	}
	return fmt.Sprintf("%s progressing, %d held", w, s.Held)
}

// String is the declared rollout in one line: "canary (rows fd-00) →
// ten (10%) → rest; soak 30s, timeout 10m".
func (r *Rollout) String() string {
	var parts []string
	for i := 0; i < r.Count(); i++ {
		p := r.Name(i)
		if i < len(r.Waves) {
			w := r.Waves[i]
			var sel []string
			if len(w.Rows) > 0 {
				sel = append(sel, "rows "+strings.Join(w.Rows, ", "))
			}
			if w.Percent > 0 {
				sel = append(sel, fmt.Sprintf("%d%%", w.Percent))
			}
			if w.Soak > 0 {
				sel = append(sel, "soak "+w.Soak.String())
			}
			if len(sel) > 0 {
				p += " (" + strings.Join(sel, "; ") + ")"
			}
		}
		parts = append(parts, p)
	}
	s := strings.Join(parts, " → ")
	var opts []string
	if r.Soak > 0 {
		opts = append(opts, "soak "+r.Soak.String())
	}
	if r.Timeout > 0 {
		opts = append(opts, "timeout "+r.Timeout.String())
	}
	if len(opts) > 0 {
		s += "; " + strings.Join(opts, ", ")
	}
	return s
}

// RolloutOf returns the rollout a composer's status records
// (status.rollout), or nil.
func RolloutOf(status json.RawMessage) *RolloutStatus {
	if len(status) == 0 || !bytes.Contains(status, []byte(`"rollout"`)) {
		return nil
	}
	var v struct {
		Rollout *RolloutStatus `json:"rollout"`
	}
	if json.Unmarshal(status, &v) != nil {
		return nil
	}
	return v.Rollout
}
