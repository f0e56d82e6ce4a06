package main

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

type report struct {
	p      params
	args   []string
	took   time.Duration
	sweep  []cellResult
	jumps  []jumpResult
	pauses []pauseResult
}

func (r report) write(w io.Writer) {
	f := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	f("# Clock-drift experiments: results\n\n")
	f("Generated %s by `cd bench && go run ./drift %s` in %v on %s/%s, %d cores, %s.\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), strings.Join(r.args, " "), r.took.Round(time.Second),
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	f("Five local `redis-server` processes. **Node clocks are emulated**: node %d's clock running at rate 1+ρ is a node that receives every TTL divided by 1+ρ; a forward jump of Δ is its live TTLs shortened by Δ (libfaketime hangs Debian's jemalloc-linked redis-server). See EXPERIMENTS.md for the set-up and what to configure.\n\n", fastNode)

	f("## Sweep: one node of five with a fast clock\n\n")
	f("Each cell runs %v. Holders keep the lock for their **whole validity** (the most a correct client may do) and record the window [Lock returned, Until()]; a waiting client retries every 1-4 ms. *overlapping* = grants whose window intersects another client's (checked by integration/checker). *held* = share of the run covered by some window. *theory* = whether the worst case allows an overlap: ttl·ρ/(1+ρ) > ttl·f + 2 ms.\n\n", r.p.cell)
	geoms := map[string]string{"split": split.doc, "open": open.doc,
		"slow-client": "3 clients reaching all 5 nodes, all node clocks honest; **client 0's own monotonic clock runs slow by ρ** (a clock.Clock injected with WithClock), so it believes in its validity for longer than it lasts"}
	var lastKey string
	for _, c := range r.sweep {
		key := fmt.Sprintf("%s/%v", c.geom, c.ttl)
		if key != lastKey {
			lastKey = key
			f("\n### %s geometry, TTL %v\n\n%s.\n\n", c.geom, c.ttl, geoms[c.geom])
			f("| drift factor | ρ | grants | overlapping | max overlap | held | theory |\n|---|---|---|---|---|---|---|\n")
		}
		ov := fmt.Sprintf("%d (%.0f%%)", c.overlapping, pct(c.overlapping, c.grants))
		if c.overlapping > 0 {
			ov = "**" + ov + "**"
		}
		f("| %.2f | %.1f%% | %d | %s | %v | %.0f%% | %s |\n", c.drift, 100*c.rho, c.grants, ov,
			c.maxOverlap.Round(10*time.Microsecond), 100*c.held.Seconds()/c.dur.Seconds(),
			map[bool]string{true: "possible", false: "excluded"}[c.predicted])
	}

	f("\n## A forward clock jump on node %d during a hold\n\n", fastNode)
	f("Split geometry, TTL 1 s, drift factor 0.01 (12 ms allowance). Client A holds nodes 0,1,2; 100 ms in, node %d's clock jumps forward by Δ; client B (nodes 2,3,4) tries every millisecond until A's validity ends. %d repetitions per Δ.\n\n", fastNode, r.p.reps)
	f("| Δ | B granted while A valid | max overlap |\n|---|---|---|\n")
	for _, j := range r.jumps {
		f("| %v | %d of %d | %v |\n", j.jump, j.overlaps, j.reps, j.maxOverlap.Round(time.Millisecond))
	}

	f("\n## A client that pauses past its validity\n\n")
	f("TTL 500 ms, all nodes reachable. Client A takes the lock, stalls for its validity + 200 ms; client B takes the expired lock and holds it 400 ms. When A wakes it writes. %d repetitions per policy.\n\n", r.p.reps)
	f("| A's policy on waking | writes while B held the lock | A's Unlock said ErrNotHeld |\n|---|---|---|\n")
	for _, p := range r.pauses {
		f("| %s | %d of %d | %d of %d |\n", p.policy, p.unsafeWrites, p.reps, p.notHeld, p.reps)
	}
	f("\nThe check narrows the gap but cannot close it: a pause between the check and the write is the same pause. Only the storage can refuse a late write (fencing); see EXPERIMENTS.md.\n")
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// plotSweep draws, for each geometry and TTL, the share of overlapping
// grants against ρ, one line per drift factor.
func plotSweep(sweep []cellResult, p params, file string) error {
	type panelKey struct {
		geom string
		ttl  time.Duration
	}
	var panels []panelKey
	seen := map[panelKey]bool{}
	for _, c := range sweep {
		k := panelKey{c.geom, c.ttl}
		if !seen[k] {
			seen[k] = true
			panels = append(panels, k)
		}
	}
	plots := make([][]*plot.Plot, 1)
	for _, k := range panels {
		pl := plot.New()
		pl.Title.Text = fmt.Sprintf("%s geometry, TTL %v", k.geom, k.ttl)
		pl.X.Label.Text = "fast node's clock-rate error ρ (%)"
		if k.geom == "slow-client" {
			pl.X.Label.Text = "client 0's clock running slow by ρ (%)"
		}
		pl.Y.Label.Text = "overlapping grants (%)"
		pl.Y.Min, pl.Y.Max = 0, 125 // room for the legend above 100 %
		pl.Legend.Top = true
		pl.Legend.Left = true
		for di, drift := range p.drifts {
			var pts plotter.XYs
			for _, c := range sweep {
				if c.geom == k.geom && c.ttl == k.ttl && c.drift == drift {
					pts = append(pts, plotter.XY{X: 100 * c.rho, Y: pct(c.overlapping, c.grants)})
				}
			}
			if len(pts) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(pts)
			if err != nil {
				return err
			}
			line.Color = plotutil.Color(di)
			line.Width = vg.Points(1.5)
			points.Color = plotutil.Color(di)
			points.Shape = plotutil.Shape(di)
			pl.Add(line, points)
			pl.Legend.Add(fmt.Sprintf("drift factor %.2f", drift), line, points)
			// The theory's threshold for this drift factor: ρ/(1+ρ) = f + 2ms/ttl.
			x := drift + float64(2*time.Millisecond)/float64(k.ttl)
			rho := x / (1 - x)
			if k.geom == "slow-client" { // (1 − f − 2ms/ttl)/(1−s) = 1
				rho = x
			}
			if 100*rho <= 100*p.rhos[len(p.rhos)-1] {
				v := plotter.XYs{{X: 100 * rho, Y: 0}, {X: 100 * rho, Y: 100}}
				th, err := plotter.NewLine(v)
				if err != nil {
					return err
				}
				th.Color = plotutil.Color(di)
				th.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
				th.Width = vg.Points(0.8)
				pl.Add(th)
			}
		}
		pl.Add(plotter.NewGrid())
		plots[0] = append(plots[0], pl)
	}
	const w = 4.2 * vg.Inch
	img := vgimgCanvas(vg.Length(len(plots[0]))*w, 3.6*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots[0]), PadX: vg.Points(6), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(4)}
	canvases := plot.Align(plots, tiles, dc)
	for j, pl := range plots[0] {
		pl.Draw(canvases[0][j])
	}
	return savePNG(img, file)
}
