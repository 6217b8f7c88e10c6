package bench

// PostgreSQL as a peer, in a schema of its own (bench_<random>) that is
// dropped at the end. The workloads map onto it as:
//
//   counter   UPDATE c SET v = v + 1 WHERE id = 1 RETURNING v: one
//             statement, its own transaction, row-locked by PostgreSQL.
//   monalisa  an event is one transaction of INSERT INTO events (gen, ts, v)
//             and one UPDATE agg SET sum = sum + v, cnt = cnt + 1 per
//             aggregate (global, site, cluster, machine: always in that
//             order, so transactions never deadlock), sent as one pipelined
//             batch: PostgreSQL runs the statements up to the batch's single
//             Sync as one implicit transaction, committed with one WAL flush
//             or rolled back whole. A read is SELECT sum, cnt FROM agg WHERE
//             agg = $1 AND slot >= $2 AND slot < $3 ORDER BY slot: 50 rows of
//             16 bytes.
//   bank      a row per account. A transfer is BEGIN ISOLATION LEVEL
//             SERIALIZABLE and SELECT of both rows in one pipelined batch,
//             then UPDATE of both (in id order, so transfers never
//             deadlock) and COMMIT in a second batch: two round trips. A
//             serialization failure (SQLSTATE 40001, or 40P01 should a
//             deadlock happen all the same) is rolled back and the transfer
//             run again with tyr's RunTx backoff, counted as an abort.
//
// The durability of the numbers is that of fsync = on and synchronous_commit
// = on (read from the server and recorded with each result): a commit is
// acknowledged once its WAL is flushed.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

type postgresSystem struct {
	url    string
	schema string
	admin  *pgx.Conn
	info   SystemInfo

	// aborts counts the bank's transactions that failed to serialize.
	aborts atomic.Uint64
}

func newPostgresSystem(ctx context.Context, url string) (*postgresSystem, error) {
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s := &postgresSystem{url: url, admin: admin, schema: fmt.Sprintf("bench_%08x", rand.Uint32())}
	var version string
	if err := admin.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		_ = admin.Close(ctx)
		return nil, fmt.Errorf("postgres: server version: %w", err)
	}
	s.info.Version = "postgresql " + version
	var settings []string
	for _, p := range []string{"fsync", "synchronous_commit", "wal_sync_method", "full_page_writes"} {
		var v string
		if err := admin.QueryRow(ctx, "SHOW "+p).Scan(&v); err != nil {
			_ = admin.Close(ctx)
			return nil, fmt.Errorf("postgres: SHOW %s: %w", p, err)
		}
		settings = append(settings, p+"="+v)
	}
	s.info.Settings = strings.Join(settings, " ")
	return s, nil
}

func (s *postgresSystem) Name() string     { return "postgres" }
func (s *postgresSystem) Info() SystemInfo { return s.info }

func (s *postgresSystem) Note(workload string) string {
	switch workload {
	case "counter":
		return "postgres counter: UPDATE c SET v = v + 1 WHERE id = 1 RETURNING v, autocommit"
	case "monalisa":
		return "postgres monalisa: INSERT event + 4 UPDATEs of aggregate rows in one transaction (one pipelined " +
			"batch); a read is a SELECT of 50 aggregate rows"
	case "bank":
		return "postgres bank: a row per account; BEGIN ISOLATION LEVEL SERIALIZABLE + SELECT of both rows, " +
			"then UPDATE both + COMMIT (two pipelined batches); serialization failures rolled back and retried"
	}
	return ""
}

func (s *postgresSystem) retries(workload string) bool { return workload == "bank" }
func (s *postgresSystem) takeAborts() uint64           { return s.aborts.Swap(0) }

func (s *postgresSystem) Open(ctx context.Context) error {
	if _, err := s.admin.Exec(ctx, "CREATE SCHEMA "+s.schema); err != nil {
		return fmt.Errorf("create schema %s: %w", s.schema, err)
	}
	return nil
}

func (s *postgresSystem) Close(ctx context.Context) error {
	_, err := s.admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+s.schema+" CASCADE")
	if err != nil {
		err = fmt.Errorf("drop schema %s: %w", s.schema, err)
	}
	return errors.Join(err, s.admin.Close(ctx))
}

// table qualifies name with the run's schema.
func (s *postgresSystem) table(name string) string { return s.schema + "." + name }

