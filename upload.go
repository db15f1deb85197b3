package upscale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/upscalekit/upscale/internal/membudget"
)

// An upload is a request that sends its image itself: a
// multipart/form-data body with the file in the part "image" and the
// other fields as text parts, in any order. Its file is held to
// everything a downloaded source is (the plan's size, the memory budget,
// the engine's checks); only where the bytes come from differs.

// uploadPart is the form part that carries an upload's file.
const uploadPart = "image"

// formOverhead is what an upload's form may add to its file: the other
// fields, the parts' headers and the boundaries; as much as a JSON body
// may be.
const formOverhead = MaxRequestBytes

// formLookahead is how far past the part it hands out the multipart
// reader may read (its buffer, and a boundary): the form's overhead is
// judged exactly once the body is read, and while it is read with this
// much slack.
const formLookahead = 8 << 10

// upload is the file of an upload and the grant of the memory that holds
// it, which the request holds from its first byte until it is done.
type upload struct {
	data   []byte
	memory *membudget.Grant
}

// formBoundary reports whether h says the body is a multipart form, and
// its boundary: ErrInvalidRequest for a form without one.
func formBoundary(h http.Header) (boundary string, isForm bool, err error) {
	mediaType, params, err := mime.ParseMediaType(h.Get("Content-Type"))
	if mediaType != "multipart/form-data" {
		return "", false, nil
	}
	if err != nil || params["boundary"] == "" {
		return "", true, Explain(ErrInvalidRequest, msgFormNoBoundary)
	}
	return params["boundary"], true, nil
}

// receiveUpload reads an upload's form once its caller holds a place and
// its account is known, so that the file can be held to the account's
// plan as it streams: a body that declares more than the plan's file size
// and the form's overhead is refused before a byte is read, and a file
// that runs past it as soon as it does. The file's memory is granted from
// the budget before it is read, as a download's is, within the same
// deadline: the whole body must arrive within Config.Fetch.Timeout, the
// time a download may take, or the server's ReadTimeout if that ends
// sooner (uploadDeadline). The request it returns holds the upload's
// grant; the caller ends it.
func (h *Handler) receiveUpload(ctx context.Context, w http.ResponseWriter, r *http.Request, accountID, boundary string) (req request, err error) {
	maxBytes, err := h.accountFileLimit(ctx, accountID)
	if err != nil {
		return request{}, err
	}
	if r.ContentLength > maxBytes+formOverhead {
		return request{}, errLargerThanPlan(maxBytes)
	}
	deadline := h.uploadDeadline(w, r)
	ctx, cancel := context.WithDeadline(ctx, deadline) // for the memory's wait
	defer cancel()
	given := time.Until(deadline)
	unreadable := func(err error) error { return formError(err, given) }
	var up *upload
	defer func() {
		if err != nil && up != nil {
			up.memory.Done()
		}
	}()
	body := &formBody{r: r.Body}
	form := multipart.NewReader(body, boundary)
	fields := make(map[string]json.RawMessage)
	seen := make(map[string]bool)
	for {
		part, err := form.NextRawPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return request{}, unreadable(err)
		}
		name := part.FormName()
		if name != uploadPart && !slices.Contains(fieldNames, name) {
			return request{}, Explain(ErrInvalidRequest, msgUnknownPart, name)
		}
		if seen[name] {
			return request{}, Explain(ErrInvalidRequest, msgDuplicateField, name)
		}
		seen[name] = true
		if name == uploadPart {
			if up, err = h.readUpload(ctx, part, r.ContentLength, maxBytes, body); err != nil {
				if !isExplained(err) {
					err = unreadable(err)
				}
				return request{}, err
			}
			if len(up.data) == 0 && part.FileName() == "" {
				// An HTML form's file input left empty: absent.
				up.memory.Done()
				up = nil
			}
			continue
		}
		value, err := io.ReadAll(part)
		if err != nil {
			return request{}, unreadable(err)
		}
		if len(value) == 0 {
			continue // absent, as a JSON null is: an HTML form sends its empty fields
		}
		if fields[name], err = formValue(name, value); err != nil {
			return request{}, err
		}
	}
	if body.read-body.file > formOverhead {
		return request{}, Explain(ErrInvalidRequest, msgFormTooLarge, formOverhead)
	}
	switch {
	case up == nil && fields["imageUrl"] == nil:
		return request{}, Explain(ErrInvalidRequest, msgUploadMissing)
	case up != nil && len(up.data) == 0:
		return request{}, Explain(ErrInvalidRequest, msgUploadEmpty)
	}
	if req, err = parseFields(fields, up != nil); err != nil {
		return request{}, err
	}
	req.upload = up
	return req, nil
}

