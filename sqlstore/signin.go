package sqlstore

import (
	"context"
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
