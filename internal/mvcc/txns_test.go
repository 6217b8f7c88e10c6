package mvcc

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/txn"
)

// TestTxnRecords: a chain commit's transaction record is written with the
// commit (and not without it), and is collected after
// TxnRecordRetention.
func TestTxnRecords(t *testing.T) {
	clock := newFakeClock()
	s := openStore(t, Options{MVCC: true, Now: clock.Now})
	p, err := s.TryPrepare([]txn.Op{writeOp("a", "one")})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RecordTxn("c/1", []byte("results")); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Txn("c/1"); ok || err != nil {
		t.Fatalf("record visible before the commit: %t, %v", ok, err)
	}
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	p, err = s.TryPrepare([]txn.Op{writeOp("a", "two")})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RecordTxn("c/2", nil); err != nil {
		t.Fatal(err)
	}
	p.Abort()
	if err := s.PutTxn("c/3", []byte{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id      string
		ok      bool
		payload []byte
	}{{"c/1", true, []byte("results")}, {"c/2", false, nil}, {"c/3", true, nil}} {
		got, ok, err := s.Txn(tc.id)
		if err != nil || ok != tc.ok || !bytes.Equal(got, tc.payload) {
			t.Fatalf("Txn(%s) = %q, %t, %v; want %q, %t", tc.id, got, ok, err, tc.payload, tc.ok)
		}
	}
	if err := s.PutTxn("", nil); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("PutTxn with an empty ID: %v, want ErrInvalidArgument", err)
	}
	clock.Advance(TxnRecordRetention - 1)
	if _, err := s.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Txn("c/1"); !ok {
		t.Fatal("record collected before its retention passed")
	}
	clock.Advance(2)
	if _, err := s.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c/1", "c/3"} {
		if _, ok, err := s.Txn(id); ok || err != nil {
			t.Fatalf("record %s after its retention: %t, %v", id, ok, err)
		}
	}
}

func TestMissedRecords(t *testing.T) {
	clock := newFakeClock()
	s := openStore(t, Options{MVCC: true, Now: clock.Now})
	if err := s.PutMissed("c/1"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutMissed(""); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("PutMissed with an empty ID: %v, want ErrInvalidArgument", err)
	}
	for id, want := range map[string]bool{"c/1": true, "c/2": false} {
		if got, err := s.Missed(id); got != want || err != nil {
			t.Fatalf("Missed(%s) = %t, %v; want %t", id, got, err, want)
		}
	}
	if _, ok, _ := s.Txn("c/1"); ok {
		t.Fatal("a missed record reads as a transaction record")
	}
	clock.Advance(MissedRetention - 1)
	if _, err := s.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.Missed("c/1"); !ok {
		t.Fatal("missed record collected before its retention passed")
	}
	clock.Advance(2)
	if _, err := s.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Missed("c/1"); ok || err != nil {
		t.Fatalf("missed record after its retention: %t, %v", ok, err)
	}
}

func TestResultsRoundTrip(t *testing.T) {
	in := []txn.Result{{Offset: 1, Size: 2, Version: 3, Value: 4}, {Unheld: true, Value: 1 << 63}, {}}
	out, err := txn.DecodeResults(txn.EncodeResults(in))
	if err != nil || len(out) != len(in) {
		t.Fatalf("round trip: %v, %v", out, err)
	}
	for i := range in {
		if in[i] != out[i] {
			t.Fatalf("result %d: %+v, want %+v", i, out[i], in[i])
		}
	}
	if _, err := txn.DecodeResults([]byte{1, 2, 3}); !errors.Is(err, errs.ErrCorruption) {
		t.Fatalf("a truncated encoding decoded: %v", err)
	}
}

// TestClientRecords: a commit's client ID record is written with the
// commit (not without it) and names the chain transaction; a fence is
// read back with its vouched bit; both are collected after
// TxnRecordRetention.
func TestClientRecords(t *testing.T) {
	clock := newFakeClock()
	s := openStore(t, Options{MVCC: true, Now: clock.Now})
	committed, aborted, passed, fenced := []byte("client-1"), []byte("client-2"), []byte("client-3"), []byte("client-4")
	partA, partB := []byte("client-6"), []byte("client-7")
	p, err := s.TryPrepare([]txn.Op{writeOp("a", "one")})
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(p.RecordTxn("c/1", []byte("results")), p.RecordClients([]ClientPart{{ID: committed}}, "c/1")); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Client(committed); ok || err != nil {
		t.Fatalf("client record visible before the commit: %t, %v", ok, err)
	}
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	p, err = s.TryPrepare([]txn.Op{writeOp("a", "two")})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RecordClients([]ClientPart{{ID: aborted}}, "c/2"); err != nil {
		t.Fatal(err)
	}
	p.Abort()
	if err := errors.Join(s.PutClients([]ClientPart{{ID: passed}}, "c/3"), s.FenceClient(fenced, true),
		s.PutClients([]ClientPart{{ID: partA, From: 0, To: 2}, {ID: partB, From: 2, To: 5}}, "c/4")); err != nil {
		t.Fatal(err)
	}
	// A part's range must be a non-empty run of ops; a bad one changes
	// nothing.
	if err := s.PutClients([]ClientPart{{ID: []byte("client-8"), From: 3, To: 3}}, "c/5"); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("an empty op range: %v", err)
	}
	if _, ok, _ := s.Client([]byte("client-8")); ok {
		t.Fatal("a refused part was recorded")
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id   []byte
		ok   bool
		want ClientRecord
	}{
		{committed, true, ClientRecord{Committed: true, Txn: "c/1"}},
		{aborted, false, ClientRecord{}},
		{passed, true, ClientRecord{Committed: true, Txn: "c/3"}},
		{fenced, true, ClientRecord{Fenced: true, Vouched: true}},
		{partA, true, ClientRecord{Committed: true, Txn: "c/4", From: 0, To: 2}},
		{partB, true, ClientRecord{Committed: true, Txn: "c/4", From: 2, To: 5}},
	} {
		got, ok, err := s.Client(tc.id)
		if err != nil || ok != tc.ok || got != tc.want {
			t.Fatalf("Client(%s) = %+v, %t, %v; want %+v, %t", tc.id, got, ok, err, tc.want, tc.ok)
		}
	}
	if err := s.FenceClient([]byte("client-5"), false); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.Client([]byte("client-5")); err != nil || !ok || got.Vouched || !got.Fenced {
		t.Fatalf("unvouched fence read back as %+v, %t, %v", got, ok, err)
	}
	if err := s.FenceClient(nil, false); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("fence of an empty client ID: %v, want ErrInvalidArgument", err)
	}
	clock.Advance(TxnRecordRetention - 1)
	if _, err := s.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Client(fenced); !ok {
		t.Fatal("fence collected before its retention passed")
	}
	clock.Advance(2)
	if _, err := s.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
	for _, id := range [][]byte{committed, passed, fenced} {
		if _, ok, err := s.Client(id); ok || err != nil {
			t.Fatalf("client record %s after its retention: %t, %v", id, ok, err)
		}
	}
}
