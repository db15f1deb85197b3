// Command gorilla is an existing gorilla/mux application that adds the
// upscale API to its routes. Its own user table serves as the KeyStore: each
// user row stores the SHA-256 of the user's API key, never the key.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/vips"
)

// user is a row of the application's own user table.
type user struct {
	ID         string
	Name       string
	APIKeyHash upscale.KeyDigest
	Suspended  bool
}

// userTable is the application's user store, one API key per user.
// Implementing Authenticate makes it an upscale.KeyStore; AddKey and
// RevokeKey make it an upscale.KeyAdmin, held to the same rules as the
// library's own stores.
type userTable struct {
	mu    sync.RWMutex
	byID  map[string]*user
	byKey map[upscale.KeyDigest]*user
}

var _ upscale.KeyAdmin = (*userTable)(nil)

func newUserTable() *userTable {
	return &userTable{byID: map[string]*user{}, byKey: map[upscale.KeyDigest]*user{}}
}

// add stores u, with the digest of apiKey.
func (t *userTable) add(u user, apiKey string) {
	u.APIKeyHash = upscale.DigestKey(apiKey)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byID[u.ID] = &u
	t.byKey[u.APIKeyHash] = &u
}

func (t *userTable) suspend(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byID[id].Suspended = true
}

// AddKey implements upscale.KeyAdmin: it gives user accountID the key,
// creating the user if needed. A user's earlier key stops working.
func (t *userTable) AddKey(_ context.Context, key, accountID string) error {
	if err := upscale.ValidateKey(key); err != nil {
		return err
	}
	digest := upscale.DigestKey(key)
	t.mu.Lock()
	defer t.mu.Unlock()
	if u, ok := t.byKey[digest]; ok {
		if u.Suspended || u.ID != accountID {
			return upscale.ErrKeyConflict
		}
		return nil
	}
	u, ok := t.byID[accountID]
	if !ok {
		u = &user{ID: accountID}
		t.byID[accountID] = u
	}
	delete(t.byKey, u.APIKeyHash)
	u.APIKeyHash = digest
	t.byKey[digest] = u
	return nil
}

// RevokeKey implements upscale.KeyAdmin by suspending the key's user.
func (t *userTable) RevokeKey(_ context.Context, key string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	u, ok := t.byKey[upscale.DigestKey(key)]
	if !ok || u.Suspended {
		return upscale.ErrNotFound
	}
	u.Suspended = true
	return nil
}

// Authenticate implements upscale.KeyStore: a suspended user's key counts as
// revoked.
func (t *userTable) Authenticate(_ context.Context, key string) (string, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	u, ok := t.byKey[upscale.DigestKey(key)]
	if !ok || u.Suspended {
		return "", upscale.ErrUnauthorized
	}
	return u.ID, nil
}

// app is the whole application: its own pages plus the upscale API.
type app struct {
	users *userTable
}

// routes returns the application's router with the upscale handler and the
// result links mounted beside its own routes.
func (a *app) routes(api http.Handler, results http.Handler) *mux.Router {
	r := mux.NewRouter()
	r.Use(requestID, accessLog)
	r.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "Welcome to the image site.")
	}).Methods(http.MethodGet)
	r.HandleFunc("/users/{id}", a.showUser).Methods(http.MethodGet)
	// All methods go to the upscale handler, which answers 405 itself.
	r.Handle("/api/v1/upscale", api)
	r.PathPrefix("/results/").Handler(results).Methods(http.MethodGet, http.MethodHead)
	return r
}

func (a *app) showUser(w http.ResponseWriter, r *http.Request) {
	a.users.mu.RLock()
	u, ok := a.users.byID[mux.Vars(r)["id"]]
	a.users.mu.RUnlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"id": u.ID, "name": u.Name, "suspended": u.Suspended})
}

func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-ID", strings.ToLower(rand.Text()))
		next.ServeHTTP(w, r)
	})
}

func accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		next.ServeHTTP(w, r)
		slog.Info("request", "method", r.Method, "path", r.URL.Path, "took", time.Since(start))
	})
}

// newUpscale wires the upscale handler to the application's users and a
// ledger holding their plans, with results linked under publicURL/results.
func newUpscale(users *userTable, ledger upscale.QuotaLedger, engine upscale.Upscaler, publicURL string) (*upscale.Handler, *upscale.MemoryBlobStore, error) {
	blobs, err := upscale.NewMemoryBlobStore(upscale.MemoryBlobStoreOptions{BaseURL: publicURL + "/results"})
	if err != nil {
		return nil, nil, err
	}
	h, err := upscale.New(upscale.Config{Keys: users, Ledger: ledger, Upscaler: engine, Blobs: blobs})
	return h, blobs, err
}

func main() {
	users := newUserTable()
	users.add(user{ID: "u1", Name: "Ada"}, "upk_live_ada_0123456789abcdef")
	ledger := upscale.NewMemoryLedger(upscale.LedgerOptions{})
	ledger.PutAccount(context.Background(), upscale.Account{ID: "u1", Plan: upscale.Plan{Name: "free", MonthlyImages: 10, MaxFileBytes: 25 << 20}})

	api, results, err := newUpscale(users, ledger, vips.New(vips.Options{}), "http://127.0.0.1:8081")
	if err != nil {
		log.Fatal(err)
	}
	a := &app{users: users}
	srv := &http.Server{
		Addr:              "127.0.0.1:8081",
		Handler:           a.routes(api, results),
		ReadHeaderTimeout: 10 * time.Second,
		WriteTimeout:      2 * time.Minute,
	}
	log.Fatal(srv.ListenAndServe())
}
