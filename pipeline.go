package upscale

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/upscalekit/upscale/internal/membudget"
)

// run charges one unit for req: reserve, fetch, enlarge, store, commit.
// The unit is released on every path that does not reach the commit.
// prepare, when not nil, is given the answer and the reservation that pays
// for it before the commit; if it fails, the request stops uncharged. Once
// it has succeeded, a commit whose outcome stays unknown (the ledger
// unavailable for ChargeTimeout) leaves result and reservation as they are
// and returns errChargeUnknown: whoever prepared them finishes them.
func (h *Handler) run(ctx context.Context, accountID string, req request, prepare func(context.Context, Response, Reservation) error) (Response, error) {
	f, err := h.fetchSource(ctx, accountID, req)
	if err != nil {
		return Response{}, err
	}
	defer h.letGo(ctx, f)
	img, err := h.enlarge(ctx, f.src, req.Params, f.memory)
	if err != nil {
		return Response{}, err
	}
	blobKey := newBlobKey(extension(img.ContentType))
	resp, err := h.storeResult(ctx, blobKey, img, h.cfg.Now().Add(h.cfg.LinkTTL), f.hold.Pool)
	if err != nil {
		return Response{}, err
	}
	resp.sourceBytes = int64(len(f.src))
	expires := resp.linkExpires
	if prepare != nil {
		if err := prepare(ctx, resp, f.hold); err != nil {
			if errors.Is(err, ErrUnavailable) {
				// Prepared or not, nobody can tell: the result and the
				// unit stay for the claim's takeover, which commits them
				// if the answer was prepared and otherwise runs afresh
				// while the reservation expires.
				f.kept = true
				return Response{}, fmt.Errorf("prepare the answer: %w: %w", errChargeUnknown, err)
			}
			h.deleteBlob(ctx, "uncharged result", blobKey, expires)
			return Response{}, err
		}
	}
	err = h.commit(ctx, f.hold.ID)
	switch {
	case err == nil:
		f.kept = true
		return resp, nil
	case errors.Is(err, ErrNotFound):
		h.deleteBlob(ctx, "uncharged result", blobKey, expires)
		return Response{}, fmt.Errorf("commit reservation: %w: %w", errUnitGone, err)
	case prepare != nil:
		f.kept = true
		return Response{}, fmt.Errorf("commit reservation: %w: %w", errChargeUnknown, err)
	}
	// No claim can finish it later: find out now whether an attempt
	// whose answer was lost did charge, and if so deliver what was paid.
	f.kept = true
	paid, checkErr := h.charged(ctx, f.hold.ID, false)
	switch {
	case checkErr != nil:
		h.cfg.Logger.Error("upscale: a commit's outcome is unknown; the result stays until its link expires", "reservation", f.hold.ID, "account", accountID, "err", checkErr)
		return Response{}, fmt.Errorf("commit reservation: %w: %w", Explain(ErrUnavailable, msgChargeUnknown), err)
	case paid:
		return resp, nil
	}
	h.deleteBlob(ctx, "uncharged result", blobKey, expires)
	return Response{}, fmt.Errorf("commit reservation: %w", err)
}

// newBlobKey is a new BlobStore key: random letters and digits, then ext
// (a result's ".png", a job's kept ".source").
func newBlobKey(ext string) string {
	return strings.ToLower(rand.Text()) + ext
}

// storeResult stores img under blobKey behind a link that lasts until
// expires: the answer that names it, paid from via.
func (h *Handler) storeResult(ctx context.Context, blobKey string, img Image, expires time.Time, via Pool) (Response, error) {
	var link string
	storeStart := time.Now()
	err := h.blobs.call(func() (err error) {
		link, err = h.cfg.Blobs.Put(ctx, blobKey, img.Data, img.ContentType, expires)
		return err
	})
	h.cfg.Metrics.StepDone(StepStore, time.Since(storeStart))
	if err != nil {
		return Response{}, fmt.Errorf("store result: %w", err)
	}
	resp := Response{URL: link, Via: via, linkExpires: expires, engine: img.Engine, resultBytes: int64(len(img.Data))}
	if img.Fitted {
		resp.ResizedTo = &Size{Width: img.Width, Height: img.Height}
	}
	return resp, nil
}

