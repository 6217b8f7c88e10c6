package cli

// These tests cover `tyr cluster balance` without a server: the parsing of
// --capacity at its bounds, the formatting of sizes and percentages, the
// rows a cluster status gives, the summary when members are unreachable,
// dead or answer nonsense, and the printed table, line for line. Run:
// go test -run 'Capacit|Format|Balance' ./internal/cli

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/tyrstore/tyr/client"
)

func TestParseCapacity(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		err  string // a part of the error, "" for none
	}{
		{"", 0, ""},
		{"1MiB", 1 << 20, ""},
		{"1048576", 1 << 20, ""},
		{"500GiB", 500 << 30, ""},
		{"500gib", 500 << 30, ""},
		{"4TiB", 4 << 40, ""},
		{"1048576TiB", 1 << 60, ""},
		{"1048575", 0, "at least 1MiB"},
		{"500", 0, "at least 1MiB"},
		{"1048577TiB", 0, "at most 1048576TiB (1 EiB)"},
		{"-1GiB", 0, "must not be negative"},
		{"1.5TiB", 0, "want bytes, optionally with KiB, MiB, GiB or TiB"},
		{"2GB", 0, "want bytes"},
		{"lots", 0, "want bytes"},
		{"99999999999TiB", 0, "too large"},
	} {
		got, err := parseCapacity("--capacity", tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("parseCapacity(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--capacity")):
			t.Errorf("parseCapacity(%q) = %d, %v; want an error naming --capacity and containing %q", tc.in, got, err, tc.err)
		}
	}
}

func TestParseCapacities(t *testing.T) {
	got, err := parseCapacities("64MiB, 128MiB,256MiB", 3)
	if err != nil || len(got) != 3 || got[0] != 64<<20 || got[1] != 128<<20 || got[2] != 256<<20 {
		t.Errorf("one per node: %v, %v", got, err)
	}
	got, err = parseCapacities("1GiB", 4)
	if err != nil || len(got) != 4 || got[3] != 1<<30 {
		t.Errorf("one for all: %v, %v", got, err)
	}
	if got, err := parseCapacities("", 3); got != nil || err != nil {
		t.Errorf("none: %v, %v; want nil, nil", got, err)
	}
	for in, want := range map[string]string{
		"1GiB,2GiB":       "2 values for 3 nodes",
		"1GiB,,2GiB":      "value 2 is empty",
		"1GiB,2GiB,3KiB":  "at least 1MiB",
		"1GiB,2GiB,4GiB,": "4 values for 3 nodes",
	} {
		if _, err := parseCapacities(in, 3); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseCapacities(%q): %v, want an error containing %q", in, err, want)
		}
	}
}

func TestFormatBytesAndPercent(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.00 KiB", 1536: "1.50 KiB", 64 << 20: "64.0 MiB",
		128 << 20: "128 MiB", 931 << 30: "931 GiB", 1 << 60: "1.00 EiB", math.MaxUint64: "16.0 EiB",
	} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
	for u, want := range map[float64]string{
		0: "0%", 0.000001: "<0.001%", 0.00047: "0.047%", 0.0188: "1.88%", 0.125: "12.5%", 1: "100%", 2.5: "250%",
	} {
		if got := formatPercent(u); got != want {
			t.Errorf("formatPercent(%v) = %q, want %q", u, got, want)
		}
	}
}

// balanceStatus is a view of five members: one left, one dead, the rest
// alive or suspect.
func balanceStatus() client.ClusterStatus {
	return client.ClusterStatus{Self: "node1", RingID: "4ef0c52e291dd4db", Members: []client.ClusterMember{
		{ID: "node1", State: client.StateAlive, RPCAddr: "127.0.0.1:7520"},
		{ID: "node2", State: client.StateSuspect, RPCAddr: "127.0.0.1:7522"},
		{ID: "node3", State: client.StateAlive, RPCAddr: "127.0.0.1:7524"},
		{ID: "node4", State: client.StateDead, RPCAddr: "127.0.0.1:7526"},
		{ID: "node5", State: client.StateLeft, RPCAddr: "127.0.0.1:7528"},
	}}
}

