package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// NoisyMachineNote is printed with every human-readable result because
// numbers from different runs, or from different machines, are not
// comparable: only ratios between systems measured side by side mean much.
const NoisyMachineNote = "ratios only count within one run: this machine is shared and noisy"

// MB is the unit of mb_per_s: a decimal megabyte, as disk and network
// throughput are usually quoted.
const MB = 1e6

// Result is the measurement of one workload against one system at one
// client count. The JSON form is one line of results.jsonl.
type Result struct {
	Workload string  `json:"workload"`
	System   string  `json:"system"`
	Clients  int     `json:"clients"`
	OpsPerS  float64 `json:"ops_per_s"`
	MBPerS   float64 `json:"mb_per_s"`
	P50us    float64 `json:"p50_us"`
	P99us    float64 `json:"p99_us"`
	Errors   uint64  `json:"errors"`

	// The fields below give the context needed to read the ones above.
	Ops      uint64  `json:"ops"`
	OpBytes  int     `json:"op_bytes"`
	Seconds  float64 `json:"seconds"`
	InFlight int     `json:"in_flight,omitempty"`
	Note     string  `json:"note,omitempty"`
	// Version and Settings describe the server as it reported itself:
	// its version and the settings its numbers depend on (durability).
	Version  string `json:"version,omitempty"`
	Settings string `json:"settings,omitempty"`

	// With --metrics-addr, what the MetricsNodes nodes counted during the
	// measurement, summed over them: chain messages and Deliver calls
	// between nodes, client requests served (Commit and Read calls; a
	// forwarded read counts twice), and WAL syncs made for commits.
	MetricsNodes     int    `json:"metrics_nodes,omitempty"`
	PeerMessages     uint64 `json:"peer_messages,omitempty"`
	PeerDeliverCalls uint64 `json:"peer_deliver_calls,omitempty"`
	ServedRequests   uint64 `json:"served_requests,omitempty"`
	Syncs            uint64 `json:"syncs,omitempty"`

	// RetriesOnConflict is set when the system ran each operation as a
	// transaction that it aborts on conflict and runs again until it
	// commits; Aborts are then the attempts aborted during the
	// measurement (zero is a measurement too) and AbortsPerOp their number
	// per committed operation (Ops). Without it, the system does not abort
	// operations (it locks, or applies them on the server) and neither is
	// measured.
	RetriesOnConflict bool    `json:"retries_on_conflict,omitempty"`
	Aborts            uint64  `json:"aborts,omitempty"`
	AbortsPerOp       float64 `json:"aborts_per_op,omitempty"`

	// The isolation workload's measurements: Role (RoleAllRead,
	// RoleReadersAlone, RoleMix), its Readers and Writers (their sum is
	// Clients) and each side's successful operations per second. A mix
	// also carries its per-reader operations per second, those of the same
	// readers alone and of every client reading, and its own over each of
	// these (IsolationRatio, AllReadRatio).
	Role                     string  `json:"role,omitempty"`
	Readers                  int     `json:"readers,omitempty"`
	Writers                  int     `json:"writers,omitempty"`
	ReaderOpsPerS            float64 `json:"reader_ops_per_s,omitempty"`
	WriterOpsPerS            float64 `json:"writer_ops_per_s,omitempty"`
	PerReaderOpsPerS         float64 `json:"per_reader_ops_per_s,omitempty"`
	ReadOnlyPerReaderOpsPerS float64 `json:"read_only_per_reader_ops_per_s,omitempty"`
	AllReadPerReaderOpsPerS  float64 `json:"all_read_per_reader_ops_per_s,omitempty"`
	IsolationRatio           float64 `json:"isolation_ratio,omitempty"`
	AllReadRatio             float64 `json:"all_read_ratio,omitempty"`

	// PeakRSSBytes, of a result of the memory workload, is the peak
	// resident memory (VmHWM) of the server process System names, from its
	// start to the end of the run. The bench scripts write these results.
	PeakRSSBytes int64 `json:"peak_rss_bytes,omitempty"`
}

