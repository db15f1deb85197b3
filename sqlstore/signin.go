package sqlstore

import (
	"context"
	"crypto/rand"
	"time"
)

// UseLink implements dashboard.LinkStore: the first use of a sign-in link
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
