// Package s3gw serves tyr over the S3 API: versitygw (the S3 protocol:
// routing, SigV4, XML, errors) over a backend.Backend that maps buckets to
// keyspaces and objects to blobs through the Go client.
//
// An object of up to ObjectBytesMax bytes is blob KEY of keyspace BUCKET,
// so the native API reads the same bytes; larger objects and multipart
// uploads are stored as manifests of data blobs (see large.go). An
// object's S3 attributes (MD5 ETag, Content-Type and the other
// content headers, user metadata) are a small JSON blob at
// MetaPrefix+KEY in the same keyspace, written in the same commit as the
// data: a PUT replaces both atomically, and a GET reads both at one
// version in a transaction. Sidecars sort after every other key, so an S3
// listing reads keys in tyr's order and stops at them.
package s3gw

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/s3err"
	"github.com/versity/versitygw/s3response"
	"golang.org/x/sync/errgroup"

	"github.com/tyrstore/tyr/client"
)

const (
	// MetaPrefix starts the key of every object's sidecar: U+10FFFF, the
	// last code point, so sidecars sort after every object key.
	MetaPrefix = "\U0010FFFF"
	// KeyBytesMax is the longest object key, S3's own limit; its
	// sidecar's key, the prefix longer, is within tyr's key limit.
	KeyBytesMax = 1024
	// ObjectBytesMax is the largest inline object: the data of one commit
	// less room for the sidecar. Larger ones are manifest objects.
	ObjectBytesMax = 15 << 20
	// metaBytesMax bounds a sidecar (S3 allows 2 KiB of user metadata).
	metaBytesMax = 64 << 10
	// listFetches is how many sidecars a listing reads at once.
	listFetches = 32
)

// A sidecar's key is an object's key and MetaPrefix: one blob key.
const _ = uint(client.KeyBytesMax - KeyBytesMax - len(MetaPrefix))

// Backend implements versitygw's backend.Backend over a tyr client. The
// calls it does not implement answer NotImplemented.
type Backend struct {
	backend.BackendUnsupported
	c   *client.Client
	cfg client.KeyspaceConfig
	// PutBytesMax is the largest object one PUT stores and the largest
	// part of a multipart upload; 0 means PutBytesMaxDefault.
	PutBytesMax int64
	// Metrics, if not nil, count requests and bytes.
	Metrics *Metrics
	// seen holds when each bucket was last found to exist (knownBucket).
	seen sync.Map
}

// bucketSeenFor is how long knownBucket trusts that a bucket exists.
const bucketSeenFor = time.Second

// knownBucket is bucketExists for the checks the protocol layer makes on
// every request (GetBucketAcl): a bucket found in the last bucketSeenFor
// is taken to exist. A bucket another gateway dropped meanwhile then fails
// the request itself, with the error of a fresh check.
func (b *Backend) knownBucket(ctx context.Context, bucket string) error {
	if t, ok := b.seen.Load(bucket); ok && time.Since(t.(time.Time)) < bucketSeenFor {
		return nil
	}
	if err := b.bucketExists(ctx, bucket); err != nil {
		b.seen.Delete(bucket)
		return err
	}
	b.seen.Store(strings.Clone(bucket), time.Now())
	return nil
}

// New returns a backend over c; buckets are created with cfg.
func New(c *client.Client, cfg client.KeyspaceConfig) *Backend {
	return &Backend{c: c, cfg: cfg}
}

// meta is an object's sidecar.
type meta struct {
	ETag               string            `json:"etag"`
	ContentType        string            `json:"content_type,omitempty"`
	ContentEncoding    string            `json:"content_encoding,omitempty"`
	ContentDisposition string            `json:"content_disposition,omitempty"`
	ContentLanguage    string            `json:"content_language,omitempty"`
	CacheControl       string            `json:"cache_control,omitempty"`
	Expires            string            `json:"expires,omitempty"`
	Metadata           map[string]string `json:"metadata,omitempty"`
	// Size is the object's size; Upload, for a manifest object, the upload
	// whose manifest lists its data.
	Size   int64  `json:"size,omitempty"`
	Upload string `json:"upload,omitempty"`
}

func metaKey(key string) string { return MetaPrefix + key }

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func ptr[T any](v T) *T { return &v }

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// s3Error maps a tyr error to S3's, for a bucket and key. A missing key
// is NoSuchKey; a call with no key finds nothing only for a missing bucket.
// (Calls on objects tell a missing bucket from a missing key with
// objectError.)
func s3Error(err error, bucket, key string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, client.ErrNotFound):
		if key == "" {
			return s3err.GetBucketErr(s3err.ErrNoSuchBucket, bucket)
		}
		return s3err.GetAPIError(s3err.ErrNoSuchKey)
	case errors.Is(err, client.ErrExists):
		return s3err.GetBucketErr(s3err.ErrBucketAlreadyOwnedByYou, bucket)
	case errors.Is(err, client.ErrNoSpace):
		return s3err.GetAPIError(s3err.ErrQuotaExceeded)
	case errors.Is(err, client.ErrUnavailable), errors.Is(err, client.ErrConflict):
		return s3err.GetAPIError(s3err.ErrSlowDown)
	}
	return err
}