func TestBalanceRows(t *testing.T) {
	rows := balanceRows(balanceStatus())
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4 (the left member is not listed): %+v", len(rows), rows)
	}
	for i, row := range rows {
		asked := row.Problem == ""
		if want := row.ID != "node4"; asked != want {
			t.Errorf("row %d (%s, %s): asked %v, want %v (problem %q)", i, row.ID, row.State, asked, want, row.Problem)
		}
	}
	if !strings.Contains(rows[3].Problem, "dead in node1's view") {
		t.Errorf("dead member's problem: %q", rows[3].Problem)
	}
}

// TestBalanceSummary_leftOut gives answers from node1 and node3, none
// from node2 (unreachable) and node4 (dead), and checks that max/mean
// covers node1 and node3 only and the table says why the others are out.
func TestBalanceSummary_leftOut(t *testing.T) {
	rows := balanceRows(balanceStatus())
	rows[0].Usage = client.NodeUsage{NodeID: "node1", CapacityBytes: 64 << 20, CapacityConfigured: true,
		StoredBytes: 32 << 20, OpsPerSecond: 12.5, LogicalBytes: 16 << 20, ReclaimBytes: 8 << 20, FreeBytes: 1 << 20, MinFreeBytes: 2 << 20}
	rows[1].Problem = "unreachable: no answer from 127.0.0.1:7522 within 5s"
	rows[2].Usage = client.NodeUsage{NodeID: "node3", CapacityBytes: 256 << 20, StoredBytes: 32 << 20, LogicalBytes: 16 << 20, FreeBytes: 200 << 20}
	report, err := summarizeBalance(balanceStatus(), rows)
	if err != nil {
		t.Fatal(err)
	}
	// Utilizations 0.5 and 0.125: mean 0.3125, max/mean 1.6.
	if report.Counted != 2 || math.Abs(report.Summary.UtilizationMaxMean-1.6) > 1e-12 {
		t.Errorf("counted %d, max/mean %v; want 2, 1.6", report.Counted, report.Summary.UtilizationMaxMean)
	}
	var out bytes.Buffer
	printBalance(&out, report)
	want := `view of node1  ring 4ef0c52e291dd4db  4 members, 2 counted
NODE   STATE    CAPACITY  FREE       STORED    LOGICAL   RECLAIM   UTILIZATION  OPS/S
node1  alive    64.0 MiB  1.00 MiB!  32.0 MiB  16.0 MiB  8.00 MiB  50.0%        12.5
node2  suspect  -         -          -         -         -         -            -
node3  alive    256 MiB*  200 MiB    32.0 MiB  16.0 MiB  0 B       12.5%        0.0
node4  dead     -         -          -         -         -         -            -
max/mean utilization 1.600 over 2 of 4 members
max/mean ops/s per byte of capacity 2.000
stored/logical 2.00 (on disk, over the bytes of the chunks held)
* measured: the size of the file system holding the node's data directory (no --capacity)
! below the node's free-space floor (--min-free): it refuses writes until space is freed
note: node2 is left out of the figures: unreachable: no answer from 127.0.0.1:7522 within 5s
note: node4 is left out of the figures: dead in node1's view, not asked
`
	if out.String() != want {
		t.Errorf("printed:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestBalanceSummary_badAnswers checks that an answer from the wrong node
// or with impossible figures is left out, and that a report with no member
// left is an error that still prints every note.
func TestBalanceSummary_badAnswers(t *testing.T) {
	rows := balanceRows(balanceStatus())[:3]
	rows[0].Usage = client.NodeUsage{NodeID: "node9", CapacityBytes: 1 << 30}
	rows[1].Usage = client.NodeUsage{NodeID: "node2"}
	rows[2].Usage = client.NodeUsage{NodeID: "node3", CapacityBytes: 1 << 30, OpsPerSecond: math.NaN()}
	report, err := summarizeBalance(balanceStatus(), rows)
	if err == nil || !strings.Contains(err.Error(), "no member of the 3 in node1's view answered") {
		t.Fatalf("error %v, want one saying no member answered", err)
	}
	var out bytes.Buffer
	printBalance(&out, report)
	for _, want := range []string{
		`note: node1 is left out of the figures: answered as node "node9": another server holds its address`,
		"note: node2 is left out of the figures: reported a capacity of 0 bytes",
		"note: node3 is left out of the figures: reported NaN ops/s",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "max/mean") {
		t.Errorf("a figure over no member:\n%s", out.String())
	}
}
