package testservers

import (
	"fmt"
	"testing"
)

var stripeMock lazy[string]

// StripeMock returns the API base (http://127.0.0.1:PORT) of a stripe-mock
// server, Stripe's own description of its API served on loopback: it
// checks the shape of every request and answers fixtures, keeping no
// state. It is started once per test process, on free loopback ports for
// both HTTP and HTTPS (given only the first, it opens HTTPS on every
// interface), and stopped by Stop. The binary is the one named by
// UPSCALE_STRIPE_MOCK, else stripe-mock on PATH; make test-deps builds it.
func StripeMock(t testing.TB) string {
	t.Helper()
	url, err := stripeMock.get(startStripeMock)
	if err != nil {
		Unavailable(t, "stripe-mock: "+err.Error())
	}
	return url
}

func startStripeMock() (string, error) {
	bin, dir, err := tool("UPSCALE_STRIPE_MOCK", "stripe-mock", "github.com/stripe/stripe-mock@v0.203.0")
	if err != nil {
		return "", err
	}
	ports, err := freePorts(2)
	if err != nil {
		return "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	return "http://" + addr, serve(dir, addr, bin, "-http-addr", addr, "-https-addr", fmt.Sprintf("127.0.0.1:%d", ports[1]))
}
