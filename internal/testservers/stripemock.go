package testservers

import (
	"fmt"
	"sync"
	"testing"
)

var stripeMock struct {
	once sync.Once
	url  string
	err  error
}

// StripeMock returns the API base (http://127.0.0.1:PORT) of a stripe-mock
// server, Stripe's own description of its API served on loopback: it
// checks the shape of every request and answers fixtures, keeping no
// state. It is started once per test process, on free loopback ports for
// both HTTP and HTTPS (given only the first, it opens HTTPS on every
// interface), and stopped by Stop. The binary is the one named by
// UPSCALE_STRIPE_MOCK, else stripe-mock on PATH; make test-deps builds it.
func StripeMock(t testing.TB) string {
	t.Helper()
	stripeMock.once.Do(startStripeMock)
	if stripeMock.err != nil {
		Unavailable(t, "stripe-mock: "+stripeMock.err.Error())
	}
	return stripeMock.url
}

func startStripeMock() {
	bin, dir, err := tool("UPSCALE_STRIPE_MOCK", "stripe-mock", "github.com/stripe/stripe-mock@v0.203.0")
	if err != nil {
		stripeMock.err = err
		return
	}
	ports := [2]int{}
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			stripeMock.err = err
			return
		}
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	if stripeMock.err = serve(dir, addr, bin, "-http-addr", addr, "-https-addr", fmt.Sprintf("127.0.0.1:%d", ports[1])); stripeMock.err == nil {
		stripeMock.url = "http://" + addr
	}
}
