package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/xml"
	"strings"
	"testing"
)

func curvePoints() []Point {
	rep := func(n int, secs, rss, floor float64) *Report {
		return &Report{Runs: []Run{{Resources: n, Seconds: secs, ControlRSSMiB: rss}}, Floor: &Floor{Seconds: floor, Ratio: secs / floor}}
	}
	return []Point{point(rep(10_000, 1, 100, 0.5)), point(rep(100_000, 10, 800, 5)), point(rep(1_000_000, 100, 7000, 50))}
}

// A point divides the run by its size: 1 s for 10,000 resources is
// 100 µs each; 100 MiB is 10.24 KiB each.
func TestPointIsPerResource(t *testing.T) {
	p := curvePoints()[0]
	if p.MicrosPerResource != 100 || p.KiBPerResource != 10.24 || p.RatioToFloor != 2 {
		t.Fatalf("point %+v: want 100 µs, 10.24 KiB, 2× the floor", p)
	}
}

func TestWriteCSVHasARowASize(t *testing.T) {
	var b bytes.Buffer
	if err := WriteCSV(&b, curvePoints()); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 || rows[0][0] != "resources" || rows[3][0] != "1000000" || rows[3][2] != "100.0000" {
		t.Fatalf("csv %q", rows)
	}
}

// The SVG is well-formed XML with both panels, a point a size on each,
// the floor's line on the time panel, and the sizes as labels.
func TestWriteSVGDrawsBothPanels(t *testing.T) {
	var b bytes.Buffer
	if err := WriteSVG(&b, curvePoints()); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	circles, paths, dashed := 0, 0, 0
	var texts []string
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("not XML: %v\n%s", err, b.String())
			}
			break
		}
		switch el := tok.(type) {
		case xml.StartElement:
			switch el.Name.Local {
			case "circle":
				circles++
			case "path":
				paths++
				for _, a := range el.Attr {
					if a.Name.Local == "stroke-dasharray" {
						dashed++
					}
				}
			}
		case xml.CharData:
			if s := strings.TrimSpace(string(el)); s != "" {
				texts = append(texts, s)
			}
		}
	}
	if circles != 6 || paths != 3 || dashed != 1 {
		t.Errorf("%d circles, %d paths (%d dashed): want 6, 3, 1", circles, paths, dashed)
	}
	all := strings.Join(texts, "|")
	for _, want := range []string{"10k", "100k", "1M", "wall time per resource (µs)", "control-plane peak RSS per resource (KiB)"} {
		if !strings.Contains(all, want) {
			t.Errorf("no %q among the labels %s", want, all)
		}
	}
}

func TestNiceCeil(t *testing.T) {
	for in, want := range map[float64]float64{0.7: 1, 1.2: 2, 3: 5, 7: 10, 120: 200, 0: 1} {
		if got := niceCeil(in); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", in, got, want)
		}
	}
}

// The floor adds the CPU-bound parts, takes the slower of them and the
// puts, and pays the depth in latency.
func TestFloorModel(t *testing.T) {
	rep := &Report{Dispatch256: 10_000, BboltPuts: 100_000, RawGRPC1: 1_000, BboltTxns: 100, MedianSeconds: 3,
		Compose: &Compose{GoSeconds: 0.1}}
	f := floor(rep, 10_000, 4, 40_000)
	// validate 2×10,000/40,000 = 0.5 s, round trips 1 s, puts 0.1 s,
	// depth 4 × (1 ms + 10 ms) = 0.044 s, compose 0.1 s.
	if want := 0.1 + 1.5 + 0.044; abs(f.Seconds-want) > 1e-9 || abs(f.Ratio-3/want) > 1e-9 {
		t.Fatalf("floor %+v, want %.3f s", f, want)
	}
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}
