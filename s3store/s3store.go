// Package s3store is an upscale.BlobStore on S3-compatible object storage
// (AWS S3, MinIO, Ceph, Cloudflare R2, versitygw, ...), for several
// replicas sharing one bucket.
//
// Links are presigned GET URLs that stop working at expiry: the storage
// server checks them, so replicas share no secret and serve no result
// themselves. Expired objects are deleted by a sweeper in every replica
// (deleting twice is harmless), and in production also by a bucket
// lifecycle rule, which covers the time no replica runs:
//
//	{"Rules": [{"ID": "upscale-results", "Status": "Enabled",
//	  "Filter": {"Prefix": "upscale/"}, "Expiration": {"Days": 1}}]}
//
// (aws s3api put-bucket-lifecycle-configuration --bucket B
// --lifecycle-configuration file://rule.json). Lifecycle rules count whole
// days, so the sweeper is what keeps the bucket near one LinkTTL of results.
//
// The bucket must not be public: a presigned link is the only way in.
package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/periodic"
)

// maxLinkTTL is the longest a presigned link can last (SigV4's limit).
const maxLinkTTL = 7 * 24 * time.Hour

// Options configures a Store.
type Options struct {
	// Client talks to the storage; NewClient makes one from the standard
	// AWS environment. Required.
	Client *s3.Client
	// Bucket holds the results. It must exist and should not be public.
	// Required.
	Bucket string
	// Prefix starts every object key the store writes, and bounds what the
	// sweeper lists and deletes. Empty means "upscale/".
	Prefix string
	// Now is the clock that decides link lifetimes and what the sweeper
	// deletes. Nil means time.Now.
	Now func() time.Time
	// SweepInterval is how often expired objects are deleted. Zero means
	// ten minutes; negative turns the sweeper off, leaving deletion to the
	// bucket's lifecycle rule.
	SweepInterval time.Duration
	// Logger receives the sweeper's failures, such as a bucket policy
	// that allows no listing or deleting: unlogged, expired results would
	// pile up unseen. Nil means slog.Default().
	Logger *slog.Logger
}

// Store is an upscale.BlobStore on an S3 bucket. Each result is one object
// whose key begins with its expiry time, so the sweeper finds every expired
// object by listing in key order and stopping at the first live one. It is
// safe for concurrent use; Close stops the sweeper and the clean-up of
// failed Puts.
type Store struct {
	client  *s3.Client
	presign *s3.PresignClient
	bucket  string
	prefix  string
	now     func() time.Time

	sweeper *periodic.Job
	// closed ends the background deletions of failed Puts; cleaning counts
	// them. mu orders a deletion's start before Close's wait: a WaitGroup
	// may not gain a member while it is being waited for.
	mu       sync.Mutex
	closed   chan struct{}
	cleaning sync.WaitGroup
}

// Every interface a Store implements.
var (
	_ upscale.BlobStore     = (*Store)(nil)
	_ upscale.BlobReader    = (*Store)(nil)
	_ upscale.ExpiryLimiter = (*Store)(nil)
	_ upscale.Pinger        = (*Store)(nil)
)

// MaxLinkTTL implements upscale.ExpiryLimiter: a presigned link lasts at
// most 7 days (SigV4's limit).
func (*Store) MaxLinkTTL() time.Duration { return maxLinkTTL }

// NewClient returns a client configured the way the AWS CLI is: region and
// credentials from the standard environment variables (AWS_REGION,
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE),
// the shared config files and, on AWS, the instance or task role. A
// non-empty region overrides the environment's. A non-empty endpoint
// (http(s)://host:port of an S3-compatible server) is used with path-style
// addressing, which such servers expect; the region then defaults to
// us-east-1.
func NewClient(ctx context.Context, endpoint, region string) (*s3.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("s3store: AWS configuration: %w", err)
	}
	if region != "" {
		cfg.Region = region
	}
	if cfg.Region == "" && endpoint != "" {
		cfg.Region = "us-east-1"
	}
	if cfg.Region == "" {
		return nil, errors.New("s3store: no region: set AWS_REGION or pass one")
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
			o.UsePathStyle = true
		}
	}), nil
}

