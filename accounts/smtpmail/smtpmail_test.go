package smtpmail_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
	"github.com/upscalekit/upscale/accounts/smtpmail"
	"github.com/upscalekit/upscale/internal/testservers"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// TestSendsThroughARealServer: a message reaches Mailpit as plain text
// with its HTML alternative, from the sender, with or without a login.
func TestSendsThroughARealServer(t *testing.T) {
	server := testservers.Mailpit(t)
	for _, tc := range []struct{ name, url, to string }{
		{"NoLogin", "smtp://" + server.SMTP, "ada@example.com"},
		{"Login", "smtp://user:secret@" + server.SMTP, "grace@example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := smtpmail.New(smtpmail.Options{URL: tc.url, From: "Upscale <no-reply@upscale.example>"})
			if err != nil {
				t.Fatal(err)
			}
			sent := accounts.Mail{To: tc.to, Subject: "Your sign-in link — upscale", Text: "Sign in: https://upscale.example/dashboard/signin?token=abc", HTML: `<p><a href="https://upscale.example/dashboard/signin?token=abc">Sign in</a></p>`}
			if err := m.Send(context.Background(), sent); err != nil {
				t.Fatalf("Send: %v", err)
			}
			got := server.Messages(t, tc.to)
			if len(got) != 1 {
				t.Fatalf("%d messages for %s, want 1", len(got), tc.to)
			}
			msg := got[0]
			if msg.Subject != sent.Subject || msg.From.Address != "no-reply@upscale.example" || msg.From.Name != "Upscale" ||
				strings.TrimSpace(msg.Text) != sent.Text || !strings.Contains(msg.HTML, `href="https://upscale.example/dashboard/signin?token=abc"`) {
				t.Errorf("received %+v; want %+v from Upscale <no-reply@upscale.example>", msg, sent)
			}
		})
	}
}

