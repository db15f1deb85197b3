package sqlstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/upscalekit/upscale"
)

func digestHex(key string) string {
	d := upscale.DigestKey(key)
	return hex.EncodeToString(d[:])
}

// Authenticate implements upscale.KeyStore. Keys are looked up by their
// SHA-256 digest, which is all the database holds.
func (s *Store) Authenticate(ctx context.Context, key string) (string, error) {
	var accountID string
	err := s.db.QueryRowContext(ctx, `SELECT account_id FROM api_keys WHERE digest = $1 AND revoked_at IS NULL`, digestHex(key)).Scan(&accountID)
	if errors.Is(err, sql.ErrNoRows) {
		return "", upscale.ErrUnauthorized
	}
	return accountID, classify(ctx, err)
}

// CreateKey makes a new random key for accountID and returns it. The key is
// shown this once: only its digest is stored. It returns an error wrapping
// ErrNotFound when the account does not exist.
func (s *Store) CreateKey(ctx context.Context, accountID string) (string, error) {
	key := upscale.NewKey("upk_")
	return key, s.AddKey(ctx, key, accountID)
}

// AddKey implements upscale.KeyAdmin: it makes a key chosen by the host
// authenticate as accountID, which must exist.
func (s *Store) AddKey(ctx context.Context, key, accountID string) error {
	if err := upscale.ValidateKey(key); err != nil {
		return err
	}
	return s.tx(ctx, func(tx *sql.Tx) error {
		var owner string
		var revoked sql.NullInt64
		err := tx.QueryRowContext(ctx, `SELECT account_id, revoked_at FROM api_keys WHERE digest = $1`, digestHex(key)).Scan(&owner, &revoked)
		switch {
		case err == nil && owner != accountID:
			return fmt.Errorf("sqlstore: the key belongs to another account: %w", upscale.ErrKeyConflict)
		case err == nil && revoked.Valid:
			return fmt.Errorf("sqlstore: the key was revoked: %w", upscale.ErrKeyConflict)
		case err == nil:
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT id FROM accounts WHERE id = $1`, accountID).Scan(&owner); err != nil {
			return noRows(err, "account", accountID)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO api_keys (digest, account_id, created_at) VALUES ($1, $2, $3)`, digestHex(key), accountID, s.opts.Now().UnixNano())
		return err
	})
}

// RevokeKey implements upscale.KeyAdmin.
func (s *Store) RevokeKey(ctx context.Context, key string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE api_keys SET revoked_at = $2 WHERE digest = $1 AND revoked_at IS NULL`, digestHex(key), s.opts.Now().UnixNano())
	if err != nil {
		return classify(ctx, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return fmt.Errorf("revoke key: %w", upscale.ErrNotFound)
	}
	return nil
}
