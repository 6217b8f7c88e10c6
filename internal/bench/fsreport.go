package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// FSBarSmallOverLarge is the bound on the tyrfs-native small-file read
// throughput over the large-file one; FSBarOverDistributed the bound on
// TýrFS's small-file create and read rates over the distributed peer's.
const (
	FSBarSmallOverLarge  = 0.75
	FSBarOverDistributed = 2
)

// IsFS reports whether r is a result of the fs workload.
func IsFS(r Result) bool { return strings.HasPrefix(r.Workload, "fs-") }

func mibPerS(r Result) float64 { return r.MBPerS * MB / (1 << 20) }

// fsReport is one run's fs results, indexed.
type fsReport struct {
	systems   []string
	role      map[string]string
	workloads []string
	cells     []cell
	by        map[cell]map[string]Result
	clients   []int
	// large and small name the data set's two read workloads.
	large, small string
}

func newFSReport(results []Result) fsReport {
	rep := fsReport{role: map[string]string{}, by: map[cell]map[string]Result{}}
	var lb, sb int
	for _, r := range results {
		if !IsFS(r) {
			continue
		}
		if !slices.Contains(rep.systems, r.System) {
			rep.systems = append(rep.systems, r.System)
			rep.role[r.System] = r.Role
		}
		if !slices.Contains(rep.workloads, r.Workload) {
			rep.workloads = append(rep.workloads, r.Workload)
		}
		// The bars are per reader count; the data set is stored by
		// fsFillWorkers writers.
		if !strings.HasPrefix(r.Workload, "fs-write-") && !slices.Contains(rep.clients, r.Clients) {
			rep.clients = append(rep.clients, r.Clients)
		}
		k := cell{r.Workload, r.Clients}
		if rep.by[k] == nil {
			rep.by[k] = map[string]Result{}
			rep.cells = append(rep.cells, k)
		}
		rep.by[k][r.System] = r
		if strings.HasPrefix(r.Workload, "fs-read-") && r.Workload != FSReadWorkload(FSMetaFileBytes) {
			if rep.large == "" || r.OpBytes > lb {
				rep.large, lb = r.Workload, r.OpBytes
			}
			if rep.small == "" || r.OpBytes < sb {
				rep.small, sb = r.Workload, r.OpBytes
			}
		}
	}
	return rep
}

// withRole lists the systems of the roles given, in order of appearance.
func (rep fsReport) withRole(roles ...string) []string {
	var out []string
	for _, s := range rep.systems {
		if slices.Contains(roles, rep.role[s]) {
			out = append(out, s)
		}
	}
	return out
}

func (rep fsReport) get(wl string, clients int, sys string) (Result, bool) {
	r, ok := rep.by[cell{wl, clients}][sys]
	return r, ok
}

// measured reports whether sys has a result of workload wl.
func (rep fsReport) measured(sys, wl string) bool {
	for _, n := range rep.clients {
		if _, ok := rep.get(wl, n, sys); ok {
			return true
		}
	}
	return false
}

// opsRatio is a's files per second over b's.
func (rep fsReport) opsRatio(wl string, clients int, a, b string) (float64, bool) {
	ra, aok := rep.get(wl, clients, a)
	rb, bok := rep.get(wl, clients, b)
	if !aok || !bok || rb.OpsPerS == 0 {
		return 0, false
	}
	return ra.OpsPerS / rb.OpsPerS, true
}

// smallOverLarge is sys's small-file read MiB/s over its large-file one.
func (rep fsReport) smallOverLarge(sys string, clients int) (float64, bool) {
	s, sok := rep.get(rep.small, clients, sys)
	l, lok := rep.get(rep.large, clients, sys)
	if !sok || !lok || l.MBPerS == 0 {
		return 0, false
	}
	return s.MBPerS / l.MBPerS, true
}

