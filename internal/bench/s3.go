package bench

// S3 servers as peers (--s3 NAME=URL, repeatable): tyr's own gateway,
// versitygw over a POSIX directory, Ceph's RADOS gateway or any other. Each
// runs the object workload in a bucket of its own (tyr-bench-<random>),
// emptied and deleted at the end: a put is one PutObject of the whole
// object, a get one GetObject, both signed with SigV4 by the AWS SDK for
// Go, over one HTTP connection per client. Payloads are signed in full
// (the SDK's default over plain HTTP) and no additional checksums are
// asked for, so every server does the same work per byte.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"golang.org/x/sys/unix"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/s3gw"
)

// S3Peer is one --s3 value: a name for the results, an endpoint URL, and
// the credentials of this server when they are not the run's.
type S3Peer struct {
	Name, URL      string
	Access, Secret string
}

// ParseS3Peer parses NAME=http://[ACCESS:SECRET@]HOST:PORT.
func ParseS3Peer(s string) (S3Peer, error) {
	name, raw, ok := strings.Cut(s, "=")
	u, err := url.Parse(raw)
	if !ok || name == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return S3Peer{}, fmt.Errorf("--s3 %q: want NAME=http://[ACCESS:SECRET@]HOST:PORT", s)
	}
	p := S3Peer{Name: name}
	if u.User != nil {
		p.Access = u.User.Username()
		p.Secret, _ = u.User.Password()
		u.User = nil
	}
	p.URL = u.String()
	return p, nil
}

// S3FillNative is the --s3-fill of tyr's own gateway: the list workload
// stores its objects through the native API.
const S3FillNative = "native"

type s3System struct {
	peer   S3Peer
	bucket string
	access string
	secret string
	admin  *s3.Client
	// fill is how the list workload stores objects (Config.S3Fill), and
	// native, with S3FillNative, the client it does so through.
	fill   string
	native *client.Client
}

func newS3System(cfg *Config, peer S3Peer) (*s3System, error) {
	s := &s3System{peer: peer, bucket: fmt.Sprintf("tyr-bench-%08x", rand.Uint32()),
		access: cfg.S3AccessKey, secret: cfg.S3SecretKey}
	if peer.Access != "" {
		s.access, s.secret = peer.Access, peer.Secret
	}
	if s.access == "" || s.secret == "" {
		return nil, errors.New("--s3 needs credentials: in its URL, or --s3-access-key and --s3-secret-key (or TYR_S3_ACCESS_KEY and TYR_S3_SECRET_KEY)")
	}
	s.admin = s.client(4)
	s.fill = cfg.S3Fill[peer.Name]
	if s.fill == S3FillNative {
		c, err := client.Dial(cfg.Endpoint)
		if err != nil {
			return nil, err
		}
		s.native = c
	}
	return s, nil
}

// client returns an S3 client keeping up to conns connections open.
func (s *s3System) client(conns int) *s3.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = conns, conns
	return s3.New(s3.Options{
		BaseEndpoint:               aws.String(s.peer.URL),
		Region:                     "us-east-1",
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(s.access, s.secret, ""),
		HTTPClient:                 &http.Client{Transport: tr},
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

func (s *s3System) Name() string { return s.peer.Name }
func (s *s3System) Info() SystemInfo {
	return SystemInfo{Version: "S3 at " + s.peer.URL, Settings: "bucket " + s.bucket}
}
func (s *s3System) Note(string) string { return "" }

func (s *s3System) Open(ctx context.Context) error {
	_, err := s.admin.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &s.bucket})
	return err
}

// Close deletes every object of the bench bucket, then the bucket: as the
// list workload stored them.
func (s *s3System) Close(ctx context.Context) error {
	switch {
	case s.fill == S3FillNative:
		err := s.native.DropKeyspace(ctx, s.bucket)
		if errors.Is(err, client.ErrNotFound) {
			err = nil // never created
		}
		return errors.Join(err, s.native.Close())
	case s.fill != "":
		dir := filepath.Join(s.fill, s.bucket)
		entries, err := os.ReadDir(dir)
		for _, e := range entries {
			err = errors.Join(err, os.RemoveAll(filepath.Join(dir, e.Name())))
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	p := s3.NewListObjectsV2Paginator(s.admin, &s3.ListObjectsV2Input{Bucket: &s.bucket})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return err
		}
		if len(page.Contents) == 0 {
			break
		}
		var del types.Delete
		for _, o := range page.Contents {
			del.Objects = append(del.Objects, types.ObjectIdentifier{Key: o.Key})
		}
		if _, err := s.admin.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &s.bucket, Delete: &del}); err != nil {
			return err
		}
	}
	_, err := s.admin.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &s.bucket})
	return err
}

