package s3store_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/testservers"
	"github.com/upscalekit/upscale/s3store"
	"github.com/upscalekit/upscale/upscaletest"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// newBucket returns a client for the test server, made by NewClient from
// the standard AWS environment variables as a host's would be, and a new
// empty bucket.
func newBucket(t *testing.T) (*s3.Client, string) {
	t.Helper()
	server := testservers.S3(t)
	empty := filepath.Join(t.TempDir(), "none")
	t.Setenv("AWS_CONFIG_FILE", empty) // nothing from this machine's ~/.aws
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", empty)
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_ACCESS_KEY_ID", server.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", server.SecretKey)
	ctx := context.Background()
	client, err := s3store.NewClient(ctx, server.Endpoint, "")
	if err != nil {
		t.Fatal(err)
	}
	bucket := "upscale-test-" + strings.ToLower(upscale.NewKey(""))[:12]
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	return client, bucket
}

func newStore(t *testing.T, clock *upscaletest.Clock) (*s3store.Store, *s3.Client, string) {
	t.Helper()
	client, bucket := newBucket(t)
	store, err := s3store.New(context.Background(), s3store.Options{Client: client, Bucket: bucket, Now: clock.Now, SweepInterval: -1})
	upscaletest.Opened(t, store, err)
	return store, client, bucket
}

func TestConformance(t *testing.T) {
	upscaletest.TestBlobStore(t, func(t *testing.T, clock *upscaletest.Clock) upscale.BlobStore {
		clock.SleepOnAdvance() // the S3 server checks presigned links on its own clock
		store, _, _ := newStore(t, clock)
		return store
	})
}

func listKeys(t *testing.T, client *s3.Client, bucket string) []string {
	t.Helper()
	out, err := client.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &bucket})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, obj := range out.Contents {
		keys = append(keys, aws.ToString(obj.Key))
	}
	return keys
}

func TestSweepDeletesOnlyExpiredResults(t *testing.T) {
	ctx := context.Background()
	clock := upscaletest.NewClock(time.Now())
	store, client, bucket := newStore(t, clock)
	for i, ttl := range []time.Duration{3 * time.Hour, time.Hour, 2 * time.Hour} {
		if _, err := store.Put(ctx, "r"+string(rune('a'+i))+".png", []byte("png"), "image/png", clock.Now().Add(ttl)); err != nil {
			t.Fatal(err)
		}
	}
	// Objects the store did not write stay, inside its prefix or not.
	for _, key := range []string{"upscale/notes.txt", "upscale/123/short-stamp", "elsewhere/00000000001/x"} {
		if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(key), Body: strings.NewReader("x")}); err != nil {
			t.Fatal(err)
		}
	}
	before := listKeys(t, client, bucket)

	clock.Advance(90 * time.Minute)
	deleted, err := store.Sweep(ctx)
	if err != nil || deleted != 1 {
		t.Fatalf("Sweep after 90 min = %d, %v; want 1 (the one-hour result)", deleted, err)
	}
	after := listKeys(t, client, bucket)
	if len(after) != len(before)-1 || slices.ContainsFunc(after, func(k string) bool { return strings.HasSuffix(k, "/rb.png") }) {
		t.Errorf("after sweep: %q (before: %q); want all but rb.png", after, before)
	}

	clock.Advance(3 * time.Hour)
	if deleted, err := store.Sweep(ctx); err != nil || deleted != 2 {
		t.Fatalf("Sweep after all expired = %d, %v; want 2", deleted, err)
	}
	if got := listKeys(t, client, bucket); !slices.Equal(got, []string{"elsewhere/00000000001/x", "upscale/123/short-stamp", "upscale/notes.txt"}) {
		t.Errorf("left after sweeping everything: %q; want only the objects the store did not write", got)
	}
}

// TestSweeperLogsFailures: a sweeper that cannot list the bucket says so
// in the log, every time it tries.
func TestSweeperLogsFailures(t *testing.T) {
	client, bucket := newBucket(t)
	logged := make(chan string, 10)
	logger := slog.New(slog.NewTextHandler(channelWriter(logged), nil))
	store, err := s3store.New(context.Background(), s3store.Options{Client: client, Bucket: bucket, SweepInterval: 10 * time.Millisecond, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := client.DeleteBucket(context.Background(), &s3.DeleteBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	if line := <-logged; !strings.Contains(line, "level=ERROR") || !strings.Contains(line, bucket) {
		t.Errorf("logged %q, want an error naming the bucket", line)
	}
}

// channelWriter sends each write (a log line) to a channel, dropping it
// when the channel is full.
type channelWriter chan<- string

func (c channelWriter) Write(p []byte) (int, error) {
	select {
	case c <- string(p):
	default:
	}
	return len(p), nil
}

func TestPutRefusesLinksS3CannotSign(t *testing.T) {
	clock := upscaletest.NewClock(time.Now())
	store, client, bucket := newStore(t, clock)
	for name, expires := range map[string]time.Time{
		"past":        clock.Now().Add(-time.Second),
		"over 7 days": clock.Now().Add(store.MaxLinkTTL() + time.Second),
	} {
		if link, err := store.Put(context.Background(), "x.png", []byte("png"), "image/png", expires); err == nil {
			t.Errorf("Put expiring %s = %q, want an error", name, link)
		}
	}
	if keys := listKeys(t, client, bucket); len(keys) != 0 {
		t.Errorf("refused Puts left %q in the bucket", keys)
	}
}

func TestNewChecksTheBucket(t *testing.T) {
	ctx := context.Background()
	client, bucket := newBucket(t)
	if _, err := s3store.New(ctx, s3store.Options{Client: client, Bucket: "no-such-bucket-here"}); err == nil {
		t.Error("New on a missing bucket succeeded")
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
	wrongSecret, err := s3store.NewClient(ctx, testservers.S3(t).Endpoint, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s3store.New(ctx, s3store.Options{Client: wrongSecret, Bucket: bucket}); err == nil {
		t.Error("New with a wrong secret key succeeded")
	}
}
