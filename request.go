package upscale

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

const (
	// MaxRequestBytes is the largest request body the handler reads.
	MaxRequestBytes = 16 << 10
	// MaxImageURLBytes is the longest imageUrl the handler accepts.
	MaxImageURLBytes = 2048
)

// request is a validated upscale request.
type request struct {
	// source is imageUrl, nil for an upload.
	source *url.URL
	// upload is the file sent in the request itself (upload.go), nil
	// for an imageUrl.
	upload *upload
	// boundary is set while the body is a multipart form still to be
	// read: decodeRequest only looks at its headers, and receiveUpload
	// reads it once the caller holds a place.
	boundary string
	Params
	// webhook is the job's webhookUrl, nil when none was sent: checked
	// for its syntax here, and against the fetch policy when the job is
	// submitted (checkWebhookURL).
	webhook *url.URL
}

var (
	imageTypes    = []ImageType{Photo, Anime}
	denoiseLevels = []Denoise{DenoiseNone, DenoiseLow, DenoiseMid, DenoiseHigh, DenoiseMax}
)

// ImageTypes returns the image types the API accepts: photo, anime.
func ImageTypes() []ImageType { return slices.Clone(imageTypes) }

// DenoiseLevels returns the denoise levels the API accepts, weakest
// first: none, low, mid, high, max.
func DenoiseLevels() []Denoise { return slices.Clone(denoiseLevels) }

// decodeRequest reads and validates the body of an upscale request. A
// JSON body is judged strictly: exactly one JSON object of valid UTF-8,
// field names matched case-sensitively, no duplicate or unknown fields,
// nothing after the object; a null field counts as absent. A
// multipart/form-data body (an upload) is not read here: its boundary is
// kept for receiveUpload.
func decodeRequest(w http.ResponseWriter, r *http.Request) (request, error) {
	if boundary, isForm, err := formBoundary(r.Header); isForm {
		return request{boundary: boundary}, err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
		return request{}, Explain(ErrInvalidRequest, msgBodyTooLarge, MaxRequestBytes)
	}
	if err != nil {
		return request{}, Explain(ErrInvalidRequest, msgBodyUnreadable)
	}
	if !utf8.Valid(body) {
		return request{}, Explain(ErrInvalidRequest, msgBodyNotUTF8)
	}
	fields, err := objectFields(body)
	if err != nil {
		return request{}, err
	}
	return parseFields(fields, false)
}

// parseFields validates a request's fields, whether a JSON body's or an
// upload's form's, each a JSON value; absent ones take their defaults.
// uploaded says the image came as a file, so that imageUrl must not.
func parseFields(fields map[string]json.RawMessage, uploaded bool) (request, error) {
	req := request{Params: Params{Scale: 2, ImageType: Photo, Denoise: DenoiseMax}}
	var err error
	switch raw := fields["imageUrl"]; {
	case uploaded && raw != nil:
		return request{}, Explain(ErrInvalidRequest, msgUploadAndURL)
	case !uploaded:
		if req.source, err = parseImageURL(raw); err != nil {
			return request{}, err
		}
	}
	if raw := fields["scale"]; raw != nil {
		if req.Scale, err = parseScale(raw); err != nil {
			return request{}, err
		}
	}
	if raw := fields["imageType"]; raw != nil {
		if req.ImageType, err = parseEnum(raw, imageTypes, ErrInvalidImageType, "imageType"); err != nil {
			return request{}, err
		}
	}
	if raw := fields["denoise"]; raw != nil {
		if req.Denoise, err = parseEnum(raw, denoiseLevels, ErrInvalidDenoise, "denoise"); err != nil {
			return request{}, err
		}
	}
	if raw := fields["webhookUrl"]; raw != nil {
		if req.webhook, err = parseWebhookURL(raw); err != nil {
			return request{}, err
		}
	}
	if raw := fields["format"]; raw != nil {
		if req.Format, err = parseEnum(raw, formats, ErrInvalidRequest, "format"); err != nil {
			return request{}, err
		}
	}
	if raw := fields["quality"]; raw != nil {
		if req.Quality, err = parseQuality(raw); err != nil {
			return request{}, err
		}
		if req.Format == FormatPNG {
			return request{}, Explain(ErrInvalidRequest, msgQualityLossless)
		}
	}
	if raw := fields["model"]; raw != nil {
		if json.Unmarshal(raw, &req.Model) != nil || req.Model == "" || len(req.Model) > 64 {
			return request{}, Explain(ErrInvalidRequest, msgModelShape)
		}
	}
	return req, nil
}

