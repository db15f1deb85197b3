package s3store_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/testservers"
	"github.com/upscalekit/upscale/s3store"
	"github.com/upscalekit/upscale/upscaletest"
)

// storeViaProxy returns a Store on a new bucket that it reaches through a
// proxy the test can cut, and the direct client and bucket name, for
// looking at the bucket behind the proxy's back.
func storeViaProxy(t *testing.T) (*s3store.Store, *testservers.Proxy, *upscaletest.Clock, *s3.Client, string) {
	t.Helper()
	client, bucket := newBucket(t)
	endpoint, err := url.Parse(testservers.S3(t).Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testservers.NewProxy(t, endpoint.Host)
	viaProxy := s3.New(client.Options(), func(o *s3.Options) {
		o.BaseEndpoint = aws.String("http://" + proxy.Addr)
		o.RetryMaxAttempts = 1 // the SDK's own retries would only slow the test
	})
	clock := upscaletest.NewClock(time.Now())
	store, err := s3store.New(context.Background(), s3store.Options{Client: viaProxy, Bucket: bucket, Now: clock.Now, SweepInterval: -1})
	upscaletest.Opened(t, store, err)
	return store, proxy, clock, client, bucket
}

// TestOutage: while the storage server cannot be reached, Put, Delete and
// Ping fail with ErrUnavailable (so the handler answers 503 and stops
// sending work), and the same Store works again once it is back.
func TestOutage(t *testing.T) {
	store, proxy, clock, _, _ := storeViaProxy(t)
	ctx := context.Background()
	expires := clock.Now().Add(time.Hour)

	proxy.Cut()
	checks := map[string]func() error{
		"Put":    func() error { _, err := store.Put(ctx, "a.png", []byte("x"), "image/png", expires); return err },
		"Delete": func() error { return store.Delete(ctx, "a.png", expires) },
		"Ping":   func() error { return store.Ping(ctx) },
	}
	for name, call := range checks {
		if err := call(); !errors.Is(err, upscale.ErrUnavailable) {
			t.Errorf("%s while the server is down: %v, want ErrUnavailable", name, err)
		}
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	for name, call := range checks {
		if err := call(); err != nil {
			t.Errorf("%s after the server came back: %v", name, err)
		}
	}
}

// TestPutWithLostAnswerLeavesNothing: a PutObject that reached the server
// but whose answer was lost fails, and the object it stored is deleted in
// the background once the server answers again, so no result outlives a
// failed Put.
func TestPutWithLostAnswerLeavesNothing(t *testing.T) {
	store, proxy, clock, client, bucket := storeViaProxy(t)

	proxy.LoseAnswers(true)
	if _, err := store.Put(context.Background(), "lost.png", []byte("x"), "image/png", clock.Now().Add(time.Hour)); err == nil {
		t.Fatal("Put succeeded although its answer was lost")
	}
	if objects(t, client, bucket) != 1 {
		t.Fatal("the server did not store the object; the test proves nothing")
	}
	proxy.LoseAnswers(false)
	for deadline := time.Now().Add(10 * time.Second); objects(t, client, bucket) != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the object of the failed Put is still there 10 s after the server answers again")
		}
	}
}

func objects(t *testing.T, client *s3.Client, bucket string) int {
	t.Helper()
	out, err := client.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &bucket})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Contents)
}