// objectError is s3Error for a call on object key, which finds nothing
// when either the object or its bucket is missing: NoSuchBucket in the
// second case.
func (b *Backend) objectError(ctx context.Context, err error, bucket, key string) error {
	if errors.Is(err, client.ErrNotFound) {
		if berr := b.bucketExists(ctx, bucket); berr != nil {
			return berr
		}
	}
	return s3Error(err, bucket, key)
}

func checkKey(key string) error {
	if key == "" {
		return s3err.GetAPIError(s3err.ErrNoSuchKey)
	}
	if len(key) > KeyBytesMax {
		return s3err.GetKeyTooLongErr(int64(len(key)), int64(KeyBytesMax))
	}
	if strings.HasPrefix(key, MetaPrefix) || strings.ContainsRune(key, 0) {
		return s3err.GetAPIError(s3err.ErrInvalidRequest)
	}
	return nil
}

// Buckets.

func (b *Backend) ListBuckets(ctx context.Context, in s3response.ListBucketsInput) (out s3response.ListAllMyBucketsResult, err error) {
	defer b.Metrics.done("ListBuckets", "", time.Now(), &err)
	kss, err := b.c.ListKeyspaces(ctx)
	if err != nil {
		return s3response.ListAllMyBucketsResult{}, s3Error(err, "", "")
	}
	out = s3response.ListAllMyBucketsResult{Owner: s3response.CanonicalUser{ID: in.Owner}, Prefix: in.Prefix}
	for _, ks := range kss {
		if !strings.HasPrefix(ks.Name, in.Prefix) || (in.ContinuationToken != "" && ks.Name <= in.ContinuationToken) {
			continue
		}
		if in.MaxBuckets > 0 && len(out.Buckets.Bucket) == int(in.MaxBuckets) {
			out.ContinuationToken = out.Buckets.Bucket[len(out.Buckets.Bucket)-1].Name
			break
		}
		out.Buckets.Bucket = append(out.Buckets.Bucket, s3response.ListAllMyBucketsEntry{Name: ks.Name, CreationDate: ks.Created})
	}
	return out, nil
}

func (b *Backend) HeadBucket(ctx context.Context, in *s3.HeadBucketInput) (out *s3.HeadBucketOutput, err error) {
	defer b.Metrics.done("HeadBucket", str(in.Bucket), time.Now(), &err)
	if err := b.bucketExists(ctx, str(in.Bucket)); err != nil {
		return nil, err
	}
	return &s3.HeadBucketOutput{}, nil
}

func (b *Backend) CreateBucket(ctx context.Context, in *s3.CreateBucketInput, _ []byte) (err error) {
	defer b.Metrics.done("CreateBucket", str(in.Bucket), time.Now(), &err)
	_, err = b.c.CreateKeyspace(ctx, str(in.Bucket), b.cfg)
	if errors.Is(err, client.ErrInvalidArgument) {
		return s3err.GetBucketErr(s3err.ErrInvalidBucketName, str(in.Bucket))
	}
	return s3Error(err, str(in.Bucket), "")
}

func (b *Backend) DeleteBucket(ctx context.Context, bucket string) (err error) {
	defer b.Metrics.done("DeleteBucket", bucket, time.Now(), &err)
	blobs, _, err := b.c.List(ctx, bucket, "", "", 1)
	if err != nil {
		return s3Error(err, bucket, "")
	}
	if len(blobs) > 0 && isObjectKey(blobs[0].Key) {
		return s3err.GetBucketErr(s3err.ErrBucketNotEmpty, bucket)
	}
	b.seen.Delete(bucket)
	return s3Error(b.c.DropKeyspace(ctx, bucket), bucket, "")
}

// The ACL calls keep the gateway's default: one owner, full control.

func (b *Backend) GetBucketAcl(ctx context.Context, in *s3.GetBucketAclInput) (out []byte, err error) {
	if err := b.knownBucket(ctx, str(in.Bucket)); err != nil {
		return nil, err
	}
	return []byte{}, nil
}

func (b *Backend) PutBucketAcl(ctx context.Context, bucket string, _ []byte) (err error) {
	defer b.Metrics.done("PutBucketAcl", bucket, time.Now(), &err)
	return b.bucketExists(ctx, bucket)
}

// Objects.

