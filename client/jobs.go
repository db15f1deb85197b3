package client

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Submit asks for req as a job (Prefer: respond-async) and returns it as
// queued. Everything judgeable at once is judged then, with the errors
// Upscale returns. Its attempts share one Idempotency-Key, so a retry
// after a lost answer returns the same job.
func (c *Client) Submit(ctx context.Context, req Request) (*Job, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return c.submit(ctx, "application/json", body)
}

// SubmitFile is Submit with image as the source, uploaded as UpscaleFile
// uploads it: req.ImageURL must be empty, and the image is read whole
// into memory first so that every attempt sends the same bytes.
func (c *Client) SubmitFile(ctx context.Context, image io.Reader, req Request) (*Job, error) {
	contentType, body, err := fileForm(image, req)
	if err != nil {
		return nil, err
	}
	return c.submit(ctx, contentType, body)
}

// submit posts body, of contentType, as a job under one Idempotency-Key.
func (c *Client) submit(ctx context.Context, contentType string, body []byte) (*Job, error) {
	header := http.Header{"Idempotency-Key": {strconv.Quote(crand.Text())}, "Prefer": {"respond-async"}, "Content-Type": {contentType}}
	return c.job(ctx, http.MethodPost, c.url(""), header, body, http.StatusAccepted)
}

// Job returns the job id as it stands. An unknown job, or another
// account's, is an *Error with the code job_not_found.
func (c *Client) Job(ctx context.Context, id string) (*Job, error) {
	return c.job(ctx, http.MethodGet, c.url(id), nil, nil, http.StatusOK)
}

// Cancel cancels the job id and returns it as it stands: canceled if it
// had not ended (a running one may take a moment; Wait for it), else as it
// ended.
func (c *Client) Cancel(ctx context.Context, id string) (*Job, error) {
	return c.job(ctx, http.MethodDelete, c.url(id), nil, nil, http.StatusOK)
}

// Wait polls the job id until it has ended and returns it: every 250 ms at
// first, twice as long each time up to 5 s. A poll refused for now (429
// rate_limited, 503) is retried as Upscale's calls are, after the
// server's Retry-After. It returns early with ctx's error.
func (c *Client) Wait(ctx context.Context, id string) (*Job, error) {
	for poll := 250 * time.Millisecond; ; poll = min(2*poll, 5*time.Second) {
		job, err := c.Job(ctx, id)
		if err != nil || job.Done() {
			return job, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// job makes a call whose answer is a job, with status want, retried as
// Upscale's are.
func (c *Client) job(ctx context.Context, method, url string, header http.Header, body []byte, want int) (*Job, error) {
	var job Job
	err := c.retry(ctx, func() error {
		answer, err := c.do(ctx, method, url, header, body)
		if err != nil {
			return err
		}
		return answer.decode(want, &job)
	})
	if err != nil {
		return nil, err
	}
	return &job, nil
}
