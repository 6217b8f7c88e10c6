package s3gw

// Large objects and multipart uploads.
//
// An object of at most ObjectBytesMax bytes is inline: its bytes are blob
// KEY, written in one commit with its sidecar. A larger object, and every
// object a multipart upload completes, is a manifest object: its bytes are
// data blobs under the upload's ID (one per part), KEY is an empty blob,
// and the sidecar names the upload, whose manifest (a blob of its own)
// lists the data blobs in order. The data is written first, in as many
// commits as it takes, where no reader looks; one small commit then
// publishes the object (KEY, sidecar and manifest together), so a reader
// sees the old object or the new one, whatever the size.
//
// The gateway's own blobs sort after every sidecar, under internalPrefix:
//
//	u/ID          an upload in progress: its key and attributes
//	p/ID/NNNNN    part NNNNN of upload ID: its data blob, size and ETag
//	d/ID/NNNNN.R  the data of one attempt R at part NNNNN
//	c/ID          the manifest of the object upload ID completed
//
// Invariants: a data blob is kept while its upload is in progress (u/ID
// exists) or a manifest lists it (c/ID exists and names it); a manifest is
// kept while the sidecar of its key names it, and the commit that replaces
// or deletes that sidecar deletes it too when it read the sidecar first
// (a PUT racing another may not have: collect checks). A manifest and the
// sidecar naming it are written in one commit, after the data, and the
// upload stays in progress until that commit. Whatever these do not keep
// is garbage, deleted after the commit that made it so (after
// DataGrace for an object's data, so that GETs streaming it finish), and by
// the sweep if the gateway stopped first.

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/s3err"
	"github.com/versity/versitygw/s3response"
	"golang.org/x/sync/errgroup"

	"github.com/tyrstore/tyr/client"
)

const (
	// internalPrefix starts the gateway's own blobs: the sidecar prefix
	// twice, which no sidecar key has (object keys cannot start with
	// MetaPrefix).
	internalPrefix = MetaPrefix + MetaPrefix
	// PutBytesMaxDefault is Backend.PutBytesMax when zero: the largest
	// object one PUT stores and the largest part (S3's limits).
	PutBytesMaxDefault = 5 << 30
	// PartBytesMin is the least bytes a part but the last may have (S3's).
	PartBytesMin = 5 << 20
	// PartsMax is the most parts an upload has (S3's limit).
	PartsMax = 10000
	// manifestBytesMax bounds a manifest: PartsMax entries.
	manifestBytesMax = client.PayloadBytesMax
	// UploadAgeMax is how long an upload may stay in progress before the
	// sweep aborts it.
	UploadAgeMax = 7 * 24 * time.Hour
	// SweepEvery is how often the gateway sweeps every bucket.
	SweepEvery = 10 * time.Minute
	// DataGrace is how long the data of a replaced or deleted manifest
	// object stays, so that GETs already streaming it finish.
	DataGrace = 30 * time.Second
	// deletesPerCommit is how many blobs one cleanup commit deletes (two
	// ops each).
	deletesPerCommit = client.OpsPerTxMax / 2
)

// The keys of an upload's blobs.

func uploadKey(id string) string      { return internalPrefix + "u/" + id }
func partPrefix(id string) string     { return internalPrefix + "p/" + id + "/" }
func partKey(id string, n int) string { return fmt.Sprintf("%s%05d", partPrefix(id), n) }
func dataPrefix(id string) string     { return internalPrefix + "d/" + id + "/" }
func manifestKey(id string) string    { return internalPrefix + "c/" + id }

// dataKey is a new data blob's key for part n of upload id: each attempt
// at a part writes a blob of its own.
func dataKey(id string, n int) string {
	return fmt.Sprintf("%s%05d.%s", dataPrefix(id), n, randomHex(4))
}

// idOf is the upload ID in a key under prefix.
func idOf(key, prefix string) string {
	id, _, _ := strings.Cut(strings.TrimPrefix(key, prefix), "/")
	return id
}

