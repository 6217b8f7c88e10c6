package server

import (
	"fmt"
	"testing"

	"github.com/tyrstore/tyr/api/tyrpb"
)

func blobs(spec ...string) []*tyrpb.BlobInfo {
	out := make([]*tyrpb.BlobInfo, 0, len(spec))
	for _, s := range spec {
		var key string
		var version uint64
		if _, err := fmt.Sscanf(s, "%s %d", &key, &version); err != nil {
			panic(err)
		}
		out = append(out, &tyrpb.BlobInfo{Key: key, Version: version})
	}
	return out
}

func keysOf(bs []*tyrpb.BlobInfo) string {
	s := ""
	for _, b := range bs {
		s += fmt.Sprintf("%s@%d ", b.GetKey(), b.GetVersion())
	}
	return s
}

// Merged listings are sorted, hold each key once at its newest version,
// and are cut at the limit.
func TestMergeListings(t *testing.T) {
	lists := [][]*tyrpb.BlobInfo{
		blobs("a 1", "c 5", "e 1"),
		blobs("b 2", "c 7", "d 1"),
		blobs("c 6", "f 3"),
	}
	got, cut := mergeListings(lists, 10)
	if keysOf(got) != "a@1 b@2 c@7 d@1 e@1 f@3 " || cut {
		t.Errorf("merge = %s cut %t", keysOf(got), cut)
	}
	got, cut = mergeListings(lists, 3)
	if keysOf(got) != "a@1 b@2 c@7 " || !cut {
		t.Errorf("merge with limit 3 = %s cut %t", keysOf(got), cut)
	}
	got, cut = mergeListings(lists, 6)
	if len(got) != 6 || cut {
		t.Errorf("merge with limit 6 = %s cut %t; want all six, not cut", keysOf(got), cut)
	}
}