func (b *Backend) PutObject(ctx context.Context, in s3response.PutObjectInput) (out s3response.PutObjectOutput, err error) {
	defer b.Metrics.done("PutObject", str(in.Bucket), time.Now(), &err)
	bucket, key := str(in.Bucket), str(in.Key)
	if err := checkKey(key); err != nil {
		return s3response.PutObjectOutput{}, err
	}
	if in.ContentLength != nil && *in.ContentLength > b.putMax() {
		return s3response.PutObjectOutput{}, s3err.GetEntityTooLargeErr(*in.ContentLength, b.putMax())
	}
	m := meta{ContentType: str(in.ContentType),
		ContentEncoding: str(in.ContentEncoding), ContentDisposition: str(in.ContentDisposition),
		ContentLanguage: str(in.ContentLanguage), CacheControl: str(in.CacheControl), Expires: str(in.Expires),
		Metadata: in.Metadata}
	var body io.Reader
	if in.Body != nil {
		body = in.Body
	}
	m, err = b.store(ctx, bucket, key, body, m)
	if err != nil {
		return s3response.PutObjectOutput{}, err
	}
	b.Metrics.moved(bucket, "in", m.Size)
	return s3response.PutObjectOutput{ETag: m.ETag, Size: ptr(m.Size)}, nil
}

// replace returns the ops that make blob key hold exactly data: the bytes
// written over the old ones, then a truncate to their length. A truncate
// that shrinks a blob deletes a range of its pages, which costs every later
// read of the keyspace until it is compacted; written in this order, only
// a blob that was longer shrinks.
func replace(key string, data []byte) []client.Op {
	ops := []client.Op{client.WriteOp(key, 0, nil, true)}
	for off := 0; off < len(data); off += client.PayloadBytesMax {
		ops = append(ops, client.WriteOp(key, uint64(off), data[off:min(off+client.PayloadBytesMax, len(data))], false))
	}
	return append(ops, client.TruncateOp(key, uint64(len(data))))
}

// NewObjectOps returns the ops of a PUT of data, at most ObjectBytesMax
// bytes, to a key that holds no object: its blob and its sidecar with the
// MD5 ETag. Committed in one commit (several objects' ops may share one),
// they store what the gateway's PutObject stores, for loading many objects
// through the native API.
func NewObjectOps(key string, data []byte) ([]client.Op, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if len(data) > ObjectBytesMax {
		return nil, s3err.GetEntityTooLargeErr(int64(len(data)), ObjectBytesMax)
	}
	sum := md5.Sum(data)
	mb, err := json.Marshal(meta{ETag: quoted(sum[:]), Size: int64(len(data))})
	if err != nil {
		return nil, err
	}
	return append(replace(key, data), replace(metaKey(key), mb)...), nil
}

// object is what a read of an object found, at one version of its blob,
// sidecar and manifest.
type object struct {
	meta     meta
	man      *manifest // for a manifest object
	size     int64
	modified time.Time
	data     []byte // of an inline object, the range read
	from     int64  // where data starts
}

// fastReadAttempts is how often read tries without a transaction before
// it reads in one.
const fastReadAttempts = 3

// read reads key's size, sidecar and manifest and, with data, the bytes of
// an inline object in the Range header rng (all of them if it is empty or
// ignored), all of one PUT. It returns the range's start and length. A
// manifest object's data is read afterwards, by body: its data blobs do
// not change.
//
// It reads without a transaction first (readAt), and in one (readTx) when
// PUTs of the key keep getting in between.
func (b *Backend) read(ctx context.Context, bucket, key string, data bool, rng string) (object, int64, int64, error) {
	if err := checkKey(key); err != nil {
		return object{}, 0, 0, err
	}
	for range fastReadAttempts {
		o, start, length, ok, err := b.readAt(ctx, bucket, key, data, rng)
		if err != nil {
			var apiErr s3err.APIError
			if errors.As(err, &apiErr) {
				return object{}, 0, 0, err
			}
			return object{}, 0, 0, b.objectError(ctx, err, bucket, key)
		}
		if ok {
			return o, start, length, nil
		}
	}
	return b.readTx(ctx, bucket, key, data, rng)
}

