package dashboard

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"unicode"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/client"
)

// Sample is an image the Try it page offers, by name.
type Sample struct {
	Name, URL string
}

// The Try it page runs one image through the API's own handler for the
// signed-in account (upscale.ForAccount): admission, quota, fetch
// policy, engine and link, charged as any request is.

// Try it takes a file of at most tryMaxFileBytes, past what a plan
// usually accepts, so that the API, not the page, says what the
// account's plan allows; tryFormBytes more are the form's other fields.
// Up to tryMemoryBytes of it are held in memory, the rest in a temporary
// file, and one up to tryPreviewBytes is shown beside its result.
const (
	tryMaxFileBytes   = 64 << 20
	tryFormBytes      = 64 << 10
	tryMemoryBytes    = 8 << 20
	tryPreviewBytes   = 4 << 20
	tryUploadTooLarge = "Try it takes files up to %s. Send a larger one to the API itself, which takes as much as your plan allows."
)

type tryPage struct {
	frame
	Samples []Sample
	// Form is what the page asks, as the request's fields; OwnURL the
	// address the user typed, kept in its field for the next try.
	Form   client.Request
	OwnURL string
	// Upload is the name of the file tried, "" when the try sent an
	// address; Preview is that file as a data: URL, for the comparison
	// with its result, "" when it is too large to put in the page or not
	// an image every browser shows.
	Upload   string
	Preview  template.URL
	Result   *upscale.Response
	Problem  *upscale.Problem
	Curl     string
	Scales   []int
	Types    []upscale.ImageType
	Denoises []upscale.Denoise
	Formats  []upscale.Format
	// MaxFile is the largest file the page takes, in words.
	MaxFile string
}

func (d *Dashboard) newTryPage(r *http.Request, account string, form client.Request) tryPage {
	return tryPage{frame: d.frame(r, account, "try"), Samples: d.cfg.Samples, Form: form,
		Scales: upscale.Scales(), Types: upscale.ImageTypes(), Denoises: upscale.DenoiseLevels(), Formats: upscale.Formats(),
		MaxFile: upscale.Megabytes(tryMaxFileBytes)}
}

// tryForm is the Try it page's form as it first shows: the API's
// defaults, and the first sample.
func (d *Dashboard) tryForm() client.Request {
	form := client.Request{Scale: 2, ImageType: string(upscale.Photo), Denoise: string(upscale.DenoiseMax)}
	if len(d.cfg.Samples) > 0 {
		form.ImageURL = d.cfg.Samples[0].URL
	}
	return form
}

func (d *Dashboard) tryPage(w http.ResponseWriter, r *http.Request, account string) {
	d.render(w, r, http.StatusOK, "try", d.newTryPage(r, account, d.tryForm()))
}

// try runs the form's image through the API: the file chosen, sent as an
// upload, else the address typed, else the sample.
func (d *Dashboard) try(w http.ResponseWriter, r *http.Request, account string) {
	r.Body = http.MaxBytesReader(w, r.Body, tryMaxFileBytes+tryFormBytes)
	err := r.ParseMultipartForm(tryMemoryBytes)
	if r.MultipartForm != nil {
		// The server removes the temporary files of the request it made,
		// not those of r, a copy of it (signedIn).
		defer r.MultipartForm.RemoveAll()
	}
	if err != nil && !errors.Is(err, http.ErrNotMultipart) { // a form without a file may come url-encoded
		d.tryUnread(w, r, account, err)
		return
	}
	scale, _ := strconv.Atoi(r.PostFormValue("scale"))
	form := client.Request{ImageURL: r.PostFormValue("sample"), Scale: scale, ImageType: r.PostFormValue("imageType"), Denoise: r.PostFormValue("denoise"),
		Format: r.PostFormValue("format")}
	own := strings.TrimSpace(r.PostFormValue("imageUrl"))
	if own != "" {
		form.ImageURL = own
	}
	page := d.newTryPage(r, account, form)
	page.OwnURL = own
	upload := chosenFile(r)
	var answer *apiAnswer
	if upload != nil {
		call := form
		call.ImageURL = "" // the file is the image, whatever the address fields say
		page.Upload = displayName(upload.Filename)
		page.Curl = curlUploadCommand(d.cfg.APIURL, page.Upload, call)
		if answer, err = d.tryUpload(r.Context(), account, upload, call); err != nil {
			d.fail(w, r, account, "read an uploaded file", err)
			return
		}
	} else {
		body, _ := json.Marshal(form)
		page.Curl = curlCommand(d.cfg.APIURL, body)
		answer = d.callAPI(r.Context(), account, "application/json", bytes.NewReader(body), int64(len(body)))
	}

	status := http.StatusOK
	if answer.status() == http.StatusOK {
		page.Result = new(upscale.Response)
		json.Unmarshal(answer.body.Bytes(), page.Result)
		d.cfg.Logger.Info("dashboard: tried an image", "account", account, "via", page.Result.Via, "upload", upload != nil)
		if upload != nil {
			page.Preview = preview(upload)
			d.allowImages(w, page.Result.URL)
		} else {
			d.allowImages(w, form.ImageURL, page.Result.URL)
		}
	} else {
		page.Problem = new(upscale.Problem)
		json.Unmarshal(answer.body.Bytes(), page.Problem)
		status = answer.status()
	}
	d.render(w, r, status, "try", page)
}

