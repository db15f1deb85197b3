package upscale

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// setQuotaHeaders describes the account's pools after this request, in the
// RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-11: the free pool with its monthly
// allowance (q), its window (w, this month's length) and the seconds until
// it refills (t); share bonus and credits, which never refill, as what is
// left (q and r alike, no window). An unlimited plan has no pools to
// count. With a RateLimiter, the key's "burst" policy comes first. The
// balance is read through the ledger's breaker, or taken from a 429
// quota_exhausted that read it already (reqErr); a ledger that cannot give
// it leaves the pools out: the answer matters more than its annotation.
func (h *Handler) setQuotaHeaders(ctx context.Context, hdr http.Header, who caller, reqErr error) {
	if ctx.Err() != nil {
		return // nobody is listening
	}
	var policies, limits []string
	if burst := who.burst; burst != nil {
		policies = append(policies, sfItem("burst", sfParam{"q", burst.Burst}, sfParam{"w", seconds(burst.Window)}))
		limits = append(limits, sfItem("burst", sfParam{"r", burst.Remaining}, sfParam{"t", seconds(burst.Reset)}))
	}
	var b Balance
	var err error
	if exhausted, ok := errors.AsType[*exhaustedError](reqErr); ok {
		b, err = exhausted.balance, exhausted.balanceErr
	} else {
		b, err = h.balance(ctx, who.accountID)
	}
	if err != nil {
		h.cfg.Logger.Debug("upscale: no quota headers: the ledger did not give the balance", "account", who.accountID, "err", err)
	}
	if err == nil && !b.Plan.Unlimited {
		now := h.cfg.Now()
		if b.Plan.MonthlyImages > 0 {
			start, next := MonthBounds(now)
			policies = append(policies, sfItem(string(PoolFree), sfParam{"q", b.Plan.MonthlyImages}, sfParam{"w", seconds(next.Sub(start))}))
			limits = append(limits, sfItem(string(PoolFree), sfParam{"r", b.Free}, sfParam{"t", seconds(next.Sub(now))}))
		}
		for _, p := range []struct {
			pool Pool
			left int64
		}{{PoolShareBonus, b.ShareBonus}, {PoolCredit, b.Credits}} {
			policies = append(policies, sfItem(string(p.pool), sfParam{"q", p.left}))
			limits = append(limits, sfItem(string(p.pool), sfParam{"r", p.left}))
		}
	}
	if len(policies) > 0 {
		hdr.Set("RateLimit-Policy", strings.Join(policies, ", "))
		hdr.Set("RateLimit", strings.Join(limits, ", "))
	}
}

// sfItem writes a structured-field Item (RFC 9651): name as a String,
// then its integer parameters. Policy and parameter names are this
// package's own, so nothing needs escaping.
func sfItem(name string, params ...sfParam) string {
	var b strings.Builder
	b.WriteString(strconv.Quote(name))
	for _, p := range params {
		b.WriteString(";" + p.key + "=" + strconv.FormatInt(p.value, 10))
	}
	return b.String()
}

// sfParam is one integer parameter of a structured-field Item.
type sfParam struct {
	key   string
	value int64
}

// seconds rounds d up to whole seconds.
func seconds(d time.Duration) int64 { return int64(math.Ceil(d.Seconds())) }

// balance reads accountID's balance through the ledger's breaker.
func (h *Handler) balance(ctx context.Context, accountID string) (b Balance, err error) {
	err = h.ledger.call(func() (err error) {
		b, err = h.cfg.Ledger.Balance(ctx, accountID)
		return err
	})
	return b, err
}

// exhaustedError is a 429 quota_exhausted with the ledger's answer for
// the balance it was judged by, so the quota headers do not ask again.
type exhaustedError struct {
	error
	balance    Balance
	balanceErr error
}

func (e *exhaustedError) Unwrap() error { return e.error }

// quotaExhausted explains an exhausted quota: when the free pool will
// refill, with a Retry-After for then, if waiting helps at all; otherwise
// only buying helps, and there is no Retry-After.
func (h *Handler) quotaExhausted(ctx context.Context, accountID string, err error) error {
	b, balanceErr := h.balance(ctx, accountID)
	if balanceErr != nil || b.Plan.MonthlyImages == 0 {
		return &exhaustedError{
			error:   err, // the table's sentence says it all
			balance: b, balanceErr: balanceErr,
		}
	}
	now := h.cfg.Now()
	_, next := MonthBounds(now)
	return &exhaustedError{
		error: &retryAfterError{
			err: errors.Join(Explain(ErrQuotaExhausted, msgFreePoolRefills,
				b.Plan.MonthlyImages, next.Format(time.RFC3339), next.Sub(now).Round(time.Minute)), err),
			after: next.Sub(now),
		},
		balance: b,
	}
}
