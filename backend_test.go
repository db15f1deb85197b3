package upscale_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// errDown is what a store wraps when its server cannot be reached.
var errDown = fmt.Errorf("dial tcp 10.0.0.5:5432: connection refused: %w", upscale.ErrUnavailable)

// flakyLedger is a MemoryLedger whose Reserve, Commit and Release can be
// made to fail the way a ledger whose database is down fails. A failing
// Commit may have committed all the same (the answer lost on the way back).
type flakyLedger struct {
	*upscale.MemoryLedger
	reserveDown      atomic.Bool
	commitFailures   atomic.Int64  // Commit fails this many more times; -1 always
	commitLostAnswer bool          // a failing Commit commits before failing
	releaseFailures  atomic.Int64  // Release fails this many more times
	reserves         atomic.Int64  // calls of Reserve
	balances         atomic.Int64  // calls of Balance
	onCommitFailure  func()        // runs as a Commit fails, if set
	commitsHanging   atomic.Int64  // this many more Commits apply, then hang until their context ends
	balanceGate      chan struct{} // if set, Balance waits for it
}

func (l *flakyLedger) Reserve(ctx context.Context, accountID string, needsPaid bool) (upscale.Reservation, error) {
	l.reserves.Add(1)
	if l.reserveDown.Load() {
		return upscale.Reservation{}, errDown
	}
	return l.MemoryLedger.Reserve(ctx, accountID, needsPaid)
}

func (l *flakyLedger) Commit(ctx context.Context, id string) error {
	if l.commitsHanging.Add(-1) >= 0 {
		l.MemoryLedger.Commit(ctx, id)
		<-ctx.Done() // the answer never comes: a black-holed connection
		return ctx.Err()
	}
	if n := l.commitFailures.Load(); n != 0 {
		if n > 0 {
			l.commitFailures.Add(-1)
		}
		if l.commitLostAnswer {
			l.MemoryLedger.Commit(ctx, id)
		}
		if l.onCommitFailure != nil {
			l.onCommitFailure()
		}
		return errDown
	}
	return l.MemoryLedger.Commit(ctx, id)
}

func (l *flakyLedger) Balance(ctx context.Context, accountID string) (upscale.Balance, error) {
	l.balances.Add(1)
	if l.balanceGate != nil {
		<-l.balanceGate
	}
	if l.reserveDown.Load() {
		return upscale.Balance{}, errDown
	}
	return l.MemoryLedger.Balance(ctx, accountID)
}

func (l *flakyLedger) Release(ctx context.Context, id string) error {
	if l.releaseFailures.Load() > 0 {
		l.releaseFailures.Add(-1)
		return errDown
	}
	return l.MemoryLedger.Release(ctx, id)
}

// flakyBlobs is a MemoryBlobStore whose Put can fail as an unreachable
// object store does.
type flakyBlobs struct {
	*upscale.MemoryBlobStore
	down atomic.Bool
}

func (b *flakyBlobs) Put(ctx context.Context, key string, data []byte, contentType string, expires time.Time) (string, error) {
	if b.down.Load() {
		return "", errDown
	}
	return b.MemoryBlobStore.Put(ctx, key, data, contentType, expires)
}

// flakyKeys is a MemoryKeyStore that can fail as an unreachable database.
type flakyKeys struct {
	*upscale.MemoryKeyStore
	down  atomic.Bool
	calls atomic.Int64
}

func (k *flakyKeys) Authenticate(ctx context.Context, key string) (string, error) {
	k.calls.Add(1)
	if k.down.Load() {
		return "", errDown
	}
	return k.MemoryKeyStore.Authenticate(ctx, key)
}

func newFlakyEnv(t *testing.T, configure ...func(*upscale.Config)) (*env, *flakyKeys, *flakyLedger, *flakyBlobs) {
	var keys *flakyKeys
	var ledger *flakyLedger
	var blobs *flakyBlobs
	e := newEnv(t, append([]func(*upscale.Config){func(c *upscale.Config) {
		keys = &flakyKeys{MemoryKeyStore: c.Keys.(*upscale.MemoryKeyStore)}
		ledger = &flakyLedger{MemoryLedger: c.Ledger.(*upscale.MemoryLedger)}
		blobs = &flakyBlobs{MemoryBlobStore: c.Blobs.(*upscale.MemoryBlobStore)}
		c.Keys, c.Ledger, c.Blobs = keys, ledger, blobs
	}}, configure...)...)
	return e, keys, ledger, blobs
}

