package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/upscalekit/upscale"
)

// The admin operations below are what a host's billing code calls. Each
// change to a balance is journalled with the requestID given (an invoice or
// payment id, say), so it can be traced to its cause.

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// PutPlan creates a plan or replaces its terms; accounts on it see the new
// terms at once.
func (s *Store) PutPlan(ctx context.Context, p upscale.Plan) error {
	return putPlan(ctx, s.db, p)
}

// execer is a database or a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// putPlan is PutPlan, in db.
func putPlan(ctx context.Context, db execer, p upscale.Plan) error {
	if p.Name == "" || p.MonthlyImages < 0 || p.MaxFileBytes < 0 {
		return fmt.Errorf("sqlstore: plan %q: a name is required and amounts cannot be negative", p.Name)
	}
	_, err := db.ExecContext(ctx, `
		INSERT INTO plans (name, paid, unlimited, monthly_images, max_file_bytes) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (name) DO UPDATE SET paid = excluded.paid, unlimited = excluded.unlimited,
			monthly_images = excluded.monthly_images, max_file_bytes = excluded.max_file_bytes`,
		p.Name, boolInt(p.Paid), boolInt(p.Unlimited), p.MonthlyImages, p.MaxFileBytes)
	return err
}

// CreateAccount creates a on its plan (which PutPlan must have made) with its
// starting balances, journalled as grants. It reports false and changes
// nothing when the account already exists, so seeding can be repeated.
func (s *Store) CreateAccount(ctx context.Context, a upscale.Account) (created bool, err error) {
	if a.ID == "" || a.Credits < 0 || a.ShareBonus < 0 {
		return false, fmt.Errorf("sqlstore: account %q: an id is required and balances cannot be negative", a.ID)
	}
	now := s.opts.Now()
	err = s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO accounts (id, plan, credits, share_bonus) VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING`,
			a.ID, a.Plan.Name, a.Credits, a.ShareBonus)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		created = true
		return journalGrants(ctx, tx, a.ID, a.Credits, a.ShareBonus, "grant", "create-account", now)
	})
	return created, err
}

func journalGrants(ctx context.Context, tx *sql.Tx, accountID string, credits, shareBonus int64, reason, requestID string, now time.Time) error {
	for pool, delta := range map[upscale.Pool]int64{upscale.PoolCredit: credits, upscale.PoolShareBonus: shareBonus} {
		if delta == 0 {
			continue
		}
		if err := journal(ctx, tx, accountID, pool, delta, reason, requestID, upscale.Month(now), now); err != nil {
			return err
		}
	}
	return nil
}

// PutAccount creates an account or replaces its plan and balances, saving
// the plan too; the free images already used this month stay used. The
// differences are journalled as "set". It is what upscaletest's harness
// calls; billing code would rather use the grant operations.
func (s *Store) PutAccount(ctx context.Context, a upscale.Account) error {
	if err := s.PutPlan(ctx, a.Plan); err != nil {
		return err
	}
	if created, err := s.CreateAccount(ctx, a); err != nil || created {
		return err
	}
	now := s.opts.Now()
	return s.tx(ctx, func(tx *sql.Tx) error {
		var credits, shareBonus int64
		if err := tx.QueryRowContext(ctx, `SELECT credits, share_bonus FROM accounts WHERE id = $1`, a.ID).Scan(&credits, &shareBonus); err != nil {
			return noRows(err, "account", a.ID)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE accounts SET plan = $2, credits = $3, share_bonus = $4 WHERE id = $1`, a.ID, a.Plan.Name, a.Credits, a.ShareBonus); err != nil {
			return err
		}
		return journalGrants(ctx, tx, a.ID, a.Credits-credits, a.ShareBonus-shareBonus, "set", "put-account", now)
	})
}

