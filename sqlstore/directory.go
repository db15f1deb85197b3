package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/upscalekit/upscale"
)

// AccountOf implements dashboard.AccountDirectory.
func (s *Store) AccountOf(ctx context.Context, email string) (string, error) {
	var id string
	err := s.db.QueryRowContext(ctx, `SELECT account_id FROM email_accounts WHERE email = $1`, email).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("sqlstore: no account for the address: %w", upscale.ErrNotFound)
	}
	return id, classify(ctx, err)
}

// OpenAccount implements dashboard.AccountDirectory: the account and the
// address's row are made in one transaction, which a concurrent opening
// of the same address rolls back (errAddressTaken) to return the winner's.
func (s *Store) OpenAccount(ctx context.Context, email string, plan upscale.Plan, referrer string) (string, bool, error) {
	if id, err := s.AccountOf(ctx, email); !errors.Is(err, upscale.ErrNotFound) {
		return id, false, err
	}
	id := upscale.NewKey("acct_")
	err := s.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO accounts (id, plan, credits, share_bonus) VALUES ($1, $2, 0, 0)`, id, plan.Name); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO email_accounts (email, account_id, referrer, opened_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (email) DO NOTHING`, email, id, referrer, s.opts.Now().UnixNano())
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return cmp.Or(err, errAddressTaken)
		}
		return nil
	})
	if errors.Is(err, errAddressTaken) {
		id, err = s.AccountOf(ctx, email)
		return id, false, err
	}
	if err != nil {
		return "", false, classify(ctx, err)
	}
	return id, true, nil
}

// errAddressTaken rolls back an opening that lost to another of the same
// address.
var errAddressTaken = errors.New("sqlstore: the address was opened meanwhile")