// tryUnread answers a Try it form that could not be read, err saying
// why: a file past tryMaxFileBytes, or a body cut short or malformed.
func (d *Dashboard) tryUnread(w http.ResponseWriter, r *http.Request, account string, err error) {
	page := d.newTryPage(r, account, d.tryForm())
	page.Problem = &upscale.Problem{Status: http.StatusBadRequest, Title: "The form could not be read",
		Detail: "The form arrived cut short or malformed; send it again."}
	if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
		page.Problem = &upscale.Problem{Status: http.StatusRequestEntityTooLarge, Title: "The file is too large for Try it",
			Detail: fmt.Sprintf(tryUploadTooLarge, page.MaxFile)}
	}
	d.cfg.Logger.Info("dashboard: a Try it form unread", "account", account, "err", err)
	d.render(w, r, page.Problem.Status, "try", page)
}

// chosenFile is the file the form's file input sent, nil when none was
// chosen (a browser then sends the part without a filename, a value).
func chosenFile(r *http.Request) *multipart.FileHeader {
	if r.MultipartForm == nil || len(r.MultipartForm.File["image"]) == 0 {
		return nil
	}
	return r.MultipartForm.File["image"][0]
}

// callAPI runs one POST of account's through the API's handler, with
// body of contentType, and returns the answer.
func (d *Dashboard) callAPI(ctx context.Context, account, contentType string, body io.Reader, length int64) *apiAnswer {
	call, _ := http.NewRequestWithContext(upscale.ForAccount(ctx, account), http.MethodPost, d.cfg.APIURL, body)
	call.Header.Set("Content-Type", contentType)
	call.ContentLength = length
	answer := &apiAnswer{header: http.Header{}}
	d.cfg.API.ServeHTTP(answer, call)
	return answer
}

// tryUpload sends file to the API for account as an upload with call's
// fields, the form the client's UpscaleFile sends (Request.WriteForm),
// streamed from where the form keeps it rather than copied whole first.
func (d *Dashboard) tryUpload(ctx context.Context, account string, file *multipart.FileHeader, call client.Request) (*apiAnswer, error) {
	f, err := file.Open()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	body, pipe := io.Pipe()
	form := multipart.NewWriter(pipe)
	contentType := form.FormDataContentType()
	// The form's length, declared as a browser's and curl's are, so that
	// the API grants the file's memory by it rather than twice the plan's
	// limit: the same form, written with as many zeros as the file has.
	var length countingWriter
	dry := multipart.NewWriter(&length)
	dry.SetBoundary(form.Boundary())
	if err := call.WriteForm(dry, file.Filename, io.LimitReader(zeros{}, file.Size)); err != nil {
		return nil, err
	}
	dry.Close()
	written := make(chan struct{})
	go func() {
		defer close(written)
		err := call.WriteForm(form, file.Filename, f)
		if err == nil {
			err = form.Close()
		}
		pipe.CloseWithError(err)
	}()
	answer := d.callAPI(ctx, account, contentType, body, int64(length))
	body.Close() // the API may answer before reading the whole form, as when it refuses at once: the writer stops then
	<-written    // before f is closed
	return answer, nil
}

