package main

import (
	"context"
	_ "embed"
	"net/http"

	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/sqlstore"
)

// newSignIn returns the dashboard's sign-in for a server at publicURL:
// links and sessions signed with the database's secret, so that every
// replica accepts them, links spent once and sign-outs kept across
// replicas (and restarts).
func newSignIn(ctx context.Context, store *sqlstore.Store, publicURL string) (*dashboard.SignIn, error) {
	secret, err := store.Secret(ctx, "dashboard")
	if err != nil {
		return nil, err
	}
	return dashboard.NewSignIn(dashboard.SignInOptions{Secret: secret, BaseURL: publicURL + "/dashboard/", Links: store, Sessions: store})
}

//go:embed landing/index.html
var landingPage []byte

// landingHandler serves the server's front page: what it is, and where
// its dashboard, API reference and samples are. It shares the
// dashboard's style sheet, as its policy allows no inline style.
func landingHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		w.Write(landingPage)
	})
}
