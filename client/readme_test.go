package client_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// verify is docs/jobs.md's webhook receiver, word for word
// (TestREADMEVerifier holds the two together).
func verify(secret string, r *http.Request, body []byte) bool {
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	ts, err := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64)
	if err != nil || time.Since(time.Unix(ts, 0)).Abs() > 5*time.Minute {
		return false // stale, or a replay
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.%s", r.Header.Get("webhook-id"), ts, body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(r.Header.Get("webhook-signature")) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return true
		}
	}
	return false
}

// TestREADMEVerifier: docs/jobs.md's receiver is verify, and verify accepts
// what the server signs and refuses a changed body or a stale timestamp.
func TestREADMEVerifier(t *testing.T) {
	readme, err := os.ReadFile("../docs/jobs.md")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	function := func(src []byte) string {
		start := bytes.Index(src, []byte("func verify("))
		if start < 0 {
			t.Fatal("no func verify")
		}
		return string(src[start : start+bytes.Index(src[start:], []byte("\n}\n"))])
	}
	if function(readme) != function(self) {
		t.Errorf("docs/jobs.md's verify differs from this file's:\n%s", function(readme))
	}
	secret := upscale.NewWebhookSecret()
	body := []byte(`{"type":"upscale.job.failed"}`)
	request := func(at time.Time, body []byte) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/hooks", bytes.NewReader(body))
		r.Header.Set("webhook-id", "msg_job_1")
		r.Header.Set("webhook-timestamp", strconv.FormatInt(at.Unix(), 10))
		r.Header.Set("webhook-signature", upscale.SignWebhook([]string{upscale.NewWebhookSecret(), secret}, "msg_job_1", at, body))
		return r
	}
	if !verify(secret, request(time.Now(), body), body) {
		t.Error("a signed delivery does not verify")
	}
	if verify(secret, request(time.Now(), body), []byte(`{"type":"upscale.job.succeeded"}`)) {
		t.Error("a changed body verifies")
	}
	if verify(secret, request(time.Now().Add(-time.Hour), body), body) {
		t.Error("an hour-old delivery verifies")
	}
}
