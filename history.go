package upscale

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"strings"
	"time"
)

// Call is one request or job, as its account's history shows it.
type Call struct {
	// ID names it among its account's: "req_" and a random part for a
	// request, the job's ID for a job.
	ID        string
	AccountID string
	// KeyID is the key that sent it (KeyID), "" for one sent for a
	// signed-in account (ForAccount: the dashboard's Try it).
	KeyID string
	// Job is whether it was submitted as a job (Prefer: respond-async).
	Job bool
	// At is when it ended: answered, or, for a job, settled.
	At     time.Time
	Params Params
	// Status is what it was answered with: 200 for a success (a job's
	// too), else its problem's status, and Code the problem's code; a
	// job canceled has Status 0 and Code "canceled".
	Status int
	Code   string
	// Pool paid for it; "" when nothing was charged.
	Pool Pool
	// Engine says how its image was enlarged (the Upscale-Engine header).
	Engine string
	// Took is how long it took: a request from its arrival to its
	// answer, a job from its submission to its end.
	Took time.Duration
	// SourceBytes and ResultBytes are the source's and the result's
	// sizes, zero when unknown (a request refused before its download).
	SourceBytes, ResultBytes int64
	// ResultURL is the result's link, which works until ResultExpires.
	ResultURL     string
	ResultExpires time.Time
}

// CallQuery asks a CallHistory for some of an account's calls.
type CallQuery struct {
	// Since is the earliest end asked for; zero means all that are kept.
	Since time.Time
	// KeyID, when set, asks for the calls of that key only.
	KeyID string
	// Limit is the most calls returned (CallLimit); zero or less means
	// 100.
	Limit int
}

// CallHistory keeps each account's recent calls for the account's own
// pages (the dashboard's History), for as long as the store says, and
// forgets the older ones by itself. MemoryCallHistory and sqlstore.Store
// are CallHistories; upscaletest.TestCallHistory is the contract.
type CallHistory interface {
	// RecordCall keeps c. Recording a call's ID again, for its account,
	// replaces it: a job run again records its end once.
	RecordCall(ctx context.Context, c Call) error
	// Calls returns accountID's calls that q asks for, the latest end
	// first (ties by ID). An account without calls has none: an empty
	// list, not an error.
	Calls(ctx context.Context, accountID string, q CallQuery) ([]Call, error)
}

// CallLimit is the most calls a CallHistory answers for limit: limit,
// or 100 when it is not positive.
func CallLimit(limit int) int { return defaultIfNotPositive(limit, 100) }

// defaultIfNotPositive is n, or otherwise when n is not above zero.
func defaultIfNotPositive(n, otherwise int) int {
	if n <= 0 {
		return otherwise
	}
	return n
}

// DefaultCallRetention is how long the CallHistories of this module keep
// a call unless told otherwise: 30 days.
const DefaultCallRetention = 30 * 24 * time.Hour

// recordCall keeps c in Config.History, if there is one. A history that
// fails is logged and does not fail the call: it is a view, not a record
// anything is charged by.
func (h *Handler) recordCall(ctx context.Context, c Call) {
	if h.cfg.History == nil || c.AccountID == "" {
		return
	}
	if err := h.cfg.History.RecordCall(context.WithoutCancel(ctx), c); err != nil {
		h.cfg.Logger.Warn("upscale: record a call in the history; it is missing from the account's history", "call", c.ID, "account", c.AccountID, "err", err)
	}
}

// recordRequest keeps a request the handler answered in its account's
// history: resp when it succeeded, else the problem of err. A replay of
// a kept answer is not recorded again: it is the call it replays; nor is
// a refusal that sheds load (rate_limited, overloaded, a store out of
// reach) or the request of a caller that went away.
func (h *Handler) recordRequest(r *http.Request, who caller, job bool, start time.Time, resp Response, err error) {
	if err != nil && (errors.Is(err, ErrRateLimited) || errors.Is(err, ErrOverloaded) || errors.Is(err, ErrUnavailable) || callerGone(r, err)) {
		// Shed load, a store out of reach or a caller gone: a write for
		// each would undo the shedding, and none is a call the account
		// made of the service.
		return
	}
	// The ID is the server's: a caller's X-Request-Id could name another
	// call of its account, or all of them.
	c := Call{ID: "req_" + strings.ToLower(rand.Text()), AccountID: who.accountID, KeyID: who.keyID, Job: job, At: h.cfg.Now(), Params: who.params, Took: time.Since(start)}
	if err != nil {
		p := h.problem(err)
		c.Status, c.Code = p.Status, p.Code
	} else {
		c.Status, c.Pool, c.Engine = http.StatusOK, resp.Via, resp.engine
		c.SourceBytes, c.ResultBytes, c.ResultURL, c.ResultExpires = resp.sourceBytes, resp.resultBytes, resp.URL, resp.linkExpires
	}
	h.recordCall(answerContext(r, err), c)
}

// jobCall is the call of a job that ended.
func jobCall(job Job) Call {
	c := Call{ID: job.ID, AccountID: job.AccountID, KeyID: job.KeyID, Job: true, At: job.Finished, Params: job.Params,
		Status: http.StatusOK, Took: job.Finished.Sub(job.Created), Engine: job.Engine}
	switch {
	case job.Result != nil:
		c.Pool, c.SourceBytes, c.ResultBytes = job.Pool, job.Result.sourceBytes, job.Result.resultBytes
		c.ResultURL, c.ResultExpires = job.Result.URL, job.Result.linkExpires
	case job.Problem != nil:
		c.Status, c.Code = job.Problem.Status, job.Problem.Code
	default:
		c.Status, c.Code = 0, "canceled"
	}
	return c
}
