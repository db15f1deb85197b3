package upscale

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// KeyInfo is what the holder of an account may see of one of its keys:
// never the key itself, which is shown once, when it is made.
type KeyInfo struct {
	// ID names the key without revealing it (KeyID): what a page that
	// never holds the key revokes it by.
	ID string `json:"id"`
	// Hint is the start and the last four characters of the key
	// (KeyHint), enough to tell keys apart; empty for a key kept before
	// the store kept hints.
	Hint string `json:"hint"`
	// Name is the holder's label for the key; it may be empty.
	Name    string    `json:"name"`
	Created time.Time `json:"createdAt"`
	// LastUsed is when the key last authenticated, to within
	// KeyUseResolution (and, through a CachedKeyStore, its TTL); zero if
	// it never did.
	LastUsed time.Time `json:"lastUsedAt"`
	// Revoked is when the key was revoked; zero while it works.
	Revoked time.Time `json:"revokedAt"`
}

// KeyLister is a KeyAdmin that keeps, beside each key, what the account's
// holder may see of it, for an account page (the dashboard): its hint, a
// name, when it was made, last used and revoked. AddKey records the hint
// too. MemoryKeyStore, sqlstore.Store and CachedKeyStore over a KeyLister
// are KeyListers; upscaletest.TestKeyLister is the contract.
type KeyLister interface {
	KeyAdmin
	// AddNamedKey is AddKey that also keeps name (ValidateKeyName) as the
	// key's label. It returns the key's KeyInfo, and AddKey's errors.
	AddNamedKey(ctx context.Context, key, accountID, name string) (KeyInfo, error)
	// ListKeys returns accountID's keys, revoked ones included, the
	// newest first. An account with no key, or none at all, has an empty
	// list, not an error: listing tells nothing of which accounts exist.
	ListKeys(ctx context.Context, accountID string) ([]KeyInfo, error)
	// RevokeKeyID makes accountID's key id (KeyInfo.ID) fail
	// authentication from now on. It returns an error wrapping
	// ErrNotFound when accountID has no such key, or it is revoked
	// already: another account's key is not found. So is an id that
	// cannot be a key's (ValidKeyID), such as a page's path that is not
	// UTF-8, which it refuses without asking its server.
	RevokeKeyID(ctx context.Context, accountID, id string) error
}

// KeyUseResolution is how stale KeyInfo.LastUsed may be: a KeyLister
// records a key's use at most this often, so that a busy key does not cost
// a write per request.
const KeyUseResolution = time.Minute

// KeyID returns the ID of key (KeyInfo.ID): the first 16 hexadecimal
// digits of its digest, which say nothing of the key.
func KeyID(key string) string {
	d := DigestKey(key)
	return hex.EncodeToString(d[:8])
}

// ValidKeyID reports whether id can be a key's ID (KeyID): 16 lowercase
// hexadecimal digits.
func ValidKeyID(id string) bool {
	if len(id) != 16 {
		return false
	}
	for _, c := range []byte(id) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// KeyHint returns the hint of key (KeyInfo.Hint): its first characters, a
// quarter of it up to eight, and its last four, such as "upk_k3b…p2r4".
// Of a key NewKey made, it shows 35 of 130 random bits.
func KeyHint(key string) string {
	if len(key) < 8 {
		return ""
	}
	return key[:min(len(key)/4, 8)] + "…" + key[len(key)-4:]
}

// maxKeyNameLength bounds a key's name, in characters.
const maxKeyNameLength = 64

// ValidateKeyName reports whether name can label a key: at most 64
// characters, printable, none of them a control character.
func ValidateKeyName(name string) error {
	if !utf8.ValidString(name) {
		return fmt.Errorf("a key's name must be UTF-8 text")
	}
	if n := utf8.RuneCountInString(name); n > maxKeyNameLength {
		return fmt.Errorf("a key's name may be at most %d characters long, not %d", maxKeyNameLength, n)
	}
	if i := strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }); i >= 0 {
		return fmt.Errorf("a key's name may hold only printable characters (the one at byte %d is not)", i)
	}
	return nil
}

// sortKeys orders keys the newest first, as ListKeys returns them.
func sortKeys(keys []KeyInfo) {
	slices.SortFunc(keys, func(a, b KeyInfo) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}
