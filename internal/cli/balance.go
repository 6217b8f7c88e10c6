package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/balance"
	"github.com/tyrstore/tyr/internal/ring"
)

// Limits of --capacity and of `tyr cluster balance`.
const (
	// capacityBytesMin bounds --capacity below: a smaller capacity is
	// almost surely a unit left out ("--capacity 500" is 500 bytes).
	capacityBytesMin = 1 << 20
	// capacityBytesMax bounds --capacity above (1 EiB).
	capacityBytesMax = 1 << 60
	// balanceAskersMax bounds how many members `tyr cluster balance` asks
	// at once; a membership view holds at most membership.MembersMax.
	balanceAskersMax = 16
	// balanceTimeoutDefault and balanceTimeoutMax are the default and the
	// largest --timeout of `tyr cluster balance`: the wait for one member.
	balanceTimeoutDefault = 5 * time.Second
	balanceTimeoutMax     = time.Minute
)

// parseCapacity reads a --capacity value: bytes, optionally with KiB, MiB,
// GiB or TiB, in [capacityBytesMin, capacityBytesMax]. The empty string is
// 0: measure the file system.
func parseCapacity(what, s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := parseSize(what, s)
	if err != nil {
		return 0, err
	}
	if n < capacityBytesMin || n > capacityBytesMax {
		return 0, fmt.Errorf("invalid %s %q: must be at least %s and at most %s (1 EiB)", what, s,
			formatSize(capacityBytesMin), formatSize(capacityBytesMax))
	}
	return n, nil
}

// parseCapacities reads `tyr cluster up --capacity`: one value for every
// node, or a comma-separated list of one per node. It returns nil for the
// empty string (every node measures its file system).
func parseCapacities(s string, nodes int) ([]uint64, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) != 1 && len(parts) != nodes {
		return nil, fmt.Errorf("invalid --capacity %q: %d values for %d nodes; give one value for all nodes or one per node", s, len(parts), nodes)
	}
	out := make([]uint64, nodes)
	for i := range out {
		part := strings.TrimSpace(parts[min(i, len(parts)-1)])
		n, err := parseCapacity("--capacity", part)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, fmt.Errorf("invalid --capacity %q: value %d is empty", s, i+1)
		}
		out[i] = n
	}
	return out, nil
}

// balanceRow is one member in the output of `tyr cluster balance`.
type balanceRow struct {
	ID    string
	State string
	// RPCAddr is where the member is asked.
	RPCAddr string
	// Usage is the member's answer; meaningful when Problem is empty.
	Usage client.NodeUsage
	// Problem says why the member is left out of the figures (it was not
	// asked, did not answer or answered nonsense); empty if it counts.
	Problem string
}

// balanceReport is what `tyr cluster balance` prints.
type balanceReport struct {
	// Self and RingID are those of the node whose view listed the members.
	Self   string
	RingID string
	// Rows holds the members that are not left, sorted by ID.
	Rows []balanceRow
	// Counted is the number of rows in Summary, those without a Problem.
	Counted int
	// Summary is balance.Summarize over the counted rows; zero if none.
	Summary balance.Summary
}

