package sqlstore_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"image/png"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/sqlstore"
	"github.com/upscalekit/upscale/upscaletest"
)

const replicaKey = "upk_test_replicas_0123456789"

// seed makes account "acme" on FreePlan with the given balances and a key.
func seed(t *testing.T, s *sqlstore.Store, credits, shareBonus int64) {
	t.Helper()
	ctx := context.Background()
	if err := s.PutPlan(ctx, upscaletest.FreePlan); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateAccount(ctx, upscale.Account{ID: "acme", Plan: upscaletest.FreePlan, Credits: credits, ShareBonus: shareBonus}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddKey(ctx, replicaKey, "acme"); err != nil {
		t.Fatal(err)
	}
}

// checkJournal asserts that every pool's balance equals what the journal
// says: grants and the month's deltas add up to what is left.
func checkJournal(t *testing.T, s *sqlstore.Store, now time.Time) {
	t.Helper()
	ctx := context.Background()
	b, err := s.Balance(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := s.Journal(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	sum := map[upscale.Pool]int64{}
	for _, e := range entries {
		if e.Pool != upscale.PoolFree || e.Month == upscale.Month(now) {
			sum[e.Pool] += e.Delta
		}
	}
	if got, want := b.Free, b.Plan.MonthlyImages+sum[upscale.PoolFree]; got != want {
		t.Errorf("free pool %d, journal says %d", got, want)
	}
	if b.ShareBonus != sum[upscale.PoolShareBonus] || b.Credits != sum[upscale.PoolCredit] {
		t.Errorf("share bonus %d and credits %d, journal says %d and %d", b.ShareBonus, b.Credits, sum[upscale.PoolShareBonus], sum[upscale.PoolCredit])
	}
}

// newOrigin serves an 8×8 PNG at every path.
func newOrigin(t *testing.T) *httptest.Server {
	var img bytes.Buffer
	png.Encode(&img, upscaletest.TestImage(8, 8))
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(img.Bytes()) }))
	t.Cleanup(origin.Close)
	return origin
}