// checkModel refuses a model the Upscaler does not publish
// (ModelPublisher), naming those it does, or one whose passes cannot make
// the scale asked.
func (h *Handler) checkModel(p Params) error {
	if p.Model == "" {
		return nil
	}
	publisher, _ := h.cfg.Upscaler.(ModelPublisher)
	var published []PublishedModel
	if publisher != nil {
		published = publisher.PublishedModels()
	}
	i := slices.IndexFunc(published, func(m PublishedModel) bool { return m.Name == p.Model })
	if i < 0 {
		if len(published) == 0 {
			return Explain(ErrInvalidRequest, msgNoModels)
		}
		var names []string
		for _, m := range published {
			names = append(names, m.Name)
		}
		return Explain(ErrInvalidRequest, msgModelUnknown, p.Model, quotedList(names))
	}
	step := published[i].Scale
	if powerOf(p.Scale, step) {
		return nil
	}
	var fit []string
	for _, s := range scales {
		if powerOf(s, step) {
			fit = append(fit, strconv.Itoa(s))
		}
	}
	return Explain(ErrInvalidRequest, msgModelScale, p.Model, step, strings.Join(fit, ", "))
}

// powerOf reports whether n is step, step², step³…
func powerOf(n, step int) bool {
	for n > 1 && step > 1 && n%step == 0 {
		n /= step
	}
	return n == 1
}

// parseQuality reads quality: a whole number from 1 to 100.
func parseQuality(raw json.RawMessage) (int, error) {
	var q float64
	if err := json.Unmarshal(raw, &q); err != nil || q != float64(int(q)) || q < 1 || q > 100 {
		return 0, Explain(ErrInvalidRequest, msgQualityRange, raw)
	}
	return int(q), nil
}

// fieldNames are the request's fields, a JSON body's or an upload's form's.
var fieldNames = []string{"imageUrl", "scale", "imageType", "denoise", "webhookUrl", "format", "quality", "model"}

// objectFields splits a JSON object into its known fields, refusing anything
// else. Fields whose value is null are left out.
func objectFields(body []byte) (map[string]json.RawMessage, error) {
	errShape := Explain(ErrInvalidRequest, msgBodyShape)
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errShape
	}
	fields := make(map[string]json.RawMessage)
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, errShape
		}
		name := tok.(string) // inside an object, a token before a value is its name
		if !slices.Contains(fieldNames, name) {
			if name == uploadPart {
				return nil, Explain(ErrInvalidRequest, msgUploadInJSON)
			}
			return nil, Explain(ErrInvalidRequest, msgUnknownField, name)
		}
		if seen[name] {
			return nil, Explain(ErrInvalidRequest, msgDuplicateField, name)
		}
		seen[name] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, errShape
		}
		if !bytes.Equal(raw, []byte("null")) {
			fields[name] = raw
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, errShape
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, Explain(ErrInvalidRequest, msgTrailingData)
	}
	return fields, nil
}

// urlPolicy is what one URL field of the body is held to: its error,
// its messages and its rules, checked once the URL is parsed.
type urlPolicy struct {
	sentinel error
	// missing is the message for a field that is not a string or, with
	// emptyMissing, an empty one, and unparsable for one that url.Parse
	// refuses; tooLong is a format taking the URL's length and
	// MaxImageURLBytes.
	missing, unparsable, tooLong string
	emptyMissing                 bool
	// check holds the parsed URL to the field's rules, returning its
	// Explained error.
	check func(*url.URL) error
}

