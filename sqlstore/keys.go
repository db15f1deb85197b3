package sqlstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/upscalekit/upscale"
)

func digestHex(key string) string {
	d := upscale.DigestKey(key)
	return hex.EncodeToString(d[:])
}

// Authenticate implements upscale.KeyStore. Keys are looked up by their
// SHA-256 digest, which is all the database holds. A key's use is
// recorded at most once per upscale.KeyUseResolution.
func (s *Store) Authenticate(ctx context.Context, key string) (string, error) {
	var accountID string
	var lastUsed sql.NullInt64
	digest := digestHex(key)
	err := s.db.QueryRowContext(ctx, `SELECT account_id, last_used_at FROM api_keys WHERE digest = $1 AND revoked_at IS NULL`, digest).Scan(&accountID, &lastUsed)
	if errors.Is(err, sql.ErrNoRows) {
		return "", upscale.ErrUnauthorized
	}
	if err != nil {
		return "", classify(ctx, err)
	}
	if now := s.opts.Now(); !lastUsed.Valid || now.Sub(time.Unix(0, lastUsed.Int64)) >= upscale.KeyUseResolution {
		// The use is shown to the key's holder; a request is not refused
		// for want of recording it.
		s.db.ExecContext(ctx, `UPDATE api_keys SET last_used_at = $2 WHERE digest = $1 AND (last_used_at IS NULL OR last_used_at < $2)`, digest, now.UnixNano())
	}
	return accountID, nil
}

// CreateKey makes a new random key for accountID, named name (which may
// be empty), and returns it. The key is shown this once: only its digest
// is stored. It returns an error wrapping ErrNotFound when the account
// does not exist.
func (s *Store) CreateKey(ctx context.Context, accountID, name string) (string, error) {
	key := upscale.NewKey("upk_")
	_, err := s.AddNamedKey(ctx, key, accountID, name)
	return key, err
}

// AddKey implements upscale.KeyAdmin: it makes a key chosen by the host
// authenticate as accountID, which must exist.
func (s *Store) AddKey(ctx context.Context, key, accountID string) error {
	_, err := s.AddNamedKey(ctx, key, accountID, "")
	return err
}

// keyColumns are the columns keyInfo reads, in its order.
const keyColumns = `account_id, digest, hint, name, created_at, last_used_at, revoked_at`

// keyInfo reads a row of keyColumns.
func keyInfo(row interface{ Scan(...any) error }) (accountID string, info upscale.KeyInfo, err error) {
	var digest string
	var created int64
	var lastUsed, revoked sql.NullInt64
	if err := row.Scan(&accountID, &digest, &info.Hint, &info.Name, &created, &lastUsed, &revoked); err != nil {
		return "", info, err
	}
	info.ID, info.Created = digest[:16], time.Unix(0, created)
	if lastUsed.Valid {
		info.LastUsed = time.Unix(0, lastUsed.Int64)
	}
	if revoked.Valid {
		info.Revoked = time.Unix(0, revoked.Int64)
	}
	return accountID, info, nil
}

// AddNamedKey implements upscale.KeyLister. A key added again to its own
// account keeps its name.
func (s *Store) AddNamedKey(ctx context.Context, key, accountID, name string) (upscale.KeyInfo, error) {
	if err := upscale.ValidateKey(key); err != nil {
		return upscale.KeyInfo{}, err
	}
	if err := upscale.ValidateKeyName(name); err != nil {
		return upscale.KeyInfo{}, err
	}
	var info upscale.KeyInfo
	err := s.tx(ctx, func(tx *sql.Tx) error {
		owner, kept, err := keyInfo(tx.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE digest = $1`, digestHex(key)))
		switch {
		case err == nil && owner != accountID:
			return fmt.Errorf("sqlstore: the key belongs to another account: %w", upscale.ErrKeyConflict)
		case err == nil && !kept.Revoked.IsZero():
			return fmt.Errorf("sqlstore: the key was revoked: %w", upscale.ErrKeyConflict)
		case err == nil:
			info = kept
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT id FROM accounts WHERE id = $1`, accountID).Scan(&owner); err != nil {
			return noRows(err, "account", accountID)
		}
		info = upscale.KeyInfo{ID: upscale.KeyID(key), Hint: upscale.KeyHint(key), Name: name, Created: s.opts.Now()}
		_, err = tx.ExecContext(ctx, `INSERT INTO api_keys (digest, account_id, hint, name, created_at) VALUES ($1, $2, $3, $4, $5)`,
			digestHex(key), accountID, info.Hint, name, info.Created.UnixNano())
		return err
	})
	return info, err
}

// ListKeys implements upscale.KeyLister.
func (s *Store) ListKeys(ctx context.Context, accountID string) ([]upscale.KeyInfo, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE account_id = $1 ORDER BY created_at DESC, digest`, accountID)
	if err != nil {
		return nil, classify(ctx, err)
	}
	defer rows.Close()
	keys := []upscale.KeyInfo{}
	for rows.Next() {
		_, info, err := keyInfo(rows)
		if err != nil {
			return nil, classify(ctx, err)
		}
		keys = append(keys, info)
	}
	return keys, classify(ctx, rows.Err())
}

// RevokeKeyID implements upscale.KeyLister. An id that cannot be a key's
// is not found without a query: PostgreSQL refuses text that is not UTF-8.
func (s *Store) RevokeKeyID(ctx context.Context, accountID, id string) error {
	if !upscale.ValidKeyID(id) {
		return fmt.Errorf("revoke key: %w", upscale.ErrNotFound)
	}
	res, err := s.db.ExecContext(ctx, `UPDATE api_keys SET revoked_at = $3 WHERE account_id = $1 AND substr(digest, 1, 16) = $2 AND revoked_at IS NULL`,
		accountID, id, s.opts.Now().UnixNano())
	return revoked(ctx, res, err)
}

// RevokeKey implements upscale.KeyAdmin.
func (s *Store) RevokeKey(ctx context.Context, key string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE api_keys SET revoked_at = $2 WHERE digest = $1 AND revoked_at IS NULL`, digestHex(key), s.opts.Now().UnixNano())
	return revoked(ctx, res, err)
}

// revoked is the answer of a revocation: ErrNotFound when it changed no
// key.
func revoked(ctx context.Context, res sql.Result, err error) error {
	if err != nil {
		return classify(ctx, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return fmt.Errorf("revoke key: %w", upscale.ErrNotFound)
	}
	return nil
}