// uploadDeadline sets the read deadline of an upload's body and returns
// it: Fetch.Timeout from now, or the server's ReadTimeout from the
// request's start if that is sooner, since the connection's deadline is
// one and this one replaces the server's. Once the body is read whole,
// net/http lifts it for its own read of the idle connection; a body
// refused part-read keeps it, so that net/http, closing the body after
// the handler, does not wait on a dripping caller. A ResponseWriter that
// cannot set one (a wrapper without Unwrap) leaves the upload to the
// server's own timeouts, and is logged once.
func (h *Handler) uploadDeadline(w http.ResponseWriter, r *http.Request) time.Time {
	deadline := time.Now().Add(h.cfg.Fetch.Timeout)
	if srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server); ok && srv.ReadTimeout > 0 {
		if server := servedOf(r).started.Add(srv.ReadTimeout); server.Before(deadline) {
			deadline = server
		}
	}
	if err := http.NewResponseController(w).SetReadDeadline(deadline); err != nil {
		h.noReadDeadline.Do(func() {
			h.cfg.Logger.Warn("upscale: the ResponseWriter cannot set a read deadline (does a wrapper lack Unwrap?): uploads are bounded only by the server's ReadTimeout", "err", err)
		})
	}
	return deadline
}

// readUpload reads an upload's file, at most maxBytes, into memory
// granted first; bodyBytes is the whole body's declared length, which
// bounds the file's, or -1. Its errors are explained (the plan's limit,
// the budget's refusals) or the body's own.
func (h *Handler) readUpload(ctx context.Context, part io.Reader, bodyBytes, maxBytes int64, body *formBody) (*upload, error) {
	up := &upload{memory: h.budget.NewGrant()}
	buf, err := readSource(ctx, &fileCounter{r: part, n: &body.file}, min(max(bodyBytes, 0), maxBytes), maxBytes, func(ctx context.Context, n int64) error {
		return up.memory.Grow(ctx, n, h.admission.busy)
	})
	if err == nil && int64(buf.Len()) > maxBytes {
		err = errLargerThanPlan(maxBytes)
	}
	if err != nil {
		up.memory.Done()
		return nil, err
	}
	up.data = buf.Bytes()
	up.memory.ShrinkTo(int64(cap(up.data)))
	return up, nil
}

// formValue is a form field's text as the JSON value parseFields reads:
// scale and quality a number, written in digits, the others a string of
// valid UTF-8.
func formValue(name string, text []byte) (json.RawMessage, error) {
	if !utf8.Valid(text) {
		return nil, Explain(ErrInvalidRequest, msgFormNotUTF8, name)
	}
	if name != "scale" && name != "quality" {
		return json.Marshal(string(text))
	}
	if len(text) > 3 || strings.Trim(string(text), "0123456789") != "" {
		return nil, Explain(ErrInvalidRequest, msgFormNumber, name)
	}
	return text, nil
}

// formError explains an upload's body that could not be read: too slow
// (its deadline, the time it was given, passed), too much beside its file,
// or cut short or malformed.
func formError(err error, given time.Duration) error {
	switch {
	case errors.Is(err, errFormOverhead):
		return Explain(ErrInvalidRequest, msgFormTooLarge, formOverhead)
	case errors.Is(err, os.ErrDeadlineExceeded):
		// Kept in the chain, so that the caller, who is still there, is
		// answered (callerGone).
		return fmt.Errorf("%w: %w", Explain(ErrInvalidRequest, msgUploadTimeout, given.Round(time.Millisecond)), err)
	}
	return Explain(ErrInvalidRequest, msgFormUnreadable)
}

// accountFileLimit is the largest source file accountID's plan accepts
// now, read from its balance.
func (h *Handler) accountFileLimit(ctx context.Context, accountID string) (int64, error) {
	var b Balance
	err := h.ledger.call(func() (err error) {
		b, err = h.cfg.Ledger.Balance(ctx, accountID)
		return err
	})
	if err != nil {
		return 0, err
	}
	return h.fileLimit(b.Plan), nil
}

// fileLimit is the largest source file plan accepts.
func (h *Handler) fileLimit(plan Plan) int64 {
	if plan.MaxFileBytes > 0 {
		return plan.MaxFileBytes
	}
	return h.cfg.FreeTierMaxFileBytes
}

// errFormOverhead is formBody's refusal to read more of a form whose
// fields and headers pass formOverhead.
var errFormOverhead = errors.New("the form adds too much to its file")

// formBody is an upload's body as the multipart reader reads it, counting
// what it reads, so that no more than the file and formOverhead (and
// formLookahead) of it is ever read.
type formBody struct {
	r    io.Reader
	read int64
	file int64 // of read, the file's bytes handed out (fileCounter)
}

func (b *formBody) Read(p []byte) (int, error) {
	if b.read-b.file > formOverhead+formLookahead {
		return 0, errFormOverhead
	}
	n, err := b.r.Read(p)
	b.read += int64(n)
	return n, err
}

// fileCounter counts the bytes of the file part read through it.
type fileCounter struct {
	r io.Reader
	n *int64
}

func (c *fileCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += int64(n)
	return n, err
}
