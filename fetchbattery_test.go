package upscale_test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

type batteryRow struct {
	url, expect, why string
}

func readBattery(t *testing.T) []batteryRow {
	t.Helper()
	f, err := os.Open("testdata/hostile_urls.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []batteryRow
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, "\t")
		if len(fields) != 3 || (fields[1] != "refuse" && fields[1] != "allow") {
			t.Fatalf("malformed battery row %q", line)
		}
		rows = append(rows, batteryRow{fields[0], fields[1], fields[2]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) < 100 {
		t.Fatalf("%d battery rows, want at least the 100 of the shared battery", len(rows))
	}
	return rows
}

// publicAnswer is what public.test resolves to: the one address a refused
// row may dial, as the harmless first hop of a redirect.
var publicAnswer = netip.MustParseAddr("8.8.4.4")

// batteryNames are the fake DNS zone the battery's names resolve in.
func batteryNames() map[string][][]netip.Addr {
	one := func(a ...string) [][]netip.Addr { return [][]netip.Addr{addrs(a...)} }
	return map[string][][]netip.Addr{
		"public.test":              {{publicAnswer}},
		"example.com":              one("93.184.215.14"),
		"xn--bcher-kva.example":    one("2606:4700:4700::1001"),
		"metadata.google.internal": one("169.254.169.254"),
		"127.0.0.1.nip.io":         one("127.0.0.1"),
		"169.254.169.254.nip.io":   one("169.254.169.254"),
		"localtest.me":             one("127.0.0.1"),
		"rebind.test":              {addrs("8.8.8.8"), addrs("127.0.0.1")},
		"mixed.test":               one("8.8.8.8", "127.0.0.1"),
		"kubernetes.default.svc":   one("10.96.0.1"),
		"host.docker.internal":     one("192.168.65.254"),
		"self.test":                one("127.0.0.1"), // where the service itself listens in this test
	}
}

// TestHostileURLBattery runs every row of testdata/hostile_urls.txt through
// the real handler on a fake network. A refused row must give 400 with
// source_forbidden or invalid_image_url (source_unreachable for the endless
// redirect, which is refused by count rather than by address), dial nothing
// but the public first hop of a redirect, and charge nothing. An allowed row
// must reach the origin and succeed.
func TestHostileURLBattery(t *testing.T) {
	rows := readBattery(t)
	for _, row := range rows {
		t.Run(row.url, func(t *testing.T) {
			e, fake := newBatteryEnv(t)
			if strings.Contains(row.url, "rebind.test") {
				// A rebinding name hands out its public answer first. A
				// fetcher that resolves once per dial and dials what it
				// checked uses that answer harmlessly, so to test the check
				// on the hostile answer, the public one is spent first, as
				// it would be by a fetcher's separate validation lookup.
				fake.LookupNetIP(t.Context(), "ip", "rebind.test")
			}
			hitsBefore := e.hits.Load()
			w := e.post(keyFree, body(row.url))

			if row.expect == "allow" {
				checkOK(t, w, upscale.PoolFree)
				if e.hits.Load() == hitsBefore {
					t.Fatal("allowed row never reached the origin")
				}
				return
			}
			codes := []string{"source_forbidden", "invalid_image_url"}
			if strings.HasSuffix(row.url, "/redirect-loop") {
				codes = []string{"source_unreachable"}
			}
			if w.Code != http.StatusBadRequest || !containsCode(w.Body.String(), codes) {
				t.Fatalf("%s: got %d %s, want 400 with one of %v", row.why, w.Code, w.Body, codes)
			}
			viaPublicHost := strings.HasPrefix(strings.TrimPrefix(strings.TrimPrefix(row.url, "https://"), "http://"), "public.test")
			for _, a := range fake.dials() {
				if !viaPublicHost || a.Addr() != publicAnswer {
					t.Errorf("dialled %v for a refused row", a)
				}
			}
			if got := e.balance("free").Free; got != freePlan.MonthlyImages {
				t.Errorf("free pool %d after a refused row, want %d", got, freePlan.MonthlyImages)
			}
		})
	}
}

func containsCode(body string, codes []string) bool {
	for _, c := range codes {
		if strings.Contains(body, `"code":"`+c+`"`) {
			return true
		}
	}
	return false
}

// TestHostileURLBatteryResolvers runs the battery again under Go's own
// resolver and under the C library's, which read hosts such as "localhost"
// (and would read 0x7f000001, were it not refused first) in their own ways.
func TestHostileURLBatteryResolvers(t *testing.T) {
	if os.Getenv("UPSCALE_BATTERY_CHILD") != "" {
		t.Skip("already inside a resolver run")
	}
	for _, mode := range []string{"go", "cgo"} {
		t.Run("netdns="+mode, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHostileURLBattery$", "-test.count=1")
			cmd.Env = append(os.Environ(), "GODEBUG=netdns="+mode+"+2", "UPSCALE_BATTERY_CHILD=1")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("battery under netdns=%s: %v\n%s", mode, err, out)
			}
			if !strings.Contains(string(out), "PASS") {
				t.Fatalf("battery under netdns=%s did not pass:\n%s", mode, out)
			}
		})
	}
}

// newBatteryEnv is an env whose sources are reached through a fake network
// with a plain and a TLS origin, under the default (strict) address policy.
func newBatteryEnv(t *testing.T) (*env, *fakeNet) {
	t.Helper()
	fake := &fakeNet{answers: batteryNames(), lookups: map[string]int{}, system: map[string]bool{"localhost": true}}
	cert, pool := testCertificate(t, []string{"example.com", "xn--bcher-kva.example", "public.test"}, []net.IP{net.ParseIP("8.8.8.8")})
	e := newEnv(t, func(c *upscale.Config) {
		c.Fetch.AllowPrivateNetworks = false
		c.Fetch.Resolver = fake
		c.Fetch.Dial = fake.dial
		c.Fetch.TLSClientConfig = &tls.Config{RootCAs: pool}
	})
	tlsOrigin := httptest.NewUnstartedServer(http.HandlerFunc(e.serveOrigin))
	tlsOrigin.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	tlsOrigin.StartTLS()
	t.Cleanup(tlsOrigin.Close)
	fake.origin = e.origin.Listener.Addr().String()
	fake.tlsOrigin = tlsOrigin.Listener.Addr().String()
	return e, fake
}

// testCertificate makes a self-signed certificate for names and ips, and a
// pool that trusts it.
func testCertificate(t *testing.T, names []string, ips []net.IP) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		DNSNames:              names,
		IPAddresses:           ips,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}