// readAt reads as read does, without a transaction: the blob's version,
// then the sidecar (and manifest), then the bytes, each of which carries
// the blob's version again; or a last Stat when no bytes are read. Every
// PUT changes the blob, so the same version before and after means the
// sidecar read in between is that version's. ok is false when a PUT got in
// between.
func (b *Backend) readAt(ctx context.Context, bucket, key string, data bool, rng string) (o object, start, length int64, ok bool, err error) {
	info, err := b.c.Stat(ctx, bucket, key)
	if err != nil {
		return o, 0, 0, false, err
	}
	o.size, o.modified = int64(info.Size), info.Modified
	mb, err := b.c.Read(ctx, bucket, metaKey(key), 0, metaBytesMax)
	if err != nil && !errors.Is(err, client.ErrNotFound) {
		return o, 0, 0, false, err
	}
	if len(mb) > 0 {
		if err := json.Unmarshal(mb, &o.meta); err != nil {
			return o, 0, 0, false, fmt.Errorf("object %q: its S3 attributes are not readable: %w", key, err)
		}
	}
	if o.meta.Upload != "" && info.Size == 0 {
		mb, err := b.c.Read(ctx, bucket, manifestKey(o.meta.Upload), 0, manifestBytesMax)
		if errors.Is(err, client.ErrNotFound) {
			return o, 0, 0, false, nil // replaced meanwhile
		}
		if err != nil {
			return o, 0, 0, false, err
		}
		o.man = &manifest{}
		if err := json.Unmarshal(mb, o.man); err != nil {
			return o, 0, 0, false, fmt.Errorf("object %q: its manifest is not readable: %w", key, err)
		}
		o.size = o.meta.Size
	}
	start, length = 0, o.size
	if data {
		var whole bool
		if start, length, whole, err = backend.ParseObjectRange(o.size, rng); err != nil {
			return o, 0, 0, false, err
		}
		if !whole {
			start, length = 0, o.size
		}
	}
	checked := false
	if data && o.man == nil {
		// A range of one part is usually read whole, without a copy.
		size := length
		if length <= client.PayloadBytesMax {
			size = 0
		}
		o.data, o.from = make([]byte, 0, size), start
		for off := start; off < start+length; {
			part, at, err := b.c.ReadPart(ctx, bucket, key, uint64(off), uint64(min(start+length-off, client.PayloadBytesMax)))
			if err != nil {
				return o, 0, 0, false, err
			}
			if at.Version != info.Version {
				return o, 0, 0, false, nil
			}
			checked = true
			if len(part) == 0 {
				break
			}
			if off == start && int64(len(part)) == length {
				o.data = part // the whole range in one part: no copy
			} else {
				o.data = append(o.data, part...)
			}
			off += int64(len(part))
		}
	}
	if !checked {
		again, err := b.c.Stat(ctx, bucket, key)
		if err != nil {
			return o, 0, 0, false, err
		}
		if again.Version != info.Version {
			return o, 0, 0, false, nil
		}
	}
	b.nativeETag(&o, info.Version)
	return o, start, length, true, nil
}

// nativeETag gives an object written through the native API, which has no
// S3 attributes of its own, an ETag from its blob's version.
func (b *Backend) nativeETag(o *object, version uint64) {
	if o.meta.ETag == "" || (o.meta.Upload != "" && o.man == nil) {
		o.meta = meta{ETag: fmt.Sprintf(`"tyr-%x"`, version)}
	}
}

// readTx reads as read does, in one transaction: its commit checks that no
// PUT changed what it read (a conflict runs it again).
func (b *Backend) readTx(ctx context.Context, bucket, key string, data bool, rng string) (object, int64, int64, error) {
	var o object
	var start, length int64
	err := b.c.RunTx(ctx, bucket, func(tx *client.Tx) error {
		o = object{}
		size, err := tx.Size(ctx, key)
		if err != nil {
			return err
		}
		o.size = int64(size)
		mb, err := tx.Read(ctx, metaKey(key), 0, metaBytesMax)
		if err != nil && !errors.Is(err, client.ErrNotFound) {
			return err
		}
		if len(mb) > 0 {
			if err := json.Unmarshal(mb, &o.meta); err != nil {
				return fmt.Errorf("object %q: its S3 attributes are not readable: %w", key, err)
			}
		}
		// A blob with bytes is inline whatever its sidecar says: the
		// native API wrote to it.
		if o.meta.Upload != "" && size == 0 {
			mb, err := tx.Read(ctx, manifestKey(o.meta.Upload), 0, manifestBytesMax)
			if err != nil {
				return err
			}
			o.man = &manifest{}
			if err := json.Unmarshal(mb, o.man); err != nil {
				return fmt.Errorf("object %q: its manifest is not readable: %w", key, err)
			}
			o.size = o.meta.Size
		}
		start, length = 0, o.size
		if data {
			var ok bool
			start, length, ok, err = backend.ParseObjectRange(o.size, rng)
			if err != nil {
				return err
			}
			if !ok {
				start, length = 0, o.size
			}
			if o.man != nil {
				return nil
			}
			o.data, o.from = make([]byte, 0, length), start
			for off := start; off < start+length; {
				part, err := tx.Read(ctx, key, uint64(off), uint64(min(start+length-off, client.PayloadBytesMax)))
				if err != nil {
					return err
				}
				if len(part) == 0 {
					break
				}
				o.data = append(o.data, part...)
				off += int64(len(part))
			}
		}
		return nil
	}, nil)
	if err != nil {
		var apiErr s3err.APIError
		if errors.As(err, &apiErr) {
			return object{}, 0, 0, err
		}
		return object{}, 0, 0, b.objectError(ctx, err, bucket, key)
	}
	info, err := b.c.Stat(ctx, bucket, key)
	if err == nil {
		o.modified = info.Modified
	}
	b.nativeETag(&o, info.Version)
	return o, start, length, nil
}

// body returns a reader of length bytes of object o from start.
func (b *Backend) body(ctx context.Context, bucket string, o object, start, length int64) (io.ReadCloser, error) {
	if o.man != nil {
		return b.newPartsReader(ctx, bucket, *o.man, start, length), nil
	}
	if o.data == nil || start < o.from || start+length > o.from+int64(len(o.data)) {
		return nil, fmt.Errorf("s3: bytes %d+%d of an object read at %d+%d", start, length, o.from, len(o.data))
	}
	return io.NopCloser(bytes.NewReader(o.data[start-o.from : start-o.from+length])), nil
}

