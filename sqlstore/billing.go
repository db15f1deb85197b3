package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/upscalekit/upscale"
)

// Grant implements upscale.BillingLedger: the grant's row, keyed by its
// ID, the balance and the journal change in one transaction, so a repeat
// inserts nothing and changes nothing.
func (s *Store) Grant(ctx context.Context, g upscale.Grant) (granted bool, err error) {
	column, err := poolColumn(g.Pool)
	if err != nil || g.ID == "" || g.Units <= 0 {
		return false, fmt.Errorf("sqlstore: grant %q of %d %s: a grant needs an ID and a positive number of credits or share bonus", g.ID, g.Units, g.Pool)
	}
	now := s.opts.Now()
	err = s.tx(ctx, func(tx *sql.Tx) error {
		if err := accountExists(ctx, tx, g.AccountID); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO billing_grants (id, account_id, pool, units, label, event, granted_at) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING`,
			g.ID, g.AccountID, string(g.Pool), g.Units, g.Label, g.Event, g.At.UnixNano())
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err // granted already
		}
		// column is one of poolColumn's constants, never input.
		if _, err := tx.ExecContext(ctx, `UPDATE accounts SET `+column+` = `+column+` + $2 WHERE id = $1`, g.AccountID, g.Units); err != nil {
			return err
		}
		granted = true
		return journal(ctx, tx, g.AccountID, g.Pool, g.Units, "grant", g.ID, upscale.Month(now), now)
	})
	return granted, err
}

// poolColumn is the accounts column that holds pool's balance, for the
// pools payments fill.
func poolColumn(pool upscale.Pool) (string, error) {
	switch pool {
	case upscale.PoolCredit:
		return "credits", nil
	case upscale.PoolShareBonus:
		return "share_bonus", nil
	}
	return "", fmt.Errorf("sqlstore: payments fill credits and share bonus, not %q", pool)
}

// accountExists returns an error wrapping ErrNotFound when accountID is
// no account.
func accountExists(ctx context.Context, tx *sql.Tx, accountID string) error {
	var id string
	return noRows(tx.QueryRowContext(ctx, `SELECT id FROM accounts WHERE id = $1`, accountID).Scan(&id), "account", accountID)
}

// Reverse implements upscale.BillingLedger. The reversal's row is claimed
// first, so that of two concurrent deliveries of one reversal the second
// waits for the first and then reads what it took; the grant's and the
// account's rows are then locked, so that reversals of one grant, and
// reservations from the account, take their turns.
func (s *Store) Reverse(ctx context.Context, r upscale.Reversal) (upscale.Reversed, error) {
	if r.ID == "" || r.UpTo <= 0 {
		return upscale.Reversed{}, fmt.Errorf("sqlstore: reversal %q up to %d units: a reversal needs an ID and a positive number of units", r.ID, r.UpTo)
	}
	now := s.opts.Now()
	var done upscale.Reversed
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var grantID string
		if err := tx.QueryRowContext(ctx, `SELECT id FROM billing_grants WHERE id = $1`, r.GrantID).Scan(&grantID); err != nil {
			return noRows(err, "grant", r.GrantID)
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO billing_reversals (id, grant_id, taken, shortfall, event, reversed_at) VALUES ($1, $2, 0, 0, $3, $4) ON CONFLICT (id) DO NOTHING`,
			r.ID, r.GrantID, r.Event, r.At.UnixNano())
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err != nil {
				return err
			}
			return tx.QueryRowContext(ctx, `SELECT taken, shortfall FROM billing_reversals WHERE id = $1`, r.ID).Scan(&done.Taken, &done.Shortfall)
		}
		var p upscale.Purchase
		var pool string
		if _, err := tx.ExecContext(ctx, `UPDATE billing_grants SET taken = taken WHERE id = $1`, r.GrantID); err != nil { // lock it
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT account_id, pool, units, taken, shortfall FROM billing_grants WHERE id = $1`, r.GrantID).
			Scan(&p.AccountID, &pool, &p.Units, &p.Reversed.Taken, &p.Reversed.Shortfall); err != nil {
			return err
		}
		p.Pool = upscale.Pool(pool)
		column, err := poolColumn(p.Pool)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE accounts SET credits = credits WHERE id = $1`, p.AccountID); err != nil { // lock it
			return err
		}
		var balance int64
		if err := tx.QueryRowContext(ctx, `SELECT `+column+` FROM accounts WHERE id = $1`, p.AccountID).Scan(&balance); err != nil {
			return err
		}
		done = upscale.ReversalOf(p, r.UpTo, balance)
		if _, err := tx.ExecContext(ctx, `UPDATE accounts SET `+column+` = `+column+` - $2 WHERE id = $1`, p.AccountID, done.Taken); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE billing_grants SET taken = taken + $2, shortfall = shortfall + $3 WHERE id = $1`, r.GrantID, done.Taken, done.Shortfall); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE billing_reversals SET taken = $2, shortfall = $3 WHERE id = $1`, r.ID, done.Taken, done.Shortfall); err != nil {
			return err
		}
		return journal(ctx, tx, p.AccountID, p.Pool, -done.Taken, "reverse", r.ID, upscale.Month(now), now)
	})
	return done, err
}

