package sqlstore_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/sqlstore"
)

// TestSignOutAcrossReplicas: two replicas, each with its own Store on one
// database and its own SignIn on the database's secret. A session begun
// on one and signed out of on the other is refused on both, a copy of its
// cookie too, and a sign-in afterwards works on both.
func TestSignOutAcrossReplicas(t *testing.T) {
	const base = "https://example.com/dashboard/"
	for name, newDB := range engines {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			dsn := newDB(t)
			var stores []*sqlstore.Store
			var signIns []*dashboard.SignIn
			var replicas []http.Handler
			for range 2 {
				s := open(t, dsn, upscale.LedgerOptions{})
				secret, err := s.Secret(ctx, "dashboard")
				if err != nil {
					t.Fatal(err)
				}
				signIn, err := dashboard.NewSignIn(dashboard.SignInOptions{Secret: secret, BaseURL: base, Links: s, Sessions: s})
				if err != nil {
					t.Fatal(err)
				}
				d, err := dashboard.New(dashboard.Config{SignIn: signIn, Keys: s, Ledger: s, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
				stores, signIns, replicas = append(stores, s), append(signIns, signIn), append(replicas, d)
			}
			seed(t, stores[0], 0, 0)
			// serve sends a request to a replica with the session cookie,
			// if any, and a form, if any.
			serve := func(replica int, method, path, cookie string, form url.Values) *http.Response {
				t.Helper()
				r := httptest.NewRequest(method, path, strings.NewReader(form.Encode()))
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				if cookie != "" {
					r.AddCookie(&http.Cookie{Name: "upscale_session", Value: cookie})
				}
				w := httptest.NewRecorder()
				replicas[replica].ServeHTTP(w, r)
				return w.Result()
			}
			signIn := func(replica int) string {
				t.Helper()
				link, err := signIns[replica].Link("acme")
				if err != nil {
					t.Fatal(err)
				}
				resp := serve(replica, "POST", "/signin", "", url.Values{"token": {strings.TrimPrefix(link, base+"signin?token=")}})
				for _, c := range resp.Cookies() {
					if c.Name == "upscale_session" && resp.StatusCode == http.StatusSeeOther {
						return c.Value
					}
				}
				t.Fatalf("sign in on replica %d: %d, no session", replica, resp.StatusCode)
				return ""
			}

			copied := signIn(0)
			if resp := serve(1, "GET", "/", copied, nil); resp.StatusCode != http.StatusOK {
				t.Fatalf("the session begun on replica 0, on replica 1: %d", resp.StatusCode)
			}
			if resp := serve(1, "POST", "/signout", copied, nil); resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("sign out on replica 1: %d", resp.StatusCode)
			}
			for replica := range replicas {
				if resp := serve(replica, "GET", "/", copied, nil); resp.StatusCode != http.StatusUnauthorized {
					t.Errorf("the signed-out session on replica %d: %d, want 401", replica, resp.StatusCode)
				}
				if resp := serve(replica, "POST", "/keys", copied, url.Values{"name": {"copied"}}); resp.StatusCode != http.StatusUnauthorized {
					t.Errorf("make a key with the signed-out session on replica %d: %d, want 401", replica, resp.StatusCode)
				}
			}
			if keys, err := stores[0].ListKeys(ctx, "acme"); err != nil || len(keys) != 1 {
				t.Errorf("acme's keys: %+v, %v; want only the one seeded", keys, err)
			}

			again := signIn(1)
			for replica := range replicas {
				if resp := serve(replica, "GET", "/", again, nil); resp.StatusCode != http.StatusOK {
					t.Errorf("the session begun after signing out, on replica %d: %d, want 200", replica, resp.StatusCode)
				}
			}
		})
	}
}
