package upscale_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/upscalekit/upscale"
)

// fakeNet is a resolver and dialer for the fetcher that never touches the
// real network: names resolve from a table (a name with several answers
// gives them in turn, as a rebinding DNS server would), and every dial lands
// on a local origin (the TLS one for port 443) while the address asked for
// is recorded. Names in system go to net.DefaultResolver instead, spelled
// as DNS would compare them (lower case, no trailing dot) so that the local
// hosts file answers without a query leaving the machine; the resolver
// GODEBUG=netdns picks is then the one the policy is tested against.
type fakeNet struct {
	origin    string // host:port of the local listener behind every address
	tlsOrigin string // the same for port 443, when set
	system    map[string]bool

	mu      sync.Mutex
	answers map[string][][]netip.Addr
	lookups map[string]int
	dialled []netip.AddrPort
}

func (n *fakeNet) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	name := strings.ToLower(strings.TrimSuffix(host, ".")) // as DNS compares names
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lookups[name]++
	if n.system[name] {
		return net.DefaultResolver.LookupNetIP(ctx, network, name)
	}
	answers, ok := n.answers[name]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return answers[min(n.lookups[name], len(answers))-1], nil
}

func (n *fakeNet) dial(ctx context.Context, network, address string) (net.Conn, error) {
	ap := netip.MustParseAddrPort(address)
	n.mu.Lock()
	n.dialled = append(n.dialled, ap)
	n.mu.Unlock()
	target := n.origin
	if ap.Port() == 443 && n.tlsOrigin != "" {
		target = n.tlsOrigin
	}
	var d net.Dialer
	return d.DialContext(ctx, network, target)
}

func (n *fakeNet) dials() []netip.AddrPort {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.dialled)
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func newFakeNetEnv(t *testing.T, configure ...func(*upscale.Config)) (*env, *fakeNet) {
	t.Helper()
	fake := &fakeNet{
		answers: map[string][][]netip.Addr{
			"public.test": {addrs("8.8.4.4")},
			"mixed.test":  {addrs("8.8.8.8", "127.0.0.1")},
			"rebind.test": {addrs("8.8.8.8"), addrs("127.0.0.1")},
			"v6.test":     {addrs("2606:4700:4700::1111")},
			"meta.test":   {addrs("169.254.169.254")},
		},
		lookups: map[string]int{},
	}
	e := newEnv(t, func(c *upscale.Config) {
		c.Fetch.AllowPrivateNetworks = false
		c.Fetch.Resolver = fake
		c.Fetch.Dial = fake.dial
		for _, f := range configure {
			f(c)
		}
	})
	fake.origin = e.origin.Listener.Addr().String()
	return e, fake
}

func TestFetchThroughFakeNetwork(t *testing.T) {
	t.Run("PublicNamesReachTheOrigin", func(t *testing.T) {
		e, fake := newFakeNetEnv(t)
		e.putAccount(upscale.Account{ID: "pro", Plan: upscale.Plan{Name: "big", Paid: true, MonthlyImages: 100, MaxFileBytes: 1 << 20}})
		for _, u := range []string{"http://public.test/small.png", "http://v6.test/small.png", "http://8.8.8.8/small.png", "http://public.test/redirect-small"} {
			checkOK(t, e.post(keyPro, body(u)), upscale.PoolFree)
		}
		if len(fake.dialled) == 0 {
			t.Fatal("no dial went through the injected dialer")
		}
		for _, a := range fake.dialled {
			if !a.Addr().IsGlobalUnicast() || a.Addr().IsPrivate() {
				t.Errorf("dialled %v", a)
			}
		}
	})
	t.Run("Refused", func(t *testing.T) {
		for _, u := range []string{
			"http://mixed.test/small.png", // one bad answer refuses the whole name
			"http://meta.test/latest/meta-data/",
			"http://public.test/redirect?to=http://meta.test/",
			"http://public.test/redirect?to=http://127.0.0.1/",
		} {
			t.Run(u, func(t *testing.T) {
				e, fake := newFakeNetEnv(t)
				checkProblem(t, e.post(keyFree, body(u)), http.StatusBadRequest, "source_forbidden")
				for _, a := range fake.dialled {
					if a.Addr() != netip.MustParseAddr("8.8.4.4") {
						t.Errorf("dialled %v", a)
					}
				}
				if got := e.balance("free").Free; got != 3 {
					t.Errorf("free pool %d after a refused source, want 3", got)
				}
			})
		}
	})
	t.Run("Rebinding", func(t *testing.T) {
		// 100 attempts: each names rebind.test twice (the first request and
		// a redirect back to it, after which the origin closes the
		// connection so the client must dial again), and the fake DNS answers
		// public once and loopback from then on. Every second hop must be
		// refused without a dial to loopback.
		e, fake := newFakeNetEnv(t)
		e.putAccount(upscale.Account{ID: "pro", Plan: upscale.Plan{Name: "big", Paid: true, MonthlyImages: 1000, MaxFileBytes: 1 << 20}})
		for i := range 100 {
			fake.mu.Lock()
			fake.lookups["rebind.test"] = 0
			fake.mu.Unlock()
			w := e.post(keyPro, body(fmt.Sprintf("http://rebind.test/redirect?close=1&to=http://rebind.test/small.png&n=%d", i)))
			checkProblem(t, w, http.StatusBadRequest, "source_forbidden")
		}
		for _, a := range fake.dialled {
			if a.Addr().IsLoopback() {
				t.Fatalf("dialled %v", a)
			}
		}
		if got := len(fake.dialled); got != 100 {
			t.Errorf("%d dials, want 100: one to the public answer per attempt, none after rebinding", got)
		}
		if got := e.balance("pro").Free; got != 1000 {
			t.Errorf("free pool %d after refused requests, want 1000", got)
		}
	})
}

// TestWidenedPolicy: a host lets private sources through on purpose, by
// network or by name, and nothing else through with them.
func TestWidenedPolicy(t *testing.T) {
	widen := func(c *upscale.Config) {
		c.Fetch.AllowedNetworks = []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")}
		c.Fetch.AllowedHosts = []string{"Images.Internal."}
	}
	for u, code := range map[string]string{
		"http://in-network.test/small.png":                               "",
		"http://images.internal/small.png":                               "",
		"http://IMAGES.INTERNAL./small.png":                              "",
		"http://out-of-network.test/small.png":                           "source_forbidden",
		"http://images.internal/redirect?to=http://out-of-network.test/": "source_forbidden",
		"http://in-network.test/redirect?to=http://meta.test/":           "source_forbidden",
	} {
		t.Run(u, func(t *testing.T) {
			e, fake := newFakeNetEnv(t, widen)
			fake.answers["in-network.test"] = [][]netip.Addr{addrs("10.20.0.5")}
			fake.answers["images.internal"] = [][]netip.Addr{addrs("192.168.7.7")}
			fake.answers["out-of-network.test"] = [][]netip.Addr{addrs("10.21.0.5")}
			w := e.post(keyFree, body(u))
			if code == "" {
				checkOK(t, w, upscale.PoolFree)
				return
			}
			checkProblem(t, w, http.StatusBadRequest, code)
			for _, a := range fake.dials() {
				if a.Addr() == netip.MustParseAddr("10.21.0.5") || a.Addr().Is4() && a.Addr().As4()[0] == 169 {
					t.Errorf("dialled %v", a)
				}
			}
		})
	}
}
