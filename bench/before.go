package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// beforeRun is what a report of an earlier run (written by this harness's
// earlier version, e.g. at the commit before a redesign) says, read back
// from its Markdown: the figures a before/after comparison needs.
type beforeRun struct {
	path      string
	generated string // its "Generated ..." line
	library   string // its "Library under test" item
	load      string // its load average item
	// ratio has, per scenario id of its ratio table, the medians of A, B,
	// C and D ("healthy-serial, direct (no proxies)" included).
	ratio map[string][4]float64
	// scene has, per scenario id and contender id, its ops/s and cycle p50.
	scene map[string]map[string][2]string
	// allocs, bytes, cpu and p50 of its direct pass, per contender A B C D.
	allocs, bytes [4]float64
	cpu, p50      [4]string
}

// sceneHeadings maps the per-scenario headings of a report to scenario ids.
var sceneHeadings = []struct{ prefix, id string }{
	{"### Healthy, serial", "healthy-serial"},
	{"### Healthy, parallel", "healthy-parallel"},
	{"### One node +", "latency"},
	{"### One node blackholed", "blackhole"},
	{"### Contended", "contended"},
}

// readBefore parses the report at path; nil when there is none.
func readBefore(path string) *beforeRun {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	bf := &beforeRun{path: path, ratio: map[string][4]float64{}, scene: map[string]map[string][2]string{}}
	section, scene := "", ""
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "Generated "):
			bf.generated = strings.TrimSuffix(strings.TrimSpace(line), ".")
		case strings.HasPrefix(line, "- Library under test: "):
			bf.library = strings.TrimPrefix(line, "- Library under test: ")
		case strings.HasPrefix(line, "- Load average"):
			bf.load, _, _ = strings.Cut(strings.TrimPrefix(line, "- "), ". Other")
		case strings.HasPrefix(line, "## "):
			section, scene = line, ""
		case strings.HasPrefix(line, "### "):
			scene = ""
			for _, h := range sceneHeadings {
				if strings.HasPrefix(line, h.prefix) {
					scene = h.id
				}
			}
		case strings.HasPrefix(line, "| "):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			switch {
			case strings.HasPrefix(section, "## Ratio to the raw floor") && len(cells) == 5:
				var r [4]float64
				for k := range 4 {
					r[k] = boldRatio(cells[k+1])
				}
				if r[3] > 0 {
					bf.ratio[cells[0]] = r
				}
			case strings.HasPrefix(section, "## Allocations") && len(cells) >= 5:
				k := strings.Index("ABCD", cells[0][:1])
				if k < 0 || len(cells[0]) < 2 || cells[0][1] != ' ' {
					continue
				}
				bf.allocs[k], _ = strconv.ParseFloat(cells[1], 64)
				bf.bytes[k], _ = strconv.ParseFloat(cells[2], 64)
				bf.cpu[k], bf.p50[k] = cells[3], cells[4]
			case strings.HasPrefix(section, "## Per scenario") && scene != "" && len(cells) >= 4:
				if len(cells[0]) < 2 || cells[0][1] != ' ' || !strings.Contains("ABCD", cells[0][:1]) {
					continue
				}
				if bf.scene[scene] == nil {
					bf.scene[scene] = map[string][2]string{}
				}
				bf.scene[scene][cells[0][:1]] = [2]string{cells[2], cells[3]}
			}
		}
	}
	if len(bf.ratio) == 0 {
		return nil
	}
	return bf
}

// boldRatio reads the median out of a ratio cell, "**0.97×** [0.85×–1.42×]".
func boldRatio(cell string) float64 {
	_, rest, ok := strings.Cut(cell, "**")
	if !ok {
		return 0
	}
	v, _, _ := strings.Cut(rest, "**")
	f, err := strconv.ParseFloat(strings.TrimSuffix(v, "×"), 64)
	if err != nil {
		return 0
	}
	return f
}