func (b *Backend) HeadObject(ctx context.Context, in *s3.HeadObjectInput) (out *s3.HeadObjectOutput, err error) {
	defer b.Metrics.done("HeadObject", str(in.Bucket), time.Now(), &err)
	o, _, _, err := b.read(ctx, str(in.Bucket), str(in.Key), false, "")
	if err != nil {
		return nil, err
	}
	if err := backend.EvaluatePreconditions(o.meta.ETag, o.modified, backend.PreConditions{IfMatch: in.IfMatch,
		IfNoneMatch: in.IfNoneMatch, IfModSince: in.IfModifiedSince, IfUnmodeSince: in.IfUnmodifiedSince}); err != nil {
		return nil, err
	}
	contentRange, length, err := rangeOf(o.size, str(in.Range))
	if err != nil {
		return nil, err
	}
	return &s3.HeadObjectOutput{ContentLength: ptr(length), ContentRange: contentRange, ETag: ptr(o.meta.ETag),
		LastModified: ptr(o.modified), ContentType: nonEmpty(o.meta.ContentType),
		ContentEncoding: nonEmpty(o.meta.ContentEncoding), ContentDisposition: nonEmpty(o.meta.ContentDisposition),
		ContentLanguage: nonEmpty(o.meta.ContentLanguage), CacheControl: nonEmpty(o.meta.CacheControl),
		ExpiresString: nonEmpty(o.meta.Expires), Metadata: o.meta.Metadata, AcceptRanges: ptr("bytes"),
		StorageClass: types.StorageClassStandard}, nil
}

func (b *Backend) GetObject(ctx context.Context, in *s3.GetObjectInput) (out *s3.GetObjectOutput, err error) {
	defer b.Metrics.done("GetObject", str(in.Bucket), time.Now(), &err)
	o, start, length, err := b.read(ctx, str(in.Bucket), str(in.Key), true, str(in.Range))
	if err != nil {
		return nil, err
	}
	if err := backend.EvaluatePreconditions(o.meta.ETag, o.modified, backend.PreConditions{IfMatch: in.IfMatch,
		IfNoneMatch: in.IfNoneMatch, IfModSince: in.IfModifiedSince, IfUnmodeSince: in.IfUnmodifiedSince}); err != nil {
		return nil, err
	}
	body, err := b.body(ctx, str(in.Bucket), o, start, length)
	if err != nil {
		return nil, err
	}
	b.Metrics.moved(str(in.Bucket), "out", length)
	out = &s3.GetObjectOutput{Body: body, ContentLength: ptr(length),
		ETag: ptr(o.meta.ETag), LastModified: ptr(o.modified), ContentType: nonEmpty(o.meta.ContentType),
		ContentEncoding: nonEmpty(o.meta.ContentEncoding), ContentDisposition: nonEmpty(o.meta.ContentDisposition),
		ContentLanguage: nonEmpty(o.meta.ContentLanguage), CacheControl: nonEmpty(o.meta.CacheControl),
		ExpiresString: nonEmpty(o.meta.Expires), Metadata: o.meta.Metadata, AcceptRanges: ptr("bytes"),
		StorageClass: types.StorageClassStandard}
	out.ContentRange, _, _ = rangeOf(o.size, str(in.Range))
	return out, nil
}

// rangeOf returns the Content-Range answering Range header rng on an
// object of size bytes, nil if rng is empty or ignored, and the length of
// the answer.
func rangeOf(size int64, rng string) (*string, int64, error) {
	start, length, ok, err := backend.ParseObjectRange(size, rng)
	if err != nil || !ok || rng == "" {
		return nil, size, err
	}
	return ptr(fmt.Sprintf("bytes %d-%d/%d", start, start+length-1, size)), length, nil
}

func (b *Backend) DeleteObject(ctx context.Context, in *s3.DeleteObjectInput) (out *s3.DeleteObjectOutput, err error) {
	defer b.Metrics.done("DeleteObject", str(in.Bucket), time.Now(), &err)
	bucket, key := str(in.Bucket), str(in.Key)
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if err := b.remove(ctx, bucket, []string{key}); err != nil {
		return nil, err
	}
	return &s3.DeleteObjectOutput{}, nil
}

// remove deletes objects, their sidecars and manifests in one commit; a
// missing one is not an error (S3 deletes are idempotent). The data of
// manifest objects goes right after.
func (b *Backend) remove(ctx context.Context, bucket string, keys []string) error {
	var dropped []string
	err := b.c.RunTx(ctx, bucket, func(tx *client.Tx) error {
		dropped = dropped[:0]
		for _, k := range keys {
			id, err := b.dropManifest(ctx, tx, k)
			if err != nil {
				return err
			}
			if id != "" {
				dropped = append(dropped, id)
			}
			// Create then delete: deleting a missing blob would fail the commit.
			if err := tx.Do(client.WriteOp(k, 0, nil, true), client.DeleteOp(k),
				client.WriteOp(metaKey(k), 0, nil, true), client.DeleteOp(metaKey(k))); err != nil {
				return err
			}
		}
		return nil
	}, nil)
	if err != nil {
		return s3Error(err, bucket, "")
	}
	for _, id := range dropped {
		b.dropLater(bucket, id)
	}
	return nil
}