var (
	// imageURLPolicy: imageUrl, required, an absolute http or https URL
	// that the fetch may call (checkSourceURL's rules that need no
	// network).
	imageURLPolicy = urlPolicy{
		sentinel: ErrInvalidImageURL, missing: msgImageURLMissing, tooLong: msgImageURLTooLong, unparsable: msgImageURLUnparsable,
		emptyMissing: true,
		check:        func(u *url.URL) error { return checkSourceURL(u, false) },
	}
	// webhookURLPolicy: webhookUrl, held to the same rules, refused with
	// its own error.
	webhookURLPolicy = urlPolicy{
		sentinel: ErrInvalidWebhookURL, missing: msgWebhookUnparsable, tooLong: msgWebhookTooLong, unparsable: msgWebhookUnparsable,
		check: func(u *url.URL) error {
			if problem := urlProblem(u); problem != "" {
				return Explain(ErrInvalidWebhookURL, msgWebhookRefused, problem)
			}
			return nil
		},
	}
)

// parseImageURL reads imageUrl; parseWebhookURL, webhookUrl.
func parseImageURL(raw json.RawMessage) (*url.URL, error)   { return parseURL(raw, imageURLPolicy) }
func parseWebhookURL(raw json.RawMessage) (*url.URL, error) { return parseURL(raw, webhookURLPolicy) }

// parseURL reads a URL field of the body as p says, without its fragment,
// which is never sent to a server anyway.
func parseURL(raw json.RawMessage, p urlPolicy) (*url.URL, error) {
	var s string
	if raw == nil || json.Unmarshal(raw, &s) != nil || (p.emptyMissing && s == "") {
		return nil, Explain(p.sentinel, "%s", p.missing)
	}
	if len(s) > MaxImageURLBytes {
		return nil, Explain(p.sentinel, p.tooLong, len(s), MaxImageURLBytes)
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, Explain(p.sentinel, "%s", p.unparsable)
	}
	if err := p.check(u); err != nil {
		return nil, err
	}
	u.Fragment, u.RawFragment = "", ""
	return u, nil
}

func parseScale(raw json.RawMessage) (int, error) {
	errScale := Explain(ErrInvalidScale, msgScaleNotNumber, scaleList(false))
	if c := raw[0]; c != '-' && (c < '0' || c > '9') {
		return 0, errScale
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return 0, Explain(ErrInvalidRequest, msgScaleUnreadable, raw, scaleList(false))
	}
	s := int(f)
	if float64(s) != f || !slices.Contains(scales[:], s) {
		return 0, errScale
	}
	return s, nil
}

func parseEnum[T ~string](raw json.RawMessage, allowed []T, sentinel error, field string) (T, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil && slices.Contains(allowed, T(s)) {
		return T(s), nil
	}
	return "", Explain(sentinel, msgNotOneOf, field, quotedList(allowed))
}

func quotedList[T ~string](values []T) string {
	var b []byte
	for i, v := range values {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendQuote(b, string(v))
	}
	return string(b)
}

// preference is what a request's Prefer headers ask for (RFC 7240):
// respond-async, and how long the caller would wait for the result.
type preference struct {
	async bool
	wait  time.Duration
}

// maxWait bounds how long a submission with Prefer: wait=N is held open
// for its job's end (RFC 7240 lets a server wait less than asked).
const maxWait = 60 * time.Second

// preferences reads the Prefer headers: comma-separated preferences,
// each a token with an optional value and parameters after semicolons,
// tokens matched case-insensitively; what is not understood is ignored. A
// wait longer than maxWait, however many digits it has, is maxWait.
func preferences(h http.Header) preference {
	var p preference
	for _, header := range h.Values("Prefer") {
		for _, item := range strings.Split(header, ",") {
			token, _, _ := strings.Cut(item, ";")
			name, value, _ := strings.Cut(strings.TrimSpace(token), "=")
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "respond-async":
				p.async = true
			case "wait":
				n, err := strconv.ParseUint(strings.Trim(strings.TrimSpace(value), `"`), 10, 64)
				if errors.Is(err, strconv.ErrRange) || (err == nil && n > uint64(maxWait/time.Second)) {
					n, err = uint64(maxWait/time.Second), nil
				}
				if err == nil && n > 0 {
					p.wait = time.Duration(n) * time.Second
				}
			}
		}
	}
	return p
}