func (s *s3System) objects() {}

func (s *s3System) Create(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if err := (&s3Conn{s: s, c: s.admin}).PutObject(ctx, k, nil); err != nil {
			return err
		}
	}
	return nil
}

func (s *s3System) Conns(_ context.Context, n int) ([]conn, func() error, error) {
	c := s.client(n)
	conns := make([]conn, n)
	for i := range conns {
		conns[i] = &s3Conn{s: s, c: c}
	}
	return conns, func() error { return nil }, nil
}

// Fill stores n empty objects under prefix: through PutObject, 32 at
// once, unless s.fill says otherwise.
func (s *s3System) Fill(ctx context.Context, prefix string, n int) error {
	switch {
	case s.fill == S3FillNative:
		one, err := s3gw.NewObjectOps(listKey(prefix, 0), nil)
		if err != nil {
			return err
		}
		return fillBatches(ctx, prefix, n, limits.OpsPerCommitMax/len(one), fillWorkers,
			func(ctx context.Context, keys []string) error {
				var ops []client.Op
				for _, k := range keys {
					o, err := s3gw.NewObjectOps(k, nil)
					if err != nil {
						return err
					}
					ops = append(ops, o...)
				}
				_, err := s.native.Commit(ctx, s.bucket, ops...)
				return err
			})
	case s.fill != "":
		if err := os.MkdirAll(filepath.Join(s.fill, s.bucket, prefix), 0o755); err != nil {
			return err
		}
		return fillBatches(ctx, prefix, n, 1000, fillWorkers, func(_ context.Context, keys []string) error {
			for _, k := range keys {
				if err := posixObject(filepath.Join(s.fill, s.bucket, k)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	c := &s3Conn{s: s, c: s.client(32)}
	return fillBatches(ctx, prefix, n, 1, 32, func(ctx context.Context, keys []string) error {
		return c.PutObject(ctx, keys[0], nil)
	})
}

// emptyETag is the ETag of an empty object: its MD5, quoted.
const emptyETag = `"d41d8cd98f00b204e9800998ecf8427e"`

// posixObject makes an empty object as versitygw's POSIX back-end stores
// one: a file, with its ETag in the extended attribute user.etag.
func posixObject(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = unix.Fsetxattr(int(f.Fd()), "user.etag", []byte(emptyETag), 0)
	return errors.Join(err, f.Close())
}

type s3Conn struct {
	s *s3System
	c *s3.Client
}

func (c *s3Conn) Ping(ctx context.Context) error {
	_, err := c.c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &c.s.bucket})
	return err
}

func (c *s3Conn) PutObject(ctx context.Context, key string, value []byte) error {
	_, err := c.c.PutObject(ctx, &s3.PutObjectInput{Bucket: &c.s.bucket, Key: &key, Body: bytes.NewReader(value),
		ContentLength: aws.Int64(int64(len(value)))})
	return err
}

func (c *s3Conn) GetObject(ctx context.Context, key string, n int) ([]byte, error) {
	out, err := c.c.GetObject(ctx, &s3.GetObjectInput{Bucket: &c.s.bucket, Key: &key})
	if err != nil {
		return nil, err
	}
	defer out.Body.Close()
	buf := bytes.NewBuffer(make([]byte, 0, n))
	_, err = io.Copy(buf, out.Body)
	return buf.Bytes(), err
}

func (c *s3Conn) ListPage(ctx context.Context, prefix, after string, max int) ([]string, error) {
	in := &s3.ListObjectsV2Input{Bucket: &c.s.bucket, Prefix: &prefix, MaxKeys: aws.Int32(int32(max))}
	if after != "" {
		in.StartAfter = &after
	}
	out, err := c.c.ListObjectsV2(ctx, in)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(out.Contents))
	for i, o := range out.Contents {
		keys[i] = aws.ToString(o.Key)
	}
	return keys, nil
}
