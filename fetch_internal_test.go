package upscale

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestCheckHostSyntax(t *testing.T) {
	for host, ok := range map[string]bool{
		"example.com":           true,
		"xn--bcher-kva.example": true,
		"8.8.8.8":               true,
		"127.0.0.1.":            true, // a literal after all; the address policy refuses it
		"1.2.3.4.example":       true, // last label is not numeric
		"0x.example":            true,
		"::1":                   true,
		"127.1":                 false,
		"2130706433":            false,
		"0x7f000001":            false,
		"017700000001":          false,
		"0177.0.0.1":            false,
		"0x7f.0x0.0x0.0x1":      false,
		"0177.0x0.0x0.0x1":      false,
		"0":                     false,
		"example.0x":            false,
		"1.2.3.4.5":             false,
		"bücher.example":        false,
		"①②⑦.⓪.⓪.①":             false,
	} {
		err := checkSourceURL(&url.URL{Scheme: "http", Host: host}, false)
		if ok && err != nil {
			t.Errorf("%q refused: %v", host, err)
		}
		if !ok && !errors.Is(err, ErrInvalidImageURL) {
			t.Errorf("%q: err = %v, want ErrInvalidImageURL", host, err)
		}
		if err := checkSourceURL(&url.URL{Scheme: "http", Host: host}, true); !ok && !errors.Is(err, ErrSourceForbidden) {
			t.Errorf("a redirect to %q: err = %v, want ErrSourceForbidden", host, err)
		}
	}
}

// TestCheckSocket: the default dialer's last-moment check refuses what the
// policy refuses, and lets through a host the Config allowed by name.
func TestCheckSocket(t *testing.T) {
	f, err := newFetcher(FetchPolicy{AllowedPorts: []uint16{80, 443}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := f.checkSocket(ctx, "tcp4", "8.8.8.8:443", nil); err != nil {
		t.Errorf("public address refused: %v", err)
	}
	for _, addr := range []string{"127.0.0.1:80", "[::ffff:169.254.169.254]:80", "[fe80::1%eth0]:443", "garbage"} {
		if err := f.checkSocket(ctx, "tcp", addr, nil); !errors.Is(err, ErrSourceForbidden) {
			t.Errorf("checkSocket(%s) = %v, want ErrSourceForbidden", addr, err)
		}
	}
	if err := f.checkSocket(ctx, "tcp", "10.1.2.3:80", nil); !errors.Is(err, ErrSourceForbidden) || strings.Contains(err.Error(), "10.1.2.3") || !strings.Contains(err.Error(), "private-use") {
		t.Errorf("checkSocket(10.1.2.3) = %v; want ErrSourceForbidden saying what kind of address, not which", err)
	}
	allowed := context.WithValue(ctx, hostAllowedKey{}, true)
	if err := f.checkSocket(allowed, "tcp", "10.1.2.3:80", nil); err != nil {
		t.Errorf("address of an allowed host refused: %v", err)
	}
}
