package site

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// cssRules parses site.css into selector → property → value (the last
// declaration wins, as in the cascade for equal specificity).
func cssRules(t *testing.T) map[string]map[string]string {
	t.Helper()
	data, err := assetFS.ReadFile("assets/site.css")
	if err != nil {
		t.Fatal(err)
	}
	css := regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAllString(string(data), "")
	rules := map[string]map[string]string{}
	for _, m := range regexp.MustCompile(`([^{}]+)\{([^}]*)\}`).FindAllStringSubmatch(css, -1) {
		for _, sel := range strings.Split(m[1], ",") {
			sel = strings.Join(strings.Fields(sel), " ")
			if rules[sel] == nil {
				rules[sel] = map[string]string{}
			}
			for _, d := range strings.Split(m[2], ";") {
				k, v, ok := strings.Cut(d, ":")
				if ok {
					rules[sel][strings.TrimSpace(k)] = strings.TrimSpace(v)
				}
			}
		}
	}
	return rules
}

// luminance is the WCAG 2 relative luminance of a #rgb or #rrggbb color.
func luminance(hex string) (float64, error) {
	h := strings.TrimPrefix(hex, "#")
	if len(h) == 3 {
		h = string([]byte{h[0], h[0], h[1], h[1], h[2], h[2]})
	}
	if len(h) != 6 {
		return 0, fmt.Errorf("not a #rrggbb color: %q", hex)
	}
	var ch [3]float64
	for i := range ch {
		v, err := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		if err != nil {
			return 0, fmt.Errorf("not a #rrggbb color: %q", hex)
		}
		c := float64(v) / 255
		if c <= 0.03928 {
			ch[i] = c / 12.92
		} else {
			ch[i] = math.Pow((c+0.055)/1.055, 2.4)
		}
	}
	return 0.2126*ch[0] + 0.7152*ch[1] + 0.0722*ch[2], nil
}

// contrast is the WCAG 2 contrast ratio of two colors.
func contrast(a, b string) (float64, error) {
	la, err := luminance(a)
	if err != nil {
		return 0, err
	}
	lb, err := luminance(b)
	if err != nil {
		return 0, err
	}
	if la < lb {
		la, lb = lb, la
	}
	return (la + 0.05) / (lb + 0.05), nil
}

// TestContrast checks, from site.css itself, that the text of the site
// meets WCAG AA (4.5:1) against each background it is shown on: the phase
// badges (white on their color), muted text and notes on the page and in
// tables, the header's counts and stamps, the deleted-resource notice,
// and the graph's nodes (white text on their phase's fill).
func TestContrast(t *testing.T) {
	rules := cssRules(t)
	get := func(sel, prop string) string {
		t.Helper()
		v := rules[sel][prop]
		if v == "" {
			t.Fatalf("site.css: %s has no %s", sel, prop)
		}
		return v
	}
	page, table, header := get("body", "background"), get("table", "background"), get("header", "background")
	type pair struct{ what, fg, bg string }
	var pairs []pair
	for _, ph := range []string{"ready", "failed", "pending", "running", "deleting"} {
		sel := ".ph-" + ph + ".phase"
		pairs = append(pairs, pair{ph + " badge", get(".phase", "color"), get(sel, "background")})
		pairs = append(pairs, pair{ph + " count in the header", get("header .ph-"+ph, "color"), header})
	}
	for _, sel := range []string{".muted", ".note", ".subject", "dl.facts dt", ".st-success", ".st-failure", ".st-pending", ".error"} {
		pairs = append(pairs, pair{sel + " on the page", get(sel, "color"), page}, pair{sel + " in a table", get(sel, "color"), table})
	}
	pairs = append(pairs,
		pair{"body text", get("body", "color"), page},
		pair{"header links", get("header a", "color"), header},
		pair{"header revision", get("header .rev", "color"), header},
		pair{"deleted notice", get(".gone", "color"), get(".gone", "background")},
		pair{"held tag", get("body", "color"), get(".tag.held", "background")},
		pair{"applied tag", get("body", "color"), get(".tag.applied", "background")},
	)
	for ph, fill := range phaseColor { // the graph's nodes: white text on the phase's fill
		pairs = append(pairs, pair{string(ph) + " graph node", "#ffffff", fill})
	}
	pairs = append(pairs, pair{"other graph node", "#ffffff", colorOf("")})
	for _, p := range pairs {
		r, err := contrast(p.fg, p.bg)
		if err != nil {
			t.Errorf("%s: %v", p.what, err)
			continue
		}
		t.Logf("%-32s %s on %s: %.2f:1", p.what, p.fg, p.bg, r)
		if r < 4.5 {
			t.Errorf("%s: %s on %s is %.2f:1, below WCAG AA 4.5:1", p.what, p.fg, p.bg, r)
		}
	}
}
