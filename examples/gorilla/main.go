// Command gorilla is an existing gorilla/mux application that adds the
// upscale API to its routes, and the account dashboard behind its own
// sign-in. Its own user table serves as the KeyStore: each key row stores
// the SHA-256 of an API key, never the key.
package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorilla/mux"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/engine/vips"
)

// user is a row of the application's own user table.
type user struct {
	ID   string
	Name string
	// PasswordHash is the SHA-256 of the user's password, for the demo
	// sign-in; a real application keeps a slow hash (bcrypt, argon2).
	PasswordHash [sha256.Size]byte
	Suspended    bool
}

// apiKey is a row of the application's key table: the SHA-256 of an API
// key, never the key, and what the user's account page shows of it.
type apiKey struct {
	userID string
	info   upscale.KeyInfo
}

// userTable is the application's user store, with any number of API keys
// per user. Implementing Authenticate makes it an upscale.KeyStore;
// AddKey and RevokeKey an upscale.KeyAdmin; AddNamedKey, ListKeys and
// RevokeKeyID an upscale.KeyLister, for the dashboard. It is held to the
// same rules as the library's own stores (main_test.go).
type userTable struct {
	mu   sync.RWMutex
	byID map[string]*user
	keys map[upscale.KeyDigest]*apiKey
}

var _ upscale.KeyLister = (*userTable)(nil)

func newUserTable() *userTable {
	return &userTable{byID: map[string]*user{}, keys: map[upscale.KeyDigest]*apiKey{}}
}

// add stores u, with password and one API key.
func (t *userTable) add(u user, password, key string) {
	u.PasswordHash = sha256.Sum256([]byte(password))
	t.mu.Lock()
	t.byID[u.ID] = &u
	t.mu.Unlock()
	t.AddKey(context.Background(), key, u.ID)
}

func (t *userTable) suspend(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byID[id].Suspended = true
}

// signIn returns the user whose password this is, if any.
func (t *userTable) signIn(id, password string) (*user, bool) {
	u, ok := t.signInID(id)
	want := sha256.Sum256([]byte(password))
	if !ok || subtle.ConstantTimeCompare(u.PasswordHash[:], want[:]) != 1 {
		return nil, false
	}
	return u, true
}

// signInID reports whether user id may be signed in: it exists and is
// not suspended.
func (t *userTable) signInID(id string) (*user, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	u, ok := t.byID[id]
	return u, ok && !u.Suspended
}

// AddKey implements upscale.KeyAdmin: it gives user accountID the key,
// creating the user if needed.
func (t *userTable) AddKey(ctx context.Context, key, accountID string) error {
	_, err := t.AddNamedKey(ctx, key, accountID, "")
	return err
}

// AddNamedKey implements upscale.KeyLister.
func (t *userTable) AddNamedKey(_ context.Context, key, accountID, name string) (upscale.KeyInfo, error) {
	if err := upscale.ValidateKey(key); err != nil {
		return upscale.KeyInfo{}, err
	}
	if err := upscale.ValidateKeyName(name); err != nil {
		return upscale.KeyInfo{}, err
	}
	digest := upscale.DigestKey(key)
	t.mu.Lock()
	defer t.mu.Unlock()
	if k, ok := t.keys[digest]; ok {
		if k.userID != accountID || !k.info.Revoked.IsZero() {
			return upscale.KeyInfo{}, upscale.ErrKeyConflict
		}
		return k.info, nil
	}
	if _, ok := t.byID[accountID]; !ok {
		t.byID[accountID] = &user{ID: accountID}
	}
	k := &apiKey{userID: accountID, info: upscale.KeyInfo{ID: upscale.KeyID(key), Hint: upscale.KeyHint(key), Name: name, Created: time.Now()}}
	t.keys[digest] = k
	return k.info, nil
}

// RevokeKey implements upscale.KeyAdmin.
func (t *userTable) RevokeKey(_ context.Context, key string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return revoke(t.keys[upscale.DigestKey(key)])
}

// RevokeKeyID implements upscale.KeyLister.
func (t *userTable) RevokeKeyID(_ context.Context, accountID, id string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range t.keys {
		if k.userID == accountID && k.info.ID == id {
			return revoke(k)
		}
	}
	return upscale.ErrNotFound
}

func revoke(k *apiKey) error {
	if k == nil || !k.info.Revoked.IsZero() {
		return upscale.ErrNotFound
	}
	k.info.Revoked = time.Now()
	return nil
}

// ListKeys implements upscale.KeyLister.
func (t *userTable) ListKeys(_ context.Context, accountID string) ([]upscale.KeyInfo, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	keys := []upscale.KeyInfo{}
	for _, k := range t.keys {
		if k.userID == accountID {
			keys = append(keys, k.info)
		}
	}
	slices.SortFunc(keys, func(a, b upscale.KeyInfo) int { return b.Created.Compare(a.Created) })
	return keys, nil
}

