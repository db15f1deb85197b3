package dashboard

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

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

type tryPage struct {
	frame
	Samples []Sample
	// Form is what the page asks, as the request's fields; OwnURL the
	// address the user typed, kept in its field for the next try.
	Form     client.Request
	OwnURL   string
	Result   *upscale.Response
	Problem  *upscale.Problem
	Curl     string
	Scales   []int
	Types    []upscale.ImageType
	Denoises []upscale.Denoise
	Formats  []upscale.Format
}

func (d *Dashboard) newTryPage(r *http.Request, account string, form client.Request) tryPage {
	return tryPage{frame: d.frame(r, account, "try"), Samples: d.cfg.Samples, Form: form,
		Scales: upscale.Scales(), Types: upscale.ImageTypes(), Denoises: upscale.DenoiseLevels(), Formats: upscale.Formats()}
}

func (d *Dashboard) tryPage(w http.ResponseWriter, r *http.Request, account string) {
	form := client.Request{Scale: 2, ImageType: string(upscale.Photo), Denoise: string(upscale.DenoiseMax)}
	if len(d.cfg.Samples) > 0 {
		form.ImageURL = d.cfg.Samples[0].URL
	}
	d.render(w, r, http.StatusOK, "try", d.newTryPage(r, account, form))
}

func (d *Dashboard) try(w http.ResponseWriter, r *http.Request, account string) {
	scale, _ := strconv.Atoi(r.PostFormValue("scale"))
	form := client.Request{ImageURL: r.PostFormValue("sample"), Scale: scale, ImageType: r.PostFormValue("imageType"), Denoise: r.PostFormValue("denoise"),
		Format: r.PostFormValue("format")}
	own := strings.TrimSpace(r.PostFormValue("imageUrl"))
	if own != "" {
		form.ImageURL = own
	}
	body, _ := json.Marshal(form)
	call, _ := http.NewRequestWithContext(upscale.ForAccount(r.Context(), account), http.MethodPost, d.cfg.APIURL, strings.NewReader(string(body)))
	call.Header.Set("Content-Type", "application/json")
	answer := &apiAnswer{header: http.Header{}}
	d.cfg.API.ServeHTTP(answer, call)

	page := d.newTryPage(r, account, form)
	page.OwnURL = own
	page.Curl = curlCommand(d.cfg.APIURL, body)
	status := http.StatusOK
	if answer.status() == http.StatusOK {
		page.Result = new(upscale.Response)
		json.Unmarshal(answer.body.Bytes(), page.Result)
		d.cfg.Logger.Info("dashboard: tried an image", "account", account, "via", page.Result.Via)
		d.allowImages(w, form.ImageURL, page.Result.URL)
	} else {
		page.Problem = new(upscale.Problem)
		json.Unmarshal(answer.body.Bytes(), page.Problem)
		status = answer.status()
	}
	d.render(w, r, status, "try", page)
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
