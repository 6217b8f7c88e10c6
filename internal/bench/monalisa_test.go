package bench

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestPowerLawFollowsItsExponent(t *testing.T) {
	const n, samples = 10, 400000
	rng := rand.New(rand.NewPCG(5, 6))
	for _, s := range []float64{0, 1, 2} {
		p := newPowerLaw(n, s)
		var counts [n]int
		for range samples {
			k := p.pick(rng)
			if k < 0 || k >= n {
				t.Fatalf("s=%v: rank %d out of [0, %d)", s, k, n)
			}
			counts[k]++
		}
		// P(k) = (k+1)^-s / sum over ranks.
		total := 0.0
		for k := range n {
			total += math.Pow(float64(k+1), -s)
		}
		for _, k := range []int{0, 1, n - 1} {
			want := math.Pow(float64(k+1), -s) / total
			got := float64(counts[k]) / samples
			// Five standard deviations of a binomial proportion.
			if tol := 5 * math.Sqrt(want*(1-want)/samples); math.Abs(got-want) > tol {
				t.Errorf("s=%v: rank %d drawn %.4f of the time, want %.4f ± %.4f", s, k, got, want, tol)
			}
		}
	}
	if got := newPowerLaw(1, 1).pick(rng); got != 0 {
		t.Errorf("one rank: picked %d", got)
	}
}

func TestMonalisaLayout(t *testing.T) {
	l := newMonalisaLayout(1000, time.Unix(0, 0))
	if l.machines != 100 || l.clusters != 10 || l.sites != 2 || l.aggregates() != 113 {
		t.Fatalf("1000 generators: %d machines, %d clusters, %d sites, %d aggregates; want 100, 10, 2, 113",
			l.machines, l.clusters, l.sites, l.aggregates())
	}
	for gen, want := range map[int][aggLevels]int{
		0:   {0, 1, 3, 13},
		9:   {0, 1, 3, 13},
		10:  {0, 1, 3, 14},
		499: {0, 1, 7, 62},
		500: {0, 2, 8, 63},
		999: {0, 2, 12, 112},
	} {
		if got := l.aggsOf(gen); got != want {
			t.Errorf("aggregates of generator %d = %v, want %v", gen, got, want)
		}
	}
	names := map[string]bool{}
	for a := range l.aggregates() {
		lv, i := l.level(a)
		name := l.aggKey(a)
		if !strings.HasPrefix(name, "agg/"+levelNames[lv]) || names[name] {
			t.Errorf("aggregate %d (level %d, #%d) named %q", a, lv, i, name)
		}
		names[name] = true
	}
	if got := l.aggKey(112); got != "agg/machine/99" {
		t.Errorf("last aggregate is %q, want agg/machine/99", got)
	}
	one := newMonalisaLayout(1, time.Unix(0, 0))
	if one.aggregates() != 4 || one.aggsOf(0) != [aggLevels]int{0, 1, 2, 3} {
		t.Errorf("one generator: %d aggregates, %v", one.aggregates(), one.aggsOf(0))
	}
}

func TestMonalisaWrite(t *testing.T) {
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newMonalisaLayout(1000, epoch)
	at := epoch.Add(3*time.Minute + 30*time.Second)
	w := l.write(505, at, 42)
	if w.slot != 3 || w.aggs != l.aggsOf(505) || w.gen != 505 || w.value != 42 {
		t.Errorf("write = %+v", w)
	}
	if ts := binary.LittleEndian.Uint64(w.event[:8]); ts != uint64(at.UnixNano()) {
		t.Errorf("event timestamp %d, want %d", ts, at.UnixNano())
	}
	if v := binary.LittleEndian.Uint64(w.event[8:]); v != 42 {
		t.Errorf("event value %d, want 42", v)
	}
	for d, want := range map[time.Duration]int{-time.Hour: 0, 0: 0, 59 * time.Minute: 59, 61 * time.Minute: 1} {
		if got := l.slot(epoch.Add(d)); got != want {
			t.Errorf("slot at epoch%+v = %d, want %d", d, got, want)
		}
	}
	for d, want := range map[time.Duration]int{0: 0, 49 * time.Minute: 0, 50 * time.Minute: 1, 59 * time.Minute: 10} {
		from := l.readFrom(epoch.Add(d))
		if from != want || from+readSlots > monalisaSlots {
			t.Errorf("read at epoch+%v starts at slot %d, want %d within the ring", d, from, want)
		}
	}
	if got := len(tyrMonalisaOps(l, &w)); got != 1+2*aggLevels {
		t.Errorf("tyr commit of %d ops, want the append and two adds per aggregate", got)
	}
	if slotOffset(3) != 48 {
		t.Errorf("slot 3 at offset %d, want 48", slotOffset(3))
	}
}

func TestAddToSlot(t *testing.T) {
	got := addToSlot(nil, 7) // past the end: zeros
	if binary.LittleEndian.Uint64(got) != 7 || binary.LittleEndian.Uint64(got[8:]) != 1 {
		t.Errorf("empty slot + 7 = %x", got)
	}
	got = addToSlot(got, 5)
	if binary.LittleEndian.Uint64(got) != 12 || binary.LittleEndian.Uint64(got[8:]) != 2 || len(got) != slotBytes {
		t.Errorf("slot (7, 1) + 5 = %x", got)
	}
}

func TestCheckTotals(t *testing.T) {
	cfg := &Config{}
	ok := [aggLevels]uint64{10, 10, 10, 10}
	sums := [aggLevels]uint64{99, 99, 99, 99}
	if err := checkTotals(ok, sums, 10, 9, cfg); err != nil {
		t.Errorf("consistent totals: %v", err)
	}
	for name, c := range map[string]struct {
		count, sum      [aggLevels]uint64
		logged, acked   uint64
		wantInTheReport string
	}{
		"a level lost an event": {[aggLevels]uint64{10, 10, 9, 10}, sums, 10, 10, "cluster"},
		"a level lost a value":  {ok, [aggLevels]uint64{99, 99, 99, 98}, 10, 10, "machine"},
		"an uncounted event":    {ok, sums, 11, 10, "logs hold 11"},
		"a lost event":          {ok, sums, 10, 11, "lost events"},
	} {
		err := checkTotals(c.count, c.sum, c.logged, c.acked, cfg)
		if err == nil || !strings.Contains(err.Error(), c.wantInTheReport) {
			t.Errorf("%s: got %v, want an error mentioning %q", name, err, c.wantInTheReport)
		}
	}
}

func TestConfigErrorsNameTheFlag(t *testing.T) {
	for want, edit := range map[string]func(*Config){
		"--zookeeper and --zk-redis": func(c *Config) { c.ZooKeeper = "127.0.0.1:2181" },
		"--agg \"add\"":              func(c *Config) { c.Agg = []string{"atomic", "add"} },
		"--agg: need":                func(c *Config) { c.Agg = nil },
		"--generators 0":             func(c *Config) { c.Generators = 0 },
		"--read-ratio 1.5":           func(c *Config) { c.ReadRatio = 1.5 },
		"--read-ratio NaN":           func(c *Config) { c.ReadRatio = math.NaN() },
		"unknown workload \"lisa\"":  func(c *Config) { c.Workload = "lisa" },
	} {
		cfg := DefaultConfig()
		cfg.Workload = "monalisa"
		edit(&cfg)
		if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an error with %q", err, want)
		}
	}
	cfg := DefaultConfig()
	cfg.Workload = "monalisa"
	if err := cfg.validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}