// countingWriter counts what is written to it.
type countingWriter int64

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// preview is file as a data: URL, for the page to show beside its
// result: "" when it is larger than tryPreviewBytes or not of a type
// every browser shows.
func preview(file *multipart.FileHeader) template.URL {
	if file.Size > tryPreviewBytes {
		return ""
	}
	f, err := file.Open()
	if err != nil {
		return ""
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, tryPreviewBytes))
	if err != nil {
		return ""
	}
	switch contentType := http.DetectContentType(data); contentType {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		// Trusted as a URL: the page makes it, of a type the browser
		// decodes as an image and nothing else.
		return template.URL("data:" + contentType + ";base64," + base64.StdEncoding.EncodeToString(data))
	}
	return ""
}

// displayName is a file's name as the page shows it and the curl command
// reads it: without control characters, which a browser never sends but
// a forged form may.
func displayName(name string) string {
	name = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(name, ""))
	return cmp.Or(name, "image")
}

// apiAnswer is the http.ResponseWriter a Try it call's answer is written
// to, for the page to show: the API's status and body.
type apiAnswer struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (a *apiAnswer) Header() http.Header { return a.header }

func (a *apiAnswer) WriteHeader(code int) {
	if a.code == 0 {
		a.code = code
	}
}

func (a *apiAnswer) Write(p []byte) (int, error) {
	a.WriteHeader(http.StatusOK)
	return a.body.Write(p)
}

// status is the status the API answered with: 200 when it wrote a body
// without one, as net/http's server sends.
func (a *apiAnswer) status() int {
	if a.code == 0 {
		return http.StatusOK
	}
	return a.code
}

// curlCommand is a POST of body to apiURL as curl, the key left to the
// shell in double quotes ($API_KEY).
func curlCommand(apiURL string, body []byte) string {
	return "curl -sS -X POST " + shellWord(apiURL) + ` -H "Authorization: Bearer $API_KEY" -H 'Content-Type: application/json' -d ` + shellWord(string(body))
}

// curlUploadCommand is an upload to apiURL of the file named filename
// with call's fields as curl: each field its own -F, as Request.WriteForm
// writes them, the key left to the shell in double quotes ($API_KEY).
func curlUploadCommand(apiURL, filename string, call client.Request) string {
	// curl reads a file's name up to a ; or a , unless it is quoted, and
	// then takes \\ and \" as \ and ".
	if strings.ContainsAny(filename, ";,\"\\ \t") {
		filename = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(filename) + `"`
	}
	words := []string{"curl", "-F", shellWord("image=@" + filename)}
	for _, f := range []struct{ name, value string }{
		{"scale", strconv.Itoa(call.Scale)}, {"imageType", call.ImageType}, {"denoise", call.Denoise}, {"format", call.Format},
	} {
		if f.value == "" || f.value == "0" {
			continue
		}
		// -F reads a value starting with @ or < from a file, and one with
		// a ; as having parameters: --form-string sends any value as it
		// is, for one that is not a plain word.
		option := "-F"
		if !plainFormValue(f.value) {
			option = "--form-string"
		}
		words = append(words, option, shellWord(f.name+"="+f.value))
	}
	return strings.Join(words, " ") + ` -H "Authorization: Bearer $API_KEY" ` + shellWord(apiURL)
}

// plainFormValue reports whether curl's -F sends s as it is: letters,
// digits, - _ and . only, as every value Try it offers is.
func plainFormValue(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("-_.", r))
	}) < 0
}

// shellWord returns s as one word of a POSIX shell command, which the
// shell passes on as s whatever it holds: a page's reader runs the curl
// command, and the image's address is anyone's. A word of characters no
// shell treats specially stays as it is; any other goes between single
// quotes, inside which the shell reads every character as itself but the
// quote: each ' in s is written as a closing quote, an escaped quote (\')
// and an opening quote.
func shellWord(s string) string {
	plain := s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("-_./:@%+=,", r))
	}) < 0
	if plain {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// allowImages lets the page show images from the origins of urls, beside
// its own: the source wherever it is, and the result wherever the
// BlobStore's links point.
func (d *Dashboard) allowImages(w http.ResponseWriter, urls ...string) {
	var origins []string
	for _, raw := range urls {
		origins = append(origins, origin(raw))
	}
	w.Header().Set("Content-Security-Policy", withImagesFrom(d.policy, origins...))
}
