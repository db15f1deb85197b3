// Package netguard holds the rules for where the service may connect:
// which addresses are public (a Policy, from the IANA special-purpose
// registries) and which host names every resolver reads alike. The root
// package turns their verdicts into the API's errors.
package netguard

import (
	"fmt"
	"net/netip"
	"strings"
)

// specialRange is one row of the address policy: a prefix that is not
// public unicast, with the phrase a caller is told. When embeds is set the
// prefix carries an IPv4 address, which is unpacked and judged too.
type specialRange struct {
	prefix netip.Prefix
	what   string
	embeds func(netip.Addr) netip.Addr
}

func special(prefix, what string) specialRange {
	return specialRange{prefix: netip.MustParsePrefix(prefix), what: what}
}

func embedding(prefix, what string, embeds func(netip.Addr) netip.Addr) specialRange {
	return specialRange{prefix: netip.MustParsePrefix(prefix), what: what, embeds: embeds}
}

// specialRanges is built from the IANA IPv4 and IPv6 Special-Purpose Address
// Registries (every entry not marked globally reachable), the multicast
// registries and the deprecated ranges that net.IP.IsPrivate and
// IsGlobalUnicast miss. Rows are tried in order, so an exact address comes
// before the prefix that contains it. A few registry entries are globally
// reachable anycast addresses inside a refused block (192.0.0.9, 2001:1::1,
// ...); they are refused with their block, as no image is served from them.
var specialRanges = []specialRange{
	special("0.0.0.0/8", "a “this network” address (0.0.0.0/8)"),
	special("10.0.0.0/8", "a private-use address (10.0.0.0/8)"),
	special("100.64.0.0/10", "a shared (carrier-grade NAT) address (100.64.0.0/10)"),
	special("127.0.0.0/8", "a loopback address (127.0.0.0/8)"),
	special("169.254.0.0/16", "a link-local address, where cloud metadata services live (169.254.0.0/16)"),
	special("172.16.0.0/12", "a private-use address (172.16.0.0/12)"),
	special("192.0.0.0/24", "an IETF protocol address (192.0.0.0/24)"),
	special("192.0.2.0/24", "a documentation address (192.0.2.0/24)"),
	special("192.88.99.0/24", "a deprecated 6to4 relay address (192.88.99.0/24)"),
	special("192.168.0.0/16", "a private-use address (192.168.0.0/16)"),
	special("198.18.0.0/15", "a benchmarking address (198.18.0.0/15)"),
	special("198.51.100.0/24", "a documentation address (198.51.100.0/24)"),
	special("203.0.113.0/24", "a documentation address (203.0.113.0/24)"),
	special("224.0.0.0/4", "a multicast address (224.0.0.0/4)"),
	special("240.0.0.0/4", "a reserved or broadcast address (240.0.0.0/4)"),

	special("::/128", "the unspecified address (::)"),
	special("::1/128", "the loopback address (::1)"),
	embedding("::ffff:0:0/96", "an IPv4-mapped address (::ffff:0:0/96)", lastFourBytes),
	embedding("::/96", "a deprecated IPv4-compatible address (::/96)", lastFourBytes),
	embedding("64:ff9b::/96", "a NAT64 address (64:ff9b::/96)", lastFourBytes),
	embedding("64:ff9b:1::/48", "a local-use NAT64 address (64:ff9b:1::/48)", lastFourBytes),
	embedding("2002::/16", "a 6to4 address (2002::/16)", sixToFourIPv4),
	embedding("2001::/32", "a Teredo address (2001::/32)", teredoClientIPv4),
	special("100::/64", "a discard-only address (100::/64)"),
	special("2001::/23", "an IETF protocol address (2001::/23)"),
	special("2001:db8::/32", "a documentation address (2001:db8::/32)"),
	special("3fff::/20", "a documentation address (3fff::/20)"),
	special("5f00::/16", "a segment-routing address (5f00::/16)"),
	special("fc00::/7", "a unique local address (fc00::/7)"),
	special("fe80::/10", "a link-local address (fe80::/10)"),
	special("fec0::/10", "a deprecated site-local address (fec0::/10)"),
	special("ff00::/8", "a multicast address (ff00::/8)"),
}

