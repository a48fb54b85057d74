package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"os/exec"
	"strconv"
	"time"
)

// CurveOptions say which sizes Curve measures, and how.
type CurveOptions struct {
	// Sizes are the graph sizes, in resources, ascending (the classic
	// BOM at Sizes[i]/3 teams: an account, a VPC and a route a team).
	Sizes []int
	// Converge is the converge executable: each size is its own
	// `converge bench --teams N --runs 1 -o json`, so that each peak RSS
	// is its run's alone.
	Converge string
	// Dir is the repository directory (the classic example).
	Dir string
	// Transport is how long each run measures its raw rates.
	Transport time.Duration
}

// Point is one size of a Curve.
type Point struct {
	Resources int     `json:"resources"`
	Seconds   float64 `json:"seconds"`
	// MicrosPerResource and KiBPerResource are the run's wall time and
	// the control plane's peak RSS divided by its resources.
	MicrosPerResource float64 `json:"us_per_resource"`
	PeakRSSMiB        float64 `json:"control_plane_peak_rss_mib"`
	KiBPerResource    float64 `json:"kib_per_resource"`
	WorkerRSSMiB      float64 `json:"worker_peak_rss_mib"`
	FloorSeconds      float64 `json:"floor_seconds"`
	RatioToFloor      float64 `json:"ratio_to_floor"`
}

// Curve measures converge at each of o.Sizes, each in a process of its
// own, and says on progress as each one ends.
func Curve(ctx context.Context, progress io.Writer, o CurveOptions) ([]Point, error) {
	var pts []Point
	for _, size := range o.Sizes {
		teams := max(1, size/3)
		cmd := exec.CommandContext(ctx, o.Converge, "bench", "--dir", o.Dir, "--teams", strconv.Itoa(teams),
			"--runs", "1", "--transport", o.Transport.String(), "-o", "json")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return pts, fmt.Errorf("bench at %d resources: %v\n%s", size, err, stderr.Bytes())
		}
		var rep Report
		if err := json.Unmarshal(out, &rep); err != nil {
			return pts, fmt.Errorf("bench at %d resources: its report: %w", size, err)
		}
		if len(rep.Runs) != 1 {
			return pts, fmt.Errorf("bench at %d resources: %d runs in its report, want 1", size, len(rep.Runs))
		}
		pts = append(pts, point(&rep))
		p := pts[len(pts)-1]
		fmt.Fprintf(progress, "%d resources: %.2fs (%.1f µs each), peak RSS %.0f MiB (%.2f KiB each), %.2f× the floor\n",
			p.Resources, p.Seconds, p.MicrosPerResource, p.PeakRSSMiB, p.KiBPerResource, p.RatioToFloor)
	}
	return pts, nil
}

// point is a Curve's point of a one-run report.
func point(rep *Report) Point {
	r := rep.Runs[0]
	p := Point{Resources: r.Resources, Seconds: r.Seconds, PeakRSSMiB: r.ControlRSSMiB, WorkerRSSMiB: r.WorkerRSSMiB}
	if r.Resources > 0 {
		p.MicrosPerResource = r.Seconds * 1e6 / float64(r.Resources)
		p.KiBPerResource = r.ControlRSSMiB * 1024 / float64(r.Resources)
	}
	if rep.Floor != nil {
		p.FloorSeconds, p.RatioToFloor = rep.Floor.Seconds, rep.Floor.Ratio
	}
	return p
}

// WriteCSV writes pts as CSV with a header row.
func WriteCSV(w io.Writer, pts []Point) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"resources", "seconds", "us_per_resource", "control_plane_peak_rss_mib", "kib_per_resource",
		"worker_peak_rss_mib", "floor_seconds", "ratio_to_floor"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }
	for _, p := range pts {
		cw.Write([]string{strconv.Itoa(p.Resources), f(p.Seconds), f(p.MicrosPerResource), f(p.PeakRSSMiB),
			f(p.KiBPerResource), f(p.WorkerRSSMiB), f(p.FloorSeconds), f(p.RatioToFloor)})
	}
	cw.Flush()
	return cw.Error()
}

// The chart's geometry: two panels side by side, each plotW × plotH
// inside its margins.
const (
	plotW, plotH = 360.0, 220.0
	marginL      = 64.0
	marginT      = 40.0
	marginB      = 48.0
	panelW       = marginL + plotW + 24
)

