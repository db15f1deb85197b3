package upscale

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/upscalekit/upscale/internal/netguard"
)

// FetchPolicy is where and how a Handler downloads source images: every
// rule an imageUrl and each redirect are held to (docs/security.md).
type FetchPolicy struct {
	// Timeout bounds the whole download of a source image, redirects
	// included; past it the caller gets 400 source_unreachable. It bounds
	// an upload's body too, as a read deadline on its connection: past
	// it the caller gets 400 invalid_request. Zero means 20 seconds.
	Timeout time.Duration
	// AllowedPorts are the ports source URLs may use. Nil means 80 and 443.
	AllowedPorts []uint16
	// AllowedNetworks are address ranges sources may come from although the
	// address policy refuses them, such as an internal image server's
	// 10.20.0.0/16, or 64:ff9b::/96 on an IPv6-only network with NAT64 (the
	// IPv4 address inside a NAT64 address is still checked). Nil means none.
	AllowedNetworks []netip.Prefix
	// AllowedHosts are host names whose addresses are not checked at all,
	// such as "images.internal". Compared without case or trailing dot; a
	// redirect to any other host is checked as usual. Nil means none.
	AllowedHosts []string
	// AllowPrivateNetworks lifts the address policy (loopback, private,
	// link-local and reserved addresses, and the port list) for sources.
	// It is for local development and tests: never set it on a server that
	// takes URLs from callers it does not trust.
	AllowPrivateNetworks bool
	// BuiltinSources are images the handler holds itself: an imageUrl
	// equal to a key (an absolute http or https URL, compared once both
	// are parsed) is read from here, with no connection made, so the
	// address policy has nothing to decide and the policy for every other
	// URL stays as it is. The plan's file size limit still applies. The
	// standalone bundles its demo images this way, under its own address,
	// so its demo works on a machine without internet access. Nil means
	// none.
	BuiltinSources map[string][]byte
	// TLSClientConfig is used for https sources. Nil means Go's defaults
	// with the system's root certificates; set RootCAs to trust a private
	// CA, for instance for AllowedHosts.
	TLSClientConfig *tls.Config
	// Resolver looks up source host names. Nil means net.DefaultResolver.
	// Every address it returns is checked; one forbidden address refuses
	// the whole name.
	Resolver Resolver
	// Dial connects to a source's checked ip:port. Nil means a net.Dialer.
	// It exists so tests can reach fake origins without a network; the
	// address policy is applied before Dial is called.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// MaxRedirects is how many redirects a fetch follows before giving up.
const MaxRedirects = 5

// fetcher downloads source images under the address policy: http and https
// only, allowed ports only, no credentials in URLs, no proxy, every hop's host
// resolved once with all answers checked before the checked addresses are
// dialled (see dialChecked), one deadline for the whole download, and a byte
// cap applied while streaming. It never forwards anything from the caller's
// request.
type fetcher struct {
	client   *http.Client
	webhooks *http.Client // the same transport, following no redirect
	ports    []uint16     // nil: any port
	timeout  time.Duration
	policy   *netguard.Policy // nil: AllowPrivateNetworks
	hosts    []string         // Config.Fetch.AllowedHosts, lower case without a trailing dot
	resolver Resolver
	dial     func(ctx context.Context, network, address string) (net.Conn, error)
	builtin  map[string][]byte // Config.BuiltinSources, by parsed URL
}

// Resolver looks up the addresses of a host name. *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

func newFetcher(cfg FetchPolicy) (*fetcher, error) {
	f := &fetcher{ports: cfg.AllowedPorts, timeout: cfg.Timeout, resolver: cfg.Resolver, dial: cfg.Dial}
	for raw, data := range cfg.BuiltinSources {
		quoted, _ := json.Marshal(raw) // parsed as the request's imageUrl is, so both print alike
		u, err := parseImageURL(quoted)
		if err != nil {
			return nil, fmt.Errorf("upscale: Config.Fetch.BuiltinSources: %q is not an absolute http(s) URL", raw)
		}
		if f.builtin == nil {
			f.builtin = make(map[string][]byte)
		}
		f.builtin[u.String()] = data
	}
	for _, h := range cfg.AllowedHosts {
		f.hosts = append(f.hosts, canonicalHost(h))
	}
	if f.resolver == nil {
		f.resolver = net.DefaultResolver
	}
	if cfg.AllowPrivateNetworks {
		f.ports = nil
	} else {
		f.policy = &netguard.Policy{Allowed: cfg.AllowedNetworks}
	}
	if f.dial == nil {
		dialer := &net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}
		if f.policy != nil {
			dialer.ControlContext = f.checkSocket
		}
		f.dial = dialer.DialContext
	}
	f.client = &http.Client{
		Transport: &http.Transport{
			Proxy:             nil, // a proxy would dial on our behalf, unchecked
			DialContext:       f.dialChecked,
			TLSClientConfig:   cfg.TLSClientConfig.Clone(),
			ForceAttemptHTTP2: true,
			// A handshake that takes half the fetch's time leaves too
			// little for the body: the source is slow for now (502).
			TLSHandshakeTimeout:   min(10*time.Second, cfg.Timeout/2),
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
			DisableCompression:    true, // so the byte cap counts what we store, not a gzip bomb's inflation
			ResponseHeaderTimeout: cfg.Timeout,
		},
		CheckRedirect: f.checkRedirect,
	}
	f.webhooks = &http.Client{
		Transport:     f.client.Transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return f, nil
}

// hostAllowedKey marks a dial's context when Config.Fetch.AllowedHosts let its
// host through, so that checkSocket does not refuse what the host allowed.
type hostAllowedKey struct{}

// dialChecked resolves the host of address once, refuses the whole name if
// any of its addresses is forbidden, and then dials the checked addresses
// themselves, in order, so no second lookup can answer differently (DNS
// rebinding). It runs for the first request and for every redirect.
func (f *fetcher) dialChecked(ctx context.Context, network, address string) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	port, ok := f.allowedPort(portText)
	if !ok {
		return nil, f.errPort(portText)
	}
	addrs, err := f.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	switch {
	case f.policy == nil:
	case slices.Contains(f.hosts, canonicalHost(host)):
		ctx = context.WithValue(ctx, hostAllowedKey{}, true)
	default:
		for _, a := range addrs {
			if err := f.checkAddress(a); err != nil {
				return nil, err
			}
		}
	}
	var errs []error
	for _, a := range addrs {
		conn, err := f.dial(ctx, network, netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// checkSocket checks the address again on the socket itself, just before
// connect: a second line of defence should a later change ever dial
// something dialChecked did not check.
func (f *fetcher) checkSocket(ctx context.Context, _, address string, _ syscall.RawConn) error {
	if ctx.Value(hostAllowedKey{}) != nil {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return Explain(ErrSourceForbidden, msgAddressUncheckable)
	}
	return f.checkAddress(ap.Addr())
}

// checkAddress returns nil when a may be dialled, and otherwise an error
// wrapping ErrSourceForbidden that says what kind of address it is, never
// the address itself.
func (f *fetcher) checkAddress(a netip.Addr) error {
	if what := f.policy.Refusal(a); what != "" {
		return Explain(ErrSourceForbidden, msgAddressRefused, what)
	}
	return nil
}

func (f *fetcher) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(strings.TrimSuffix(host, ".")); err == nil {
		return []netip.Addr{a}, nil // a literal, perhaps written fully qualified ("127.0.0.1.")
	}
	addrs, err := f.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	for i, a := range addrs {
		addrs[i] = a.WithZone("") // a zone would make the dialled address differ from the checked one
	}
	return addrs, nil
}

// canonicalHost is how host names are compared: DNS ignores case and the
// trailing dot of a fully qualified name.
func canonicalHost(host string) string {
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

// checkSourceURL holds a source URL, the request's imageUrl or a
// redirect's target, to the rules that need no network: an absolute http
// or https URL, no user name or password, and a host written the one way
// every resolver reads alike (netguard.HostSyntaxProblem). A request's own URL that
// breaks one is ErrInvalidImageURL; a redirect to one is
// ErrSourceForbidden, since the caller's URL was fine.
func checkSourceURL(u *url.URL, redirect bool) error {
	switch problem := urlProblem(u); {
	case problem == "":
		return nil
	case redirect:
		return Explain(ErrSourceForbidden, msgRedirectRefused, problem)
	default:
		return Explain(ErrInvalidImageURL, msgImageURLRefused, problem)
	}
}

// urlProblem says what keeps u from being a URL this service calls, or
// returns "".
func urlProblem(u *url.URL) string {
	switch {
	case (u.Scheme != "http" && u.Scheme != "https") || u.Opaque != "" || u.Hostname() == "":
		return "is not an absolute http or https URL, such as https://example.com/photo.jpg"
	case u.User != nil:
		return "contains a user name or password"
	}
	return netguard.HostSyntaxProblem(u.Hostname())
}

// checkWebhookURL holds a job's webhookUrl to the policy before the job is
// queued: its port, and every address its host resolves to now. Each
// delivery is held to it again as it dials (dialChecked), so a name that
// resolves elsewhere later gains nothing.
func (f *fetcher) checkWebhookURL(ctx context.Context, u *url.URL) error {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if _, ok := f.allowedPort(port); !ok {
		return Explain(ErrInvalidWebhookURL, msgWebhookPort, port, f.ports)
	}
	host := u.Hostname()
	if f.policy == nil || slices.Contains(f.hosts, canonicalHost(host)) {
		return nil
	}
	addrs, err := f.resolve(ctx, host)
	if err != nil {
		return Explain(ErrInvalidWebhookURL, msgWebhookUnresolvable, host)
	}
	for _, a := range addrs {
		if what := f.policy.Refusal(a); what != "" {
			return Explain(ErrInvalidWebhookURL, msgWebhookAddress, what)
		}
	}
	return nil
}

// checkURL applies the parts of the policy that need no network: scheme,
// credentials, host syntax and port. It runs on imageUrl and on every
// redirect target.
func (f *fetcher) checkURL(u *url.URL, redirect bool) error {
	if err := checkSourceURL(u, redirect); err != nil {
		return err
	}
	if _, ok := f.allowedPort(u.Port()); u.Port() != "" && !ok {
		return f.errPort(u.Port())
	}
	return nil
}

// allowedPort parses text as a port the fetcher may dial, written the one
// canonical way: "0443" is refused, since parsers disagree on it (decimal
// 443 here, octal 291 in others).
func (f *fetcher) allowedPort(text string) (uint16, bool) {
	port, err := strconv.ParseUint(text, 10, 16)
	ok := err == nil && strconv.FormatUint(port, 10) == text && (f.ports == nil || slices.Contains(f.ports, uint16(port)))
	return uint16(port), ok
}

func (f *fetcher) errPort(port string) error {
	return Explain(ErrSourceForbidden, msgPortRefused, port, f.ports)
}

func (f *fetcher) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > MaxRedirects {
		return Explain(ErrSourceUnreachable, msgTooManyRedirects, MaxRedirects)
	}
	return f.checkURL(req.URL, true)
}

// fetch downloads u. It returns an error wrapping ErrImageTooLarge when the
// body exceeds maxBytes, ErrSourceForbidden when the policy refuses an
// address or port on the way, ErrSourceUnavailable when the source's
// server failed in a way that may pass, ctx's own error when ctx ends
// (the host's deadline, or the caller gone), and ErrSourceUnreachable for
// every other failure, its own timeout included.
func (f *fetcher) fetch(ctx context.Context, u *url.URL, maxBytes int64, reserve func(ctx context.Context, n int64) error) ([]byte, error) {
	tooLarge := errLargerThanPlan(maxBytes)
	if data, ok := f.builtin[u.String()]; ok {
		if int64(len(data)) > maxBytes {
			return nil, tooLarge
		}
		if err := reserve(ctx, int64(len(data))); err != nil {
			return nil, err
		}
		return slices.Clone(data), nil // the engine may not write to it, but a copy makes sure
	}
	if err := f.checkURL(u, false); err != nil {
		return nil, err
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, Explain(ErrInvalidImageURL, msgImageURLUnusable)
	}
	req.Header.Set("User-Agent", "upscale (+https://github.com/upscalekit/upscale)")
	req.Header.Set("Accept", "image/jpeg, image/png, image/webp, image/avif, image/heic, image/heif, image/tiff, image/gif")
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, f.classify(parent, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests:
		return nil, Explain(ErrSourceUnavailable, msgSourceFailing, resp.StatusCode)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return nil, Explain(ErrSourceUnreachable, msgSourceStatus, resp.StatusCode)
	}
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		// We ask for no encoding, so one sent anyway is a misbehaving or
		// hostile server (a gzip bomb, say): its bytes are not an image.
		return nil, Explain(ErrSourceUnreachable, msgSourceEncoded, enc)
	}
	if resp.ContentLength > maxBytes {
		return nil, tooLarge // a declared size may refuse early, never accept
	}
	// A declared size is read into one buffer of that size (a body
	// running past it is cut off there).
	limit, size := maxBytes, int64(0)
	if resp.ContentLength > 0 {
		limit, size = resp.ContentLength, resp.ContentLength
	}
	buf, err := readSource(ctx, resp.Body, size, limit, reserve)
	if err != nil {
		return nil, f.classify(parent, err)
	}
	switch n := int64(buf.Len()); {
	case n > maxBytes:
		return nil, tooLarge
	case n > limit:
		return nil, Explain(ErrSourceUnreachable, msgSourceOverran, limit)
	}
	return buf.Bytes(), nil
}

// readSource reads a source's bytes from body, at most limit and one
// more, so that its caller can tell a longer body, into memory reserved
// before it is read: a body of a known size (size > 0, at least what it
// holds if limit is) into one buffer of that size, any other into one
// that grows by doubling, which may hold twice limit while it copies.
func readSource(ctx context.Context, body io.Reader, size, limit int64, reserve func(ctx context.Context, n int64) error) (*bytes.Buffer, error) {
	memory := 2 * limit
	if size > 0 {
		memory = size + bytes.MinRead
	}
	if err := reserve(ctx, memory); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if size > 0 {
		buf.Grow(int(memory)) // the read past the end finds EOF without growing
	}
	_, err := buf.ReadFrom(io.LimitReader(body, limit+1))
	return &buf, err
}

// errLargerThanPlan refuses a source file larger than maxBytes, the most
// the account's plan accepts.
func errLargerThanPlan(maxBytes int64) error {
	return Explain(ErrImageTooLarge, msgLargerThanPlan, Megabytes(maxBytes))
}

// classify explains a failed download. Whose deadline passed decides its
// answer: the host's (parent's) is a 504 like any other deadline for the
// request, the fetch's own is the source's fault (400). A failure that
// may pass (a refused or reset connection, a body cut short, a DNS
// server's failure) is ErrSourceUnavailable, which an Idempotency-Key
// does not keep.
func (f *fetcher) classify(parent context.Context, err error) error {
	if isExplained(err) {
		return err
	}
	if parent.Err() != nil {
		return fmt.Errorf("download the source: %w", context.Cause(parent))
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", Explain(ErrSourceUnreachable, msgFetchTimeout, f.timeout), err)
	}
	if netErr, ok := errors.AsType[net.Error](err); ok && netErr.Timeout() && !errors.As(err, new(*net.DNSError)) {
		// A step's own timeout (the TLS handshake's, say): slow for now.
		return fmt.Errorf("%w: %v", Explain(ErrSourceUnavailable, msgSourceSlow), err)
	}
	if dnsErr, ok := errors.AsType[*net.DNSError](err); ok {
		if dnsErr.IsNotFound {
			return Explain(ErrSourceUnreachable, msgUnknownHost)
		}
		return fmt.Errorf("%w: %v", Explain(ErrSourceUnavailable, msgDNSFailing), err)
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %v", Explain(ErrSourceUnavailable, msgSourceBrokeOff), err)
	}
	return fmt.Errorf("%w: %v", Explain(ErrSourceUnreachable, msgSourceUnreachable), err)
}
