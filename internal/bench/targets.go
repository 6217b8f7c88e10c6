package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// MemoryWorkload names the results that give a server's peak resident
// memory (PeakRSSBytes), one per server process; System names the process.
const MemoryWorkload = "memory"

// MemoryBoundBytes is the bound on each node's resident memory.
const MemoryBoundBytes = 512 << 20

// TargetClients is the client count the targets are stated at.
const TargetClients = 32

// hasOwnTable tells the results a report shows in tables of their own
// rather than among the ratios of operations per second: the isolation
// workload's, whose measurements differ by their readers, not by system,
// and the servers' memory.
func hasOwnTable(r Result) bool {
	return r.Workload == IsolationWorkload || r.Workload == MemoryWorkload
}

// writeIsolationTable writes, for each system measured under the
// isolation workload, its read-only runs and mixes.
func writeIsolationTable(b *strings.Builder, results []Result) {
	var systems []string
	for _, r := range results {
		if r.Workload == IsolationWorkload && !slices.Contains(systems, r.System) {
			systems = append(systems, r.System)
		}
	}
	for _, sys := range systems {
		fmt.Fprintf(b, "\n**isolation** (%s): readers and writers on disjoint blobs. Per-reader throughput of each mix "+
			"over that of the same readers alone, measured just before it, and over that of every client reading:\n\n", sys)
		b.WriteString("| clients | readers | writers | reader ops/s | writer ops/s | per reader | " +
			"same readers alone, per reader | ratio | every client reading, per reader | ratio |\n" +
			"|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range isolationRows(results, sys) {
			if r.Role == RoleAllRead {
				fmt.Fprintf(b, "| %d | %d | 0 | %.0f | – | %.0f | – | – | – | – |\n",
					r.Clients, r.Readers, r.ReaderOpsPerS, perReader(r))
				continue
			}
			fmt.Fprintf(b, "| %d | %d | %d | %.0f | %.0f | %.0f | %.0f | %s | %.0f | %s |\n",
				r.Clients, r.Readers, r.Writers, r.ReaderOpsPerS, r.WriterOpsPerS, r.PerReaderOpsPerS,
				r.ReadOnlyPerReaderOpsPerS, ratioText(r.IsolationRatio), r.AllReadPerReaderOpsPerS, ratioText(r.AllReadRatio))
		}
	}
}

// WriteIsolation writes the isolation tables of results, for people.
func WriteIsolation(w io.Writer, results []Result) error {
	var b strings.Builder
	writeIsolationTable(&b, results)
	_, err := io.WriteString(w, b.String())
	return err
}