// SetPlan moves an account to the plan named planName. It returns an error
// wrapping ErrNotFound when the account or the plan does not exist.
func (s *Store) SetPlan(ctx context.Context, accountID, planName string) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		var name string
		if err := tx.QueryRowContext(ctx, `SELECT name FROM plans WHERE name = $1`, planName).Scan(&name); err != nil {
			return noRows(err, "plan", planName)
		}
		res, err := tx.ExecContext(ctx, `UPDATE accounts SET plan = $2 WHERE id = $1`, accountID, planName)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return notFound("account", accountID)
		}
		return nil
	})
}

// GrantCredits adds n credits (n < 0 takes them away, never below zero) to
// an account, journalled under requestID. It returns an error wrapping
// ErrNotFound for an unknown account. Each call grants again, whatever its
// requestID: it is the operator's hand, and a payment's notification,
// which may come twice, goes through Grant, which grants once per ID.
func (s *Store) GrantCredits(ctx context.Context, accountID string, n int64, requestID string) error {
	return s.grant(ctx, accountID, upscale.PoolCredit, "credits", n, requestID)
}

// GrantShareBonus adds n share-bonus images to an account, as GrantCredits
// does credits.
func (s *Store) GrantShareBonus(ctx context.Context, accountID string, n int64, requestID string) error {
	return s.grant(ctx, accountID, upscale.PoolShareBonus, "share_bonus", n, requestID)
}

func (s *Store) grant(ctx context.Context, accountID string, pool upscale.Pool, column string, n int64, requestID string) error {
	now := s.opts.Now()
	return s.tx(ctx, func(tx *sql.Tx) error {
		// column is one of two constants above, never input.
		res, err := tx.ExecContext(ctx, `UPDATE accounts SET `+column+` = `+column+` + $2 WHERE id = $1 AND `+column+` + $2 >= 0`, accountID, n)
		if err != nil {
			return err
		}
		if rows, err := res.RowsAffected(); err != nil || rows == 0 {
			var exists string
			if err := tx.QueryRowContext(ctx, `SELECT id FROM accounts WHERE id = $1`, accountID).Scan(&exists); err != nil {
				return noRows(err, "account", accountID)
			}
			return fmt.Errorf("sqlstore: account %q: taking %d %s would leave a negative balance", accountID, -n, column)
		}
		return journal(ctx, tx, accountID, pool, n, "grant", requestID, upscale.Month(now), now)
	})
}

// Usage is what an account spent in one calendar month, by pool: committed
// requests only.
type Usage struct {
	Month  string
	ByPool map[upscale.Pool]int64
}

// Usage returns what accountID spent in month ("2006-01", UTC).
func (s *Store) Usage(ctx context.Context, accountID, month string) (Usage, error) {
	u := Usage{Month: month, ByPool: map[upscale.Pool]int64{}}
	rows, err := s.db.QueryContext(ctx, `SELECT pool, count(*) FROM journal WHERE account_id = $1 AND month = $2 AND reason = 'commit' GROUP BY pool`, accountID, month)
	if err != nil {
		return u, err
	}
	defer rows.Close()
	for rows.Next() {
		var pool string
		var n int64
		if err := rows.Scan(&pool, &n); err != nil {
			return u, err
		}
		u.ByPool[upscale.Pool(pool)] = n
	}
	return u, rows.Err()
}

// Entry is one row of the journal.
type Entry struct {
	Pool upscale.Pool
	// Delta is the change to the pool's balance: -1 for a reservation, +1
	// for its release or expiry, 0 for its commit, n for a grant.
	Delta     int64
	Reason    string
	RequestID string
	// Month is the free pool's month the row counts against.
	Month string
	Time  time.Time
}

// Journal returns accountID's journal, oldest first.
func (s *Store) Journal(ctx context.Context, accountID string) ([]Entry, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT pool, delta, reason, request_id, month, created_at FROM journal WHERE account_id = $1 ORDER BY created_at, id`, accountID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		var e Entry
		var pool string
		var at int64
		if err := rows.Scan(&pool, &e.Delta, &e.Reason, &e.RequestID, &e.Month, &at); err != nil {
			return nil, err
		}
		e.Pool, e.Time = upscale.Pool(pool), time.Unix(0, at).UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}
