package s3gw

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"testing/iotest"
	"time"

	"github.com/versity/versitygw/s3response"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/testserver"
)

// backendOn starts a server with keyspace ks and returns a context for the
// test, a client and a Backend over it.
func backendOn(t *testing.T, ks string) (context.Context, *client.Client, *Backend) {
	t.Helper()
	c := testserver.Start(t).Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	if _, err := c.CreateKeyspace(ctx, ks, client.DefaultKeyspaceConfig()); err != nil {
		t.Fatal(err)
	}
	return ctx, c, New(c, client.DefaultKeyspaceConfig())
}

// The sweep keeps what the invariants of large.go keep and deletes the
// rest: a manifest object's data and manifest stay; an upload in progress
// stays; a manifest no sidecar names (a PUT raced the one that published
// it), the data of a replaced object, part records and data of an upload
// gone, and uploads older than UploadAgeMax go.
func TestSweep(t *testing.T) {
	ctx, c, b := backendOn(t, "sweep")
	put := func(key string, v any) {
		t.Helper()
		if err := b.putJSON(ctx, "sweep", key, v); err != nil {
			t.Fatal(err)
		}
	}
	data := func(id string, n int) string {
		t.Helper()
		k := dataKey(id, n)
		if _, err := c.WriteCreate(ctx, "sweep", k, 0, []byte("part")); err != nil {
			t.Fatal(err)
		}
		return k
	}
	// live: object "a" is a manifest object of upload live.
	live := newUploadID()
	liveData := data(live, 1)
	put(manifestKey(live), manifest{Key: "a", Parts: []extent{{Blob: liveData, Size: 4}}})
	put(metaKey("a"), meta{ETag: `"x-1"`, Size: 4, Upload: live})
	if _, err := c.WriteCreate(ctx, "sweep", "a", 0, nil); err != nil {
		t.Fatal(err)
	}
	// orphan: a manifest of "a" too, which a racing PUT replaced.
	orphan := newUploadID()
	data(orphan, 1)
	put(manifestKey(orphan), manifest{Key: "a", Parts: []extent{{Blob: dataKey(orphan, 1), Size: 4}}})
	// unused: an attempt at part 2 of live that no manifest lists.
	unused := data(live, 2)
	// busy: an upload in progress with a part.
	busy := newUploadID()
	put(uploadKey(busy), upload{Key: "b", Initiated: time.Now()})
	busyData := data(busy, 1)
	put(partKey(busy, 1), part{Blob: busyData, Size: 4})
	// gone: an aborted upload's part record and data.
	gone := newUploadID()
	data(gone, 1)
	put(partKey(gone, 1), part{Blob: dataKey(gone, 1), Size: 4})
	// old: an upload in progress for longer than UploadAgeMax.
	old := uploadIDAt(time.Now().Add(-UploadAgeMax - time.Hour))
	put(uploadKey(old), upload{Key: "c"})
	data(old, 1)

	if err := b.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	left, err := b.keys(ctx, "sweep", internalPrefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{manifestKey(live), liveData, busyData, partKey(busy, 1), uploadKey(busy)}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Fatalf("after the sweep:\n got %q\nwant %q", left, want)
	}
	if slices.Contains(left, unused) {
		t.Fatal("an unused part attempt survived")
	}
	// The object still reads whole.
	o, _, _, err := b.read(ctx, "sweep", "a", true, "")
	if err != nil || o.man == nil || o.size != 4 {
		t.Fatalf("object a after the sweep: %+v, %v", o, err)
	}
	// A second sweep finds nothing more to delete.
	if err := b.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	again, _ := b.keys(ctx, "sweep", internalPrefix, nil)
	if !slices.Equal(again, want) {
		t.Fatalf("second sweep: %q", again)
	}
	var m meta
	if err := b.readJSON(ctx, "sweep", metaKey("a"), metaBytesMax, &m); err != nil || m.Upload != live {
		t.Fatalf("sidecar of a: %+v, %v", m, err)
	}
	if _, err := c.Stat(ctx, "sweep", uploadKey(old)); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("expired upload: %v", err)
	}
}

// A large PUT whose body fails half-way leaves no object, no upload in
// progress and no data.
func TestFailedPutLeavesNothing(t *testing.T) {
	ctx, _, b := backendOn(t, "failed")
	broken := io.MultiReader(bytes.NewReader(make([]byte, ObjectBytesMax+3<<20)), iotest.ErrReader(errors.New("connection reset")))
	if _, err := b.store(ctx, "failed", "big", broken, meta{}); err == nil {
		t.Fatal("a PUT whose body failed succeeded")
	}
	left, err := b.keys(ctx, "failed", "", nil)
	if err != nil || len(left) != 0 {
		t.Fatalf("after a failed PUT: %q, %v", left, err)
	}
}

// A listing's ETags are the sidecars' when the objects have them, listed
// with their bytes or read where that listing stops short (the sidecars of
// keys grouped under a common prefix fill it), and made from the version
// for objects written natively.
func TestListETags(t *testing.T) {
	ctx, c, b := backendOn(t, "etags")
	want := map[string]string{}
	put := func(key string) {
		t.Helper()
		body := []byte("object " + key)
		out, err := b.PutObject(ctx, s3response.PutObjectInput{Bucket: ptr("etags"), Key: ptr(key), Body: bytes.NewReader(body)})
		if err != nil {
			t.Fatal(err)
		}
		sum := md5.Sum(body)
		if want[key] = quoted(sum[:]); out.ETag != want[key] {
			t.Fatalf("PUT %s: ETag %s, want %s", key, out.ETag, want[key])
		}
	}
	for i := range 30 {
		put(fmt.Sprintf("g/%02d", i))
	}
	put("o1")
	put("o3")
	if _, err := c.WriteCreate(ctx, "etags", "o2", 0, []byte("native")); err != nil {
		t.Fatal(err)
	}
	info, err := c.Stat(ctx, "etags", "o2")
	if err != nil {
		t.Fatal(err)
	}
	want["o2"] = fmt.Sprintf(`"tyr-%x"`, info.Version)
	for _, tc := range []struct {
		delim string
		max   int
		keys  int
	}{{"", 1000, 33}, {"/", 1000, 3}, {"", 7, 7}, {"/", 2, 1}} {
		l, err := b.list(ctx, "etags", "", tc.delim, "", tc.max)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.objects) != tc.keys {
			t.Errorf("delimiter %q, max %d: %d objects, want %d", tc.delim, tc.max, len(l.objects), tc.keys)
		}
		for _, o := range l.objects {
			if *o.ETag != want[*o.Key] {
				t.Errorf("delimiter %q, max %d: %s has ETag %s, want %s", tc.delim, tc.max, *o.Key, *o.ETag, want[*o.Key])
			}
		}
	}
}
