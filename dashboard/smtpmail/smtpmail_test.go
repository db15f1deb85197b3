package smtpmail_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/dashboard/smtpmail"
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
			sent := dashboard.Mail{To: tc.to, Subject: "Your sign-in link — upscale", Text: "Sign in: https://upscale.example/dashboard/signin?token=abc", HTML: `<p><a href="https://upscale.example/dashboard/signin?token=abc">Sign in</a></p>`}
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
	if err := m.Send(context.Background(), dashboard.Mail{To: "ada@example.com", Subject: "s", Text: "t", HTML: "<p>t</p>"}); !errors.Is(err, upscale.ErrUnavailable) {
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
	ip := nonLoopbackIP(t)
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	said := make(chan string, 1)
	go func() { // an SMTP server that offers no STARTTLS, and notes what it is told
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second)) // bounds a client that would leave it open
		var heard strings.Builder
		conn.Write([]byte("220 plain.example ESMTP\r\n"))
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				said <- heard.String()
				return
			}
			heard.Write(buf[:n])
			switch line := strings.ToUpper(string(buf[:n])); {
			case strings.HasPrefix(line, "EHLO"):
				conn.Write([]byte("250-plain.example\r\n250 AUTH PLAIN LOGIN\r\n"))
			case strings.HasPrefix(line, "QUIT"):
				conn.Write([]byte("221 bye\r\n"))
			default:
				conn.Write([]byte("250 ok\r\n"))
			}
		}
	}()
	m, err := smtpmail.New(smtpmail.Options{URL: "smtp://user:secret@" + ln.Addr().String(), From: "no-reply@upscale.example"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Send(context.Background(), dashboard.Mail{To: "ada@example.com", Subject: "s", Text: "t", HTML: "<p>t</p>"}); err == nil {
		t.Fatal("Send to a server without STARTTLS succeeded")
	}
	ln.Close()
	if heard := <-said; strings.Contains(heard, "MAIL FROM") || strings.Contains(heard, "AUTH") {
		t.Errorf("the server without STARTTLS was told %q; want neither a login nor a message", heard)
	}
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