// Authenticate implements upscale.KeyStore: a suspended user's keys count
// as revoked. It records the key's use, at most once a minute.
func (t *userTable) Authenticate(_ context.Context, key string) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k, ok := t.keys[upscale.DigestKey(key)]
	if !ok || !k.info.Revoked.IsZero() || t.byID[k.userID].Suspended {
		return "", upscale.ErrUnauthorized
	}
	if now := time.Now(); now.Sub(k.info.LastUsed) >= upscale.KeyUseResolution {
		k.info.LastUsed = now
	}
	return k.userID, nil
}

// app is the whole application: its own pages and sign-in, the upscale
// API, and the account dashboard behind the application's own sign-in.
type app struct {
	users *userTable
	// secret signs the application's session cookies.
	secret []byte
}

// sessionCookie holds the signed-in user's ID and its HMAC.
const sessionCookie = "site_session"

// routes returns the application's router with the upscale handler, the
// result links and the dashboard mounted beside its own routes.
func (a *app) routes(api http.Handler, results http.Handler, dash http.Handler) *mux.Router {
	r := mux.NewRouter()
	r.Use(requestID, accessLog)
	r.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "Welcome to the image site.")
	}).Methods(http.MethodGet)
	r.HandleFunc("/users/{id}", a.showUser).Methods(http.MethodGet)
	r.HandleFunc("/login", a.login).Methods(http.MethodPost)
	// All methods go to the upscale handler, which answers 405 itself:
	// the API and its jobs' resources (Prefer: respond-async).
	r.Handle("/api/v1/upscale", api)
	r.Handle("/api/v1/upscale/jobs/{id}", api)
	r.PathPrefix("/results/").Handler(results).Methods(http.MethodGet, http.MethodHead)
	r.PathPrefix("/account/").Handler(http.StripPrefix("/account", dash))
	return r
}

// login signs a user in with the application's own session: the
// dashboard reads it through signedIn.
func (a *app) login(w http.ResponseWriter, r *http.Request) {
	u, ok := a.users.signIn(r.PostFormValue("user"), r.PostFormValue("password"))
	if !ok {
		http.Error(w, "Unknown user or wrong password.", http.StatusUnauthorized)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: u.ID + "." + a.sign(u.ID), Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode, MaxAge: 12 * 3600})
	http.Redirect(w, r, "/account/", http.StatusSeeOther)
}

// signedIn returns the user of the request's session, "" when none: the
// dashboard's Config.Account.
func (a *app) signedIn(r *http.Request) string {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return ""
	}
	id, mac, ok := strings.Cut(c.Value, ".")
	if !ok || !hmac.Equal([]byte(mac), []byte(a.sign(id))) {
		return ""
	}
	if _, ok := a.users.signInID(id); !ok {
		return ""
	}
	return id
}

func (a *app) sign(id string) string {
	m := hmac.New(sha256.New, a.secret)
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))
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
// ledger holding their plans, with results linked under publicURL/results,
// and the dashboard, which reads the signed-in user from the
// application's own session and sends others to its sign-in.
func (a *app) newUpscale(ledger *upscale.MemoryLedger, engine upscale.Upscaler, publicURL string) (*upscale.Handler, *upscale.MemoryBlobStore, *dashboard.Dashboard, error) {
	blobs, err := upscale.NewMemoryBlobStore(upscale.MemoryBlobStoreOptions{BaseURL: publicURL + "/results"})
	if err != nil {
		return nil, nil, nil, err
	}
	h, err := upscale.New(upscale.Config{Keys: a.users, Ledger: ledger, Upscaler: engine, Blobs: blobs})
	if err != nil {
		return nil, nil, nil, err
	}
	dash, err := dashboard.New(dashboard.Config{
		Account: a.signedIn, SignInURL: "/login", Keys: a.users, Ledger: ledger,
		API: h, APIURL: publicURL + "/api/v1/upscale",
	})
	return h, blobs, dash, err
}

func main() {
	a := &app{users: newUserTable(), secret: []byte(rand.Text() + rand.Text())}
	a.users.add(user{ID: "u1", Name: "Ada"}, "change me", "upk_live_ada_0123456789abcdef")
	ledger := upscale.NewMemoryLedger(upscale.LedgerOptions{})
	ledger.PutAccount(context.Background(), upscale.Account{ID: "u1", Plan: upscale.Plan{Name: "free", MonthlyImages: 10, MaxFileBytes: 25 << 20}})

	api, results, dash, err := a.newUpscale(ledger, vips.New(vips.Options{}), "http://127.0.0.1:8081")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{
		Addr:              "127.0.0.1:8081",
		Handler:           a.routes(api, results, dash),
		ReadHeaderTimeout: 10 * time.Second,
		WriteTimeout:      2 * time.Minute,
	}
	// The job form's workers run beside the server, and on SIGINT or
	// SIGTERM the server stops taking requests, then the workers get a
	// minute to finish the jobs they run.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := api.StartJobs(ctx); err != nil {
		log.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()
	select {
	case err := <-served:
		log.Fatal(err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		log.Print(err)
	}
	if err := api.StopJobs(shutdown); err != nil {
		log.Print(err)
	}
}
