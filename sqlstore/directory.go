package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
)

// AccountOf implements accounts.Directory.
func (s *Store) AccountOf(ctx context.Context, email string) (string, error) {
	var id string
	err := s.db.QueryRowContext(ctx, `SELECT account_id FROM email_accounts WHERE email = $1`, email).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("sqlstore: no account for the address: %w", upscale.ErrNotFound)
	}
	return id, classify(ctx, err)
}

// OpenAccount implements accounts.Directory: the account and the
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

// Opened implements accounts.Directory.
func (s *Store) Opened(ctx context.Context, since time.Time) ([]accounts.DirectoryEntry, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT email, account_id, referrer, opened_at FROM email_accounts
		WHERE opened_at >= $1 ORDER BY opened_at, account_id`, since.UnixNano())
	if err != nil {
		return nil, classify(ctx, err)
	}
	defer rows.Close()
	var out []accounts.DirectoryEntry
	for rows.Next() {
		var e accounts.DirectoryEntry
		var opened int64
		if err := rows.Scan(&e.Email, &e.AccountID, &e.Referrer, &opened); err != nil {
			return nil, err
		}
		e.Opened = time.Unix(0, opened)
		out = append(out, e)
	}
	return out, classify(ctx, rows.Err())
}

// ShareCode implements accounts.Directory: a read, as each
// overview asks; the first call writes the code, and concurrent first
// calls make one, the first written.
func (s *Store) ShareCode(ctx context.Context, accountID string) (string, error) {
	var code string
	read := func() error {
		return s.db.QueryRowContext(ctx, `SELECT code FROM share_codes WHERE account_id = $1`, accountID).Scan(&code)
	}
	err := read()
	if errors.Is(err, sql.ErrNoRows) {
		if _, err = s.db.ExecContext(ctx, `INSERT INTO share_codes (account_id, code) VALUES ($1, $2) ON CONFLICT (account_id) DO NOTHING`,
			accountID, accounts.NewShareCode()); err == nil {
			err = read()
		}
	}
	return code, classify(ctx, err)
}

// SharedBy implements accounts.Directory.
func (s *Store) SharedBy(ctx context.Context, code string) (string, error) {
	var account string
	err := s.db.QueryRowContext(ctx, `SELECT account_id FROM share_codes WHERE code = $1`, code).Scan(&account)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("sqlstore: no account shares the code: %w", upscale.ErrNotFound)
	}
	return account, classify(ctx, err)
}

// errAddressTaken rolls back an opening that lost to another of the same
// address.
var errAddressTaken = errors.New("sqlstore: the address was opened meanwhile")
