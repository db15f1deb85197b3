package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"time"
)

// UseLink implements accounts.LinkStore: the first use of a sign-in link
// inserts it, and any later one finds it there. Links whose expiry has
// passed are forgotten as it goes.
func (s *Store) UseLink(ctx context.Context, id string, expires time.Time) (bool, error) {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM signin_links WHERE expires_at <= $1`, s.opts.Now().UnixNano()); err != nil {
		return false, classify(ctx, err)
	}
	res, err := s.db.ExecContext(ctx, `INSERT INTO signin_links (id, expires_at) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`, id, expires.UnixNano())
	if err != nil {
		return false, classify(ctx, err)
	}
	n, err := res.RowsAffected()
	return n == 1, classify(ctx, err)
}

// SignOut implements accounts.SessionStore: an account's row is moved
// only forward, in one statement, so that racing replicas keep the latest.
func (s *Store) SignOut(ctx context.Context, accountID string, at time.Time) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO signouts (account_id, signed_out_at) VALUES ($1, $2)
		ON CONFLICT (account_id) DO UPDATE SET signed_out_at = excluded.signed_out_at WHERE signouts.signed_out_at < excluded.signed_out_at`,
		accountID, at.UnixNano())
	return classify(ctx, err)
}

// SignedOutAt implements accounts.SessionStore, by the account's key.
func (s *Store) SignedOutAt(ctx context.Context, accountID string) (time.Time, error) {
	var at int64
	err := s.db.QueryRowContext(ctx, `SELECT signed_out_at FROM signouts WHERE account_id = $1`, accountID).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, classify(ctx, err)
	}
	return time.Unix(0, at), nil
}

// Secret returns the secret named name, the same to every replica: made
// (52 random printable characters) by the first to ask.
func (s *Store) Secret(ctx context.Context, name string) ([]byte, error) {
	if _, err := s.db.ExecContext(ctx, `INSERT INTO secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`, name, rand.Text()+rand.Text()); err != nil {
		return nil, classify(ctx, err)
	}
	var value string
	err := s.db.QueryRowContext(ctx, `SELECT value FROM secrets WHERE name = $1`, name).Scan(&value)
	return []byte(value), classify(ctx, err)
}