func ratioText(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

// writeMemoryTable writes each server's peak resident memory.
func writeMemoryTable(b *strings.Builder, results []Result) {
	var rows []Result
	for _, r := range results {
		if r.Workload == MemoryWorkload {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\nPeak resident memory (VmHWM) of each server process, from its start to the end of the run:\n\n" +
		"| process | peak RSS MiB |\n|---|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(b, "| %s | %.1f |\n", r.System, mib(r.PeakRSSBytes))
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// A Target is one of the performance targets as measured in one
// run.
type Target struct {
	What     string // the measurement, e.g. "counter atomic add, 32 clients"
	Bound    string // what it must reach
	Measured string // what the run measured
	Status   string // "met", or "not met: ..." saying by how much, or "not measured: ..."
}

// Met reports whether the run measured the target and reached it.
func (t Target) Met() bool { return t.Status == "met" }

// bound is one inequality of a target: got ≥ need (or, with atMost,
// got ≤ need). ok is false when the run did not measure got.
type bound struct {
	label  string
	got    float64
	need   float64
	ok     bool
	atMost bool
	unit   string // printed after got and need; "×" for ratios
}

func (b bound) holds() bool {
	if b.atMost {
		return b.got <= b.need
	}
	return b.got >= b.need
}

func (b bound) measured() string {
	if !b.ok {
		return b.label + ": –"
	}
	return fmt.Sprintf("%s: %s", b.label, number(b.got, b.unit))
}

func number(v float64, unit string) string {
	if unit == "×" {
		return fmt.Sprintf("%.2f×", v)
	}
	return fmt.Sprintf("%.0f %s", v, unit)
}

// target turns bounds into a Target: met when each is measured and holds;
// otherwise the status names what was not measured, or each bound missed
// and the fraction of its bound reached (over the bound, for an upper one).
func target(what, boundText string, bounds ...bound) Target {
	t := Target{What: what, Bound: boundText}
	var measured, missing, missed []string
	for _, b := range bounds {
		measured = append(measured, b.measured())
		switch {
		case !b.ok:
			missing = append(missing, b.label)
		case !b.holds() && b.atMost:
			missed = append(missed, fmt.Sprintf("%s %s, %.2f× the bound of %s",
				b.label, number(b.got, b.unit), b.got/b.need, number(b.need, b.unit)))
		case !b.holds():
			missed = append(missed, fmt.Sprintf("%s %s, %.0f %% of the %s bound",
				b.label, number(b.got, b.unit), 100*b.got/b.need, number(b.need, b.unit)))
		}
	}
	t.Measured = strings.Join(measured, "; ")
	switch {
	case len(missing) > 0:
		t.Status = "not measured: " + strings.Join(missing, ", ")
	case len(missed) > 0:
		t.Status = "not met: " + strings.Join(missed, "; ")
	default:
		t.Status = "met"
	}
	return t
}

// Targets evaluates the targets on one run's results, with base
// the system the ratios are of (tyr as the cluster under test). The
// stream target takes base+"-rf1", the same cluster with a keyspace of one
// replica, when it was measured, and base otherwise.
func Targets(results []Result, base string) []Target {
	c := compare(results, base)
	ratio := func(wl, peer string, need float64) bound {
		v, ok := c.ratio(cell{wl, TargetClients}, peer)
		return bound{label: base + "/" + peer, got: v, need: need, ok: ok, unit: "×"}
	}
	at := fmt.Sprintf("%d clients", TargetClients)
	read1K := ReadWorkload(1 << 10)
	ts := []Target{
		target("`monalisa --agg=atomic`, "+at, "≥ 10× ZooKeeper-locked Redis and ≥ 2× PostgreSQL",
			ratio("monalisa", "zk-redis-durable", 10),
			ratio("monalisa", "postgres", 2)),
		target("`counter` atomic add, "+at, "≥ 1× Redis INCRBY appendfsync always; ≥ 2× tyr's own "+
			"transactional read-modify-write",
			ratio("counter", "redis-durable", 1),
			ratio("counter", base+"-rmw", 2)),
		target("`bank`, "+at, "≥ 1× PostgreSQL SERIALIZABLE",
			ratio("bank", "postgres", 1)),
		target("`write` 4 KiB, "+at, "≥ 1× Redis SET appendfsync always",
			ratio("write", "redis-durable", 1)),
		target("`read` 1 KiB direct, "+at, "≥ 1× Redis GET (memory-only)",
			ratio(read1K, "redis-memory", 1)),
		isolationTarget(results, base),
		streamTarget(c, results, base),
		streamPutTarget(c, base),
		memoryTarget(results),
	}
	return ts
}

// isolationTarget takes the 50/50 mix at the most clients measured.
func isolationTarget(results []Result, base string) Target {
	var mix Result
	found := false
	for _, r := range results {
		if r.Workload != IsolationWorkload || r.System != base || r.Role != RoleMix || r.Readers != r.Writers {
			continue
		}
		if !found || r.Clients >= mix.Clients {
			mix, found = r, true
		}
	}
	what := "`isolation` 50/50"
	if found {
		what = fmt.Sprintf("`isolation` 50/50, %d readers + %d writers", mix.Readers, mix.Writers)
	}
	t := target(what, "per-reader throughput ≥ 0.9× read-only",
		bound{label: "vs the same readers alone", got: mix.IsolationRatio, need: 0.9,
			ok: found && mix.IsolationRatio > 0, unit: "×"})
	if found && mix.AllReadRatio > 0 {
		t.Measured += fmt.Sprintf(" (vs all %d clients reading: %.2f×)", mix.Clients, mix.AllReadRatio)
	}
	return t
}

// streamTarget compares the stream get of one replica with the loopback
// stream limit at one client.
func streamTarget(c comparison, results []Result, base string) Target {
	sys := base + "-rf1"
	get, ok := c.by[cell{"stream-get", 1}][sys]
	if !ok {
		sys = base
		get, ok = c.by[cell{"stream-get", 1}][sys]
	}
	limit, lok := c.limits[cell{"limit-stream", 1}]
	b := bound{label: sys + " get / limit-stream", need: 0.5, ok: ok && lok && limit.MBPerS > 0, unit: "×"}
	if b.ok {
		b.got = get.MBPerS / limit.MBPerS
	}
	t := target("`stream` get, RF=1", "≥ 0.5× the loopback stream limit", b)
	if b.ok {
		t.Measured += fmt.Sprintf(" (%.0f of %.0f MB/s, %s)", get.MBPerS, limit.MBPerS, sizeLabel(int64(get.Ops)*int64(get.OpBytes)))
	}
	return t
}

// streamPutTarget compares the stream put at the cluster's replication
// with the same put at one replica, and that with the disk's durable
// sequential write rate, at one client.
func streamPutTarget(c comparison, base string) Target {
	put := c.by[cell{"stream-put", 1}]
	rf, rfOK := put[base]
	one, oneOK := put[base+"-rf1"]
	disk, diskOK := c.limits[cell{"limit-disk", 1}]
	replicated := bound{label: base + " put / " + base + "-rf1 put", need: 0.5, ok: rfOK && oneOK && one.MBPerS > 0, unit: "×"}
	if replicated.ok {
		replicated.got = rf.MBPerS / one.MBPerS
	}
	single := bound{label: base + "-rf1 put / limit-disk", need: 0.5, ok: oneOK && diskOK && disk.MBPerS > 0, unit: "×"}
	if single.ok {
		single.got = one.MBPerS / disk.MBPerS
	}
	t := target("`stream-put`", "replicated ≥ 0.5× one replica; one replica ≥ 0.5× the disk's sequential write rate", replicated, single)
	if replicated.ok && single.ok {
		t.Measured += fmt.Sprintf(" (%.0f, %.0f and %.0f MB/s)", rf.MBPerS, one.MBPerS, disk.MBPerS)
	}
	return t
}

// memoryTarget holds every server process the memory results name to the
// bound.
func memoryTarget(results []Result) Target {
	var bounds []bound
	for _, r := range results {
		if r.Workload == MemoryWorkload {
			bounds = append(bounds, bound{label: r.System, got: mib(r.PeakRSSBytes), need: mib(MemoryBoundBytes),
				ok: r.PeakRSSBytes > 0, atMost: true, unit: "MiB"})
		}
	}
	if len(bounds) == 0 {
		bounds = append(bounds, bound{label: "every node's peak RSS"})
	}
	return target("memory", fmt.Sprintf("each node's RSS ≤ %.0f MiB throughout", mib(MemoryBoundBytes)), bounds...)
}

// WriteTargets writes the targets as a Markdown table.
func WriteTargets(w io.Writer, ts []Target) error {
	var b strings.Builder
	b.WriteString("| target | bound | measured | status |\n|---|---|---|---|\n")
	for _, t := range ts {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.What, t.Bound, t.Measured, t.Status)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteTargetsSection writes the targets of results as the closing section
// of a report, with the reminder that only ratios within the run count.
func WriteTargetsSection(w io.Writer, results []Result, base string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Targets\n\nThe issue's targets, each at %d clients where it names clients, as measured in this run "+
		"(ratios are %s over the system named):\n\n", TargetClients, base)
	if err := WriteTargets(&b, Targets(results, base)); err != nil {
		return err
	}
	fmt.Fprintf(&b, "\nOnly ratios within one run count: %s, so absolute numbers from different runs "+
		"are not comparable.\n", strings.TrimPrefix(NoisyMachineNote, "ratios only count within one run: "))
	_, err := io.WriteString(w, b.String())
	return err
}