// newReplicas returns two handlers, each with its own Store on dsn (so its
// own connection pool, as two processes would have) for keys, quotas and
// Idempotency-Keys, after seeding account "acme" with credits and
// shareBonus. Their queues have room for every request: the tests hold
// the stores to their counts, not admission.
func newReplicas(t *testing.T, dsn string, credits, shareBonus int64) []*upscale.Handler {
	t.Helper()
	var replicas []*upscale.Handler
	for i := range 2 {
		s := open(t, dsn, upscale.LedgerOptions{})
		if i == 0 {
			seed(t, s, credits, shareBonus)
		}
		blobs, err := upscale.NewMemoryBlobStore(upscale.MemoryBlobStoreOptions{BaseURL: "http://replica.test/outputs"})
		upscaletest.Opened(t, blobs, err)
		h, err := upscale.New(upscale.Config{Keys: s, Ledger: s, Idempotency: s, Upscaler: upscaletest.PixelUpscaler{}, Blobs: blobs,
			Fetch: upscale.FetchPolicy{AllowPrivateNetworks: true}, Capacity: upscale.Capacity{QueueLength: 200}, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, h)
	}
	return replicas
}

// TestTwoReplicas: two handlers, each with its own Store (so its own
// connection pool, as two processes would have) on one database, get 200
// concurrent requests for an account with 5 units. Exactly 5 succeed, and
// the journal accounts for every unit.
func TestTwoReplicas(t *testing.T) {
	origin := newOrigin(t)
	for name, newDB := range engines {
		t.Run(name, func(t *testing.T) {
			dsn := newDB(t)
			replicas := newReplicas(t, dsn, 1, 1) // 3 free + 1 share bonus + 1 credit = 5 units
			statuses := map[int]int{}
			var mu sync.Mutex
			var wg sync.WaitGroup
			for i := range 200 {
				wg.Go(func() {
					r := httptest.NewRequest(http.MethodPost, "/api/v1/upscale", strings.NewReader(fmt.Sprintf(`{"imageUrl": %q}`, origin.URL+"/a.png")))
					r.Header.Set("Authorization", "Bearer "+replicaKey)
					w := httptest.NewRecorder()
					replicas[i%2].ServeHTTP(w, r)
					mu.Lock()
					statuses[w.Code]++
					mu.Unlock()
				})
			}
			wg.Wait()
			if statuses[http.StatusOK] != 5 || statuses[http.StatusTooManyRequests] != 195 {
				t.Fatalf("statuses %v, want 5×200 and 195×429", statuses)
			}
			s := open(t, dsn, upscale.LedgerOptions{})
			if b, _ := s.Balance(context.Background(), "acme"); b.Free != 0 || b.ShareBonus != 0 || b.Credits != 0 {
				t.Errorf("balance %+v after spending everything", b)
			}
			checkJournal(t, s, time.Now())
		})
	}
}

// TestKilledReplicaLosesNoUnit: a process that reserved a unit is killed
// with SIGKILL before it commits or releases it; once the reservation TTL
// has passed, the unit is back, and the journal says it expired.
func TestKilledReplicaLosesNoUnit(t *testing.T) {
	if dsn := os.Getenv("UPSCALE_RESERVE_AND_HANG"); dsn != "" {
		reserveAndHang(dsn)
		return
	}
	for name, newDB := range engines {
		t.Run(name, func(t *testing.T) {
			dsn := newDB(t)
			seed(t, open(t, dsn, upscale.LedgerOptions{}), 0, 0)

			child := exec.Command(os.Args[0], "-test.run=^TestKilledReplicaLosesNoUnit$")
			child.Env = append(os.Environ(), "UPSCALE_RESERVE_AND_HANG="+dsn)
			out, _ := child.StdoutPipe()
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			if !strings.HasPrefix(line, "reserved ") {
				child.Process.Kill()
				t.Fatalf("child said %q (%v)", line, err)
			}
			child.Process.Kill() // SIGKILL: no deferred release can run
			child.Wait()

			ctx := context.Background()
			now := open(t, dsn, upscale.LedgerOptions{})
			if b, _ := now.Balance(ctx, "acme"); b.Free != upscaletest.FreePlan.MonthlyImages-1 {
				t.Fatalf("free pool %d right after the kill, want the unit still held", b.Free)
			}
			later := time.Now().Add(upscale.DefaultReservationTTL + time.Minute)
			s := open(t, dsn, upscale.LedgerOptions{Now: func() time.Time { return later }})
			if b, _ := s.Balance(ctx, "acme"); b.Free != upscaletest.FreePlan.MonthlyImages {
				t.Errorf("free pool %d after the reservation TTL, want %d", b.Free, upscaletest.FreePlan.MonthlyImages)
			}
			entries, _ := s.Journal(ctx, "acme")
			if last := entries[len(entries)-1]; last.Reason != "expire" || last.Delta != 1 {
				t.Errorf("last journal entry %+v, want the expiry giving the unit back", last)
			}
			checkJournal(t, s, later)
		})
	}
}

// reserveAndHang is the child of TestKilledReplicaLosesNoUnit: it reserves
// a unit, says so, and waits to be killed.
func reserveAndHang(dsn string) {
	s, err := sqlstore.Open(context.Background(), dsn, sqlstore.Options{})
	if err != nil {
		fmt.Println("open:", err)
		return
	}
	r, err := s.Reserve(context.Background(), "acme", false)
	if err != nil {
		fmt.Println("reserve:", err)
		return
	}
	fmt.Println("reserved", r.ID)
	time.Sleep(time.Minute)
}

// TestJournal: grants, sets, commits, releases and expiries all leave
// journal rows that add up to the balances, and Usage counts commits.
func TestJournal(t *testing.T) {
	for name, newDB := range engines {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clock := upscaletest.NewClock(time.Date(2026, 5, 20, 12, 0, 0, 0, time.UTC))
			s := open(t, newDB(t), upscale.LedgerOptions{Now: clock.Now})
			seed(t, s, 2, 1)
			if err := s.GrantCredits(ctx, "acme", 3, "invoice-17"); err != nil {
				t.Fatal(err)
			}
			if err := s.GrantCredits(ctx, "acme", -100, "refund-1"); err == nil {
				t.Error("taking 100 credits from 5 succeeded")
			}
			if err := s.GrantShareBonus(ctx, "acme", 2, "shared-on-x"); err != nil {
				t.Fatal(err)
			}
			var held []upscale.Reservation
			for range 9 { // 3 free + 3 share bonus + 3 of the 5 credits
				r, err := s.Reserve(ctx, "acme", false)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, r)
			}
			for i, r := range held {
				switch i % 3 {
				case 0:
					if err := s.Commit(ctx, r.ID); err != nil {
						t.Fatal(err)
					}
				case 1:
					if err := s.Release(ctx, r.ID); err != nil {
						t.Fatal(err)
					}
				}
			}
			clock.Advance(upscale.DefaultReservationTTL + time.Second) // the rest expire
			checkJournal(t, s, clock.Now())
			u, err := s.Usage(ctx, "acme", "2026-05")
			if err != nil {
				t.Fatal(err)
			}
			if u.ByPool[upscale.PoolFree] != 1 || u.ByPool[upscale.PoolShareBonus] != 1 || u.ByPool[upscale.PoolCredit] != 1 {
				t.Errorf("usage %v, want one commit from each pool", u.ByPool)
			}
			if err := s.SetPlan(ctx, "acme", "no-such-plan"); err == nil {
				t.Error("SetPlan to an unknown plan succeeded")
			}
		})
	}
}