// New checks that the bucket is reachable with the client's credentials,
// so a wrong name, region or key fails at start and not at the first
// request, and starts the sweeper.
func New(ctx context.Context, opts Options) (*Store, error) {
	if opts.Client == nil || opts.Bucket == "" {
		return nil, errors.New("s3store: Options.Client and Options.Bucket are required")
	}
	if opts.Prefix == "" {
		opts.Prefix = "upscale/"
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = 10 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if _, err := opts.Client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &opts.Bucket}); err != nil {
		return nil, fmt.Errorf("s3store: bucket %q: %w", opts.Bucket, err)
	}
	s := &Store{
		client:  opts.Client,
		presign: s3.NewPresignClient(opts.Client),
		bucket:  opts.Bucket,
		prefix:  opts.Prefix,
		now:     opts.Now,
		closed:  make(chan struct{}),
	}
	s.sweeper = periodic.Start(opts.SweepInterval, func() {
		ctx, cancel := context.WithTimeout(context.Background(), opts.SweepInterval)
		defer cancel()
		if deleted, err := s.Sweep(ctx); err != nil {
			opts.Logger.Error("s3store: sweep: expired results stay in the bucket until a sweep succeeds", "bucket", opts.Bucket, "deleted", deleted, "err", err)
		}
	})
	return s, nil
}

// Ping checks that the bucket answers with the store's credentials; it
// implements upscale.Pinger.
func (s *Store) Ping(ctx context.Context) error {
	if _, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.bucket}); err != nil {
		return classify(ctx, fmt.Errorf("s3store: bucket %q: %w", s.bucket, err))
	}
	return nil
}

// Close stops the sweeper and the clean-up of failed Puts (whose objects
// the sweeper of another replica, or the lifecycle rule, deletes at their
// expiry); calling it again does nothing. Objects stay, and their links
// keep working until they expire.
func (s *Store) Close() error {
	s.mu.Lock()
	select {
	case <-s.closed:
	default:
		close(s.closed)
	}
	s.mu.Unlock()
	s.sweeper.Stop()
	s.cleaning.Wait()
	return nil
}

// objectKey puts the expiry, in Unix seconds padded to a fixed width, in
// front of key, so that key order is expiry order.
func (s *Store) objectKey(key string, expires time.Time) string {
	return fmt.Sprintf("%s%011d/%s", s.prefix, expires.Unix(), key)
}

// expiryOf reads back the expiry objectKey wrote; ok is false for an object
// the store did not write.
func (s *Store) expiryOf(objectKey string) (expires time.Time, ok bool) {
	stamp, _, found := strings.Cut(strings.TrimPrefix(objectKey, s.prefix), "/")
	if !found || len(stamp) != 11 {
		return time.Time{}, false
	}
	unix, err := strconv.ParseInt(stamp, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(unix, 0), true
}

// Put implements upscale.BlobStore: one PutObject, which S3 makes visible
// whole or not at all, then a presigned GET lasting until expires (rounded
// up to the second; at most 7 days away).
func (s *Store) Put(ctx context.Context, key string, data []byte, contentType string, expires time.Time) (string, error) {
	ttl := expires.Sub(s.now())
	switch {
	case ttl <= 0:
		return "", fmt.Errorf("s3store: %q already expired", key)
	case ttl > maxLinkTTL:
		return "", fmt.Errorf("s3store: link for %q would last %v; presigned links last at most %v", key, ttl, maxLinkTTL)
	}
	objectKey := s.objectKey(key, expires)
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        &s.bucket,
		Key:           &objectKey,
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		ContentType:   &contentType,
		// Caches may keep a result as long as its link works, no longer.
		CacheControl: aws.String("private, max-age=" + strconv.Itoa(int(ttl.Seconds()))),
	})
	if err != nil {
		// The server may have stored the object and only its answer been
		// lost: delete it, in the background, since the server is likely
		// unreachable right now.
		s.cleanUp(objectKey, expires)
		return "", classify(ctx, fmt.Errorf("s3store: put %s: %w", objectKey, err))
	}
	link, err := s.presign.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &objectKey},
		s3.WithPresignExpires(time.Duration(math.Ceil(ttl.Seconds()))*time.Second))
	if err != nil {
		// No link will ever reach the object; don't leave it for the sweeper.
		s.client.DeleteObject(context.WithoutCancel(ctx), &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &objectKey})
		return "", fmt.Errorf("s3store: presign %s: %w", objectKey, err)
	}
	return link.URL, nil
}