// WriteSVG draws pts as two charts against size (log scale): wall time
// per resource and the control plane's peak RSS per resource. Flat
// lines are cost linear in size.
func WriteSVG(w io.Writer, pts []Point) error {
	if len(pts) == 0 {
		return fmt.Errorf("no points to draw")
	}
	type tick struct {
		Pos   float64
		Label string
	}
	type panel struct {
		X            float64
		Title, YUnit string
		Path         string
		// FloorPath is the floor's line, where the panel has one.
		FloorPath string
		Dots      []struct{ X, Y float64 }
		XTicks    []tick
		YTicks    []tick
	}
	lo, hi := math.Log10(float64(pts[0].Resources)), math.Log10(float64(pts[len(pts)-1].Resources))
	if hi <= lo {
		hi = lo + 1
	}
	xOf := func(n int) float64 { return marginL + (math.Log10(float64(n))-lo)/(hi-lo)*plotW }
	mk := func(i int, title, unit string, y, fl func(Point) float64) panel {
		top := 0.0
		for _, p := range pts {
			top = math.Max(top, y(p))
			if fl != nil {
				top = math.Max(top, fl(p))
			}
		}
		top = niceCeil(top * 1.15)
		pn := panel{X: float64(i) * panelW, Title: title, YUnit: unit}
		var path bytes.Buffer
		for j, p := range pts {
			x, yy := xOf(p.Resources), marginT+plotH-y(p)/top*plotH
			if j == 0 {
				fmt.Fprintf(&path, "M%.1f,%.1f", x, yy)
			} else {
				fmt.Fprintf(&path, " L%.1f,%.1f", x, yy)
			}
			pn.Dots = append(pn.Dots, struct{ X, Y float64 }{x, yy})
			pn.XTicks = append(pn.XTicks, tick{x, sizeLabel(p.Resources)})
		}
		pn.Path = path.String()
		if fl != nil {
			var fp bytes.Buffer
			for j, p := range pts {
				cmd := " L"
				if j == 0 {
					cmd = "M"
				}
				fmt.Fprintf(&fp, "%s%.1f,%.1f", cmd, xOf(p.Resources), marginT+plotH-fl(p)/top*plotH)
			}
			pn.FloorPath = fp.String()
		}
		for k := 0; k <= 4; k++ {
			v := top * float64(k) / 4
			pn.YTicks = append(pn.YTicks, tick{marginT + plotH - float64(k)/4*plotH, strconv.FormatFloat(v, 'g', 3, 64)})
		}
		return pn
	}
	data := struct {
		W, H, PlotW, PlotH, L, T, R, XLabelY, AxisY float64
		Panels                                      []panel
	}{W: 2 * panelW, H: marginT + plotH + marginB, PlotW: plotW, PlotH: plotH, L: marginL, T: marginT,
		R: marginL + plotW, XLabelY: marginT + plotH + 18, AxisY: marginT + plotH + 38,
		Panels: []panel{
			mk(0, "wall time per resource", "µs", func(p Point) float64 { return p.MicrosPerResource }, floorMicros),
			mk(1, "control-plane peak RSS per resource", "KiB", func(p Point) float64 { return p.KiBPerResource }, nil),
		}}
	return curveSVG.Execute(w, data)
}

// floorMicros is a point's floor per resource, in µs.
func floorMicros(p Point) float64 {
	if p.Resources == 0 {
		return 0
	}
	return p.FloorSeconds * 1e6 / float64(p.Resources)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// sizeLabel is n as 10k, 300k, 1M.
func sizeLabel(n int) string {
	switch {
	case n >= 1_000_000:
		return strconv.FormatFloat(float64(n)/1e6, 'g', 3, 64) + "M"
	case n >= 1000:
		return strconv.FormatFloat(float64(n)/1e3, 'g', 3, 64) + "k"
	}
	return strconv.Itoa(n)
}

var curveSVG = template.Must(template.New("curve").Parse(`<svg xmlns="http://www.w3.org/2000/svg" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="#fff"/>
{{- $g := .}}
{{- range .Panels}}
<g transform="translate({{.X}},0)">
<text x="{{$g.L}}" y="22" font-size="14" font-weight="bold">{{.Title}} ({{.YUnit}})</text>
<rect x="{{$g.L}}" y="{{$g.T}}" width="{{$g.PlotW}}" height="{{$g.PlotH}}" fill="none" stroke="#999"/>
{{- range .YTicks}}
<text x="{{$g.L}}" dx="-6" y="{{.Pos}}" dy="4" text-anchor="end">{{.Label}}</text>
{{- end}}
{{- range .XTicks}}
<text x="{{.Pos}}" y="{{$g.XLabelY}}" text-anchor="middle">{{.Label}}</text>
{{- end}}
{{- if .FloorPath}}
<path d="{{.FloorPath}}" fill="none" stroke="#16a34a" stroke-width="1.5" stroke-dasharray="5,4"/>
<text x="{{$g.R}}" dx="-6" y="{{$g.T}}" dy="16" text-anchor="end" fill="#16a34a">dashed: the floor (same run)</text>
{{- end}}
<path d="{{.Path}}" fill="none" stroke="#2563eb" stroke-width="2"/>
{{- range .Dots}}
<circle cx="{{.X}}" cy="{{.Y}}" r="3.5" fill="#2563eb"/>
{{- end}}
<text x="{{$g.R}}" y="{{$g.AxisY}}" text-anchor="end">resources (log scale)</text>
</g>
{{- end}}
</svg>
`))