// renderBefore writes the before/after comparison: the earlier run's
// ratios and floors next to this run's (proxied set-up, the only one the
// earlier harness had, and the mixed and direct ones for reference).
func renderBefore(b *strings.Builder, p params, rs []*scenarioRes, bf *beforeRun) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("## Before and after the redesign\n\n")
	if bf == nil {
		w("No earlier report to compare with (`-before %s` not found).\n\n", p.before)
		return
	}
	setups := []string{"proxied", "mixed", "direct"}
	w("*Before*: `%s`, written by the bench harness of that commit (same method, proxied set-up only, plus a direct pass of fixed-length rounds, healthy serial; %s; library: %s; %s). *After*: this run. **Two different runs**: each ratio is relative to the floor measured in its own run, and the floors themselves are given so that a shift of the machine's speed between the runs shows.\n\n", bf.path, bf.generated, bf.library, bf.load)
	w("| figure | before: proxied | after: proxied | after: mixed | after: direct |\n|---|---|---|---|---|\n")
	row := func(label, old string, after func(s *scenarioRes) string, id string) {
		w("| %s | %s |", label, old)
		for _, tp := range setups {
			cell := "–"
			if s := find(rs, tp, id); s != nil {
				cell = after(s)
			}
			w(" %s |", cell)
		}
		w("\n")
	}
	ratioRow := func(label, id string, k int) {
		row(label, ratioOf(bf.ratio, id, k), func(s *scenarioRes) string { return ratioCell(s.res[k].ratios) }, id)
	}
	floorRow := func(label, id string) {
		old := "–"
		if d, ok := bf.scene[id]["D"]; ok {
			old = fmt.Sprintf("%s cycles/s, cycle p50 %s", d[0], d[1])
		}
		row(label, old, floorFigures, id)
	}
	ratioRow("healthy serial: A ÷ floor", "healthy-serial", 0)
	ratioRow("healthy serial: C (go-redsync fail-fast, unchanged code) ÷ floor", "healthy-serial", 2)
	floorRow("healthy serial: the floor D", "healthy-serial")
	ratioRow("one node blackholed: A ÷ floor", "blackhole", 0)
	ratioRow("one node blackholed: C ÷ floor", "blackhole", 2)
	floorRow("one node blackholed: the floor D", "blackhole")
	ratioRow(fmt.Sprintf("one node +%v: A ÷ floor", p.latency), "latency", 0)
	floorRow(fmt.Sprintf("one node +%v: the floor D", p.latency), "latency")
	// The earlier direct pass against this run's direct set-up: both
	// healthy, serial, no proxy.
	if d := find(rs, "direct", "healthy-serial"); d != nil {
		a, f := roundMedians(d.res[0]), roundMedians(d.res[floorIdx])
		w("| no proxies, healthy serial: A allocations per cycle | %s | | | %.1f |\n", fmtNum(bf.allocs[0]), a.allocs)
		w("| no proxies: A bytes per cycle | %s | | | %.0f |\n", fmtNum(bf.bytes[0]), a.bytes)
		w("| no proxies: A CPU per cycle | %s | | | %s |\n", orDash(bf.cpu[0]), fmtDur(a.cpu))
		w("| no proxies: A ÷ floor | %s | | | %s |\n", ratioOf(bf.ratio, "healthy-serial, direct (no proxies)", 0), ratioCell(d.res[0].ratios))
		w("| no proxies: the floor D (allocs, CPU, cycle p50) | %s, %s, %s | | | %.1f, %s, %s |\n", fmtNum(bf.allocs[3]), orDash(bf.cpu[3]), orDash(bf.p50[3]), f.allocs, fmtDur(f.cpu), fmtDur(d.res[floorIdx].cycle.q(0.5)))
	}
	w("\n")
}

func ratioOf(m map[string][4]float64, id string, k int) string {
	if r, ok := m[id]; ok && r[k] > 0 {
		return "**" + fmtRatio(r[k]) + "**"
	}
	return "–"
}

func fmtNum(x float64) string {
	if x == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", x)
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}
