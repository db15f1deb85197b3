package sqlstore_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
	"github.com/upscalekit/upscale/accounts/accountstest"
	"github.com/upscalekit/upscale/internal/testservers"
	"github.com/upscalekit/upscale/sqlstore"
	"github.com/upscalekit/upscale/upscaletest"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// engines are the two databases every test here runs on; each returns the
// DSN of a new, empty database.
var engines = map[string]func(t testing.TB) string{
	"SQLite":     func(t testing.TB) string { return filepath.Join(t.TempDir(), "upscale.db") },
	"PostgreSQL": func(t testing.TB) string { return testservers.PostgresDatabase(t) },
}

func open(t testing.TB, dsn string, opts upscale.LedgerOptions) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.Open(context.Background(), dsn, sqlstore.Options{Ledger: opts})
	upscaletest.Opened(t, s, err)
	return s
}

// withKeyAccounts opens a Store with the accounts upscaletest.TestKeyStore
// gives keys to.
func withKeyAccounts(t *testing.T, dsn string) *sqlstore.Store {
	t.Helper()
	s := open(t, dsn, upscale.LedgerOptions{})
	ctx := context.Background()
	if err := s.PutPlan(ctx, upscaletest.FreePlan); err != nil {
		t.Fatal(err)
	}
	for _, id := range upscaletest.KeyAccounts {
		if _, err := s.CreateAccount(ctx, upscale.Account{ID: id, Plan: upscaletest.FreePlan}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestConformance(t *testing.T) {
	for name, newDB := range engines {
		t.Run(name, func(t *testing.T) {
			t.Run("KeyStore", func(t *testing.T) {
				upscaletest.TestKeyStore(t, func(t *testing.T) upscale.KeyAdmin { return withKeyAccounts(t, newDB(t)) })
			})
			t.Run("KeyLister", func(t *testing.T) {
				upscaletest.TestKeyLister(t, func(t *testing.T) upscale.KeyLister { return withKeyAccounts(t, newDB(t)) })
			})
			t.Run("QuotaLedger", func(t *testing.T) {
				upscaletest.TestQuotaLedger(t, func(t *testing.T, opts upscale.LedgerOptions) upscaletest.LedgerHarness {
					return open(t, newDB(t), opts)
				})
			})
			t.Run("BillingLedger", func(t *testing.T) {
				upscaletest.TestBillingLedger(t, func(t *testing.T, opts upscale.LedgerOptions) upscaletest.BillingHarness {
					return open(t, newDB(t), opts)
				})
			})
			t.Run("CheckoutStore", func(t *testing.T) {
				upscaletest.TestCheckoutStore(t, func(t *testing.T) upscale.CheckoutStore {
					s := withKeyAccounts(t, newDB(t))
					for _, id := range []string{"a", "b"} {
						if _, err := s.CreateAccount(context.Background(), upscale.Account{ID: id, Plan: upscaletest.FreePlan}); err != nil {
							t.Fatal(err)
						}
					}
					return s
				})
			})
			t.Run("LinkStore", func(t *testing.T) {
				accountstest.TestLinkStore(t, func(t *testing.T, clock *upscaletest.Clock) accounts.LinkStore {
					return open(t, newDB(t), upscale.LedgerOptions{Now: clock.Now})
				})
			})
			t.Run("Directory", func(t *testing.T) {
				accountstest.TestDirectory(t, func(t *testing.T) (accounts.Directory, func(string) (upscale.Balance, error)) {
					s := open(t, newDB(t), upscale.LedgerOptions{})
					if err := s.PutPlan(context.Background(), upscale.Plan{Name: "free", MonthlyImages: 10, MaxFileBytes: 10 << 20}); err != nil {
						t.Fatal(err)
					}
					return s, func(id string) (upscale.Balance, error) { return s.Balance(context.Background(), id) }
				})
			})
			t.Run("SessionStore", func(t *testing.T) {
				accountstest.TestSessionStore(t, func(t *testing.T) accounts.SessionStore {
					return open(t, newDB(t), upscale.LedgerOptions{})
				})
			})
			t.Run("CallHistory", func(t *testing.T) {
				upscaletest.TestCallHistory(t, func(t *testing.T, clock *upscaletest.Clock, retention time.Duration) upscale.CallHistory {
					s, err := sqlstore.Open(context.Background(), newDB(t), sqlstore.Options{Ledger: upscale.LedgerOptions{Now: clock.Now}, CallRetention: retention})
					upscaletest.Opened(t, s, err)
					return s
				})
			})
			t.Run("WebhookLog", func(t *testing.T) {
				upscaletest.TestWebhookLog(t, func(t *testing.T, clock *upscaletest.Clock, retention time.Duration) upscale.WebhookLog {
					s, err := sqlstore.Open(context.Background(), newDB(t), sqlstore.Options{Ledger: upscale.LedgerOptions{Now: clock.Now}, CallRetention: retention})
					upscaletest.Opened(t, s, err)
					return s
				})
			})
			t.Run("UsageReporter", func(t *testing.T) {
				upscaletest.TestUsageReporter(t, func(t *testing.T, opts upscale.LedgerOptions) upscaletest.UsageHarness {
					return open(t, newDB(t), opts)
				})
			})
			t.Run("FirstCharger", func(t *testing.T) {
				upscaletest.TestFirstCharger(t, func(t *testing.T, opts upscale.LedgerOptions) upscaletest.FirstChargeHarness {
					return open(t, newDB(t), opts)
				})
			})
			t.Run("ChargedOnceAcrossCrash", func(t *testing.T) {
				upscaletest.TestChargedOnceAcrossCrash(t, func(t *testing.T, clock *upscaletest.Clock) upscaletest.ChargeStores {
					s := open(t, newDB(t), upscale.LedgerOptions{Now: clock.Now})
					if err := s.PutPlan(context.Background(), upscaletest.FreePlan); err != nil {
						t.Fatal(err)
					}
					return upscaletest.ChargeStores{Ledger: s, Idempotency: s}
				})
			})
			t.Run("WebhookSecrets", func(t *testing.T) {
				upscaletest.TestWebhookSecrets(t, func(t *testing.T, clock *upscaletest.Clock) upscale.WebhookSecrets {
					s := open(t, newDB(t), upscale.LedgerOptions{Now: clock.Now})
					ctx := context.Background()
					if err := s.PutPlan(ctx, upscaletest.FreePlan); err != nil {
						t.Fatal(err)
					}
					for _, id := range []string{"acme", "globex"} {
						if _, err := s.CreateAccount(ctx, upscale.Account{ID: id, Plan: upscaletest.FreePlan}); err != nil {
							t.Fatal(err)
						}
					}
					return s
				})
			})
			t.Run("IdempotencyStore", func(t *testing.T) {
				upscaletest.TestIdempotencyStore(t, func(t *testing.T, clock *upscaletest.Clock) upscale.IdempotencyStore {
					return open(t, newDB(t), upscale.LedgerOptions{Now: clock.Now})
				})
			})
		})
	}
}

// TestSecret: one secret per name, made once, the same from every
// connection.
func TestSecret(t *testing.T) {
	for name, newDB := range engines {
		t.Run(name, func(t *testing.T) {
			dsn := newDB(t)
			ctx := context.Background()
			first, second := open(t, dsn, upscale.LedgerOptions{}), open(t, dsn, upscale.LedgerOptions{})
			a, err := first.Secret(ctx, "dashboard")
			if err != nil || len(a) < 32 {
				t.Fatalf("Secret = %q, %v; want 32 bytes or more", a, err)
			}
			if b, err := second.Secret(ctx, "dashboard"); err != nil || string(b) != string(a) {
				t.Errorf("the same secret from another store: %q, %v; want %q", b, err, a)
			}
			if c, err := first.Secret(ctx, "other"); err != nil || string(c) == string(a) {
				t.Errorf("another name's secret: %q, %v; want another one", c, err)
			}
		})
	}
}