func (b *Backend) DeleteObjects(ctx context.Context, in *s3.DeleteObjectsInput) (out s3response.DeleteResult, err error) {
	defer b.Metrics.done("DeleteObjects", str(in.Bucket), time.Now(), &err)

	if in.Delete == nil {
		return out, nil
	}
	const perCommit = client.OpsPerTxMax / 8 // 4 ops, and 2 for a manifest
	var batch []string
	flush := func() {
		if len(batch) == 0 {
			return
		}
		err := b.remove(ctx, str(in.Bucket), batch)
		for _, k := range batch {
			if err != nil {
				out.Error = append(out.Error, types.Error{Key: ptr(k), Code: ptr("InternalError"), Message: ptr(err.Error())})
			} else {
				out.Deleted = append(out.Deleted, types.DeletedObject{Key: ptr(k)})
			}
		}
		batch = batch[:0]
	}
	for _, obj := range in.Delete.Objects {
		k := str(obj.Key)
		if err := checkKey(k); err != nil {
			out.Error = append(out.Error, types.Error{Key: ptr(k), Code: ptr("InvalidArgument"), Message: ptr(err.Error())})
			continue
		}
		batch = append(batch, k)
		if len(batch) == perCommit {
			flush()
		}
	}
	flush()
	return out, nil
}

// Listing.

// listed is one page of a listing: objects and common prefixes in key
// order, and where the next page starts.
type listed struct {
	objects   []s3response.Object
	prefixes  []types.CommonPrefix
	truncated bool
	next      string // the last key or prefix of the page
}