// setAborts records the aborts of a system that retries on conflict.
func (r *Result) setAborts(aborts uint64) {
	r.RetriesOnConflict = true
	r.Aborts = aborts
	r.AbortsPerOp = abortRate(aborts, r.Ops)
}

// abortRate is aborts per committed operation, or 0 when nothing
// committed: aborts then are all there is, and the result's operations
// per second (0) say so.
func abortRate(aborts, ops uint64) float64 {
	if ops == 0 {
		return 0
	}
	return round(float64(aborts)/float64(ops), 4)
}

// abortCell formats r's aborts per committed operation: "–" when r's
// system does not abort operations, or nothing committed.
func abortCell(r Result) string {
	if !r.RetriesOnConflict || r.Ops == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f", r.AbortsPerOp)
}

// abortsCell formats r's aborted attempts: "–" when r's system does not abort
// operations.
func abortsCell(r Result) string {
	if !r.RetriesOnConflict {
		return "–"
	}
	return strconv.FormatUint(r.Aborts, 10)
}

func anyRetries(results []Result) bool {
	return slices.ContainsFunc(results, func(r Result) bool { return r.RetriesOnConflict })
}

// summarize turns raw counts into a Result. Only successful operations count
// towards throughput and latency; failures are reported as errors.
func summarize(workload, system string, clients int, h *Histogram, bytes uint64, opBytes int, errors uint64, elapsed time.Duration) Result {
	r := Result{Workload: workload, System: system, Clients: clients, Errors: errors,
		Ops: h.Count(), OpBytes: opBytes, Seconds: round(elapsed.Seconds(), 3)}
	if s := elapsed.Seconds(); s > 0 {
		r.OpsPerS = round(float64(h.Count())/s, 1)
		r.MBPerS = round(float64(bytes)/MB/s, 2)
	}
	r.P50us = round(float64(h.Percentile(50))/float64(time.Microsecond), 1)
	r.P99us = round(float64(h.Percentile(99))/float64(time.Microsecond), 1)
	return r
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// WriteJSON writes r as one line of JSON.
func WriteJSON(w io.Writer, r Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteTable writes results as an aligned table for people, with the
// aborts per committed operation when a system retries on conflict.
func WriteTable(w io.Writer, results []Result) error {
	retried := anyRetries(results)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "workload\tsystem\tclients\tops/s\tMB/s\tp50 µs\tp99 µs\terrors\t")
	if retried {
		fmt.Fprint(tw, "aborts\taborts/op\t")
	}
	fmt.Fprintln(tw)
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.2f\t%.1f\t%.1f\t%d\t",
			r.Workload, r.System, r.Clients, r.OpsPerS, r.MBPerS, r.P50us, r.P99us, r.Errors)
		if retried {
			fmt.Fprintf(tw, "%s\t%s\t", abortsCell(r), abortCell(r))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// ReadJSONL reads results written by WriteJSON, skipping blank lines.
func ReadJSONL(r io.Reader) ([]Result, error) {
	var out []Result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var res Result
		if err := json.Unmarshal([]byte(text), &res); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		out = append(out, res)
	}
	return out, sc.Err()
}

// BaseSystem is the name of tyr's results unless --system says otherwise,
// and the system the others are compared with unless a report says
// otherwise.
const BaseSystem = "tyr"

// comparison groups results by workload and client count, keeping each
// system's last measurement, as it is the most recent. The machine's limits
// are kept apart: they are what the systems are read against.
type comparison struct {
	base      string
	workloads []string
	cells     []cell
	by        map[cell]map[string]Result
	peers     []string            // every system but base, in order of appearance
	peersOf   map[string][]string // the same, per workload
	limits    map[cell]Result     // the machine's, by limit and client count
	limitRows []Result
}

type cell struct {
	workload string
	clients  int
}

func isLimit(r Result) bool {
	return r.System == MachineSystem && slices.Contains(LimitWorkloads, r.Workload)
}

func compare(results []Result, base string) comparison {
	c := comparison{base: base, by: map[cell]map[string]Result{}, peersOf: map[string][]string{},
		limits: map[cell]Result{}}
	for _, r := range results {
		if hasOwnTable(r) {
			continue
		}
		k := cell{r.Workload, r.Clients}
		if isLimit(r) {
			if _, seen := c.limits[k]; !seen {
				c.limitRows = append(c.limitRows, r)
			}
			c.limits[k] = r
			continue
		}
		if c.by[k] == nil {
			c.by[k] = map[string]Result{}
			c.cells = append(c.cells, k)
		}
		if !slices.Contains(c.workloads, r.Workload) {
			c.workloads = append(c.workloads, r.Workload)
		}
		c.by[k][r.System] = r
		if r.System != base {
			if !slices.Contains(c.peers, r.System) {
				c.peers = append(c.peers, r.System)
			}
			if !slices.Contains(c.peersOf[r.Workload], r.System) {
				c.peersOf[r.Workload] = append(c.peersOf[r.Workload], r.System)
			}
		}
	}
	return c
}

// ratio returns the base system's operations per second over peer's for
// k, and false when either is missing or the peer did nothing.
func (c comparison) ratio(k cell, peer string) (float64, bool) {
	base, ok := c.by[k][c.base]
	p, pok := c.by[k][peer]
	if !ok || !pok || p.OpsPerS == 0 {
		return 0, false
	}
	return base.OpsPerS / p.OpsPerS, true
}

func (c comparison) ratioCell(k cell, peer string) string {
	v, ok := c.ratio(k, peer)
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

// WriteRatios writes, for people, the ratio of base's operations per
// second to each other system's; it writes nothing when there is none.
func WriteRatios(w io.Writer, results []Result, base string) error {
	c := compare(results, base)
	if len(c.peers) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "workload\tclients\t")
	for _, p := range c.peers {
		fmt.Fprintf(tw, "%s/%s ops/s\t", base, p)
	}
	fmt.Fprintln(tw)
	for _, k := range c.cells {
		fmt.Fprintf(tw, "%s\t%d\t", k.workload, k.clients)
		for _, p := range c.peers {
			fmt.Fprintf(tw, "%s\t", c.ratioCell(k, p))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// WriteReport writes Markdown: for each workload, a table of the ratio of
// base's operations per second to every other system's measured under it,
// at each client count (preceded by the workload's plot when plots names
// one); the machine's limits; every measurement (with what the nodes
// counted, for results that carry it, and as a fraction of the machine's
// limits when they were measured); the systems' versions and settings; and
// the notes on how workloads map onto the systems.
func WriteReport(w io.Writer, results []Result, base string, plots map[string]string) error {
	c := compare(results, base)
	var b strings.Builder
	for i, wl := range c.workloads {
		if i > 0 {
			b.WriteString("\n")
		}
		writeRatioTable(&b, c, wl, plots[wl])
	}
	if len(c.limitRows) > 0 {
		b.WriteString("\nMachine limits, measured in the same run:\n\n")
		b.WriteString("| limit | clients | ops/s | MB/s | p50 µs | p99 µs | errors |\n|---|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range c.limitRows {
			r = c.limits[cell{r.Workload, r.Clients}]
			fmt.Fprintf(&b, "| %s | %d | %.1f | %.2f | %.1f | %.1f | %d |\n",
				r.Workload, r.Clients, r.OpsPerS, r.MBPerS, r.P50us, r.P99us, r.Errors)
		}
	}

	writeIsolationTable(&b, results)
	writeMemoryTable(&b, results)

	counted := slices.ContainsFunc(results, func(r Result) bool { return r.MetricsNodes > 0 })
	limited := len(c.limits) > 0
	retried := anyRetries(results)
	if slices.ContainsFunc(results, func(r Result) bool { return !isLimit(r) && !hasOwnTable(r) }) {
		writeMeasurements(&b, c, results, retried, counted, limited)
	}
	return writeTail(w, &b, results, "Systems, as they reported themselves")
}

// writeTail ends a report in b with the systems' descriptions under
// heading, the notes and the machine's caveat, and writes it to w.
func writeTail(w io.Writer, b *strings.Builder, results []Result, heading string) error {
	if infos := systemInfos(results); len(infos) > 0 {
		b.WriteString("\n" + heading + ":\n\n")
		for _, line := range infos {
			b.WriteString("- " + line + "\n")
		}
	}
	if notes := Notes(results); len(notes) > 0 {
		b.WriteString("\n")
		for _, n := range notes {
			b.WriteString("- " + n + "\n")
		}
	}
	fmt.Fprintf(b, "\n%s.\n", NoisyMachineNote)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeMeasurements writes the table of every measurement but the
// machine's limits and those shown in tables of their own.
func writeMeasurements(b *strings.Builder, c comparison, results []Result, retried, counted, limited bool) {
	b.WriteString("\nAll measurements:\n\n")
	b.WriteString("| workload | system | clients | ops/s | MB/s | p50 µs | p99 µs | errors |")
	sep := "|---|---|---:|---:|---:|---:|---:|---:|"
	if retried {
		b.WriteString(" aborts | aborts/op |")
		sep += "---:|---:|"
	}
	if counted {
		b.WriteString(" nodes | peer messages/op | Deliver calls/op | requests served/op | WAL syncs/op |")
		sep += "---:|---:|---:|---:|---:|"
	}
	if limited {
		b.WriteString(" of round-trip limit | of fsync limit | of stream limit | of disk limit |")
		sep += "---:|---:|---:|---:|"
	}
	b.WriteString("\n" + sep + "\n")
	for _, r := range results {
		if isLimit(r) || hasOwnTable(r) {
			continue
		}
		fmt.Fprintf(b, "| %s | %s | %d | %.1f | %.2f | %.1f | %.1f | %d |",
			r.Workload, r.System, r.Clients, r.OpsPerS, r.MBPerS, r.P50us, r.P99us, r.Errors)
		if retried {
			fmt.Fprintf(b, " %s | %s |", abortsCell(r), abortCell(r))
		}
		if counted {
			b.WriteString(countCells(r))
		}
		if limited {
			b.WriteString(c.limitCells(r))
		}
		b.WriteString("\n")
	}
}

// writeRatioTable writes workload wl's table: base's and each peer's
// operations per second, and their ratio, for every client count; then,
// when any of them retries on conflict, their aborts per committed
// operation.
func writeRatioTable(b *strings.Builder, c comparison, wl, plot string) {
	defer writeAbortTable(b, c, wl)
	peers := c.peersOf[wl]
	fmt.Fprintf(b, "**%s**\n\n", wl)
	if plot != "" {
		fmt.Fprintf(b, "![%s: operations per second by clients](%s)\n\n", wl, plot)
	}
	b.WriteString("| workload | clients | " + c.base + " ops/s |")
	sep := "|---|---:|---:|"
	for _, p := range peers {
		fmt.Fprintf(b, " %s ops/s | %s/%s |", p, c.base, p)
		sep += "---:|---:|"
	}
	b.WriteString("\n" + sep + "\n")
	for _, k := range c.cells {
		if k.workload != wl {
			continue
		}
		r, ok := c.by[k][c.base]
		fmt.Fprintf(b, "| %s | %d | %s |", k.workload, k.clients, opsCell(r, ok))
		for _, p := range peers {
			peer, pok := c.by[k][p]
			fmt.Fprintf(b, " %s | %s |", opsCell(peer, pok), c.ratioCell(k, p))
		}
		b.WriteString("\n")
	}
}

// writeAbortTable writes, for workload wl, the aborts per committed
// operation of each system that retries on conflict, by client count.
func writeAbortTable(b *strings.Builder, c comparison, wl string) {
	var systems []string
	for _, sys := range append([]string{c.base}, c.peersOf[wl]...) {
		for _, k := range c.cells {
			if r, ok := c.by[k][sys]; ok && k.workload == wl && r.RetriesOnConflict {
				systems = append(systems, sys)
				break
			}
		}
	}
	if len(systems) == 0 {
		return
	}
	b.WriteString("\nAborts per committed operation, of the systems that abort and retry on conflict:\n\n")
	b.WriteString("| workload | clients |")
	sep := "|---|---:|"
	for _, sys := range systems {
		fmt.Fprintf(b, " %s aborts/op |", sys)
		sep += "---:|"
	}
	b.WriteString("\n" + sep + "\n")
	for _, k := range c.cells {
		if k.workload != wl {
			continue
		}
		fmt.Fprintf(b, "| %s | %d |", k.workload, k.clients)
		for _, sys := range systems {
			cellText := "–"
			if r, ok := c.by[k][sys]; ok {
				cellText = abortCell(r)
			}
			fmt.Fprintf(b, " %s |", cellText)
		}
		b.WriteString("\n")
	}
}

// limitCells gives r as a fraction of the machine's limits at the same
// client count: operations against round trips and fsyncs, and the stream
// workloads' bytes against the stream and disk limits.
func (c comparison) limitCells(r Result) string {
	frac := func(limit string, v func(Result) float64) string {
		l, ok := c.limits[cell{limit, r.Clients}]
		if !ok || v(l) == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", v(r)/v(l))
	}
	ops := func(x Result) float64 { return x.OpsPerS }
	mb := func(x Result) float64 { return x.MBPerS }
	if strings.HasPrefix(r.Workload, "stream") {
		return fmt.Sprintf(" – | – | %s | %s |", frac("limit-stream", mb), frac("limit-disk", mb))
	}
	return fmt.Sprintf(" %s | %s | – | – |", frac("limit-roundtrip", ops), frac("limit-fsync", ops))
}

// systemInfos returns one line per system that described itself, with its
// last description.
func systemInfos(results []Result) []string {
	var order []string
	last := map[string]Result{}
	for _, r := range results {
		if r.Version == "" && r.Settings == "" {
			continue
		}
		if _, seen := last[r.System]; !seen {
			order = append(order, r.System)
		}
		last[r.System] = r
	}
	lines := make([]string, len(order))
	for i, sys := range order {
		r := last[sys]
		lines[i] = sys + ": " + strings.Join(slices.DeleteFunc([]string{r.Version, r.Settings},
			func(s string) bool { return s == "" }), "; ")
	}
	return lines
}

// Notes returns the distinct notes of results, in order.
func Notes(results []Result) []string {
	var notes []string
	for _, r := range results {
		if r.Note != "" && !slices.Contains(notes, r.Note) {
			notes = append(notes, r.Note)
		}
	}
	return notes
}

// countCells formats what the nodes counted during r, per operation.
func countCells(r Result) string {
	if r.MetricsNodes == 0 || r.Ops == 0 {
		return " – | – | – | – | – |"
	}
	per := func(v uint64) float64 { return float64(v) / float64(r.Ops) }
	return fmt.Sprintf(" %d | %.2f | %.2f | %.2f | %.3f |", r.MetricsNodes, per(r.PeerMessages), per(r.PeerDeliverCalls),
		per(r.ServedRequests), per(r.Syncs))
}

func opsCell(r Result, ok bool) string {
	if !ok {
		return "–"
	}
	s := fmt.Sprintf("%.0f", r.OpsPerS)
	if r.Errors > 0 {
		s += fmt.Sprintf(" (%d errors)", r.Errors)
	}
	return s
}

// describe records on r how system s runs workload, and its version and
// settings as it reported them.
func (r *Result) describe(s system, workload string) {
	r.Note = s.Note(workload)
	info := s.Info()
	r.Version, r.Settings = info.Version, info.Settings
}
