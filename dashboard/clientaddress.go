package dashboard

import (
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// ProxiedClientAddress returns a SignInOptions.ClientAddress for a server
// behind the reverse proxies whose addresses are in trusted. A request
// from any other peer is its peer's: what it says of itself in
// X-Forwarded-For or Forwarded is not read, as anyone may write those.
// From a trusted proxy, the hops the proxies recorded are read from the
// nearest back, and the first that is not a trusted proxy is the client;
// a hop no proxy could name (Forwarded's "unknown", or not an address)
// stops the walk at the proxy that recorded it, so that its clients share
// its allowance rather than take a name of their choosing.
//
// X-Forwarded-For is read when the request has one, else Forwarded (RFC
// 7239). Most proxies (nginx, Caddy, Traefik, HAProxy, cloud load
// balancers) append to X-Forwarded-For; one that writes only Forwarded
// must also drop the X-Forwarded-For its clients send.
//
// With no trusted proxies every request is its peer's: the default.
func ProxiedClientAddress(trusted []netip.Prefix) func(r *http.Request) string {
	// Addresses are compared unmapped (parseNode): so are IPv4-mapped
	// IPv6 prefixes, ::ffff:10.0.0.0/104 as 10.0.0.0/8.
	trusted = slices.Clone(trusted)
	for i, p := range trusted {
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			trusted[i] = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
	}
	trusts := func(a netip.Addr) bool {
		return slices.ContainsFunc(trusted, func(p netip.Prefix) bool { return p.Contains(a) })
	}
	return func(r *http.Request) string {
		client, ok := parseNode(r.RemoteAddr)
		if !ok {
			return r.RemoteAddr // not a network peer: a test's or an in-process caller's
		}
		if !trusts(client) {
			return client.String()
		}
		hops := forwardedHops(r.Header)
		for i := len(hops) - 1; i >= 0; i-- {
			hop, ok := parseNode(hops[i])
			if !ok {
				break
			}
			client = hop
			if !trusts(hop) {
				break
			}
		}
		return client.String()
	}
}

// forwardedHops are the addresses proxies recorded, the client's first:
// X-Forwarded-For's, else Forwarded's for= parameters, an element without
// one as "".
func forwardedHops(h http.Header) []string {
	var hops []string
	if values := h.Values("X-Forwarded-For"); len(values) > 0 {
		for _, v := range values {
			for hop := range strings.SplitSeq(v, ",") {
				hops = append(hops, strings.TrimSpace(hop))
			}
		}
		return hops
	}
	for _, v := range h.Values("Forwarded") {
		for element := range strings.SplitSeq(v, ",") {
			var node string
			for pair := range strings.SplitSeq(element, ";") {
				name, value, _ := strings.Cut(strings.TrimSpace(pair), "=")
				if strings.EqualFold(name, "for") {
					node = strings.Trim(value, `"`)
				}
			}
			hops = append(hops, node)
		}
	}
	return hops
}

// parseNode reads an address as a peer or a proxy gives it: 192.0.2.1,
// 192.0.2.1:4711, 2001:db8::1, [2001:db8::1]:4711 or [2001:db8::1], an
// IPv4-mapped IPv6 address as its IPv4 one, with no zone.
func parseNode(node string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(node, "["), "]"))
	if err != nil {
		ap, err := netip.ParseAddrPort(node)
		if err != nil {
			return netip.Addr{}, false
		}
		a = ap.Addr()
	}
	return a.Unmap().WithZone(""), true
}
