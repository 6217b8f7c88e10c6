package cli

import (
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/server"
)

func TestBlockCacheAuto(t *testing.T) {
	for _, c := range []struct{ memory, want uint64 }{
		{0, 128 << 20},         // memory not known
		{256 << 20, 128 << 20}, // a small machine or cgroup: the floor
		{24 << 30, 6 << 30},
	} {
		if got := autoBlockCache(c.memory); got != c.want {
			t.Errorf("autoBlockCache(%d) = %d, want %d", c.memory, got, c.want)
		}
	}
	mem := memoryBytes()
	if mem == 0 {
		t.Fatal("memoryBytes: 0 on Linux, where sysinfo gives the machine's memory")
	}
	got, err := parseBlockCache("auto")
	if err != nil {
		t.Fatal(err)
	}
	if got != max(mem/4, blockCacheAutoMin) {
		t.Errorf("--block-cache auto = %d with %d bytes of memory", got, mem)
	}
	if got, err := parseBlockCache("40MiB"); err != nil || got != 40<<20 {
		t.Errorf("--block-cache 40MiB = %d, %v", got, err)
	}
	if _, err := parseBlockCache("lots"); err == nil {
		t.Error("--block-cache lots accepted")
	}
}

func TestCheckSweepGrace(t *testing.T) {
	for d, ok := range map[time.Duration]bool{time.Second: true, server.HiddenGraceDefault: true, 999 * time.Millisecond: false, 0: false, -time.Minute: false} {
		if err := checkSweepGrace(d); (err == nil) != ok {
			t.Errorf("checkSweepGrace(%v): %v, want ok %v", d, err, ok)
		}
	}
}