// checkUnavailable asserts 503 backend_unavailable with a Retry-After of at
// least a second.
func checkUnavailable(t *testing.T, w *httptest.ResponseRecorder) {
	t.Helper()
	checkProblem(t, w, http.StatusServiceUnavailable, "backend_unavailable")
	if ra, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After %q, want whole seconds, at least 1", w.Header().Get("Retry-After"))
	}
}

// TestLedgerUnavailable: a ledger that cannot be reached gives 503 with a
// Retry-After and no download; for the next second new requests are
// refused without calling it; then one request tries it and, the ledger
// being back, succeeds.
func TestLedgerUnavailable(t *testing.T) {
	e, _, ledger, _ := newFlakyEnv(t)
	ledger.reserveDown.Store(true)
	checkUnavailable(t, e.post(keyFree, body(e.url("/small.png"))))
	checkUnavailable(t, e.post(keyFree, body(e.url("/small.png"))))
	if got := ledger.reserves.Load(); got != 1 {
		t.Errorf("Reserve called %d times, want 1: the second request must be refused without calling the ledger", got)
	}
	if got := e.hits.Load(); got != 0 {
		t.Errorf("the origin was asked %d times, want 0", got)
	}

	ledger.reserveDown.Store(false)
	e.clock.Advance(time.Second)
	checkOK(t, e.post(keyFree, body(e.url("/small.png"))), upscale.PoolFree)
	if got := e.balance("free").Free; got != 2 {
		t.Errorf("free pool %d, want 2: one success charged", got)
	}
}

// TestKeyStoreUnavailable: an unreachable key store is an outage (503),
// not a bad key (401).
func TestKeyStoreUnavailable(t *testing.T) {
	e, keys, _, _ := newFlakyEnv(t)
	keys.down.Store(true)
	checkUnavailable(t, e.post(keyFree, body(e.url("/small.png"))))
	checkUnavailable(t, e.post(keyPro, body(e.url("/small.png"))))
	if got := keys.calls.Load(); got != 1 {
		t.Errorf("Authenticate called %d times, want 1", got)
	}
}

// TestBlobStoreUnavailable: a result that cannot be stored gives 503 and
// its unit back; until the store has had its second's rest, new requests
// are refused before they reserve or fetch.
func TestBlobStoreUnavailable(t *testing.T) {
	e, _, _, blobs := newFlakyEnv(t)
	blobs.down.Store(true)
	checkUnavailable(t, e.post(keyFree, body(e.url("/small.png"))))
	if got := e.balance("free").Free; got != 3 {
		t.Errorf("free pool %d, want 3: the unit goes back", got)
	}
	checkUnavailable(t, e.post(keyFree, body(e.url("/small.png"))))
	if got := e.hits.Load(); got != 1 {
		t.Errorf("the origin was asked %d times, want 1: the second request must not fetch", got)
	}
	blobs.down.Store(false)
	e.clock.Advance(time.Second)
	checkOK(t, e.post(keyFree, body(e.url("/small.png"))), upscale.PoolFree)
}

// TestCommitRetried: a commit that fails twice while the ledger is
// unreachable, then succeeds, gives 200 charged once.
func TestCommitRetried(t *testing.T) {
	e, _, ledger, blobs := newFlakyEnv(t)
	ledger.commitFailures.Store(2)
	checkOK(t, e.post(keyFree, body(e.url("/small.png"))), upscale.PoolFree)
	checkPaidOnce(t, e, blobs)
}

// checkPaidOnce asserts one unit of the free account charged and one
// result stored.
func checkPaidOnce(t *testing.T, e *env, blobs *flakyBlobs) {
	t.Helper()
	if got := e.balance("free").Free; got != 2 {
		t.Errorf("free pool %d, want 2: charged once", got)
	}
	if got := blobs.Len(); got != 1 {
		t.Errorf("%d stored results, want 1", got)
	}
}

// TestCommitAnswerLost: the first commit goes through but its answer is
// lost; the retry finds the reservation settled, and the caller gets the
// result it paid for, charged once.
func TestCommitAnswerLost(t *testing.T) {
	e, _, ledger, _ := newFlakyEnv(t)
	ledger.commitFailures.Store(1)
	ledger.commitLostAnswer = true
	checkOK(t, e.post(keyFree, body(e.url("/small.png"))), upscale.PoolFree)
	if got := e.balance("free").Free; got != 2 {
		t.Errorf("free pool %d, want 2: charged once", got)
	}
}