func (s *postgresSystem) CreateCounter(ctx context.Context) error {
	_, err := s.admin.Exec(ctx, fmt.Sprintf(
		"CREATE TABLE %[1]s (id int PRIMARY KEY, v bigint NOT NULL); INSERT INTO %[1]s VALUES (1, 0)", s.table("c")))
	return err
}

// CreateMonalisa creates the events table (a heap without index: an
// append-only log) and every aggregate's slots as rows of zeros.
func (s *postgresSystem) CreateMonalisa(ctx context.Context, l *monalisaLayout) error {
	_, err := s.admin.Exec(ctx, fmt.Sprintf(`
CREATE TABLE %[1]s (gen int NOT NULL, ts bigint NOT NULL, v bigint NOT NULL);
CREATE TABLE %[2]s (agg int, slot int, sum bigint NOT NULL, cnt bigint NOT NULL, PRIMARY KEY (agg, slot));
INSERT INTO %[2]s SELECT a, s, 0, 0 FROM generate_series(0, %[3]d) a, generate_series(0, %[4]d) s`,
		s.table("events"), s.table("agg"), l.aggregates()-1, monalisaSlots-1))
	if err != nil {
		return err
	}
	// VACUUM runs alone: not in the transaction the statements above share.
	_, err = s.admin.Exec(ctx, "VACUUM ANALYZE "+s.table("agg"))
	return err
}

// Conns opens one connection per client.
func (s *postgresSystem) Conns(ctx context.Context, n int) ([]conn, func() error, error) {
	var conns []conn
	closeAll := func() error {
		var err error
		for _, c := range conns {
			err = errors.Join(err, c.(*postgresConn).c.Close(context.WithoutCancel(ctx)))
		}
		return err
	}
	for range n {
		c, err := pgx.Connect(ctx, s.url)
		if err != nil {
			return nil, nil, errors.Join(err, closeAll())
		}
		conns = append(conns, &postgresConn{c: c, s: s})
	}
	return conns, closeAll, nil
}

type postgresConn struct {
	c *pgx.Conn
	s *postgresSystem
}

func (c *postgresConn) Ping(ctx context.Context) error { return c.c.Ping(ctx) }

func (c *postgresConn) Add(ctx context.Context, delta uint64) error {
	var v int64
	return c.c.QueryRow(ctx, "UPDATE "+c.s.table("c")+" SET v = v + $1 WHERE id = 1 RETURNING v",
		int64(delta)).Scan(&v)
}

// Record sends the event's transaction as one batch and checks that every
// aggregate row was there to update.
func (c *postgresConn) Record(ctx context.Context, _ *monalisaLayout, w *monalisaWrite) error {
	b := &pgx.Batch{}
	b.Queue("INSERT INTO "+c.s.table("events")+" (gen, ts, v) VALUES ($1, $2, $3)",
		w.gen, int64(binary.LittleEndian.Uint64(w.event[:8])), int64(w.value))
	update := "UPDATE " + c.s.table("agg") + " SET sum = sum + $1, cnt = cnt + 1 WHERE agg = $2 AND slot = $3"
	for _, a := range w.aggs {
		b.Queue(update, int64(w.value), a, w.slot)
	}
	res := c.c.SendBatch(ctx, b)
	for i := range b.Len() {
		tag, err := res.Exec()
		if err != nil {
			_ = res.Close()
			return err
		}
		if tag.RowsAffected() != 1 {
			_ = res.Close()
			return fmt.Errorf("statement %d of the event's batch changed %d rows, want 1", i, tag.RowsAffected())
		}
	}
	return res.Close()
}

func (c *postgresConn) ReadAggregates(ctx context.Context, _ *monalisaLayout, agg, from, n int) ([]byte, error) {
	rows, err := c.c.Query(ctx, "SELECT sum, cnt FROM "+c.s.table("agg")+
		" WHERE agg = $1 AND slot >= $2 AND slot < $3 ORDER BY slot", agg, from, from+n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]byte, 0, n*slotBytes)
	for rows.Next() {
		var sum, cnt int64
		if err := rows.Scan(&sum, &cnt); err != nil {
			return nil, err
		}
		out = binary.LittleEndian.AppendUint64(out, uint64(sum))
		out = binary.LittleEndian.AppendUint64(out, uint64(cnt))
	}
	return out, rows.Err()
}