// ApplyTerms implements upscale.BillingLedger: t.Plan is saved as
// PutPlan saves it, and the account moved to it, unless t do not
// supersede the account's terms (upscale.PlanTerms.Supersedes).
func (s *Store) ApplyTerms(ctx context.Context, t upscale.PlanTerms) (applied bool, err error) {
	err = s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE accounts SET plan = plan WHERE id = $1`, t.AccountID) // lock it
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return cmpErr(err, notFound("account", t.AccountID))
		}
		var held upscale.PlanTerms
		var asOf int64
		err = tx.QueryRowContext(ctx, `SELECT subscription, status, as_of FROM billing_terms WHERE account_id = $1`, t.AccountID).Scan(&held.Subscription, &held.Status, &asOf)
		held.AsOf = time.Unix(0, asOf)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case !t.Supersedes(held):
			return nil // older than what it holds, or of a subscription it holds as ended
		}
		if err := putPlan(ctx, tx, t.Plan); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE accounts SET plan = $2 WHERE id = $1`, t.AccountID, t.Plan.Name); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `
			INSERT INTO billing_terms (account_id, subscription, status, paid_through, cancel_at_period_end, as_of, event) VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (account_id) DO UPDATE SET subscription = excluded.subscription, status = excluded.status, paid_through = excluded.paid_through,
				cancel_at_period_end = excluded.cancel_at_period_end, as_of = excluded.as_of, event = excluded.event`,
			t.AccountID, t.Subscription, string(t.Status), t.PaidThrough.UnixNano(), boolInt(t.CancelAtPeriodEnd), t.AsOf.UnixNano(), t.Event)
		applied = err == nil
		return err
	})
	return applied, err
}

// cmpErr is err when there is one, else otherwise.
func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// Terms implements upscale.BillingLedger.
func (s *Store) Terms(ctx context.Context, accountID string) (upscale.PlanTerms, error) {
	t := upscale.PlanTerms{AccountID: accountID}
	var status string
	var paidThrough, asOf sql.NullInt64
	var cancel sql.NullInt64
	var subscription, event sql.NullString
	var paid, unlimited int
	err := s.db.QueryRowContext(ctx, `
		SELECT p.name, p.paid, p.unlimited, p.monthly_images, p.max_file_bytes,
			t.subscription, COALESCE(t.status, ''), t.paid_through, t.cancel_at_period_end, t.as_of, t.event
		FROM accounts a JOIN plans p ON p.name = a.plan LEFT JOIN billing_terms t ON t.account_id = a.id
		WHERE a.id = $1`, accountID).Scan(&t.Plan.Name, &paid, &unlimited, &t.Plan.MonthlyImages, &t.Plan.MaxFileBytes,
		&subscription, &status, &paidThrough, &cancel, &asOf, &event)
	if err != nil {
		return upscale.PlanTerms{}, classify(ctx, noRows(err, "account", accountID))
	}
	if !asOf.Valid {
		return upscale.PlanTerms{}, nil // never subscribed
	}
	t.Plan.Paid, t.Plan.Unlimited = paid == 1, unlimited == 1
	t.Subscription, t.Status, t.Event = subscription.String, upscale.SubscriptionStatus(status), event.String
	t.PaidThrough, t.AsOf, t.CancelAtPeriodEnd = time.Unix(0, paidThrough.Int64).UTC(), time.Unix(0, asOf.Int64).UTC(), cancel.Int64 == 1
	return t, nil
}

