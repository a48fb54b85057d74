package converge

import "time"

// Control is what an operator decided about reconciliation, kept in the
// store so a restart keeps it: a pinned revision (converge rollback,
// converge unpin) and the suspended roots (converge suspend, resume).
// The zero Control pins nothing and suspends nothing.
type Control struct {
	// Pin, when set, is the revision applied and held instead of the
	// followed branch's head.
	Pin *Pin `json:"pin,omitempty"`
	// Suspended are the roots that get no new dispatches; a Suspension
	// with an empty Root suspends everything.
	Suspended []Suspension `json:"suspended,omitempty"`
}

// Pin is a revision held until unpinned.
type Pin struct {
	Revision Revision  `json:"revision"`
	By       string    `json:"by,omitempty"`
	At       time.Time `json:"at"`
	// From is the revision that was applied when the pin was set.
	From string `json:"from,omitempty"`
}

// Suspension is one suspended root ("" for everything).
type Suspension struct {
	Root ID        `json:"root,omitempty"`
	By   string    `json:"by,omitempty"`
	At   time.Time `json:"at"`
}

// String is the pin in words: "pinned main@abc by ann at
// 2026-12-01T10:00:00Z (converge unpin)".
func (p *Pin) String() string {
	s := "pinned " + p.Revision.String()
	if p.By != "" {
		s += " by " + p.By
	}
	if !p.At.IsZero() {
		s += " at " + p.At.UTC().Format(time.RFC3339)
	}
	return s + " (converge unpin)"
}

// String is the suspension in words: "classicbom/classic suspended by
// ann at 2026-12-01T10:00:00Z (converge resume classicbom/classic)";
// "everything suspended …" for Root "".
func (s Suspension) String() string {
	what, resume := string(s.Root)+" suspended", "converge resume "+string(s.Root)
	if s.Root == "" {
		what, resume = "everything suspended", "converge resume"
	}
	if s.By != "" {
		what += " by " + s.By
	}
	if !s.At.IsZero() {
		what += " at " + s.At.UTC().Format(time.RFC3339)
	}
	return what + " (" + resume + ")"
}

// SuspendedAll reports whether everything is suspended.
func (c *Control) SuspendedAll() bool {
	_, ok := c.Suspension("")
	return ok
}

// Suspension returns root's suspension ("" for everything), or false.
func (c *Control) Suspension(root ID) (Suspension, bool) {
	if c == nil {
		return Suspension{}, false
	}
	for _, s := range c.Suspended {
		if s.Root == root {
			return s, true
		}
	}
	return Suspension{}, false
}

// Suspend adds s, replacing a suspension of the same root; it reports
// whether the root was suspended already.
func (c *Control) Suspend(s Suspension) bool {
	for i, o := range c.Suspended {
		if o.Root == s.Root {
			c.Suspended[i] = s
			return true
		}
	}
	c.Suspended = append(c.Suspended, s)
	return false
}

// Resume removes root's suspension; it reports whether there was one.
func (c *Control) Resume(root ID) bool {
	for i, o := range c.Suspended {
		if o.Root == root {
			c.Suspended = append(c.Suspended[:i:i], c.Suspended[i+1:]...)
			return true
		}
	}
	return false
}
