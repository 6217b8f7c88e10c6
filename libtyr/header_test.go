package main

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/limits"
)

// TestHeaderLimits checks that tyr.h states the limits the server enforces.
func TestHeaderLimits(t *testing.T) {
	h, err := os.ReadFile("tyr.h")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{
		"TYR_PAYLOAD_BYTES_MAX":       client.PayloadBytesMax,
		"TYR_KEY_BYTES_MAX":           client.KeyBytesMax,
		"TYR_KEYSPACE_NAME_BYTES_MAX": limits.KeyspaceNameBytesMax,
		"TYR_BLOB_BYTES_MAX":          client.BlobBytesMax,
		"TYR_LIST_LIMIT_MAX":          client.ListLimitMax,
		"TYR_CAS_BYTES_MAX":           client.CASBytesMax,
		"TYR_OPS_PER_TX_MAX":          client.OpsPerTxMax,
		"TYR_READ_CHECKS_MAX":         client.ReadChecksMax,
		"TYR_FS_FETCH_MANY_MAX":       limits.FSFetchManyMax,
		"TYR_FS_GROUPS_MAX":           limits.FSGroupsMax,
	}
	def := regexp.MustCompile(`(?m)^#define (TYR_[A-Z_]+_MAX) \(?(?:UINT64_C\()?(\d+)u?\)?(?: << (\d+)\)?)?`)
	seen := 0
	for _, m := range def.FindAllStringSubmatch(string(h), -1) {
		w, ok := want[m[1]]
		if !ok {
			continue
		}
		v, _ := strconv.ParseUint(m[2], 10, 64)
		if m[3] != "" {
			s, _ := strconv.Atoi(m[3])
			v <<= s
		}
		if v != w {
			t.Errorf("tyr.h: %s is %d, the server's limit is %d", m[1], v, w)
		}
		seen++
	}
	if seen != len(want) {
		t.Errorf("tyr.h: found %d of the %d limits", seen, len(want))
	}
}