func isObjectKey(key string) bool { return !strings.HasPrefix(key, MetaPrefix) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func quoted(sum []byte) string    { return `"` + hex.EncodeToString(sum) + `"` }
func unquoted(etag string) string { return strings.Trim(etag, `"`) }

// newUploadID returns a new upload ID: 32 hex digits, the time it was made
// and random bits, so IDs sort by the time they were made.
func newUploadID() string { return uploadIDAt(time.Now()) }

func uploadIDAt(t time.Time) string {
	return fmt.Sprintf("%016x%s", uint64(t.UnixNano()), randomHex(8))
}

func validUploadID(id string) bool {
	_, err := hex.DecodeString(id)
	return len(id) == 32 && err == nil
}

// uploadTime is when upload id was made.
func uploadTime(id string) time.Time {
	if !validUploadID(id) {
		return time.Time{}
	}
	b, _ := hex.DecodeString(id[:16])
	return time.Unix(0, int64(binary.BigEndian.Uint64(b)))
}

// upload is an upload in progress (u/ID).
type upload struct {
	Key       string    `json:"key"`
	Initiated time.Time `json:"initiated"`
	Meta      meta      `json:"meta"`
	// Put marks the upload of one large PUT, not listed as a multipart
	// upload.
	Put bool `json:"put,omitempty"`
}

// part is an uploaded part (p/ID/NNNNN).
type part struct {
	Blob     string    `json:"blob"`
	Size     int64     `json:"size"`
	ETag     string    `json:"etag"`
	Modified time.Time `json:"modified"`
}

// extent is a data blob of a manifest object, in order.
type extent struct {
	Blob string `json:"b"`
	Size int64  `json:"s"`
}

// manifest lists a manifest object's data blobs (c/ID).
type manifest struct {
	Key   string   `json:"key"`
	Parts []extent `json:"parts"`
}

func (m manifest) holds(blob string) bool {
	return slices.ContainsFunc(m.Parts, func(e extent) bool { return e.Blob == blob })
}

// readJSON reads blob key of bucket, at most n bytes, into v.
func (b *Backend) readJSON(ctx context.Context, bucket, key string, n uint64, v any) error {
	data, err := b.c.Read(ctx, bucket, key, 0, n)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// store makes object key hold the bytes of body with attributes m, and
// returns them with ETag and Size set. Bodies of up to ObjectBytesMax bytes
// are stored inline in one commit; larger ones are written to a data blob
// first and published as a manifest object.
func (b *Backend) store(ctx context.Context, bucket, key string, body io.Reader, m meta) (meta, error) {
	if body == nil {
		body = bytes.NewReader(nil)
	}
	head, err := io.ReadAll(io.LimitReader(body, ObjectBytesMax+1))
	if err != nil {
		return meta{}, err
	}
	if len(head) <= ObjectBytesMax {
		sum := md5.Sum(head)
		m.ETag, m.Size, m.Upload = quoted(sum[:]), int64(len(head)), ""
		return m, b.publish(ctx, bucket, key, head, m, nil, "")
	}
	if err := b.bucketExists(ctx, bucket); err != nil {
		return meta{}, err
	}
	id := newUploadID()
	if err := b.putJSON(ctx, bucket, uploadKey(id), upload{Key: key, Initiated: time.Now(), Meta: m, Put: true}); err != nil {
		return meta{}, err
	}
	h := md5.New()
	e, err := b.writeData(ctx, bucket, id, 1, io.MultiReader(bytes.NewReader(head), body), h, b.putMax())
	if err == nil {
		m.ETag, m.Size, m.Upload = quoted(h.Sum(nil)), e.Size, id
		err = b.publish(ctx, bucket, key, nil, m, &manifest{Key: key, Parts: []extent{e}}, id)
	}
	if err != nil {
		b.abandon(bucket, id)
		return meta{}, err
	}
	return m, nil
}

// abandon ends upload id of a PUT that failed: its record, so that it is
// no longer in progress, then what it wrote. If the PUT's commit went
// through after all (its answer lost), the record is gone already and the
// manifest keeps the data.
func (b *Backend) abandon(bucket, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.deleteBlobs(ctx, bucket, []string{uploadKey(id)}); err != nil {
		slog.Warn("s3: a failed PUT's upload is left to the sweep", "bucket", bucket, "upload", id, "err", err)
		return
	}
	b.dropUpload(bucket, id)
}

// writeData streams r, at most limit bytes, into a new data blob of part
// n of upload id, hashing it into h.
func (b *Backend) writeData(ctx context.Context, bucket, id string, n int, r io.Reader, h hash.Hash, limit int64) (extent, error) {
	blob := dataKey(id, n)
	size, err := b.c.Put(ctx, bucket, blob, io.TeeReader(io.LimitReader(r, limit+1), h))
	if err != nil {
		return extent{}, s3Error(err, bucket, "")
	}
	if size > limit {
		return extent{}, s3err.GetEntityTooLargeErr(size, limit)
	}
	return extent{Blob: blob, Size: size}, nil
}

// putJSON replaces blob key with v's JSON in one commit.
func (b *Backend) putJSON(ctx context.Context, bucket, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = b.c.Commit(ctx, bucket, replace(key, data)...)
	return s3Error(err, bucket, "")
}

// publish replaces object key, in one commit: the blob holds data
// (nil for a manifest object), the sidecar m, and man, if not nil, becomes
// the manifest of upload m.Upload. done, if not empty, is the upload this
// completes, which must still be in progress (else NoSuchUpload). The old
// object's manifest goes in the same commit, and its data right after.
func (b *Backend) publish(ctx context.Context, bucket, key string, data []byte, m meta, man *manifest, done string) error {
	mb, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(mb) > metaBytesMax {
		return s3err.GetAPIError(s3err.ErrMetadataTooLarge)
	}
	var manb []byte
	if man != nil {
		if manb, err = json.Marshal(man); err != nil {
			return err
		}
	}
	// The replaced object's manifest goes in the same commit. Its sidecar
	// is read first, not in a transaction: a PUT that gets in between
	// leaves its manifest behind, which collect finds (no sidecar names
	// it) and deletes.
	old, err := b.uploadOf(ctx, bucket, key)
	if err != nil {
		return b.objectError(ctx, err, bucket, "")
	}
	var ops []client.Op
	if done != "" {
		// Fails the commit with NotFound unless the upload is in progress.
		ops = append(ops, client.DeleteOp(uploadKey(done)))
	}
	if old != "" {
		// Create then delete: a manifest gone missing must not fail the commit.
		ops = append(ops, client.WriteOp(manifestKey(old), 0, nil, true), client.DeleteOp(manifestKey(old)))
	}
	ops = append(ops, replace(key, data)...)
	ops = append(ops, replace(metaKey(key), mb)...)
	if man != nil {
		ops = append(ops, replace(manifestKey(m.Upload), manb)...)
	}
	_, err = b.c.Commit(ctx, bucket, ops...)
	if errors.Is(err, client.ErrNotFound) && done != "" {
		if berr := b.bucketExists(ctx, bucket); berr != nil {
			return berr
		}
		return s3err.GetAPIError(s3err.ErrNoSuchUpload)
	}
	if err != nil {
		return b.objectError(ctx, err, bucket, "")
	}
	if old != "" && old != m.Upload {
		b.dropLater(bucket, old)
	}
	return nil
}

// putMax is the largest PUT or part.
func (b *Backend) putMax() int64 {
	if b.PutBytesMax > 0 {
		return b.PutBytesMax
	}
	return PutBytesMaxDefault
}

// dropLater runs dropUpload after DataGrace. bucket is copied: the
// protocol layer's strings may share request buffers it reuses.
func (b *Backend) dropLater(bucket, id string) {
	bucket = strings.Clone(bucket)
	time.AfterFunc(DataGrace, func() { b.dropUpload(bucket, id) })
}

// uploadOf returns the upload whose manifest object key is, "" if it is
// none (inline, native or missing).
func (b *Backend) uploadOf(ctx context.Context, bucket, key string) (string, error) {
	mb, err := b.c.Read(ctx, bucket, metaKey(key), 0, metaBytesMax)
	if errors.Is(err, client.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var m meta
	if json.Unmarshal(mb, &m) != nil {
		return "", nil
	}
	return m.Upload, nil
}

// dropManifest reads object key's sidecar in tx and, if it names a
// manifest, deletes the manifest in tx; it returns that upload's ID.
func (b *Backend) dropManifest(ctx context.Context, tx *client.Tx, key string) (string, error) {
	mb, err := tx.Read(ctx, metaKey(key), 0, metaBytesMax)
	if errors.Is(err, client.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var old meta
	if json.Unmarshal(mb, &old) != nil || old.Upload == "" {
		return "", nil
	}
	// Create then delete: a manifest gone missing must not fail the commit.
	return old.Upload, tx.Do(client.WriteOp(manifestKey(old.Upload), 0, nil, true), client.DeleteOp(manifestKey(old.Upload)))
}

// dropUpload deletes what upload id left that no manifest lists: its part
// records, and its data blobs unless c/ID lists them. It runs after the
// commit that made them garbage, on its own deadline; what it misses (an
// error, a stopped gateway) the sweep deletes.
func (b *Backend) dropUpload(bucket, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.collect(ctx, bucket, id); err != nil {
		slog.Warn("s3: cleanup of an upload's data stopped; the sweep will finish it", "bucket", bucket, "upload", id, "err", err)
	}
}

// collect deletes upload id's garbage, if it is not in progress.
func (b *Backend) collect(ctx context.Context, bucket, id string) error {
	if _, err := b.c.Stat(ctx, bucket, uploadKey(id)); err == nil {
		return nil
	} else if !errors.Is(err, client.ErrNotFound) {
		return err
	}
	var man manifest
	var garbage []string
	err := b.readJSON(ctx, bucket, manifestKey(id), manifestBytesMax, &man)
	switch {
	case err == nil:
		// A manifest no sidecar names (a PUT replaced its object without
		// seeing it) is garbage too.
		current, err := b.uploadOf(ctx, bucket, man.Key)
		if err != nil {
			return err
		}
		if current != id {
			man, garbage = manifest{}, append(garbage, manifestKey(id))
		}
	case !errors.Is(err, client.ErrNotFound):
		return err
	}
	garbage, err = b.keys(ctx, bucket, partPrefix(id), garbage)
	if err != nil {
		return err
	}
	if garbage, err = b.keys(ctx, bucket, dataPrefix(id), garbage); err != nil {
		return err
	}
	garbage = slices.DeleteFunc(garbage, man.holds)
	return b.deleteBlobs(ctx, bucket, garbage)
}

// keys appends to out the keys under prefix.
func (b *Backend) keys(ctx context.Context, bucket, prefix string, out []string) ([]string, error) {
	after := ""
	for {
		page, next, err := b.c.List(ctx, bucket, prefix, after, client.ListLimitMax)
		if err != nil {
			return out, err
		}
		for _, bi := range page {
			out = append(out, bi.Key)
		}
		if next == "" {
			return out, nil
		}
		after = next
	}
}

// deleteBlobs deletes blobs, those missing too, a batch per commit.
func (b *Backend) deleteBlobs(ctx context.Context, bucket string, keys []string) error {
	for len(keys) > 0 {
		n := min(len(keys), deletesPerCommit)
		ops := make([]client.Op, 0, 2*n)
		for _, k := range keys[:n] {
			ops = append(ops, client.WriteOp(k, 0, nil, true), client.DeleteOp(k))
		}
		if _, err := b.c.Commit(ctx, bucket, ops...); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}

// Sweep deletes, in every bucket, the garbage a stopped gateway left and
// the uploads in progress for longer than UploadAgeMax (aborted).
func (b *Backend) Sweep(ctx context.Context) error {
	kss, err := b.c.ListKeyspaces(ctx)
	if err != nil {
		return err
	}
	for _, ks := range kss {
		if err := b.sweep(ctx, ks.Name); err != nil && !errors.Is(err, client.ErrNotFound) {
			return fmt.Errorf("sweep of bucket %s: %w", ks.Name, err)
		}
	}
	return nil
}

func (b *Backend) sweep(ctx context.Context, bucket string) error {
	uploads, err := b.keys(ctx, bucket, internalPrefix+"u/", nil)
	if err != nil {
		return err
	}
	var expired []string
	for _, k := range uploads {
		if id := idOf(k, internalPrefix+"u/"); time.Since(uploadTime(id)) > UploadAgeMax {
			expired = append(expired, k)
		}
	}
	if err := b.deleteBlobs(ctx, bucket, expired); err != nil {
		return err
	}
	ids := map[string]bool{}
	for _, prefix := range []string{internalPrefix + "p/", internalPrefix + "d/"} {
		keys, err := b.keys(ctx, bucket, prefix, nil)
		if err != nil {
			return err
		}
		for _, k := range keys {
			ids[idOf(k, prefix)] = true
		}
	}
	for id := range ids {
		if err := b.collect(ctx, bucket, id); err != nil {
			return err
		}
	}
	return nil
}

// SweepLoop sweeps every SweepEvery until ctx ends.
func (b *Backend) SweepLoop(ctx context.Context) {
	for {
		if err := b.Sweep(ctx); err != nil && ctx.Err() == nil {
			slog.Warn("s3: sweep stopped", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(SweepEvery):
		}
	}
}

// partsReader reads a range of a manifest object, part after part. A data
// blob gone missing (the object was replaced meanwhile) ends it with an
// error, never with another object's bytes.
type partsReader struct {
	ctx    context.Context
	cancel context.CancelFunc
	b      *Backend
	bucket string
	parts  []extent
	off    int64 // into parts[0]
	left   int64
	cur    io.ReadCloser
}

func (b *Backend) newPartsReader(ctx context.Context, bucket string, man manifest, start, length int64) *partsReader {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	bucket = strings.Clone(bucket) // read after the call returns
	parts := man.Parts
	for len(parts) > 0 && start >= parts[0].Size {
		start -= parts[0].Size
		parts = parts[1:]
	}
	return &partsReader{ctx: ctx, cancel: cancel, b: b, bucket: bucket, parts: parts, off: start, left: length}
}

func (r *partsReader) Read(p []byte) (int, error) {
	for r.left > 0 {
		if r.cur == nil {
			if len(r.parts) == 0 {
				return 0, io.ErrUnexpectedEOF
			}
			e := r.parts[0]
			n := min(e.Size-r.off, r.left)
			cur, err := r.b.c.NewRangeReader(r.ctx, r.bucket, e.Blob, uint64(r.off), n)
			if err != nil {
				return 0, fmt.Errorf("s3: a part of the object is gone (replaced meanwhile?): %w", err)
			}
			r.cur, r.parts, r.off = cur, r.parts[1:], 0
		}
		if int64(len(p)) > r.left {
			p = p[:r.left]
		}
		n, err := r.cur.Read(p)
		r.left -= int64(n)
		if err == io.EOF {
			_ = r.cur.Close()
			r.cur, err = nil, nil
		}
		if n > 0 || err != nil {
			return n, err
		}
	}
	return 0, io.EOF
}

func (r *partsReader) Close() error {
	if r.cur != nil {
		_ = r.cur.Close()
	}
	r.cancel()
	return nil
}

// Multipart uploads.

func (b *Backend) CreateMultipartUpload(ctx context.Context, in s3response.CreateMultipartUploadInput) (out s3response.InitiateMultipartUploadResult, err error) {
	defer b.Metrics.done("CreateMultipartUpload", str(in.Bucket), time.Now(), &err)
	bucket, key := str(in.Bucket), str(in.Key)
	if err := checkKey(key); err != nil {
		return s3response.InitiateMultipartUploadResult{}, err
	}
	if err := b.bucketExists(ctx, bucket); err != nil {
		return s3response.InitiateMultipartUploadResult{}, err
	}
	m := meta{ContentType: str(in.ContentType), ContentEncoding: str(in.ContentEncoding),
		ContentDisposition: str(in.ContentDisposition), ContentLanguage: str(in.ContentLanguage),
		CacheControl: str(in.CacheControl), Expires: str(in.Expires), Metadata: in.Metadata}
	id := newUploadID()
	if err := b.putJSON(ctx, bucket, uploadKey(id), upload{Key: key, Initiated: time.Now(), Meta: m}); err != nil {
		return s3response.InitiateMultipartUploadResult{}, err
	}
	return s3response.InitiateMultipartUploadResult{Bucket: bucket, Key: key, UploadId: id}, nil
}

// inProgress reads upload id of object key: NoSuchUpload if it is not in
// progress, or is another key's.
func (b *Backend) inProgress(ctx context.Context, bucket, key, id string) (upload, error) {
	var u upload
	if !validUploadID(id) {
		return u, s3err.GetAPIError(s3err.ErrNoSuchUpload)
	}
	err := b.readJSON(ctx, bucket, uploadKey(id), metaBytesMax+4096, &u)
	if errors.Is(err, client.ErrNotFound) {
		if berr := b.bucketExists(ctx, bucket); berr != nil {
			return u, berr
		}
		return u, s3err.GetAPIError(s3err.ErrNoSuchUpload)
	}
	if err != nil {
		return u, s3Error(err, bucket, "")
	}
	if u.Key != key || u.Put {
		return u, s3err.GetAPIError(s3err.ErrNoSuchUpload)
	}
	return u, nil
}

func checkPartNumber(p *int32) (int, error) {
	if p == nil || *p < 1 || *p > PartsMax {
		v := "none"
		if p != nil {
			v = strconv.Itoa(int(*p))
		}
		return 0, s3err.GetInvalidArgumentErr(s3err.InvalidArgPartNumber, v)
	}
	return int(*p), nil
}

func (b *Backend) UploadPart(ctx context.Context, in *s3.UploadPartInput) (out *s3.UploadPartOutput, err error) {
	defer b.Metrics.done("UploadPart", str(in.Bucket), time.Now(), &err)
	n, err := checkPartNumber(in.PartNumber)
	if err != nil {
		return nil, err
	}
	if in.ContentLength != nil && *in.ContentLength > b.putMax() {
		return nil, s3err.GetEntityTooLargeErr(*in.ContentLength, b.putMax())
	}
	body := in.Body
	if body == nil {
		body = bytes.NewReader(nil)
	}
	etag, err := b.uploadPart(ctx, str(in.Bucket), str(in.Key), str(in.UploadId), n, body)
	if err != nil {
		return nil, err
	}
	return &s3.UploadPartOutput{ETag: &etag}, nil
}

// uploadPart writes body as part n of upload id: the data into a blob of
// its own, then the part's record, in a transaction that checks the upload
// is still in progress. A part uploaded again replaces the record; the old
// data is garbage at completion.
func (b *Backend) uploadPart(ctx context.Context, bucket, key, id string, n int, body io.Reader) (string, error) {
	if _, err := b.inProgress(ctx, bucket, key, id); err != nil {
		return "", err
	}
	h := md5.New()
	e, err := b.writeData(ctx, bucket, id, n, body, h, b.putMax())
	if err != nil {
		return "", err
	}
	b.Metrics.moved(bucket, "in", e.Size)
	p := part{Blob: e.Blob, Size: e.Size, ETag: quoted(h.Sum(nil)), Modified: time.Now()}
	pb, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	err = b.c.RunTx(ctx, bucket, func(tx *client.Tx) error {
		if _, err := tx.Size(ctx, uploadKey(id)); err != nil {
			return err
		}
		return tx.Do(replace(partKey(id, n), pb)...)
	}, nil)
	if err != nil {
		_ = b.deleteBlobs(context.WithoutCancel(ctx), bucket, []string{e.Blob})
		if errors.Is(err, client.ErrNotFound) {
			return "", s3err.GetAPIError(s3err.ErrNoSuchUpload)
		}
		return "", s3Error(err, bucket, "")
	}
	return p.ETag, nil
}

func (b *Backend) UploadPartCopy(ctx context.Context, in *s3.UploadPartCopyInput) (out s3response.CopyPartResult, err error) {
	defer b.Metrics.done("UploadPartCopy", str(in.Bucket), time.Now(), &err)
	n, err := checkPartNumber(in.PartNumber)
	if err != nil {
		return s3response.CopyPartResult{}, err
	}
	sb, sk, err := copySource(str(in.CopySource))
	if err != nil {
		return s3response.CopyPartResult{}, err
	}
	o, _, _, err := b.read(ctx, sb, sk, true, "")
	if err != nil {
		return s3response.CopyPartResult{}, err
	}
	start, length := int64(0), o.size
	if r := str(in.CopySourceRange); r != "" {
		if start, length, err = backend.ParseCopySourceRange(o.size, r); err != nil {
			return s3response.CopyPartResult{}, err
		}
	}
	if length > b.putMax() {
		return s3response.CopyPartResult{}, s3err.GetEntityTooLargeErr(length, b.putMax())
	}
	body, err := b.body(ctx, sb, o, start, length)
	if err != nil {
		return s3response.CopyPartResult{}, err
	}
	defer body.Close()
	etag, err := b.uploadPart(ctx, str(in.Bucket), str(in.Key), str(in.UploadId), n, body)
	if err != nil {
		return s3response.CopyPartResult{}, err
	}
	return s3response.CopyPartResult{ETag: &etag, LastModified: time.Now()}, nil
}

// readParts reads the records of parts of upload id, numbers in order.
func (b *Backend) readParts(ctx context.Context, bucket, id string, numbers []int) ([]part, error) {
	parts := make([]part, len(numbers))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(listFetches)
	for i, n := range numbers {
		g.Go(func() error {
			err := b.readJSON(gctx, bucket, partKey(id, n), metaBytesMax, &parts[i])
			if errors.Is(err, client.ErrNotFound) {
				return s3err.GetAPIError(s3err.ErrInvalidPart)
			}
			return err
		})
	}
	return parts, g.Wait()
}

func (b *Backend) CompleteMultipartUpload(ctx context.Context, in *s3.CompleteMultipartUploadInput) (out s3response.CompleteMultipartUploadResult, versionID string, err error) {
	defer b.Metrics.done("CompleteMultipartUpload", str(in.Bucket), time.Now(), &err)
	bucket, key, id := str(in.Bucket), str(in.Key), str(in.UploadId)
	var res s3response.CompleteMultipartUploadResult
	u, err := b.inProgress(ctx, bucket, key, id)
	if err != nil {
		if done, ok := b.completed(ctx, bucket, key, id); ok {
			return done, "", nil // a retry of a completion that went through
		}
		return res, "", err
	}
	if in.MultipartUpload == nil || len(in.MultipartUpload.Parts) == 0 {
		return res, "", s3err.GetAPIError(s3err.ErrMalformedXML)
	}
	asked := in.MultipartUpload.Parts
	numbers := make([]int, len(asked))
	for i, p := range asked {
		if p.PartNumber == nil || p.ETag == nil {
			return res, "", s3err.GetAPIError(s3err.ErrMalformedXML)
		}
		if numbers[i], err = checkPartNumber(p.PartNumber); err != nil {
			return res, "", err
		}
		if i > 0 && numbers[i] <= numbers[i-1] {
			return res, "", s3err.GetAPIError(s3err.ErrInvalidPartOrder)
		}
	}
	parts, err := b.readParts(ctx, bucket, id, numbers)
	if err != nil {
		return res, "", err
	}
	man := manifest{Key: key, Parts: make([]extent, len(parts))}
	sums := md5.New()
	var size int64
	for i, p := range parts {
		if unquoted(p.ETag) != unquoted(str(asked[i].ETag)) {
			return res, "", s3err.GetAPIError(s3err.ErrInvalidPart)
		}
		if p.Size < PartBytesMin && i < len(parts)-1 {
			return res, "", s3err.GetAPIError(s3err.ErrEntityTooSmall)
		}
		sum, _ := hex.DecodeString(unquoted(p.ETag))
		sums.Write(sum)
		man.Parts[i] = extent{Blob: p.Blob, Size: p.Size}
		size += p.Size
	}
	if in.MpuObjectSize != nil && *in.MpuObjectSize != size {
		return res, "", s3err.GetIncorrectMpObjectSizeErr(size, *in.MpuObjectSize)
	}
	m := u.Meta
	m.ETag = fmt.Sprintf(`"%x-%d"`, sums.Sum(nil), len(parts))
	m.Size, m.Upload = size, id
	if err := b.publish(ctx, bucket, key, nil, m, &man, id); err != nil {
		return res, "", err
	}
	b.dropUpload(bucket, id)
	return s3response.CompleteMultipartUploadResult{Bucket: &bucket, Key: &key, ETag: &m.ETag}, "", nil
}

// completed answers a completion of upload id that already went through,
// as S3 does: the object's ETag while key is still that upload's object.
func (b *Backend) completed(ctx context.Context, bucket, key, id string) (s3response.CompleteMultipartUploadResult, bool) {
	var m meta
	if !validUploadID(id) || b.readJSON(ctx, bucket, metaKey(key), metaBytesMax, &m) != nil || m.Upload != id {
		return s3response.CompleteMultipartUploadResult{}, false
	}
	return s3response.CompleteMultipartUploadResult{Bucket: &bucket, Key: &key, ETag: &m.ETag}, true
}

func (b *Backend) AbortMultipartUpload(ctx context.Context, in *s3.AbortMultipartUploadInput) (err error) {
	defer b.Metrics.done("AbortMultipartUpload", str(in.Bucket), time.Now(), &err)
	bucket, key, id := str(in.Bucket), str(in.Key), str(in.UploadId)
	if _, err := b.inProgress(ctx, bucket, key, id); err != nil {
		return err
	}
	if _, err := b.c.Commit(ctx, bucket, client.DeleteOp(uploadKey(id))); err != nil {
		if errors.Is(err, client.ErrNotFound) {
			return s3err.GetAPIError(s3err.ErrNoSuchUpload)
		}
		return s3Error(err, bucket, "")
	}
	b.dropUpload(bucket, id)
	return nil
}

func (b *Backend) ListParts(ctx context.Context, in *s3.ListPartsInput) (out s3response.ListPartsResult, err error) {
	defer b.Metrics.done("ListParts", str(in.Bucket), time.Now(), &err)
	bucket, key, id := str(in.Bucket), str(in.Key), str(in.UploadId)
	out = s3response.ListPartsResult{Bucket: bucket, Key: key, UploadID: id, StorageClass: types.StorageClassStandard}
	if _, err := b.inProgress(ctx, bucket, key, id); err != nil {
		return out, err
	}
	marker, _ := strconv.Atoi(str(in.PartNumberMarker))
	out.PartNumberMarker, out.MaxParts = marker, maxKeys(in.MaxParts)
	after := ""
	if marker > 0 {
		after = partKey(id, marker)
	}
	listed, _, err := b.c.List(ctx, bucket, partPrefix(id), after, out.MaxParts+1)
	if err != nil {
		return out, s3Error(err, bucket, "")
	}
	if len(listed) > out.MaxParts {
		listed, out.IsTruncated = listed[:out.MaxParts], true
	}
	numbers := make([]int, len(listed))
	for i, bi := range listed {
		numbers[i], _ = strconv.Atoi(strings.TrimPrefix(bi.Key, partPrefix(id)))
	}
	parts, err := b.readParts(ctx, bucket, id, numbers)
	if err != nil {
		return out, err
	}
	for i, p := range parts {
		out.Parts = append(out.Parts, s3response.Part{PartNumber: numbers[i], LastModified: p.Modified, ETag: p.ETag, Size: p.Size})
	}
	if out.IsTruncated && len(numbers) > 0 {
		out.NextPartNumberMarker = numbers[len(numbers)-1]
	}
	return out, nil
}

// ListMultipartUploads lists the uploads in progress, by key and then
// upload ID (which sorts by initiation time), reading every upload record
// of the bucket: uploads in progress are expected to be few.
func (b *Backend) ListMultipartUploads(ctx context.Context, in *s3.ListMultipartUploadsInput) (out s3response.ListMultipartUploadsResult, err error) {
	defer b.Metrics.done("ListMultipartUploads", str(in.Bucket), time.Now(), &err)
	bucket, prefix, delim := str(in.Bucket), str(in.Prefix), str(in.Delimiter)
	out = s3response.ListMultipartUploadsResult{Bucket: bucket, KeyMarker: str(in.KeyMarker), UploadIDMarker: str(in.UploadIdMarker),
		Delimiter: delim, Prefix: prefix, MaxUploads: maxKeys(in.MaxUploads)}
	if out.KeyMarker == "" {
		out.UploadIDMarker = "" // S3 ignores it without a key marker
	}
	if out.UploadIDMarker != "" && !validUploadID(out.UploadIDMarker) {
		return out, s3err.GetInvalidArgumentErr(s3err.InvalidArgUploadIdMarker, out.UploadIDMarker)
	}
	if err := b.bucketExists(ctx, bucket); err != nil {
		return out, err
	}
	keys, err := b.keys(ctx, bucket, internalPrefix+"u/", nil)
	if err != nil {
		return out, s3Error(err, bucket, "")
	}
	ups := make([]s3response.Upload, len(keys))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(listFetches)
	for i, k := range keys {
		g.Go(func() error {
			var u upload
			err := b.readJSON(gctx, bucket, k, metaBytesMax+4096, &u)
			if err == nil && !u.Put {
				ups[i] = s3response.Upload{Key: u.Key, UploadID: idOf(k, internalPrefix+"u/"), Initiated: u.Initiated,
					StorageClass: types.StorageClassStandard}
			}
			if errors.Is(err, client.ErrNotFound) {
				err = nil // completed or aborted meanwhile
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return out, s3Error(err, bucket, "")
	}
	sort.Slice(ups, func(i, j int) bool {
		return ups[i].Key < ups[j].Key || ups[i].Key == ups[j].Key && ups[i].UploadID < ups[j].UploadID
	})
	group := ""
	for _, u := range ups {
		if u.UploadID == "" || !strings.HasPrefix(u.Key, prefix) {
			continue
		}
		if u.Key < out.KeyMarker || u.Key == out.KeyMarker && (out.UploadIDMarker == "" || u.UploadID <= out.UploadIDMarker) {
			continue
		}
		if group != "" && strings.HasPrefix(u.Key, group) ||
			delim != "" && strings.HasSuffix(out.KeyMarker, delim) && strings.HasPrefix(u.Key, out.KeyMarker) {
			continue // in a common prefix listed already
		}
		if len(out.Uploads)+len(out.CommonPrefixes) == out.MaxUploads {
			out.IsTruncated = true
			break
		}
		if delim != "" {
			if i := strings.Index(u.Key[len(prefix):], delim); i >= 0 {
				group = u.Key[:len(prefix)+i+len(delim)]
				out.CommonPrefixes = append(out.CommonPrefixes, s3response.CommonPrefix{Prefix: group})
				out.NextKeyMarker, out.NextUploadIDMarker = group, ""
				continue
			}
		}
		out.Uploads = append(out.Uploads, u)
		out.NextKeyMarker, out.NextUploadIDMarker = u.Key, u.UploadID
	}
	if !out.IsTruncated {
		out.NextKeyMarker, out.NextUploadIDMarker = "", ""
	}
	return out, nil
}