// TestReopenKeepsEverything: a Store opened again on the same database
// finds keys, balances and reservations as they were, and migrating twice
// changes nothing.
func TestReopenKeepsEverything(t *testing.T) {
	for name, newDB := range engines {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			dsn := newDB(t)
			first := open(t, dsn, upscale.LedgerOptions{})
			seed(t, first, 4, 0)
			key, err := first.CreateKey(ctx, "acme", "")
			if err != nil {
				t.Fatal(err)
			}
			r, err := first.Reserve(ctx, "acme", false)
			if err != nil {
				t.Fatal(err)
			}
			first.Close()

			again := open(t, dsn, upscale.LedgerOptions{})
			if acct, err := again.Authenticate(ctx, key); err != nil || acct != "acme" {
				t.Errorf("Authenticate after reopening: %q, %v", acct, err)
			}
			if err := again.Commit(ctx, r.ID); err != nil {
				t.Errorf("Commit after reopening: %v", err)
			}
			if b, _ := again.Balance(ctx, "acme"); b.Free != upscaletest.FreePlan.MonthlyImages-1 || b.Credits != 4 {
				t.Errorf("balance after reopening %+v", b)
			}
			if created, err := again.CreateAccount(ctx, upscale.Account{ID: "acme", Plan: upscaletest.FreePlan, Credits: 99}); created || err != nil {
				t.Errorf("CreateAccount on an existing account: created %v, %v", created, err)
			}
		})
	}
}

// TestIdempotencyAcrossReplicas: two handlers, each with its own Store on
// one database, get 20 identical requests with one Idempotency-Key at
// once, alternating. One runs and is charged; the others get 409 while it
// runs or its replay after; a later request on either replica is the
// replay, byte for byte.
func TestIdempotencyAcrossReplicas(t *testing.T) {
	origin := newOrigin(t)
	for name, newDB := range engines {
		t.Run(name, func(t *testing.T) {
			dsn := newDB(t)
			replicas := newReplicas(t, dsn, 0, 0)
			post := func(replica int) *httptest.ResponseRecorder {
				r := httptest.NewRequest(http.MethodPost, "/api/v1/upscale", strings.NewReader(fmt.Sprintf(`{"imageUrl": %q}`, origin.URL+"/a.png")))
				r.Header.Set("Authorization", "Bearer "+replicaKey)
				r.Header.Set("Idempotency-Key", `"one-order"`)
				w := httptest.NewRecorder()
				replicas[replica].ServeHTTP(w, r)
				return w
			}
			var mu sync.Mutex
			outcomes := map[string]int{}
			var answer []byte
			var wg sync.WaitGroup
			for i := range 20 {
				wg.Go(func() {
					w := post(i % 2)
					outcome := fmt.Sprint(w.Code)
					if w.Header().Get("Idempotent-Replayed") == "true" {
						outcome += " replayed"
					}
					mu.Lock()
					defer mu.Unlock()
					outcomes[outcome]++
					if w.Code == http.StatusOK && answer == nil {
						answer = w.Body.Bytes()
					}
				})
			}
			wg.Wait()
			if outcomes["200"] != 1 || outcomes["200"]+outcomes["200 replayed"]+outcomes["409"] != 20 {
				t.Fatalf("outcomes %v, want one 200 that ran, the rest 409 or replayed", outcomes)
			}
			for replica := range 2 {
				if w := post(replica); !bytes.Equal(w.Body.Bytes(), answer) || w.Header().Get("Idempotent-Replayed") != "true" {
					t.Errorf("replica %d afterwards: %d %s, want the replay of %s", replica, w.Code, w.Body, answer)
				}
			}
			s := open(t, dsn, upscale.LedgerOptions{})
			if b, _ := s.Balance(context.Background(), "acme"); b.Free != upscaletest.FreePlan.MonthlyImages-1 {
				t.Errorf("free pool %d after 22 requests with one key, want %d: charged once", b.Free, upscaletest.FreePlan.MonthlyImages-1)
			}
		})
	}
}