func newClusterBalance(e *env) *cobra.Command {
	var (
		dir     string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "balance",
		Short: "Print each member's capacity, bytes stored, utilization and ops/s, and max/mean utilization",
		Long: `Ask one node (--endpoint, or a running node of the local cluster in --dir)
for the members, then every member that is alive or suspect for its own
figures: capacity (its --capacity, or the size of the file system holding
its data directory, marked *), the bytes its keyspaces occupy on disk, and
the client operations per second it answered over the last minute.
Utilization is stored / capacity; max/mean utilization is the figure
load-aware placement balances (docs/placement.md). A member that is dead,
does not answer within --timeout or answers nonsense is listed and left out
of the figures, with a note saying why. Left members are not listed.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 || timeout > balanceTimeoutMax {
				return fmt.Errorf("invalid --timeout %s: must be positive and at most %s", timeout, balanceTimeoutMax)
			}
			endpoints, err := statusEndpoints(e, dir)
			if err != nil {
				return err
			}
			st, err := firstStatus(cmd.Context(), endpoints)
			if err != nil {
				return err
			}
			rows := balanceRows(st)
			askUsages(cmd.Context(), rows, timeout)
			report, err := summarizeBalance(st, rows)
			printBalance(e.stdout, report)
			return err
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "ask a running node of the local cluster in DIR instead of --endpoint")
	cmd.Flags().DurationVar(&timeout, "timeout", balanceTimeoutDefault,
		fmt.Sprintf("how long to wait for each member's answer, at most %s", balanceTimeoutMax))
	return cmd
}

// statusEndpoints returns the endpoints to ask for the cluster status:
// the running nodes of the local cluster in dir, or --endpoint.
func statusEndpoints(e *env, dir string) ([]string, error) {
	if dir == "" {
		return []string{e.endpoint}, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	nodes, err := loadNodes(abs)
	if err != nil {
		return nil, err
	}
	var endpoints []string
	for _, n := range nodes {
		if n.pid() != 0 {
			endpoints = append(endpoints, n.endpoint())
		}
	}
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("no node of the cluster in %s is running", abs)
	}
	return endpoints, nil
}

// balanceRows returns a row for every member of st that is not left, in
// st's order (by ID). Dead members and members without an address carry
// their Problem already: they are not asked.
func balanceRows(st client.ClusterStatus) []balanceRow {
	rows := make([]balanceRow, 0, len(st.Members))
	for _, m := range st.Members {
		r := balanceRow{ID: m.ID, State: m.State, RPCAddr: m.RPCAddr}
		switch {
		case m.State == client.StateLeft:
			continue
		case m.State == client.StateDead:
			r.Problem = fmt.Sprintf("dead in %s's view, not asked", st.Self)
		case m.RPCAddr == "":
			r.Problem = "no client address known, not asked"
		}
		rows = append(rows, r)
	}
	return rows
}

// askUsages asks every row without a Problem for its usage, at most
// balanceAskersMax at once, each for up to timeout, and records the answer
// or the Problem.
func askUsages(ctx context.Context, rows []balanceRow, timeout time.Duration) {
	slots := make(chan struct{}, balanceAskersMax)
	var wg sync.WaitGroup
	for i := range rows {
		if rows[i].Problem != "" {
			continue
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			rows[i].Usage, rows[i].Problem = askUsage(ctx, rows[i].RPCAddr, timeout)
		}()
	}
	wg.Wait()
}

// askUsage asks the node at addr for its usage; on failure it returns why
// the node is left out.
func askUsage(ctx context.Context, addr string, timeout time.Duration) (client.NodeUsage, string) {
	c, err := client.Dial(addr, client.WithoutRouting())
	if err != nil {
		return client.NodeUsage{}, "unreachable: " + strings.TrimPrefix(err.Error(), "tyr: ")
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u, err := c.NodeUsage(ctx)
	var ce *client.Error
	switch {
	case err == nil:
		return u, ""
	case errors.Is(err, context.DeadlineExceeded):
		return client.NodeUsage{}, fmt.Sprintf("unreachable: no answer from %s within %s", addr, timeout)
	case errors.As(err, &ce) && ce.Code == codes.Unimplemented:
		return client.NodeUsage{}, "its server is too old to report usage"
	case errors.As(err, &ce) && ce.Code == codes.Unavailable:
		return client.NodeUsage{}, fmt.Sprintf("unreachable at %s: %s", addr, ce.Message)
	}
	return client.NodeUsage{}, strings.TrimPrefix(err.Error(), "tyr: ")
}

// checkUsage returns why row's answer cannot count, or "".
func checkUsage(row balanceRow) string {
	u := row.Usage
	switch {
	case u.NodeID != row.ID:
		return fmt.Sprintf("answered as node %q: another server holds its address", u.NodeID)
	case u.CapacityBytes == 0:
		return "reported a capacity of 0 bytes"
	case !(u.OpsPerSecond >= 0 && u.OpsPerSecond <= math.MaxFloat64): // NaN fails too
		return fmt.Sprintf("reported %v ops/s", u.OpsPerSecond)
	}
	return ""
}

// summarizeBalance checks every answer, then summarizes the members that
// count with balance.Summarize. It fails if no member counts; the report
// is still filled for printing.
func summarizeBalance(st client.ClusterStatus, rows []balanceRow) (balanceReport, error) {
	report := balanceReport{Self: st.Self, RingID: st.RingID, Rows: rows}
	var nodes []balance.NodeReport
	for i := range rows {
		if rows[i].Problem == "" {
			rows[i].Problem = checkUsage(rows[i])
		}
		if rows[i].Problem != "" {
			continue
		}
		u := rows[i].Usage
		nodes = append(nodes, balance.NodeReport{ID: ring.NodeID(rows[i].ID), CapacityBytes: u.CapacityBytes,
			StoredBytes: u.StoredBytes, OpsPerSecond: u.OpsPerSecond})
	}
	if len(nodes) == 0 {
		return report, fmt.Errorf("no member of the %d in %s's view answered; see the notes above", len(rows), st.Self)
	}
	summary, err := balance.Summarize(balance.Config{}, balance.Report{Nodes: nodes})
	if err != nil {
		return report, err
	}
	report.Counted, report.Summary = len(nodes), summary
	return report, nil
}

// printBalance writes the report: a header, one line per member, the
// max/mean figures and a note per member left out.
func printBalance(w io.Writer, r balanceReport) {
	fmt.Fprintf(w, "view of %s  ring %s  %d members, %d counted\n", r.Self, r.RingID, len(r.Rows), r.Counted)
	utilization := map[string]float64{}
	for _, n := range r.Summary.Nodes {
		utilization[string(n.ID)] = n.Utilization
	}
	measured, short := false, false
	var stored, logical uint64
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tCAPACITY\tFREE\tSTORED\tLOGICAL\tRECLAIM\tUTILIZATION\tOPS/S")
	for _, row := range r.Rows {
		if row.Problem != "" {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\n", row.ID, row.State)
			continue
		}
		u := row.Usage
		capacity := formatBytes(u.CapacityBytes)
		if !u.CapacityConfigured {
			capacity += "*"
			measured = true
		}
		free := formatBytes(u.FreeBytes)
		if u.FreeBytes < u.MinFreeBytes {
			free += "!"
			short = true
		}
		stored += u.StoredBytes
		logical += u.LogicalBytes
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\n", row.ID, row.State, capacity, free, formatBytes(u.StoredBytes),
			formatBytes(u.LogicalBytes), formatBytes(u.ReclaimBytes), formatPercent(utilization[row.ID]), u.OpsPerSecond)
	}
	_ = tw.Flush()
	if r.Counted > 0 {
		fmt.Fprintf(w, "max/mean utilization %.3f over %d of %d members\n", r.Summary.UtilizationMaxMean, r.Counted, len(r.Rows))
		fmt.Fprintf(w, "max/mean ops/s per byte of capacity %.3f\n", r.Summary.OpsMaxMean)
		if logical > 0 {
			fmt.Fprintf(w, "stored/logical %.2f (on disk, over the bytes of the chunks held)\n", float64(stored)/float64(logical))
		}
	}
	if measured {
		fmt.Fprintln(w, "* measured: the size of the file system holding the node's data directory (no --capacity)")
	}
	if short {
		fmt.Fprintln(w, "! below the node's free-space floor (--min-free): it refuses writes until space is freed")
	}
	for _, row := range r.Rows {
		if row.Problem != "" {
			fmt.Fprintf(w, "note: %s is left out of the figures: %s\n", row.ID, row.Problem)
		}
	}
}

// formatBytes writes n in the largest binary unit that keeps the number at
// least 1, with three significant digits: 512 B, 1.50 KiB, 64.0 MiB,
// 931 GiB.
func formatBytes(n uint64) string {
	if n < 1<<10 {
		return fmt.Sprintf("%d B", n)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v, unit := float64(n)/(1<<10), 0
	for v >= 1<<10 && unit < len(units)-1 {
		v, unit = v/(1<<10), unit+1
	}
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f %s", v, units[unit])
	case v < 100:
		return fmt.Sprintf("%.1f %s", v, units[unit])
	}
	return fmt.Sprintf("%.0f %s", v, units[unit])
}

// formatPercent writes a utilization as a percentage with three
// significant digits down to 0.001%: 250%, 12.5%, 1.88%, 0.047%, <0.001%.
func formatPercent(u float64) string {
	p := u * 100
	switch {
	case p == 0:
		return "0%"
	case p < 0.001:
		return "<0.001%"
	case p < 1:
		return fmt.Sprintf("%.3f%%", p)
	case p < 10:
		return fmt.Sprintf("%.2f%%", p)
	case p < 100:
		return fmt.Sprintf("%.1f%%", p)
	}
	return fmt.Sprintf("%.0f%%", p)
}
