package stripetest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
)

// Outage is a Stripe that has stopped answering: a server in front of
// another (a Fake's URL) that passes every request on, so that what it
// asks for is made there, and, while it is down, never answers: the
// caller waits until it gives up. Its URL is the API base to give
// stripebilling.Options.APIBase. It is safe for concurrent use.
type Outage struct {
	URL  string
	down atomic.Bool
}

// NewOutage starts an Outage in front of target, up, until t ends.
func NewOutage(t testing.TB, target string) *Outage {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	o := &Outage{}
	ended := make(chan struct{})
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !o.down.Load() {
			proxy.ServeHTTP(w, r)
			return
		}
		// Made at Stripe whether or not the caller waits for the answer.
		proxy.ServeHTTP(httptest.NewRecorder(), r.WithContext(context.WithoutCancel(r.Context())))
		select {
		case <-r.Context().Done():
		case <-ended:
		}
	}))
	t.Cleanup(server.Close)
	t.Cleanup(func() { close(ended) }) // before Close, which waits for the held requests
	o.URL = server.URL
	return o
}

// SetDown stops the Outage answering (down) or has it answer again.
func (o *Outage) SetDown(down bool) { o.down.Store(down) }