// FSTargets evaluates the fs workload's bars: the tyrfs-native small-file
// read throughput against its large-file one, and each TýrFS system's
// small-file create and read rates against each distributed peer's, at
// each reader count.
func FSTargets(results []Result) []Target {
	rep := newFSReport(results)
	var ts []Target
	for _, sys := range rep.withRole(RoleFSNative) {
		for _, n := range rep.clients {
			v, ok := rep.smallOverLarge(sys, n)
			ts = append(ts, target(fmt.Sprintf("%s %s over %s MiB/s, %d readers", sys, rep.small, rep.large, n),
				fmt.Sprintf("≥ %.2f×", FSBarSmallOverLarge),
				bound{label: sys, got: v, need: FSBarSmallOverLarge, ok: ok, unit: "×"}))
		}
	}
	dist := rep.withRole(RoleFSDistributed)
	if len(dist) == 0 {
		dist = []string{"the distributed peer"}
	}
	for _, sys := range rep.withRole(RoleFSNative, RoleFSMount) {
		if !rep.measured(sys, fsMetaWorkload("create", FSMetaFileBytes)) {
			continue // reads only: a batched read's system
		}
		for _, peer := range dist {
			for _, n := range rep.clients {
				var bs []bound
				for _, wl := range []string{fsMetaWorkload("create", FSMetaFileBytes), FSReadWorkload(FSMetaFileBytes), rep.small} {
					v, ok := rep.opsRatio(wl, n, sys, peer)
					bs = append(bs, bound{label: wl, got: v, need: FSBarOverDistributed, ok: ok, unit: "×"})
				}
				ts = append(ts, target(fmt.Sprintf("%s over %s, files/s, %d clients", sys, peer, n),
					fmt.Sprintf("small-file create and read ≥ %.0f×", float64(FSBarOverDistributed)), bs...))
			}
		}
	}
	return ts
}

// WriteFSReport writes the fs results as Markdown: each workload's rates
// on every system, the ratios of each TýrFS system to each peer, the
// small-file over large-file read throughput of each system, the bars, and
// how each system runs the operations.
func WriteFSReport(w io.Writer, results []Result) error {
	rep := newFSReport(results)
	var b strings.Builder
	b.WriteString("Rates: files per second and MiB/s (2^20 bytes) of each system; a read is a whole file, checked " +
		"byte for byte.\n\n| workload | clients |")
	sep := "|---|---:|"
	for _, s := range rep.systems {
		fmt.Fprintf(&b, " %s files/s | %s MiB/s |", s, s)
		sep += "---:|---:|"
	}
	b.WriteString("\n" + sep + "\n")
	for _, k := range rep.cells {
		fmt.Fprintf(&b, "| %s | %d |", k.workload, k.clients)
		for _, s := range rep.systems {
			r, ok := rep.by[k][s]
			if !ok {
				b.WriteString(" – | – |")
				continue
			}
			fmt.Fprintf(&b, " %.0f | %.1f |", r.OpsPerS, mibPerS(r))
		}
		b.WriteString("\n")
	}

	tested := rep.withRole(RoleFSNative, RoleFSMount)
	peers := rep.withRole(RoleFSPeer, RoleFSDistributed)
	if len(tested) > 0 && len(peers) > 0 {
		b.WriteString("\nRatios of files per second, each TýrFS system over each peer:\n\n| workload | clients |")
		sep := "|---|---:|"
		for _, t := range tested {
			for _, p := range peers {
				fmt.Fprintf(&b, " %s / %s |", t, p)
				sep += "---:|"
			}
		}
		b.WriteString("\n" + sep + "\n")
		for _, k := range rep.cells {
			fmt.Fprintf(&b, "| %s | %d |", k.workload, k.clients)
			for _, t := range tested {
				for _, p := range peers {
					v, ok := rep.opsRatio(k.workload, k.clients, t, p)
					fmt.Fprintf(&b, " %s |", ratioOrDash(v, ok))
				}
			}
			b.WriteString("\n")
		}
	}

	if rep.large != "" && rep.small != rep.large {
		fmt.Fprintf(&b, "\nThe data set read as small files over read as large files, MiB/s (%s / %s):\n\n| system | readers | %s MiB/s | %s MiB/s | ratio |\n|---|---:|---:|---:|---:|\n",
			rep.small, rep.large, rep.large, rep.small)
		for _, s := range rep.systems {
			for _, n := range rep.clients {
				l, lok := rep.get(rep.large, n, s)
				sm, sok := rep.get(rep.small, n, s)
				if !lok || !sok {
					continue
				}
				v, ok := rep.smallOverLarge(s, n)
				fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f | %s |\n", s, n, mibPerS(l), mibPerS(sm), ratioOrDash(v, ok))
			}
		}
	}

	b.WriteString("\nBars:\n\n")
	if err := WriteTargets(&b, FSTargets(results)); err != nil {
		return err
	}
	b.WriteString("\nAll measurements:\n\n| workload | system | clients | files/s | MiB/s | p50 µs | p99 µs |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		if IsFS(r) {
			fmt.Fprintf(&b, "| %s | %s | %d | %.1f | %.2f | %.1f | %.1f |\n",
				r.Workload, r.System, r.Clients, r.OpsPerS, mibPerS(r), r.P50us, r.P99us)
		}
	}
	return writeTail(w, &b, results, "Systems")
}

func ratioOrDash(v float64, ok bool) string {
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}