// globalUnicastIPv6 is the only IPv6 block IANA allocates for global
// unicast; anything outside it is unassigned or special.
var globalUnicastIPv6 = netip.MustParsePrefix("2000::/3")

func lastFourBytes(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom4([4]byte(b[12:]))
}

func sixToFourIPv4(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom4([4]byte(b[2:6]))
}

// teredoClientIPv4 unpacks the client address of a Teredo address, which is
// stored bit-inverted in the last four bytes (RFC 4380): that is the host a
// packet to the address finally reaches.
func teredoClientIPv4(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})
}

// Policy decides which addresses may be dialled: public unicast only,
// unless the host widened it with allowed prefixes.
type Policy struct {
	// Allowed are the prefixes allowed although not public
	// (upscale.FetchPolicy.AllowedNetworks).
	Allowed []netip.Prefix
}

// Refusal describes why a is refused, as a phrase a caller may be told
// ("a loopback address (127.0.0.0/8)"), or returns "" when it is allowed.
// It never names the address itself: a caller must not learn what
// internal names resolve to.
//
// An address with IPv4 embedded in it (mapped, compatible, NAT64, 6to4,
// Teredo) is refused when the embedded IPv4 address is, whatever the allowed
// prefixes say about the outer one. When the embedded address is public the
// outer one is still refused unless an allowed prefix holds it: a host on an
// IPv6-only network allows 64:ff9b::/96 to reach IPv4 sites through its NAT64
// gateway, and every IPv4 address behind it is judged as usual.
func (p Policy) Refusal(a netip.Addr) string {
	if !a.IsValid() {
		return "an invalid address"
	}
	a = a.WithZone("") // a prefix never contains an address with a zone
	row, isSpecial := lookupSpecial(a)
	if isSpecial && row.embeds != nil {
		if inner := p.Refusal(row.embeds(a)); inner != "" {
			return row.what + " carrying " + inner
		}
	}
	switch {
	case p.allows(a):
		return ""
	case isSpecial:
		return row.what
	case a.Is6() && !globalUnicastIPv6.Contains(a):
		return "an unassigned IPv6 address (outside 2000::/3)"
	}
	return ""
}

func lookupSpecial(a netip.Addr) (specialRange, bool) {
	for _, row := range specialRanges {
		if row.prefix.Contains(a) {
			return row, true
		}
	}
	return specialRange{}, false
}

func (p Policy) allows(a netip.Addr) bool {
	for _, prefix := range p.Allowed {
		if prefix.Contains(a) {
			return true
		}
	}
	return false
}

// HostSyntaxProblem says what is wrong with a host name that different
// resolvers read differently, or "" when nothing is, before any resolver
// sees it: the classic inet_aton forms of
// IPv4 (127.1, 2130706433, 0x7f000001, 0177.0.0.1) that glibc's resolver
// turns into addresses and Go's does not, and names that are not ASCII
// (international names must be sent in their xn-- form, so that nothing is
// normalised into a different host). The WHATWG URL rule decides what looks
// numeric: a host whose last label is a number must be a dotted-quad IPv4
// address.
func HostSyntaxProblem(host string) string {
	for i := range len(host) {
		if host[i] >= 0x80 {
			return "has a host that is not ASCII; write international domain names in their xn-- (punycode) form"
		}
	}
	if strings.HasPrefix(host, "[") || strings.Contains(host, ":") {
		return "" // IPv6 literal: netip decides
	}
	labels := strings.Split(strings.TrimSuffix(host, "."), ".")
	if !looksNumeric(labels[len(labels)-1]) {
		return ""
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(host, ".")); err == nil && a.Is4() {
		return ""
	}
	return fmt.Sprintf("has a host, %q, that looks like an IPv4 address in a non-standard form; write it as four decimal numbers, such as 203.0.113.7", host)
}

// looksNumeric reports whether a host label is a number in the WHATWG sense:
// decimal digits, or 0x followed by hex digits (or nothing).
func looksNumeric(label string) bool {
	if label == "" {
		return false
	}
	digits := "0123456789"
	if l := strings.ToLower(label); strings.HasPrefix(l, "0x") {
		label, digits = l[2:], "0123456789abcdef"
	}
	return strings.Trim(label, digits) == ""
}