// CreateBank creates a row per account with its initial balance.
func (s *postgresSystem) CreateBank(ctx context.Context, l bankLayout) error {
	_, err := s.admin.Exec(ctx, fmt.Sprintf(`
CREATE TABLE %[1]s (id int PRIMARY KEY, bal bigint NOT NULL);
INSERT INTO %[1]s SELECT a, %[2]d FROM generate_series(0, %[3]d) a`, s.table("bank"), bankInitial, l.accounts-1))
	if err != nil {
		return err
	}
	_, err = s.admin.Exec(ctx, "VACUUM ANALYZE "+s.table("bank"))
	return err
}

func (s *postgresSystem) Balances(ctx context.Context, l bankLayout) ([]uint64, error) {
	rows, err := s.admin.Query(ctx, "SELECT id, bal FROM "+s.table("bank")+" ORDER BY id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]uint64, 0, l.accounts)
	for rows.Next() {
		var id, bal int64
		if err := rows.Scan(&id, &bal); err != nil {
			return nil, err
		}
		if id != int64(len(out)) {
			return nil, fmt.Errorf("account %d missing", len(out))
		}
		if bal < 0 {
			return nil, fmt.Errorf("account %d holds %d", id, bal)
		}
		out = append(out, uint64(bal))
	}
	return out, rows.Err()
}

// Transfer runs the transfer's transaction until it commits, rolling back
// each attempt that failed to serialize.
func (c *postgresConn) Transfer(ctx context.Context, _ bankLayout, t *transfer) error {
	return retry(ctx, &c.s.aborts, func() (bool, error) {
		err := c.transfer(ctx, t)
		if err == nil {
			return true, nil
		}
		if c.c.PgConn().TxStatus() != 'I' {
			if _, rerr := c.c.Exec(ctx, "ROLLBACK"); rerr != nil {
				return false, errors.Join(err, fmt.Errorf("rollback: %w", rerr))
			}
		}
		var pe *pgconn.PgError
		if errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01") {
			return false, nil
		}
		return false, err
	})
}

// transfer is one attempt: it commits, or fails leaving the transaction
// for the caller to roll back.
func (c *postgresConn) transfer(ctx context.Context, t *transfer) error {
	lo, hi := t.ordered()
	read := &pgx.Batch{}
	read.Queue("BEGIN ISOLATION LEVEL SERIALIZABLE")
	read.Queue("SELECT id, bal FROM "+c.s.table("bank")+" WHERE id = $1 OR id = $2", lo, hi)
	bal := map[int]int64{}
	err := runBatch(c.c.SendBatch(ctx, read), func(res pgx.BatchResults) error {
		if _, err := res.Exec(); err != nil {
			return err
		}
		rows, err := res.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			var id int
			var b int64
			if err := rows.Scan(&id, &b); err != nil {
				rows.Close()
				return err
			}
			bal[id] = b
		}
		rows.Close()
		return rows.Err()
	})
	if err != nil {
		return err
	}
	if len(bal) != 2 || bal[lo] < 0 || bal[hi] < 0 {
		return fmt.Errorf("accounts %d and %d read as %v", lo, hi, bal)
	}
	from, to := t.apply(uint64(bal[t.from]), uint64(bal[t.to]))
	after := map[int]uint64{t.from: from, t.to: to}
	update := "UPDATE " + c.s.table("bank") + " SET bal = $1 WHERE id = $2"
	write := &pgx.Batch{}
	write.Queue(update, int64(after[lo]), lo)
	write.Queue(update, int64(after[hi]), hi)
	write.Queue("COMMIT")
	return runBatch(c.c.SendBatch(ctx, write), func(res pgx.BatchResults) error {
		for i := range 2 {
			tag, err := res.Exec()
			if err != nil {
				return err
			}
			if tag.RowsAffected() != 1 {
				return fmt.Errorf("update %d of the transfer changed %d rows, want 1", i, tag.RowsAffected())
			}
		}
		tag, err := res.Exec()
		if err == nil && tag.String() != "COMMIT" {
			// PostgreSQL answers COMMIT of a failed transaction with
			// ROLLBACK, not an error.
			err = fmt.Errorf("commit answered %q", tag.String())
		}
		return err
	})
}

// runBatch reads a batch's results with fn and closes it, which the
// connection needs before its next statement.
func runBatch(res pgx.BatchResults, fn func(pgx.BatchResults) error) error {
	err := fn(res)
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	return err
}