// Purchases implements upscale.BillingLedger.
func (s *Store) Purchases(ctx context.Context, accountID string) ([]upscale.Purchase, error) {
	var out []upscale.Purchase
	err := s.tx(ctx, func(tx *sql.Tx) error {
		if err := accountExists(ctx, tx, accountID); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT id, pool, units, label, event, granted_at, taken, shortfall FROM billing_grants WHERE account_id = $1 ORDER BY granted_at DESC, id`, accountID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			p := upscale.Purchase{Grant: upscale.Grant{AccountID: accountID}}
			var pool string
			var at int64
			if err := rows.Scan(&p.ID, &pool, &p.Units, &p.Label, &p.Event, &at, &p.Reversed.Taken, &p.Reversed.Shortfall); err != nil {
				return err
			}
			p.Pool, p.At = upscale.Pool(pool), time.Unix(0, at).UTC()
			out = append(out, p)
		}
		return rows.Err()
	})
	return out, err
}

// PutCheckout implements upscale.CheckoutStore. A subscription's plan is
// saved as PutPlan saves it, and named in the record.
func (s *Store) PutCheckout(ctx context.Context, c upscale.Checkout) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		if c.Plan.Name != "" {
			if err := putPlan(ctx, tx, c.Plan); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO billing_checkouts (id, account_id, price, units, plan, label, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING`,
			c.ID, c.AccountID, c.Price, c.Units, c.Plan.Name, c.Label, c.At.UnixNano())
		return err
	})
}

// Checkout implements upscale.CheckoutStore.
func (s *Store) Checkout(ctx context.Context, id string) (upscale.Checkout, error) {
	c := upscale.Checkout{ID: id}
	var at int64
	var paid, unlimited sql.NullInt64
	var monthly, maxBytes sql.NullInt64
	err := s.db.QueryRowContext(ctx, `
		SELECT c.account_id, c.price, c.units, c.plan, c.label, c.created_at, p.paid, p.unlimited, p.monthly_images, p.max_file_bytes
		FROM billing_checkouts c LEFT JOIN plans p ON p.name = c.plan WHERE c.id = $1`, id).
		Scan(&c.AccountID, &c.Price, &c.Units, &c.Plan.Name, &c.Label, &at, &paid, &unlimited, &monthly, &maxBytes)
	if err != nil {
		return upscale.Checkout{}, classify(ctx, noRows(err, "checkout", id))
	}
	c.At = time.Unix(0, at).UTC()
	if c.Plan.Name != "" {
		c.Plan.Paid, c.Plan.Unlimited, c.Plan.MonthlyImages, c.Plan.MaxFileBytes = paid.Int64 == 1, unlimited.Int64 == 1, monthly.Int64, maxBytes.Int64
	}
	return c, nil
}

// LinkCustomer implements upscale.CheckoutStore.
func (s *Store) LinkCustomer(ctx context.Context, accountID, customerID string) (string, error) {
	var kept string
	err := s.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO billing_customers (account_id, customer_id) VALUES ($1, $2) ON CONFLICT (account_id) DO NOTHING`, accountID, customerID); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT customer_id FROM billing_customers WHERE account_id = $1`, accountID).Scan(&kept)
	})
	return kept, err
}

// Customer implements upscale.CheckoutStore.
func (s *Store) Customer(ctx context.Context, accountID string) (string, error) {
	var customer string
	err := s.db.QueryRowContext(ctx, `SELECT customer_id FROM billing_customers WHERE account_id = $1`, accountID).Scan(&customer)
	return customer, classify(ctx, noRows(err, "customer of account", accountID))
}

// CustomerAccount implements upscale.CheckoutStore.
func (s *Store) CustomerAccount(ctx context.Context, customerID string) (string, error) {
	var account string
	err := s.db.QueryRowContext(ctx, `SELECT account_id FROM billing_customers WHERE customer_id = $1`, customerID).Scan(&account)
	return account, classify(ctx, noRows(err, "account of customer", customerID))
}