// list pages through the keys under prefix after start, grouping keys by
// delimiter, until max entries (objects and prefixes).
func (b *Backend) list(ctx context.Context, bucket, prefix, delim, start string, max int) (listed, error) {
	var l listed
	var infos []client.BlobInfo
	after, group := start, ""
	count := func() int { return len(infos) + len(l.prefixes) }
	for count() < max {
		page, next, err := b.c.List(ctx, bucket, prefix, after, min(max-count()+1, client.ListLimitMax))
		if err != nil {
			return listed{}, s3Error(err, bucket, "")
		}
		done := next == ""
		for _, bi := range page {
			if strings.HasPrefix(bi.Key, MetaPrefix) {
				done = true // the sidecars, after every object
				break
			}
			if group != "" && strings.HasPrefix(bi.Key, group) {
				continue // the rest of a common prefix already listed
			}
			if count() == max {
				l.truncated = true
				break
			}
			after = bi.Key
			if delim != "" {
				if i := strings.Index(bi.Key[len(prefix):], delim); i >= 0 {
					group = bi.Key[:len(prefix)+i+len(delim)]
					l.prefixes = append(l.prefixes, types.CommonPrefix{Prefix: ptr(group)})
					l.next = group
					// The next request starts after every key of the group.
					after = group + MetaPrefix
					continue
				}
			}
			infos = append(infos, bi)
			l.next = bi.Key
		}
		if l.truncated || done {
			break
		}
	}
	if !l.truncated && count() == max {
		// One more key under the prefix means the listing goes on.
		more, _, err := b.c.List(ctx, bucket, prefix, after, 1)
		if err != nil {
			return listed{}, s3Error(err, bucket, "")
		}
		l.truncated = len(more) > 0 && !strings.HasPrefix(more[0].Key, MetaPrefix)
	}
	// Sidecars for the ETags: listed with their bytes, and read a few at
	// once where the listing did not bring them.
	side, err := b.listSidecars(ctx, bucket, prefix, start, len(infos))
	if err != nil {
		return listed{}, s3Error(err, bucket, "")
	}
	l.objects = make([]s3response.Object, len(infos))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(listFetches)
	for i, bi := range infos {
		mb, known, exists := side.of(bi.Key)
		if known {
			l.objects[i] = listedObject(bi, mb, exists)
			continue
		}
		g.Go(func() error {
			mb, err := b.c.Read(gctx, bucket, metaKey(bi.Key), 0, metaBytesMax)
			if err != nil && !errors.Is(err, client.ErrNotFound) {
				return s3Error(err, bucket, bi.Key)
			}
			l.objects[i] = listedObject(bi, mb, err == nil)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return listed{}, err
	}
	return l, nil
}

// listedObject is the listing entry of the object blob bi describes,
// with its sidecar mb if it has one (exists): the sidecar's ETag, and its
// size for a manifest object; an ETag from the version without one.
func listedObject(bi client.BlobInfo, mb []byte, exists bool) s3response.Object {
	etag, size := fmt.Sprintf(`"tyr-%x"`, bi.Version), int64(bi.Size)
	var m meta
	if exists && json.Unmarshal(mb, &m) == nil && m.ETag != "" && (m.Upload == "" || size == 0) {
		etag = m.ETag
		if m.Upload != "" {
			size = m.Size
		}
	}
	return s3response.Object{Key: ptr(bi.Key), Size: ptr(size), ETag: ptr(etag),
		LastModified: ptr(bi.Modified), StorageClass: types.ObjectStorageClassStandard}
}

// sidecarPage is what one listing of sidecars with their bytes found.
type sidecarPage struct {
	// data holds the bytes of the sidecars listed, by object key; nil for
	// one listed without them (too large for the response).
	data map[string][]byte
	// through is the last object key whose sidecar the listing reached;
	// all says it reached the end of the prefix.
	through string
	all     bool
}

// listSidecars lists, with their bytes, up to n sidecars of the keys
// under prefix after start: those of the next n objects, in one request,
// unless sidecars of keys grouped under a common prefix fill it.
func (b *Backend) listSidecars(ctx context.Context, bucket, prefix, start string, n int) (sidecarPage, error) {
	p := sidecarPage{data: map[string][]byte{}}
	if n == 0 {
		return p, nil
	}
	page, next, err := b.c.ListData(ctx, bucket, metaKey(prefix), metaKey(start), n, metaBytesMax)
	if err != nil {
		return p, err
	}
	for _, lb := range page {
		key := strings.TrimPrefix(lb.Key, MetaPrefix)
		if strings.HasPrefix(key, MetaPrefix) {
			p.all = true // the gateway's own blobs, after every sidecar
			break
		}
		var data []byte
		if lb.HasData {
			data = append([]byte{}, lb.Data...) // not nil, even when empty
		}
		p.data[key], p.through = data, key
	}
	p.all = p.all || next == ""
	return p, nil
}

// of returns key's sidecar bytes if the listing brought them (known), and
// whether the sidecar exists: a key the listing passed without finding a
// sidecar has none. known is false when the sidecar must be read.
func (p sidecarPage) of(key string) (data []byte, known, exists bool) {
	if data, ok := p.data[key]; ok {
		return data, data != nil, true
	}
	if p.all || key <= p.through {
		return nil, true, false
	}
	return nil, false, false
}

func maxKeys(p *int32) int {
	if p == nil || *p < 0 || *p > 1000 {
		return 1000
	}
	return int(*p)
}

func (b *Backend) ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input) (out s3response.ListObjectsV2Result, err error) {
	defer b.Metrics.done("ListObjectsV2", str(in.Bucket), time.Now(), &err)
	bucket, prefix, delim := str(in.Bucket), str(in.Prefix), str(in.Delimiter)
	// A listing starts after StartAfter and the token, whichever is later.
	start := max(continueAfter(str(in.StartAfter), delim), str(in.ContinuationToken))
	n := maxKeys(in.MaxKeys)
	out = s3response.ListObjectsV2Result{Name: in.Bucket, Prefix: nonEmpty(prefix), StartAfter: nonEmpty(str(in.StartAfter)),
		ContinuationToken: nonEmpty(str(in.ContinuationToken)), MaxKeys: ptr(int32(n)), Delimiter: nonEmpty(delim),
		EncodingType: in.EncodingType}
	if n == 0 {
		if err := b.bucketExists(ctx, bucket); err != nil {
			return out, err
		}
		out.IsTruncated, out.KeyCount = ptr(false), ptr(int32(0))
		return out, nil
	}
	l, err := b.list(ctx, bucket, prefix, delim, start, n)
	if err != nil {
		return out, err
	}
	out.Contents, out.CommonPrefixes = l.objects, l.prefixes
	out.KeyCount = ptr(int32(len(l.objects) + len(l.prefixes)))
	out.IsTruncated = ptr(l.truncated)
	if l.truncated {
		out.NextContinuationToken = ptr(continueAfter(l.next, delim))
	}
	return out, nil
}

// continueAfter is where the page after one ending at last starts: after
// every key of last's group when last is a common prefix.
func continueAfter(last, delim string) string {
	if delim != "" && strings.HasSuffix(last, delim) {
		return last + MetaPrefix
	}
	return last
}

func (b *Backend) ListObjects(ctx context.Context, in *s3.ListObjectsInput) (out s3response.ListObjectsResult, err error) {
	defer b.Metrics.done("ListObjects", str(in.Bucket), time.Now(), &err)
	bucket, prefix, delim := str(in.Bucket), str(in.Prefix), str(in.Delimiter)
	n := maxKeys(in.MaxKeys)
	out = s3response.ListObjectsResult{Name: in.Bucket, Prefix: nonEmpty(prefix), Marker: nonEmpty(str(in.Marker)), MaxKeys: ptr(int32(n)),
		Delimiter: nonEmpty(delim), EncodingType: in.EncodingType}
	if n == 0 {
		out.IsTruncated = ptr(false)
		return out, nil
	}
	l, err := b.list(ctx, bucket, prefix, delim, continueAfter(str(in.Marker), delim), n)
	if err != nil {
		return out, err
	}
	out.Contents, out.CommonPrefixes = l.objects, l.prefixes
	out.IsTruncated = ptr(l.truncated)
	if l.truncated {
		out.NextMarker = ptr(l.next)
	}
	return out, nil
}

// copySource parses an x-amz-copy-source header: bucket and key.
func copySource(src string) (string, string, error) {
	src = strings.TrimPrefix(src, "/")
	if i := strings.Index(src, "?"); i >= 0 {
		src = src[:i]
	}
	sb, sk, ok := strings.Cut(src, "/")
	if !ok {
		return "", "", s3err.GetInvalidArgumentErr(s3err.InvalidArgCopySource, src)
	}
	return sb, sk, nil
}

// CopyObject streams the source into a new object, with its attributes or
// the request's when it replaces them.
func (b *Backend) CopyObject(ctx context.Context, in s3response.CopyObjectInput) (out s3response.CopyObjectOutput, err error) {
	defer b.Metrics.done("CopyObject", str(in.Bucket), time.Now(), &err)
	sb, sk, err := copySource(str(in.CopySource))
	if err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	dst, key := str(in.Bucket), str(in.Key)
	if err := checkKey(key); err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	o, _, _, err := b.read(ctx, sb, sk, true, "")
	if err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	m := o.meta
	if in.MetadataDirective == types.MetadataDirectiveReplace {
		m = meta{ContentType: str(in.ContentType), ContentEncoding: str(in.ContentEncoding),
			ContentDisposition: str(in.ContentDisposition), ContentLanguage: str(in.ContentLanguage),
			CacheControl: str(in.CacheControl), Expires: str(in.Expires), Metadata: in.Metadata}
	} else if sb == dst && sk == key {
		return s3response.CopyObjectOutput{}, s3err.GetAPIError(s3err.ErrInvalidCopyDest)
	}
	body, err := b.body(ctx, sb, o, 0, o.size)
	if err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	defer body.Close()
	if m, err = b.store(ctx, dst, key, body, m); err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	now := time.Now()
	return s3response.CopyObjectOutput{CopyObjectResult: &s3response.CopyObjectResult{ETag: ptr(m.ETag), LastModified: &now}}, nil
}

// Bucket configurations tyr does not keep: the answers S3 gives for a
// bucket without one, so the gateway's checks (policy, object lock, CORS,
// versioning) pass.

// bucketExists answers NoSuchBucket unless keyspace bucket exists. It lists
// the keyspaces: Keyspace would also add up the keyspace's usage, which
// reads every blob's record.
func (b *Backend) bucketExists(ctx context.Context, bucket string) error {
	kss, err := b.c.ListKeyspaces(ctx)
	if err != nil {
		return s3Error(err, bucket, "")
	}
	for _, ks := range kss {
		if ks.Name == bucket {
			return nil
		}
	}
	return s3err.GetBucketErr(s3err.ErrNoSuchBucket, bucket)
}

func (b *Backend) GetBucketPolicy(ctx context.Context, bucket string) (out []byte, err error) {
	if err := b.bucketExists(ctx, bucket); err != nil {
		return nil, err
	}
	return nil, s3err.GetAPIError(s3err.ErrNoSuchBucketPolicy)
}

func (b *Backend) GetObjectLockConfiguration(ctx context.Context, bucket string) (out []byte, err error) {
	if err := b.bucketExists(ctx, bucket); err != nil {
		return nil, err
	}
	return nil, s3err.GetAPIError(s3err.ErrObjectLockConfigurationNotFound)
}

func (b *Backend) GetBucketCors(ctx context.Context, bucket string) (out []byte, err error) {
	if err := b.bucketExists(ctx, bucket); err != nil {
		return nil, err
	}
	return nil, s3err.GetAPIError(s3err.ErrNoSuchCORSConfiguration)
}

func (b *Backend) GetBucketVersioning(ctx context.Context, bucket string) (out s3response.GetBucketVersioningOutput, err error) {
	return s3response.GetBucketVersioningOutput{}, b.bucketExists(ctx, bucket)
}

// Accounts: one, the gateway's credentials.

// IAM returns the gateway's IAM service: one root account with the access
// and secret keys given, and S3's answer to any other access key (403
// InvalidAccessKeyId).
func IAM(access, secret string) auth.IAMService {
	root := auth.Account{Access: access, Secret: secret, Role: auth.RoleAdmin}
	return singleAccount{IAMService: auth.NewIAMServiceSingle(root), root: root}
}

type singleAccount struct {
	auth.IAMService
	root auth.Account
}

func (s singleAccount) GetUserAccount(access string) (auth.Account, error) {
	if access == s.root.Access {
		return s.root, nil
	}
	return auth.Account{}, auth.ErrNoSuchUser
}
