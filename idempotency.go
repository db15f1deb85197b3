package upscale

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"time"
)

// IdempotencyStore keeps the answers of requests sent with an
// Idempotency-Key header (draft-ietf-httpapi-idempotency-key-header-07),
// so that a caller who retries a request whose answer it never got
// receives that answer again instead of a second charge. Keys belong to an
// account: two accounts may use the same key independently.
// MemoryIdempotencyStore is the default, for one process; sqlstore.Store
// shares the keys between replicas. upscaletest.TestIdempotencyStore holds
// every implementation to this contract. Every method returns an error
// wrapping ErrUnavailable when the store's server cannot be reached.
type IdempotencyStore interface {
	// Claim records that claim's request is starting. It returns nil, nil
	// when the caller is to run the request, and must then call Keep or
	// Forget: the key was unused, its answer has been kept for longer
	// than claim.TTL, or its last claim was left unfinished for longer
	// than claim.Lease (its request died with its process). It returns the
	// kept answer when the key's request with the same fingerprint has
	// finished. It returns an error wrapping ErrIdempotencyInFlight when
	// that request is still running, and one wrapping
	// ErrIdempotencyKeyReused when the key was used for a request with
	// another fingerprint. Of concurrent claims of one key, exactly one
	// gets nil, nil.
	Claim(ctx context.Context, claim IdempotencyClaim) (*IdempotentAnswer, error)
	// Keep keeps answer for the claimed key until claim.TTL after the
	// claim. It returns an error wrapping ErrNotFound when the key is not
	// claimed.
	Keep(ctx context.Context, accountID, key string, answer IdempotentAnswer) error
	// Forget forgets a claimed key whose request ended without an answer
	// worth keeping (a failure that is safe to retry), so that the next
	// request with the key runs. Forgetting a key that is not claimed is not
	// an error.
	Forget(ctx context.Context, accountID, key string) error
}

// IdempotencyClaim is one request's claim of an Idempotency-Key.
type IdempotencyClaim struct {
	AccountID, Key string
	// Fingerprint identifies the request: the same key with another
	// fingerprint is refused.
	Fingerprint [sha256.Size]byte
	// Lease is how long an unfinished claim holds the key.
	Lease time.Duration
	// TTL is how long the key and its answer are kept.
	TTL time.Duration
}

// IdempotentAnswer is the kept answer of a request: its status and the
// JSON body it was sent with.
type IdempotentAnswer struct {
	Status int
	Body   []byte
	// LinkExpires is, for a 200, when the result's link stops working.
	LinkExpires time.Time
}

// MaxIdempotencyKeyBytes is the longest Idempotency-Key accepted.
const MaxIdempotencyKeyBytes = 255

// idempotencyKey returns the request's Idempotency-Key, if it sent one:
// the draft's structured-field string ("..."), or, as many clients send
// it, the bare value. It refuses several headers, an empty or overlong
// key, and characters outside printable ASCII.
func idempotencyKey(values []string) (key string, sent bool, err error) {
	switch len(values) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", true, Explain(ErrInvalidRequest, "Send one Idempotency-Key header, not %d.", len(values))
	}
	key = strings.TrimSpace(values[0])
	if unquoted, ok := strings.CutPrefix(key, `"`); ok {
		if key, ok = strings.CutSuffix(unquoted, `"`); !ok || strings.ContainsAny(key, `"\`) {
			return "", true, Explain(ErrInvalidRequest, "The Idempotency-Key header is a quoted string without quotes or backslashes inside, such as \"8e03978e-40d5-43e8-bc93-6894a57f9324\".")
		}
	}
	if key == "" || len(key) > MaxIdempotencyKeyBytes || strings.IndexFunc(key, func(r rune) bool { return r < ' ' || r > '~' }) >= 0 {
		return "", true, Explain(ErrInvalidRequest, "The Idempotency-Key must be 1 to %d printable ASCII characters, such as a UUID.", MaxIdempotencyKeyBytes)
	}
	return key, true, nil
}

// fingerprint identifies a validated request by what it asks for, so
// that the same request sent with other spacing, field order or defaults
// spelt out has the same fingerprint.
func (r request) fingerprint() [sha256.Size]byte {
	return sha256.Sum256(fmt.Appendf(nil, "%s\n%d\n%s\n%s", r.source, r.Scale, r.ImageType, r.Denoise))
}
