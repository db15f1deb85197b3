package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/vips"
	"github.com/upscalekit/upscale/upscaletest"
)

func TestUserTableIsAKeyStore(t *testing.T) {
	upscaletest.TestKeyStore(t, func(t *testing.T) upscale.KeyAdmin { return newUserTable() })
	upscaletest.TestKeyLister(t, func(t *testing.T) upscale.KeyLister { return newUserTable() })
}

func TestMountedInTheApp(t *testing.T) {
	const key = "upk_live_ada_0123456789abcdef"
	a := &app{users: newUserTable(), secret: []byte("test secret")}
	users := a.users
	users.add(user{ID: "u1", Name: "Ada"}, "ada's password", key)
	ledger := upscale.NewMemoryLedger(upscale.LedgerOptions{})
	ledger.PutAccount(context.Background(), upscale.Account{ID: "u1", Plan: upscale.Plan{Name: "free", MonthlyImages: 10, MaxFileBytes: 1 << 20}})

	var router http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { router.ServeHTTP(w, r) }))
	defer srv.Close()
	api, results, dash, err := a.newUpscale(ledger, vips.New(vips.Options{}), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	// The example's handler refuses loopback sources, as it should; this
	// test's origin is on loopback, so it uses a lenient twin.
	lenient, err := upscale.New(upscale.Config{Keys: users, Ledger: ledger, Upscaler: vips.New(vips.Options{}), Blobs: results, Fetch: upscale.FetchPolicy{AllowPrivateNetworks: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := lenient.StartJobs(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer lenient.StopJobs(context.Background())
	router = a.routes(lenient, results, dash)
	butterfly, _ := os.ReadFile("../../testdata/sr/Set5/butterfly.png")
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(butterfly) }))
	defer origin.Close()

	post := func(key, imageURL string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/upscale", strings.NewReader(fmt.Sprintf(`{"imageUrl": %q}`, imageURL)))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	t.Run("OK", func(t *testing.T) {
		resp := post(key, origin.URL+"/b.png")
		defer resp.Body.Close()
		var got upscale.Response
		json.NewDecoder(resp.Body).Decode(&got)
		if resp.StatusCode != 200 || resp.Header.Get("X-Request-ID") == "" || !strings.HasPrefix(got.URL, srv.URL+"/results/") {
			t.Fatalf("status %d, X-Request-ID %q, url %q: want 200 through the app's middleware with a /results/ link", resp.StatusCode, resp.Header.Get("X-Request-ID"), got.URL)
		}
		if width := upscaletest.ResultPNG(t, got.URL).Bounds().Dx(); width != 512 {
			t.Errorf("the result is %d wide, want 512", width)
		}
	})

	t.Run("Job", func(t *testing.T) {
		call := func(method, path, body string) (*http.Response, upscale.Job) {
			t.Helper()
			req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Prefer", "respond-async")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var job upscale.Job
			json.NewDecoder(resp.Body).Decode(&job)
			return resp, job
		}
		resp, job := call(http.MethodPost, "/api/v1/upscale", fmt.Sprintf(`{"imageUrl": %q}`, origin.URL+"/b.png"))
		location := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusAccepted || location != "/api/v1/upscale/jobs/"+job.ID {
			t.Fatalf("submission: %d at %q; want 202 and the job's Location", resp.StatusCode, location)
		}
		for deadline := time.Now().Add(30 * time.Second); !job.Status.Done() && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if resp, job = call(http.MethodGet, location, ""); resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s through the app's router: %d", location, resp.StatusCode)
			}
		}
		if job.Status != upscale.JobSucceeded || job.Result == nil || job.Engine == "" {
			t.Errorf("the job: %+v; want it succeeded, with its result and engine", job)
		}
	})

	t.Run("SourcePolicyOfTheRealHandler", func(t *testing.T) {
		router = a.routes(api, results, dash)
		defer func() { router = a.routes(lenient, results, dash) }()
		resp := post(key, origin.URL+"/b.png")
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("loopback source through the example's handler: %d, want 400", resp.StatusCode)
		}
	})

	t.Run("DashboardBehindTheAppsSignIn", func(t *testing.T) {
		jar, _ := cookiejar.New(nil)
		browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		get := func(path string) (*http.Response, string) {
			t.Helper()
			resp, err := browser.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return resp, string(body)
		}
		post := func(path string, form url.Values) *http.Response {
			t.Helper()
			req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Sec-Fetch-Site", "same-origin")
			resp, err := browser.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp
		}
		if resp, _ := get("/account/"); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
			t.Fatalf("the dashboard signed out: %d %q; want 303 to the app's sign-in", resp.StatusCode, resp.Header.Get("Location"))
		}
		if resp := post("/login", url.Values{"user": {"u1"}, "password": {"wrong"}}); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a wrong password: %d", resp.StatusCode)
		}
		if resp := post("/login", url.Values{"user": {"u1"}, "password": {"ada's password"}}); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign in: %d", resp.StatusCode)
		}
		if resp, page := get("/account/"); resp.StatusCode != http.StatusOK || !strings.Contains(page, "<strong>u1</strong>") || !strings.Contains(page, "of 10") {
			t.Fatalf("the overview: %d\n%s", resp.StatusCode, page)
		}
		// A key made in the dashboard is a row of the app's key table.
		resp := post("/account/keys", url.Values{"name": {"from the account page"}})
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("make a key: %d", resp.StatusCode)
		}
		if keys, _ := users.ListKeys(context.Background(), "u1"); len(keys) != 2 || keys[0].Name != "from the account page" {
			t.Errorf("the user's keys: %+v; want the new one first", keys)
		}
	})

	t.Run("SuspendedUser", func(t *testing.T) {
		users.suspend("u1")
		resp := post(key, origin.URL+"/b.png")
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("suspended user: %d, want 401", resp.StatusCode)
		}
	})

	t.Run("AppRoutesStillWork", func(t *testing.T) {
		resp, err := http.Get(srv.URL + "/users/u1")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var u map[string]any
		json.NewDecoder(resp.Body).Decode(&u)
		if resp.StatusCode != 200 || u["name"] != "Ada" {
			t.Errorf("GET /users/u1: %d %v", resp.StatusCode, u)
		}
	})
}
