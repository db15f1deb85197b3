// Package smtpmail is an accounts.Mailer that sends through an SMTP
// server. It uses github.com/wneessen/go-mail, which writes the MIME
// message (plain text with an HTML alternative, encoded headers, a
// Message-ID and a Date) and holds the connection to a TLS policy: work
// net/smtp leaves to its caller, and easy to get subtly wrong.
package smtpmail

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	netmail "net/mail"
	"net/url"
	"strconv"
	"time"

	"github.com/wneessen/go-mail"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
)

// Options configures a Mailer. URL and From are required.
type Options struct {
	// URL is the server: smtp://user:password@host:587, which must offer
	// STARTTLS unless the host is loopback, or smtps://user:password@host
	// for TLS from the first byte. The port defaults to 587 and 465; the
	// login is optional.
	URL string
	// From is the sender, such as "Upscale <no-reply@example.com>".
	From string
	// TLS, when not nil, is the TLS configuration, such as the server's
	// own certificate authority; nil trusts the system's.
	TLS *tls.Config
	// Timeout bounds one sending. Zero means 30 seconds.
	Timeout time.Duration
}

// Mailer sends each Mail through the server, on a connection of its own.
type Mailer struct {
	opts Options
	host string
	port int
	// TLS for the URL: smtps from the first byte; smtp STARTTLS,
	// required but for loopback (TLSOpportunistic).
	ssl    bool
	policy mail.TLSPolicy
	user   *url.Userinfo
}

var _ accounts.Mailer = (*Mailer)(nil)

// New returns a Mailer for opts, or an error naming what is wrong with
// them.
func New(opts Options) (*Mailer, error) {
	u, err := url.Parse(opts.URL)
	if err != nil || (u.Scheme != "smtp" && u.Scheme != "smtps") || u.Hostname() == "" || (u.Path != "" && u.Path != "/") {
		return nil, errors.New("smtpmail: the server's URL must be smtp://[user:password@]host[:port] or smtps://…")
	}
	if _, err := netmail.ParseAddress(opts.From); err != nil {
		return nil, fmt.Errorf("smtpmail: the sender %q is not an address: %w", opts.From, err)
	}
	m := &Mailer{opts: opts, host: u.Hostname(), ssl: u.Scheme == "smtps", policy: mail.TLSMandatory, user: u.User}
	m.port = 587
	if m.ssl {
		m.port = 465
	}
	if p := u.Port(); p != "" {
		if m.port, err = strconv.Atoi(p); err != nil || m.port < 1 || m.port > 65535 {
			return nil, fmt.Errorf("smtpmail: port %q", p)
		}
	}
	if ip := net.ParseIP(m.host); (ip != nil && ip.IsLoopback()) || m.host == "localhost" {
		m.policy = mail.TLSOpportunistic // a server on this machine
	}
	if m.opts.Timeout == 0 {
		m.opts.Timeout = 30 * time.Second
	}
	return m, nil
}

// dialer dials the server, in the clear (STARTTLS follows) or in TLS.
type dialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// tlsConfig is Options.TLS, or the system's roots, for the server's name.
func (m *Mailer) tlsConfig() *tls.Config {
	config := &tls.Config{MinVersion: tls.VersionTLS12}
	if m.opts.TLS != nil {
		config = m.opts.TLS.Clone()
	}
	if config.ServerName == "" {
		config.ServerName = m.host
	}
	return config
}

// Send implements accounts.Mailer: nil once the server has taken the
// message; an error wrapping upscale.ErrUnavailable when the server could
// not be reached, the connection failed or went silent before it took
// the message, or it answered 4xx; another error when it answered 5xx.
func (m *Mailer) Send(ctx context.Context, msg accounts.Mail) error {
	message := mail.NewMsg()
	if err := message.From(m.opts.From); err != nil {
		return fmt.Errorf("smtpmail: sender: %w", err)
	}
	if err := message.To(msg.To); err != nil {
		return fmt.Errorf("smtpmail: recipient: %w", err)
	}
	message.Subject(msg.Subject)
	message.SetMessageID()
	message.SetDate()
	message.SetBodyString(mail.TypeTextPlain, msg.Text)
	message.AddAlternativeString(mail.TypeTextHTML, msg.HTML)
	// go-mail leaves the connection open when STARTTLS or the login
	// fails; the dialer keeps it, to be closed whatever happened.
	var conn net.Conn
	dialer := dialer(&net.Dialer{})
	if m.ssl {
		dialer = &tls.Dialer{Config: m.tlsConfig()}
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		conn = c
		return c, err
	}
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	options := []mail.Option{mail.WithPort(m.port), mail.WithTimeout(m.opts.Timeout), mail.WithTLSPolicy(m.policy),
		mail.WithTLSConfig(m.tlsConfig()), mail.WithDialContextFunc(dial)}
	if m.ssl {
		options = append(options, mail.WithSSL()) // TLS from the first byte: no STARTTLS inside it
	}
	if m.user != nil {
		password, _ := m.user.Password()
		// The strongest mechanism the server offers after STARTTLS; PLAIN
		// inside smtps's TLS (which go-mail, handed our dialer, cannot see
		// to discover), and to a server on this machine, which may offer
		// no TLS to hide it.
		auth := mail.SMTPAuthAutoDiscover
		if m.ssl || m.policy == mail.TLSOpportunistic {
			auth = mail.SMTPAuthPlain
		}
		options = append(options, mail.WithSMTPAuth(auth), mail.WithUsername(m.user.Username()), mail.WithPassword(password))
	}
	client, err := mail.NewClient(m.host, options...)
	if err != nil {
		return fmt.Errorf("smtpmail: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, m.opts.Timeout)
	defer cancel()
	// A failure once the server took the message (the RSET or QUIT that
	// follows) is no failure of the sending: a retry would mail it twice.
	if err := client.DialAndSendWithContext(ctx, message); err != nil && !message.IsDelivered() {
		return failure(err)
	}
	return nil
}

// failure is err as Send returns it, without the recipient's address,
// which go-mail's errors and the server's replies carry, and which its
// callers log: what failed and the SMTP codes. Only a 5xx reply refuses
// the message for good; anything else, a 4xx reply or none at all (the
// connection reset, closed or silent part way through), is
// ErrUnavailable, for the mail to be tried again.
func failure(err error) error {
	var refused *mail.SendError
	if !errors.As(err, &refused) {
		return fmt.Errorf("smtpmail: %w: %w", upscale.ErrUnavailable, err) // dialling, TLS, the login: no address in them
	}
	code := refused.ErrorCode()
	what := fmt.Sprintf("%s (SMTP %d %s)", refused.Reason, code, refused.EnhancedStatusCode())
	if code == 0 {
		// The connection's own error is in go-mail's text only beside
		// the recipient.
		what = fmt.Sprintf("%s (no reply: the connection failed or timed out)", refused.Reason)
	}
	if code < 500 {
		return fmt.Errorf("smtpmail: %w: %s", upscale.ErrUnavailable, what)
	}
	return fmt.Errorf("smtpmail: the server refused the message: %s", what)
}