// TestServerDownIsUnavailable: a server that cannot be reached is
// ErrUnavailable, for the sending to be tried again later.
func TestServerDownIsUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	m, err := smtpmail.New(smtpmail.Options{URL: "smtp://" + addr, From: "no-reply@upscale.example"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Send(context.Background(), accounts.Mail{To: "ada@example.com", Subject: "s", Text: "t", HTML: "<p>t</p>"}); !errors.Is(err, upscale.ErrUnavailable) {
		t.Errorf("Send to a closed port: %v, want ErrUnavailable", err)
	}
}

// TestRefusesBadOptions: what cannot work is refused when the Mailer is
// made, not at the first sign-up.
func TestRefusesBadOptions(t *testing.T) {
	for _, opts := range []smtpmail.Options{
		{URL: "http://mail.example.com", From: "a@example.com"},
		{URL: "smtp://", From: "a@example.com"},
		{URL: "smtp://mail.example.com:99999", From: "a@example.com"},
		{URL: "smtp://mail.example.com/path", From: "a@example.com"},
		{URL: "smtp://mail.example.com", From: "not an address"},
	} {
		if _, err := smtpmail.New(opts); err == nil {
			t.Errorf("New(%+v) accepted", opts)
		}
	}
}

// TestStartTLSRequired: a server away from this machine that offers no
// STARTTLS gets no message, and no login, in the clear.
func TestStartTLSRequired(t *testing.T) {
	ln, err := net.Listen("tcp", net.JoinHostPort(nonLoopbackIP(t), "0"))
	if err != nil {
		t.Fatal(err)
	}
	heard := fakeSMTP(ln)
	m, err := smtpmail.New(smtpmail.Options{URL: "smtp://user:secret@" + ln.Addr().String(), From: "no-reply@upscale.example"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Send(context.Background(), accounts.Mail{To: "ada@example.com", Subject: "s", Text: "t", HTML: "<p>t</p>"}); err == nil {
		t.Fatal("Send to a server without STARTTLS succeeded")
	}
	ln.Close()
	if said := <-heard; strings.Contains(said, "MAIL FROM") || strings.Contains(said, "AUTH") {
		t.Errorf("the server without STARTTLS was told %q; want neither a login nor a message", said)
	}
}

// TestImplicitTLS: smtps:// speaks TLS from the first byte to a server
// away from this machine, trusted by the configured authority, and logs
// in and sends inside it.
func TestImplicitTLS(t *testing.T) {
	ip := nonLoopbackIP(t)
	cert, roots := selfSigned(t, ip)
	ln, err := tls.Listen("tcp", net.JoinHostPort(ip, "0"), &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	heard := fakeSMTP(ln)
	m, err := smtpmail.New(smtpmail.Options{URL: "smtps://user:secret@" + ln.Addr().String(), From: "no-reply@upscale.example", TLS: &tls.Config{RootCAs: roots}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Send(context.Background(), accounts.Mail{To: "ada@example.com", Subject: "s", Text: "over TLS", HTML: "<p>t</p>"}); err != nil {
		t.Fatalf("Send over smtps: %v", err)
	}
	ln.Close()
	if said := <-heard; !strings.Contains(said, "AUTH") || !strings.Contains(said, "RCPT TO:<ada@example.com>") || !strings.Contains(said, "over TLS") {
		t.Errorf("the smtps server was told %q; want a login and the message", said)
	}
}

// TestRefusalNamesNoAddress: a recipient refused for good is no
// ErrUnavailable, and the error, which callers log, holds the SMTP codes
// but not the address.
func TestRefusalNamesNoAddress(t *testing.T) {
	m, ln, heard := fakeServer(t, refuseRcpt)
	err := m.Send(context.Background(), accounts.Mail{To: "ada@example.com", Subject: "s", Text: "t", HTML: "<p>t</p>"})
	if err == nil || errors.Is(err, upscale.ErrUnavailable) || strings.Contains(err.Error(), "ada@") || !strings.Contains(err.Error(), "550") {
		t.Errorf("a recipient refused for good: %v; want a refusal with its code and without the address", err)
	}
	ln.Close()
	<-heard
}

// TestInterruptedIsUnavailable: a connection reset or silent part way
// through the exchange, or a temporary refusal, is ErrUnavailable, and the
// next try delivers; a reset once the server has taken the message is no
// failure, so that the mail is not sent twice.
func TestInterruptedIsUnavailable(t *testing.T) {
	msg := accounts.Mail{To: "ada@example.com", Subject: "s", Text: "t", HTML: "<p>t</p>"}
	for _, tc := range []struct {
		name  string
		fault fault
	}{{"ResetAtRcpt", resetAtRcpt}, {"ResetInData", resetInData}, {"StallAtMail", stallAtMail}, {"DeferRcpt", deferRcpt}} {
		t.Run(tc.name, func(t *testing.T) {
			m, _, heard := fakeServer(t, tc.fault, noFault)
			if err := m.Send(context.Background(), msg); !errors.Is(err, upscale.ErrUnavailable) || strings.Contains(err.Error(), "ada@") {
				t.Errorf("the first Send: %v; want ErrUnavailable, without the address", err)
			}
			if err := m.Send(context.Background(), msg); err != nil {
				t.Errorf("the next Send, to the server behaving: %v", err)
			}
			<-heard
		})
	}
	t.Run("ResetAfterData", func(t *testing.T) {
		m, _, heard := fakeServer(t, resetAfterData)
		if err := m.Send(context.Background(), msg); err != nil {
			t.Errorf("Send, the message taken before the reset: %v; want it sent", err)
		}
		<-heard
	})
}

// TestOutboxTriesAgainUnlessRefused: through a MemoryOutbox, a mail whose
// connection was reset is sent on the next attempt; one whose recipient
// was refused for good (550) is not tried again.
func TestOutboxTriesAgainUnlessRefused(t *testing.T) {
	for _, tc := range []struct {
		name        string
		fault       fault
		wantMessage string // the outbox's log of the mail's outcome
		wantMails   int    // MAIL commands the server was told
	}{
		{"ResetAtRcpt", resetAtRcpt, "accounts: mail sent", 2},
		{"Refused", refuseRcpt, "accounts: mail refused; not sent", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, ln, heard := fakeServer(t, tc.fault, noFault)
			log := make(records, 16)
			outbox := accounts.NewMemoryOutbox(accounts.MemoryOutboxOptions{Mailer: m, Logger: slog.New(log)})
			if err := outbox.Post(context.Background(), accounts.Mail{To: "ada@example.com", Subject: "s", Text: "t", HTML: "<p>t</p>"}, time.Now().Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			outcome := log.await(t, slog.LevelInfo, slog.LevelError)
			outbox.Close(context.Background()) // the mail's sending is over
			ln.Close()
			if said := <-heard; outcome.Message != tc.wantMessage || strings.Count(said, "MAIL FROM") != tc.wantMails {
				t.Errorf("the outbox's outcome %q after %d MAIL commands; want %q after %d", outcome.Message, strings.Count(said, "MAIL FROM"), tc.wantMessage, tc.wantMails)
			}
		})
	}
}

// records is a slog.Handler that sends each record on the channel.
type records chan slog.Record

func (r records) Enabled(context.Context, slog.Level) bool        { return true }
func (r records) Handle(_ context.Context, rec slog.Record) error { r <- rec; return nil }
func (r records) WithAttrs([]slog.Attr) slog.Handler              { return r }
func (r records) WithGroup(string) slog.Handler                   { return r }

// await returns the first record at one of levels, within 15 s.
func (r records) await(t *testing.T, levels ...slog.Level) slog.Record {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case rec := <-r:
			if slices.Contains(levels, rec.Level) {
				return rec
			}
		case <-timeout:
			t.Fatalf("no record at %v logged within 15 s", levels)
		}
	}
}

// fault is what a fake SMTP server does wrong on one connection.
type fault int

const (
	noFault        fault = iota
	refuseRcpt           // 550 to every recipient: refused for good
	deferRcpt            // 451 to every recipient: refused for now
	resetAtRcpt          // the connection reset when told RCPT
	resetInData          // the connection reset part way into the message
	stallAtMail          // no answer to MAIL, until the client leaves
	resetAfterData       // the message taken, then the connection reset
)

// fakeServer is a Mailer (with a 2 s Timeout) to a fakeSMTP with faults on
// loopback, the server's listener, and what the server hears.
func fakeServer(t *testing.T, faults ...fault) (*smtpmail.Mailer, net.Listener, <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	heard := fakeSMTP(ln, faults...)
	m, err := smtpmail.New(smtpmail.Options{URL: "smtp://" + ln.Addr().String(), From: "no-reply@upscale.example", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return m, ln, heard
}

// fakeSMTP answers SMTP clients on ln one after another, one for each of
// faults (one without a fault when none), offering AUTH but never
// STARTTLS, and sends on the channel what it was told once the last
// client leaves (or after 10 s each).
func fakeSMTP(ln net.Listener, faults ...fault) <-chan string {
	heard := make(chan string, 1)
	if len(faults) == 0 {
		faults = []fault{noFault}
	}
	go func() {
		var said strings.Builder
		defer func() { heard <- said.String() }()
		for _, f := range faults {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			answer(conn, f, &said)
		}
	}()
	return heard
}

// answer answers one SMTP client on conn with fault f, writing what it
// was told to said.
func answer(conn net.Conn, f fault, said *strings.Builder) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second)) // bounds a client that would leave it open
	// reset closes the connection with a TCP reset, as a server that
	// fails mid-exchange does.
	reset := func() {
		if tcp, ok := conn.(*net.TCPConn); ok {
			tcp.SetLinger(0)
		}
	}
	conn.Write([]byte("220 fake.example ESMTP\r\n"))
	lines := bufio.NewReader(conn)
	inData, taken := false, false
	for {
		line, err := lines.ReadString('\n')
		if err != nil {
			return
		}
		said.WriteString(line)
		switch upper := strings.ToUpper(line); {
		case inData && f == resetInData:
			reset()
			return
		case inData && line == ".\r\n":
			inData, taken = false, true
			conn.Write([]byte("250 queued\r\n"))
		case inData:
		case taken && f == resetAfterData:
			reset()
			return
		case strings.HasPrefix(upper, "EHLO"):
			conn.Write([]byte("250-fake.example\r\n250 AUTH PLAIN LOGIN\r\n"))
		case strings.HasPrefix(upper, "AUTH"):
			conn.Write([]byte("235 ok\r\n"))
		case strings.HasPrefix(upper, "MAIL") && f == stallAtMail:
			io.Copy(io.Discard, lines) // silent until the client gives up
			return
		case strings.HasPrefix(upper, "RCPT") && f == resetAtRcpt:
			reset()
			return
		case strings.HasPrefix(upper, "RCPT") && f == refuseRcpt:
			conn.Write([]byte("550 5.1.1 <" + strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(line), "RCPT TO:<"), ">") + ">: no such user\r\n"))
		case strings.HasPrefix(upper, "RCPT") && f == deferRcpt:
			conn.Write([]byte("451 4.3.0 try again later\r\n"))
		case strings.HasPrefix(upper, "DATA"):
			inData = true
			conn.Write([]byte("354 go on\r\n"))
		case strings.HasPrefix(upper, "QUIT"):
			conn.Write([]byte("221 bye\r\n"))
			return
		default:
			conn.Write([]byte("250 ok\r\n"))
		}
	}
}

// selfSigned is a certificate for ip, and a pool that trusts it.
func selfSigned(t *testing.T, ip string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fake smtp"}, IPAddresses: []net.IP{net.ParseIP(ip)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(parsed)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, roots
}

// nonLoopbackIP is an address of this machine's other than loopback, where
// a server counts as away from it.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && !ip.IP.IsLoopback() && ip.IP.To4() != nil {
			return ip.IP.String()
		}
	}
	t.Skip("no address but loopback on this machine")
	return ""
}
