package netguard

import (
	"net/netip"
	"strings"
	"testing"
)

func TestAddressPolicy(t *testing.T) {
	strict := Policy{}
	for _, tc := range []struct {
		addr string
		want string // substring of the refusal; "" means allowed
	}{
		// Public.
		{"8.8.8.8", ""},
		{"11.0.0.1", ""},
		{"100.63.255.255", ""},
		{"100.128.0.1", ""},
		{"172.32.0.1", ""},
		{"192.0.1.1", ""},
		{"198.20.0.1", ""},
		{"2606:4700:4700::1111", ""},
		{"2001:4860:4860::8888", ""},
		{"2001:200::1", ""}, // just past 2001::/23

		// What net.IP.IsPrivate and IsGlobalUnicast miss.
		{"100.64.0.1", "shared"},
		{"100.127.255.254", "shared"},
		{"192.0.0.192", "IETF protocol"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.255", "reserved or broadcast"},
		{"fec0::1", "site-local"},
		{"64:ff9b::808:808", "NAT64"},
		{"2002:808:808::1", "6to4"},
		{"::808:808", "IPv4-compatible"},

		// The usual suspects.
		{"0.0.0.0", "this network"},
		{"0.1.2.3", "this network"},
		{"10.0.0.1", "(10.0.0.0/8)"},
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"169.254.169.254", "link-local"},
		{"172.16.0.1", "(172.16.0.0/12)"},
		{"172.31.255.255", "(172.16.0.0/12)"},
		{"192.168.1.1", "(192.168.0.0/16)"},
		{"192.0.2.1", "documentation"},
		{"198.51.100.1", "documentation"},
		{"203.0.113.1", "documentation"},
		{"224.0.0.1", "multicast"},
		{"192.88.99.1", "6to4 relay"},
		{"::", "unspecified"},
		{"::1", "loopback address (::1)"},
		{"fc00::1", "unique local"},
		{"fd00:ec2::254", "unique local"},
		{"fe80::1", "link-local address (fe80::/10)"},
		{"fe80::1%eth0", "link-local address (fe80::/10)"},
		{"ff02::1", "multicast"},
		{"2001:db8::1", "documentation"},
		{"3fff::1", "documentation"},
		{"100::1", "discard-only"},
		{"2001:2::1", "IETF protocol"},
		{"5f00::1", "segment-routing"},
		{"4000::1", "unassigned"},
		{"::2:0:0:1", "unassigned"},

		// IPv4 embedded in IPv6 is unpacked and judged as IPv4.
		{"::ffff:127.0.0.1", "IPv4-mapped address (::ffff:0:0/96) carrying a loopback"},
		{"::ffff:169.254.169.254", "carrying a link-local"},
		{"::ffff:8.8.8.8", "IPv4-mapped"},
		{"::127.0.0.1", "IPv4-compatible address (::/96) carrying a loopback"},
		{"64:ff9b::a9fe:a9fe", "NAT64 address (64:ff9b::/96) carrying a link-local"},
		{"64:ff9b:1::a9fe:a9fe", "local-use NAT64 address (64:ff9b:1::/48) carrying a link-local"},
		{"2002:a9fe:a9fe::1", "6to4 address (2002::/16) carrying a link-local"},
		{"2002:7f00:1::", "carrying a loopback"},
		// Teredo: client 192.0.2.45 stored inverted as 3fff:fdd2.
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo address (2001::/32) carrying a documentation address (192.0.2.0/24)"},
		{"2001:0:4136:e378:8000:63bf:f7f7:f7f7", "Teredo address (2001::/32)"}, // client 8.8.8.8
	} {
		got := strict.Refusal(netip.MustParseAddr(tc.addr))
		if tc.want == "" && got != "" {
			t.Errorf("%s refused as %q, want allowed", tc.addr, got)
		}
		if tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%s: refusal %q, want it to mention %q", tc.addr, got, tc.want)
		}
	}
	if got := strict.Refusal(netip.Addr{}); got == "" {
		t.Error("the zero Addr is allowed")
	}
}

func TestAddressPolicyAllowedNetworks(t *testing.T) {
	p := Policy{Allowed: []netip.Prefix{
		netip.MustParsePrefix("10.20.0.0/16"),
		netip.MustParsePrefix("64:ff9b::/96"),
	}}
	for addr, allowed := range map[string]bool{
		"10.20.3.4":           true,
		"10.21.0.1":           false, // outside the allowed prefix
		"127.0.0.1":           false,
		"64:ff9b::808:808":    true,  // NAT64 of a public address, NAT64 allowed
		"64:ff9b::a9fe:a9fe":  false, // NAT64 of metadata: the inner address decides
		"64:ff9b::a14:304":    true,  // NAT64 of 10.20.3.4, which is allowed too
		"::ffff:8.8.8.8":      false, // mapped was not allowed
		"64:ff9b:1::808:808":  false, // local-use NAT64 was not allowed
		"2606:4700:4700::111": true,
	} {
		if got := p.Refusal(netip.MustParseAddr(addr)) == ""; got != allowed {
			t.Errorf("%s allowed = %v, want %v (%s)", addr, got, allowed, p.Refusal(netip.MustParseAddr(addr)))
		}
	}
}

// FuzzAddressPolicy checks the classifier against independent rules on
// arbitrary addresses: whatever the standard library knows to be non-public
// is refused, an IPv4 address and its embedded forms agree, and nothing
// panics.
func FuzzAddressPolicy(f *testing.F) {
	for _, s := range []string{"8.8.8.8", "127.0.0.1", "::ffff:10.0.0.1", "64:ff9b::808:808", "2002:a9fe:a9fe::", "2001::", "fe80::1", "2606:4700::1"} {
		b := netip.MustParseAddr(s).As16()
		f.Add(b[:])
	}
	strict := Policy{}
	nat64 := Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("64:ff9b::/96")}}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) != 4 && len(raw) != 16 {
			return
		}
		a, _ := netip.AddrFromSlice(raw)
		refused := strict.Refusal(a) != ""
		if !refused && (a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsMulticast() || a.IsUnspecified() || !a.IsGlobalUnicast() || a.Is4In6()) {
			t.Fatalf("%v allowed although the standard library says it is not public", a)
		}
		if !a.Is4() {
			return
		}
		b := a.As4()
		mapped := netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: b[0], 13: b[1], 14: b[2], 15: b[3]})
		if strict.Refusal(mapped) == "" {
			t.Fatalf("%v allowed", mapped)
		}
		translated := netip.AddrFrom16([16]byte{1: 0x64, 2: 0xff, 3: 0x9b, 12: b[0], 13: b[1], 14: b[2], 15: b[3]})
		if got := nat64.Refusal(translated) != ""; got != refused {
			t.Fatalf("with NAT64 allowed, %v refused = %v but %v refused = %v", translated, got, a, refused)
		}
	})
}
