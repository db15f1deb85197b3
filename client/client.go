// Package client calls an upscale API (github.com/upscalekit/upscale) from
// Go, with the standard library only.
//
// Every Upscale call sends an Idempotency-Key of its own and reuses it
// across its retries, so a retry after a lost answer is answered from the
// first attempt and charged at most once. It retries what nothing was
// charged for and another attempt may cure: transport errors, 500 (never
// kept under an Idempotency-Key), 502, 503, 504, 409 idempotency_in_flight
// and 429 rate_limited, with full-jitter exponential backoff, or after the
// server's Retry-After when it gives one (capped, and never past the
// context's deadline). It never retries anything else: a 429
// quota_exhausted is an *Error that says when the free pool refills.
//
// UpscaleFile and SubmitFile send the image itself, as a
// multipart/form-data upload, where Upscale and Submit send its address;
// their calls keep the same promises.
package client

import (
	"bytes"
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Client calls one API with one key. Its zero value is not usable: set
// BaseURL and Key. It is safe for concurrent use.
type Client struct {
	// BaseURL is where the API is served, such as "https://api.example.com";
	// requests go to BaseURL + Path.
	BaseURL string
	// Path is the API's path. Zero means "/api/v1/upscale", the handler's
	// default (upscale.Config.Path).
	Path string
	// Key is the API key, sent as "Authorization: Bearer <Key>".
	Key string
	// HTTPClient sends the requests. Nil means http.DefaultClient.
	HTTPClient *http.Client
	// MaxAttempts bounds the attempts of one call, the first included.
	// Zero means 4; 1 or less means no retry.
	MaxAttempts int
	// MaxWait bounds one wait between attempts. A Retry-After longer than
	// that is not waited for: the call returns the error at once. Zero
	// means 30 seconds.
	MaxWait time.Duration
}

// Request is what to enlarge. Zero fields take the API's defaults (scale
// 2, imageType "photo", denoise "max").
type Request struct {
	// ImageURL is the image's address; empty for UpscaleFile and
	// SubmitFile, which send the image itself.
	ImageURL  string `json:"imageUrl"`
	Scale     int    `json:"scale,omitempty"`
	ImageType string `json:"imageType,omitempty"`
	Denoise   string `json:"denoise,omitempty"`
	// Format is the result's format (jpeg, png, webp, avif), and Quality
	// a lossy one's, 1 to 100; empty and zero keep the server's choice.
	Format  string `json:"format,omitempty"`
	Quality int    `json:"quality,omitempty"`
	// Model names one of the networks the server publishes; empty
	// leaves the choice to the server.
	Model string `json:"model,omitempty"`
	// WebhookURL is where a job's end is posted (Submit only; see
	// VerifyWebhook).
	WebhookURL string `json:"webhookUrl,omitempty"`
}

// Size is an image's size in pixels.
type Size struct {
	Width  int `json:"width"`
	Height int `json:"height"`
}

// Response is a successful answer.
type Response struct {
	// URL is the temporary link to the enlarged image.
	URL string `json:"url"`
	// ResizedTo is the image's size when it is not the source's times
	// the scale asked for: the largest the server makes, with the
	// source's aspect ratio. Nil otherwise.
	ResizedTo *Size `json:"resizedTo"`
	// Via names the pool that paid: free_pool, share_bonus, credit or
	// unlimited.
	Via string `json:"via"`
	// Replayed is true when the answer is that of an earlier attempt of
	// the same call, whose answer had been lost.
	Replayed bool `json:"-"`
	// Engine is the Upscale-Engine header: how the image was enlarged,
	// such as "learned;passes=1;network=cunet;runtime=onednn;precision=int8, classical;scale=2". Empty
	// on a replay, or when the server's engine does not say.
	Engine string `json:"-"`
}

// Error is a problem answer of the API (RFC 9457).
type Error struct {
	Status int    `json:"status"`
	Code   string `json:"code"` // stable: quota_exhausted, invalid_scale, ...
	Title  string `json:"title"`
	Detail string `json:"detail"` // written for a person
	// BuyURL is where to buy credits or a plan, on a 429 quota_exhausted
	// or a 403 paid_plan_required from a server that sells them.
	BuyURL string `json:"buyUrl"`
	// RetryAfter is the server's Retry-After, zero when it gave none. On a
	// 429 quota_exhausted it is the time until the free pool refills.
	RetryAfter time.Duration `json:"-"`
}

// Error says the status, the machine code and the server's sentence.
func (e *Error) Error() string {
	return fmt.Sprintf("upscale API: %d %s: %s", e.Status, e.Code, e.Detail)
}

// retryable reports whether the same request may succeed later.
func (e *Error) retryable() bool {
	switch e.Status {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	case http.StatusConflict:
		return e.Code == "idempotency_in_flight"
	case http.StatusTooManyRequests:
		return e.Code == "rate_limited"
	}
	return false
}

const (
	firstBackoff = 250 * time.Millisecond
	maxBackoff   = 8 * time.Second
)

// Upscale asks for req and returns the answer, retrying as the package
// comment says. Its error is an *Error for an answer of the API, the
// context's error when ctx ends, or the last transport error.
func (c *Client) Upscale(ctx context.Context, req Request) (*Response, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return c.upscale(ctx, "application/json", body)
}

// UpscaleFile asks for req with image as its source, sent as a
// multipart/form-data upload (see Request.WriteForm), and returns the
// answer as Upscale does, with its errors and retries. req.ImageURL must
// be empty: a call with both is refused before anything is sent. The
// image is read whole into memory first, with the rest of the form, so
// that every attempt sends the same bytes; the API refuses a file larger
// than the account's plan allows with a 400 image_too_large (or a 403
// paid_plan_required past the free tier). When image has a Name method,
// as an *os.File has, the upload is named after the file.
func (c *Client) UpscaleFile(ctx context.Context, image io.Reader, req Request) (*Response, error) {
	contentType, body, err := fileForm(image, req)
	if err != nil {
		return nil, err
	}
	return c.upscale(ctx, contentType, body)
}

// upscale posts body, of contentType, under one Idempotency-Key for all
// its attempts, and reads the answer.
func (c *Client) upscale(ctx context.Context, contentType string, body []byte) (*Response, error) {
	header := http.Header{"Idempotency-Key": {strconv.Quote(crand.Text())}, "Content-Type": {contentType}}
	var resp Response
	err := c.retry(ctx, func() error {
		answer, err := c.do(ctx, http.MethodPost, c.url(""), header, body)
		if err != nil {
			return err
		}
		if err := answer.decode(http.StatusOK, &resp); err != nil || resp.URL == "" {
			return fmt.Errorf("upscale API: a %d without a link: %q", answer.status, answer.body)
		}
		resp.Replayed = answer.header.Get("Idempotent-Replayed") == "true"
		resp.Engine = answer.header.Get("Upscale-Engine")
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &resp, nil
}

// url is the API's address, and the path of a job under it when job is
// not empty.
func (c *Client) url(job string) string {
	u := strings.TrimSuffix(c.BaseURL, "/") + cmp.Or(c.Path, "/api/v1/upscale")
	if job != "" {
		u += "/jobs/" + job
	}
	return u
}

// retry calls call until it succeeds, returns an error another attempt
// cannot cure, or MaxAttempts are made, waiting between attempts as the
// package comment says.
func (c *Client) retry(ctx context.Context, call func() error) error {
	attempts := max(cmp.Or(c.MaxAttempts, 4), 1)
	maxWait := cmp.Or(c.MaxWait, 30*time.Second)
	for attempt := 1; ; attempt++ {
		err := call()
		if err == nil {
			return nil
		}
		apiErr, isAPIError := errors.AsType[*Error](err)
		if ctx.Err() != nil || attempt == attempts || (isAPIError && !apiErr.retryable()) {
			return err
		}
		wait := jitter(attempt)
		if isAPIError && apiErr.RetryAfter > 0 {
			wait = apiErr.RetryAfter
		}
		if deadline, ok := ctx.Deadline(); wait > maxWait || (ok && time.Now().Add(wait).After(deadline)) {
			return err // waiting that long is not ours to do
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// jitter is "full jitter": a uniform wait up to the exponential backoff
// after attempt, which doubles from firstBackoff up to maxBackoff (the
// shift is bounded too, so that many attempts cannot overflow it).
func jitter(attempt int) time.Duration {
	backoff := min(firstBackoff<<min(attempt-1, 16), maxBackoff)
	return rand.N(backoff) + time.Millisecond
}

// answer is an answer of the API below 400.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// decode reads the answer's body into v if its status is want.
func (a answer) decode(want int, v any) error {
	if a.status != want {
		return fmt.Errorf("upscale API: status %d, want %d", a.status, want)
	}
	return json.Unmarshal(a.body, v)
}

// do makes one call with the key and header, which names the body's
// Content-Type: its answer, an *Error for a problem answer, or the
// transport's error.
func (c *Client) do(ctx context.Context, method, url string, header http.Header, body []byte) (answer, error) {
	httpReq, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	for name, values := range header {
		httpReq.Header[name] = values
	}
	httpReq.Header.Set("Authorization", "Bearer "+c.Key)
	httpClient := c.HTTPClient
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	httpResp, err := httpClient.Do(httpReq)
	if err != nil {
		return answer{}, err
	}
	defer httpResp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(httpResp.Body, 1<<20))
	if err != nil {
		return answer{}, err
	}
	if httpResp.StatusCode < 400 {
		return answer{httpResp.StatusCode, httpResp.Header, raw}, nil
	}
	apiErr := &Error{Status: httpResp.StatusCode}
	if json.Unmarshal(raw, apiErr) != nil || apiErr.Code == "" {
		apiErr.Code, apiErr.Detail = "http_"+strconv.Itoa(httpResp.StatusCode), strings.TrimSpace(string(raw))
	}
	apiErr.Status = httpResp.StatusCode
	if s, err := strconv.Atoi(httpResp.Header.Get("Retry-After")); err == nil && s > 0 {
		apiErr.RetryAfter = time.Duration(s) * time.Second
	}
	return answer{}, apiErr
}