// cleanUp deletes objectKey, trying after 1 s and then backing off
// (doubling to 30 s) until the server answers, the object expires (the
// sweeper's turn) or the Store is closed.
func (s *Store) cleanUp(objectKey string, expires time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.closed:
		return // the sweeper or the lifecycle rule deletes it at its expiry
	default:
	}
	s.cleaning.Go(func() {
		// The first try waits too: right after a failure the server is
		// most likely still out of reach.
		for wait := time.Second; s.now().Before(expires); wait = min(2*wait, 30*time.Second) {
			select {
			case <-s.closed:
				return
			case <-time.After(wait):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &objectKey})
			cancel()
			if err == nil {
				return
			}
		}
	})
}

// Delete implements upscale.BlobStore: one DeleteObject, which S3 answers
// alike whether or not the object was there.
func (s *Store) Delete(ctx context.Context, key string, expires time.Time) error {
	objectKey := s.objectKey(key, expires)
	if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &objectKey}); err != nil {
		return classify(ctx, fmt.Errorf("s3store: delete %s: %w", objectKey, err))
	}
	return nil
}

// Get implements upscale.BlobReader: one GetObject. An object past its
// expiry is not found, whether or not the sweeper has deleted it yet.
func (s *Store) Get(ctx context.Context, key string, expires time.Time) ([]byte, error) {
	objectKey := s.objectKey(key, expires)
	if !s.now().Before(expires) {
		return nil, fmt.Errorf("s3store: %s expired: %w", objectKey, upscale.ErrNotFound)
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &objectKey})
	if _, missing := errors.AsType[*types.NoSuchKey](err); missing {
		return nil, fmt.Errorf("s3store: %s: %w", objectKey, upscale.ErrNotFound)
	}
	if err != nil {
		return nil, classify(ctx, fmt.Errorf("s3store: get %s: %w", objectKey, err))
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, classify(ctx, fmt.Errorf("s3store: read %s: %w", objectKey, err))
	}
	return data, nil
}

// classify marks the failures that waiting may cure with
// upscale.ErrUnavailable: the request never got an answer (refused or reset
// connection, DNS, TLS: the SDK's RequestSendError, after its own retries)
// or the server answered 5xx (S3's InternalError, SlowDown). An error after
// ctx ended is the caller's, and stays as it is.
func classify(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return err
	}
	var sendErr *smithyhttp.RequestSendError
	var respErr interface{ HTTPStatusCode() int }
	if errors.As(err, &sendErr) || (errors.As(err, &respErr) && respErr.HTTPStatusCode() >= 500) {
		return fmt.Errorf("%w: %w", upscale.ErrUnavailable, err)
	}
	return err
}

// Sweep deletes every object the store wrote whose expiry has passed,
// returning how many. The sweeper calls it every SweepInterval; other
// replicas may sweep at the same time, and objects they already deleted
// count as deleted.
func (s *Store) Sweep(ctx context.Context) (deleted int, err error) {
	now := s.now()
	pages := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &s.prefix})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return deleted, fmt.Errorf("s3store: list %s: %w", s.prefix, err)
		}
		var expired []types.ObjectIdentifier
		live := false
		for _, obj := range page.Contents {
			expires, ok := s.expiryOf(aws.ToString(obj.Key))
			if !ok {
				continue
			}
			if expires.After(now) {
				live = true
				break
			}
			expired = append(expired, types.ObjectIdentifier{Key: obj.Key})
		}
		if len(expired) > 0 { // a page holds at most 1000 keys, DeleteObjects' limit
			out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
				Bucket: &s.bucket,
				Delete: &types.Delete{Objects: expired, Quiet: aws.Bool(true)},
			})
			if err != nil {
				return deleted, fmt.Errorf("s3store: delete expired: %w", err)
			}
			deleted += len(expired) - len(out.Errors)
			if len(out.Errors) > 0 {
				e := out.Errors[0]
				return deleted, fmt.Errorf("s3store: delete %s: %s", aws.ToString(e.Key), aws.ToString(e.Message))
			}
		}
		if live {
			break
		}
	}
	return deleted, nil
}
