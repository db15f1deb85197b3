package sqlstore_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/testservers"
	"github.com/upscalekit/upscale/sqlstore"
	"github.com/upscalekit/upscale/upscaletest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testservers.Stop()
	os.Exit(code)
}

// engines are the two databases every test here runs on; each returns the
// DSN of a new, empty database.
var engines = map[string]func(t testing.TB) string{
	"SQLite":     func(t testing.TB) string { return filepath.Join(t.TempDir(), "upscale.db") },
	"PostgreSQL": func(t testing.TB) string { return testservers.PostgresDatabase(t) },
}

func open(t testing.TB, dsn string, opts upscale.LedgerOptions) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.Open(context.Background(), dsn, sqlstore.Options{Ledger: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// keyHarness adapts a Store to upscaletest's KeyStoreHarness: accounts the
// suite names are created on first use.
type keyHarness struct{ *sqlstore.Store }

func (h keyHarness) Add(ctx context.Context, key, accountID string) error {
	if err := h.PutPlan(ctx, upscaletest.FreePlan); err != nil {
		return err
	}
	if _, err := h.CreateAccount(ctx, upscale.Account{ID: accountID, Plan: upscaletest.FreePlan}); err != nil {
		return err
	}
	return h.AddKey(ctx, key, accountID)
}

func (h keyHarness) Revoke(ctx context.Context, key string) error { return h.RevokeKey(ctx, key) }

func TestConformance(t *testing.T) {
	for name, newDB := range engines {
		t.Run(name, func(t *testing.T) {
			t.Run("KeyStore", func(t *testing.T) {
				upscaletest.TestKeyStore(t, func(t *testing.T) upscaletest.KeyStoreHarness {
					return keyHarness{open(t, newDB(t), upscale.LedgerOptions{})}
				})
			})
			t.Run("QuotaLedger", func(t *testing.T) {
				upscaletest.TestQuotaLedger(t, func(t *testing.T, opts upscale.LedgerOptions) upscaletest.LedgerHarness {
					return open(t, newDB(t), opts)
				})
			})
		})
	}
}