// fetchSource reserves a unit for req and takes its source (source): the
// upload, or imageUrl downloaded under the fetch policy, with the
// source's memory granted. Reserving before
// fetching means an exhausted account costs no download; a file that
// turns out to need paid capability has its unit exchanged for one that
// has it. On success the caller lets go of what it holds (letGo); on
// error nothing is held.
func (h *Handler) fetchSource(ctx context.Context, accountID string, req request) (*fetched, error) {
	var uploaded int64 // an upload's size is known before anything is reserved
	if req.upload != nil {
		uploaded = int64(len(req.upload.data))
	}
	hold, err := h.reserve(ctx, accountID, h.needsPaid(req.Scale, uploaded))
	if errors.Is(err, ErrPaidPlanRequired) {
		return nil, h.paidRequired(req.Scale, uploaded)
	}
	if err != nil {
		return nil, err
	}
	src, memory, err := h.source(ctx, req, h.fileLimit(hold.Plan))
	if err != nil {
		h.release(ctx, hold)
		return nil, err
	}
	fail := func(err error) (*fetched, error) {
		memory.Done()
		h.release(ctx, hold)
		return nil, err
	}
	if !hold.Covers(h.needsPaid(req.Scale, int64(len(src)))) {
		paid, err := h.reserve(ctx, accountID, true)
		if errors.Is(err, ErrPaidPlanRequired) {
			err = h.paidRequired(req.Scale, int64(len(src)))
		}
		if err != nil {
			return fail(err)
		}
		h.release(ctx, hold)
		hold = paid
	}
	return &fetched{hold: hold, src: src, memory: memory}, nil
}

// paidRequired explains why a request that needs paid capability does:
// its scale, or else its file's size.
func (h *Handler) paidRequired(scale int, sourceBytes int64) error {
	if ScaleNeedsPaidPlan(scale) {
		return Explain(ErrPaidPlanRequired, msgScaleNeedsPaid, scale, paidScale)
	}
	size, limit := Megabytes(sourceBytes), Megabytes(h.cfg.FreeTierMaxFileBytes)
	if size == limit {
		size = "just over " + size
	}
	return Explain(ErrPaidPlanRequired, msgFileNeedsPaid, size, limit)
}

// source is req's file with its memory's grant, at most maxBytes: the
// upload's, which the request holds too, or imageUrl's downloaded under
// the fetch policy.
func (h *Handler) source(ctx context.Context, req request, maxBytes int64) ([]byte, *membudget.Grant, error) {
	if up := req.upload; up != nil {
		if int64(len(up.data)) > maxBytes { // the plan changed since the upload was read
			return nil, nil, errLargerThanPlan(maxBytes)
		}
		up.memory.Share()
		return up.data, up.memory, nil
	}
	memory := h.budget.NewGrant()
	fetchStart := time.Now()
	src, err := h.fetcher.fetch(ctx, req.source, maxBytes, func(ctx context.Context, n int64) error {
		return memory.Grow(ctx, n, h.admission.busy)
	})
	h.cfg.Metrics.StepDone(StepFetch, time.Since(fetchStart))
	if err != nil {
		memory.Done()
		return nil, nil, err
	}
	memory.ShrinkTo(int64(cap(src)))
	return src, memory, nil
}

// fetched is a request's source once fetchSource has it: the unit
// reserved for it, its bytes and their memory's grant.
type fetched struct {
	hold   Reservation
	src    []byte
	memory *membudget.Grant
	// kept says the unit is not to be given back: charged, or left for
	// whoever prepared the answer to finish.
	kept bool
}

// letGo ends f's memory grant and, unless f.kept, gives its unit back.
// Whoever fetched f calls it once, on every path.
func (h *Handler) letGo(ctx context.Context, f *fetched) {
	if !f.kept {
		h.release(ctx, f.hold)
	}
	f.memory.Done()
}

func extension(contentType string) string {
	switch contentType {
	case "image/jpeg":
		return ".jpg"
	case "image/png":
		return ".png"
	case "image/webp":
		return ".webp"
	case "image/avif":
		return ".avif"
	case "image/gif":
		return ".gif"
	}
	return ""
}