// TestCommitAfterExpiryIsNotPaid: a commit retried after its reservation
// expired (the unit went back) fails, and its result is deleted; before,
// a retry that found the reservation gone took it as paid, and delivered
// the result uncharged.
func TestCommitAfterExpiryIsNotPaid(t *testing.T) {
	e, _, ledger, blobs := newFlakyEnv(t)
	ledger.commitFailures.Store(1)
	ledger.onCommitFailure = func() { e.clock.Advance(time.Hour) }
	checkProblem(t, e.post(keyFree, body(e.url("/small.png"))), http.StatusInternalServerError, "internal_error")
	if got := blobs.Len(); got != 0 {
		t.Errorf("%d stored results, want 0: an uncharged result must not stay", got)
	}
	if got := e.balance("free").Free; got != 3 {
		t.Errorf("free pool %d, want 3: nothing charged", got)
	}
}

// TestCommitHangsAfterCharging: a commit that is applied but whose answer
// never comes (the ledger's connection black-holed) is not taken as
// uncharged: the handler finds out from the ledger and delivers the result
// it charged for. Before, it deleted the result and answered 504 "nothing
// was charged" to a charged caller.
func TestCommitHangsAfterCharging(t *testing.T) {
	e, _, ledger, blobs := newFlakyEnv(t, func(c *upscale.Config) { c.ChargeTimeout = 200 * time.Millisecond })
	ledger.commitsHanging.Store(1)
	checkOK(t, e.post(keyFree, body(e.url("/small.png"))), upscale.PoolFree)
	checkPaidOnce(t, e, blobs)
}

// TestIdempotentCommitHangsAfterCharging: the same hang under an
// Idempotency-Key leaves the prepared answer for the key: 503 with the
// lease as Retry-After, then the retry after the lease gets that answer,
// charged once. Before, the key was forgotten and the retry ran and was
// charged again.
func TestIdempotentCommitHangsAfterCharging(t *testing.T) {
	e, _, ledger, blobs := newFlakyEnv(t, func(c *upscale.Config) { c.ChargeTimeout = 200 * time.Millisecond })
	ledger.commitsHanging.Store(1)
	w := e.postOnce(keyFree, "hung", body(e.url("/small.png")))
	checkProblem(t, w, http.StatusServiceUnavailable, "backend_unavailable")
	if ra, _ := strconv.Atoi(w.Header().Get("Retry-After")); ra < 60 {
		t.Errorf("Retry-After %q, want the claim's lease: the charge is settled only once it ends", w.Header().Get("Retry-After"))
	}
	e.clock.Advance(10 * time.Minute) // past the lease, within the link's hour
	w = e.postOnce(keyFree, "hung", body(e.url("/small.png")))
	checkOK(t, w, upscale.PoolFree)
	if w.Header().Get("Idempotent-Replayed") != "true" {
		t.Error("the retry ran again instead of answering with the charged result")
	}
	checkPaidOnce(t, e, blobs)
}

// TestCommitKeepsFailing: a commit that fails for the whole ChargeTimeout
// gives 503; the stored result is deleted and the unit released.
func TestCommitKeepsFailing(t *testing.T) {
	e, _, ledger, blobs := newFlakyEnv(t, func(c *upscale.Config) { c.ChargeTimeout = 200 * time.Millisecond })
	ledger.commitFailures.Store(-1)
	checkUnavailable(t, e.post(keyFree, body(e.url("/small.png"))))
	if got := blobs.Len(); got != 0 {
		t.Errorf("%d stored results, want 0: an uncharged result must not stay", got)
	}
	if got := e.balance("free").Free; got != 3 {
		t.Errorf("free pool %d, want 3: nothing charged, nothing held", got)
	}
}

// TestReleaseRetried: a unit whose release fails while the ledger is
// unreachable is given back once the ledger answers again within
// ChargeTimeout.
func TestReleaseRetried(t *testing.T) {
	e, _, ledger, blobs := newFlakyEnv(t)
	ledger.releaseFailures.Store(2)
	blobs.down.Store(true)
	checkUnavailable(t, e.post(keyFree, body(e.url("/small.png"))))
	if got := e.balance("free").Free; got != 3 {
		t.Errorf("free pool %d, want 3: the unit is back", got)
	}
	if got := ledger.releaseFailures.Load(); got != 0 {
		t.Errorf("%d release failures left, want 0: the release must be retried", got)
	}
}
