package testservers

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"
)

var mailpit lazy[MailpitServer]

// MailpitServer is a running Mailpit: an SMTP server that keeps what it is
// sent, and the HTTP API that reads it back.
type MailpitServer struct {
	SMTP string // host:port on loopback, no TLS, any login accepted
	API  string // http://host:port
}

// Mailpit returns a Mailpit server on free loopback ports, started once
// per test process and stopped by Stop. Tests keep apart by the addresses
// they send to. The binary is the one named by UPSCALE_MAILPIT, else
// mailpit on PATH; make test-deps builds it.
func Mailpit(t testing.TB) MailpitServer {
	t.Helper()
	server, err := mailpit.get(startMailpit)
	if err != nil {
		Unavailable(t, "Mailpit: "+err.Error())
	}
	return server
}

func startMailpit() (MailpitServer, error) {
	bin, dir, err := tool("UPSCALE_MAILPIT", "mailpit", "github.com/axllent/mailpit@v1.33.1")
	if err != nil {
		return MailpitServer{}, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return MailpitServer{}, err
	}
	smtp, api := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	// Its database lives in dir, removed when the tests end: by default
	// Mailpit makes one in the system's temporary folder and removes it
	// only on a clean exit, which a killed server never makes.
	err = serve(dir, api, bin, "--smtp", smtp, "--listen", api, "--smtp-auth-accept-any", "--smtp-auth-allow-insecure",
		"--database", filepath.Join(dir, "mailpit.db"), "--disable-version-check", "--quiet")
	return MailpitServer{SMTP: smtp, API: "http://" + api}, err
}

// MailpitMessage is a message Mailpit received, as its API reads it.
type MailpitMessage struct {
	ID      string
	From    MailpitAddress
	To      []MailpitAddress
	Subject string
	Text    string
	HTML    string
}

// MailpitAddress is a sender or recipient of a MailpitMessage.
type MailpitAddress struct{ Name, Address string }

// Messages returns the messages Mailpit received for the address to,
// newest first, whole.
func (m MailpitServer) Messages(t testing.TB, to string) []MailpitMessage {
	t.Helper()
	var found struct{ Messages []struct{ ID string } }
	m.get(t, "/api/v1/search?"+url.Values{"query": {fmt.Sprintf("to:%q", to)}}.Encode(), &found)
	out := make([]MailpitMessage, len(found.Messages))
	for i, s := range found.Messages {
		m.get(t, "/api/v1/message/"+url.PathEscape(s.ID), &out[i])
	}
	return out
}

func (m MailpitServer) get(t testing.TB, path string, into any) {
	t.Helper()
	resp, err := http.Get(m.API + path)
	if err != nil {
		t.Fatalf("Mailpit: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("Mailpit: GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatalf("Mailpit: GET %s: %v", path, err)
	}
}
