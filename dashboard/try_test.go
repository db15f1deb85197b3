package dashboard_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"hash/crc32"
	"html"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/upscaletest"
)

// field is one text part of a Try it form.
type field struct{ name, value string }

// tryForm is Try it's form as a browser sends it: fields, then the file
// input's part, named filename (a browser sends no file, filename "",
// when none is chosen).
func tryForm(t *testing.T, fields []field, filename string, file []byte) (contentType string, body []byte) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for _, f := range fields {
		w.WriteField(f.name, f.value)
	}
	part, err := w.CreateFormFile("image", filename)
	if err != nil {
		t.Fatal(err)
	}
	part.Write(file)
	w.Close()
	return w.FormDataContentType(), b.Bytes()
}

// upload posts a Try it form with a file to the site as account, from
// site, the Sec-Fetch-Site a browser sends, and returns the status, the
// page and the headers.
func (s *site) upload(account, site string, fields []field, filename string, file []byte) (int, string, http.Header) {
	s.t.Helper()
	contentType, body := tryForm(s.t, fields, filename, file)
	req, _ := http.NewRequest(http.MethodPost, s.server.URL+"/dashboard/try", bytes.NewReader(body))
	req.Header.Set("X-Test-Account", account)
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Sec-Fetch-Site", site)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(page), resp.Header
}

// options are Try it's options as the page first shows them, beside the
// sample it offers.
func (s *site) options() []field {
	return []field{{"sample", s.origin + "/square.png"}, {"scale", "2"}, {"imageType", "photo"}, {"denoise", "max"}, {"format", ""}}
}

// TestTryUploadDeclaresItsLength: Try it sends an upload with its
// length declared, as a browser and curl do, so that the API grants its
// file's memory by it rather than twice the plan's limit.
func TestTryUploadDeclaresItsLength(t *testing.T) {
	type sent struct{ declared, read int64 }
	calls := make(chan sent, 1)
	s := newSite(t, upscaletest.NewClock(start), func(c *dashboard.Config) {
		api := c.API
		c.API = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			calls <- sent{r.ContentLength, int64(len(body))}
			r.Body = io.NopCloser(bytes.NewReader(body))
			api.ServeHTTP(w, r)
		})
	})
	if status, page, _ := s.upload("acme", "same-origin", s.options(), "cat.png", upscaletest.TestImagePNG(t, 8, 8)); status != http.StatusOK {
		t.Fatalf("try an upload: %d\n%s", status, page)
	}
	if got := <-calls; got.declared != got.read {
		t.Errorf("the upload declared %d bytes and sent %d; want its length declared", got.declared, got.read)
	}
}

// TestTryUpload: a file chosen in Try it is sent to the API as an
// upload, in place of the sample, enlarged and charged; the page shows it
// beside its result, and the curl command uploads it.
func TestTryUpload(t *testing.T) {
	s := newSite(t, upscaletest.NewClock(start))
	if _, page, _ := s.do("GET", "/try", "acme", nil); !strings.Contains(page, `enctype="multipart/form-data"`) ||
		!strings.Contains(page, `<label for="image">Or choose a file from your computer</label>`) ||
		!strings.Contains(page, `<input id="image" name="image" type="file" accept="image/*" aria-describedby="image-hint">`) {
		t.Fatalf("the Try it page has no file input in a multipart form:\n%s", page)
	}
	file := upscaletest.TestImagePNG(t, 8, 8)
	status, page, header := s.upload("acme", "same-origin", s.options(), "my cat.png", file)
	result := regexp.MustCompile(`<img id="result-image" src="(http://results\.test/outputs/[^"]+)"`).FindStringSubmatch(page)
	if status != http.StatusOK || result == nil || !strings.Contains(page, "Paid by <code>free_pool</code>") {
		t.Fatalf("try an upload: %d\n%s", status, page)
	}
	before := regexp.MustCompile(`<img class="before" id="before" src="([^"]+)"`).FindStringSubmatch(page)
	if want := "data:image/png;base64," + base64.StdEncoding.EncodeToString(file); before == nil || html.UnescapeString(before[1]) != want {
		t.Errorf("the page does not show the file uploaded beside its result:\n%s", page)
	}
	if csp := header.Get("Content-Security-Policy"); !strings.Contains(csp, "img-src 'self' data: http://results.test;") {
		t.Errorf("the result's CSP %q does not let the page show the file and the result, or lets in the sample's origin", csp)
	}
	if !strings.Contains(s.log.String(), "upload=true") {
		t.Errorf("the log does not say the try was an upload:\n%s", s.log)
	}
	curl := html.UnescapeString(regexp.MustCompile(`<code id="curl">([^<]+)</code>`).FindStringSubmatch(page)[1])
	if want := `curl -F 'image=@"my cat.png"' -F scale=2 -F imageType=photo -F denoise=max -H "Authorization: Bearer $API_KEY" https://api.test/api/v1/upscale`; curl != want {
		t.Errorf("the curl command:\n%s\nwant\n%s", curl, want)
	}
	if !strings.Contains(page, `value="`+s.origin+`/square.png" checked`) {
		t.Error("the sample is no longer chosen for the next try")
	}
	if b, _ := s.ledger.Balance(context.Background(), "acme"); b.Free != 9 {
		t.Errorf("free images left %d, want 9: one charged", b.Free)
	}

	// No file chosen: the sample, as before.
	status, page, _ = s.upload("acme", "same-origin", s.options(), "", nil)
	if status != http.StatusOK || !strings.Contains(page, `<img class="before" id="before" src="`+s.origin+`/square.png"`) || !strings.Contains(page, "-d &#39;{&#34;imageUrl&#34;") {
		t.Errorf("try the sample through the multipart form: %d\n%s", status, page)
	}
}

// paddedPNG is an 8×8 PNG of more than n bytes: a private chunk of n
// bytes, which a decoder skips, comes before its end.
func paddedPNG(t *testing.T, n int) []byte {
	t.Helper()
	small := upscaletest.TestImagePNG(t, 8, 8)
	end := len(small) - 12 // the IEND chunk: length, type, CRC
	chunk := binary.BigEndian.AppendUint32(nil, uint32(n))
	chunk = append(chunk, "prVt"...)
	chunk = append(chunk, make([]byte, n)...)
	chunk = binary.BigEndian.AppendUint32(chunk, crc32.ChecksumIEEE(chunk[4:]))
	return slices.Concat(small[:end], chunk, small[end:])
}

// TestTryUploadNotShown: an upload too large to put in the page is
// enlarged all the same, its result shown alone.
func TestTryUploadNotShown(t *testing.T) {
	s := newSite(t, upscaletest.NewClock(start))
	status, page, _ := s.upload("acme", "same-origin", s.options(), "big.png", paddedPNG(t, 4<<20))
	if status != http.StatusOK || !strings.Contains(page, `<img id="result-image" src="http://results.test/outputs/`) ||
		!strings.Contains(page, "<figcaption>big.png, enlarged.</figcaption>") || strings.Contains(page, `id="before"`) {
		t.Errorf("try a 4 MB upload: %d, want its result alone\n%s", status, page)
	}
}

// TestTryUploadTooLarge: a file past what the account's plan takes gets
// the API's problem, and no charge: past the plan, 400 image_too_large;
// within a free plan but past the free tier, 403 paid_plan_required.
func TestTryUploadTooLarge(t *testing.T) {
	s := newSite(t, upscaletest.NewClock(start))
	// The API's free tier takes 5 MB, as do acme's and globex's plans;
	// initech's free plan 10 MB.
	if err := s.ledger.PutAccount(context.Background(), upscale.Account{ID: "initech", Plan: upscale.Plan{Name: "free", MonthlyImages: 10, MaxFileBytes: 10 << 20}}); err != nil {
		t.Fatal(err)
	}
	large := paddedPNG(t, 6<<20)
	for _, tc := range []struct {
		account, code string
		status        int
	}{
		{"acme", "image_too_large", http.StatusBadRequest},
		{"globex", "image_too_large", http.StatusBadRequest},
		{"initech", "paid_plan_required", http.StatusForbidden},
	} {
		status, page, _ := s.upload(tc.account, "same-origin", s.options(), "large.png", large)
		if status != tc.status || !strings.Contains(page, "<code>"+tc.code+"</code>") || !strings.Contains(page, "Nothing was charged") ||
			!strings.Contains(page, "5 MB") || strings.Contains(page, `id="result-image"`) {
			t.Errorf("%s tries a 6 MB file: %d, want %d %s and the API's words\n%s", tc.account, status, tc.status, tc.code, page)
		}
	}
	for _, account := range []string{"acme", "initech"} {
		if b, _ := s.ledger.Balance(context.Background(), account); b.Free != 10 {
			t.Errorf("%s's free images left %d after the refusal, want 10", account, b.Free)
		}
	}
}

// TestTryUploadPastTheBound: a file past what Try it takes is refused by
// the page itself, saying so, without calling the API.
func TestTryUploadPastTheBound(t *testing.T) {
	called := false
	d, err := dashboard.New(dashboard.Config{Account: func(*http.Request) string { return "acme" }, Keys: upscale.NewMemoryKeyStore(),
		Ledger: upscale.NewMemoryLedger(upscale.LedgerOptions{}), Logger: slog.New(slog.DiscardHandler),
		API: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true })})
	if err != nil {
		t.Fatal(err)
	}
	contentType, head := tryForm(t, []field{{"scale", "2"}}, "huge.png", nil)
	end := bytes.LastIndex(head, []byte("\r\n--")) // the file's part is last and empty: the file goes before the closing boundary
	body := io.MultiReader(bytes.NewReader(head[:end]), io.LimitReader(zeros{}, 65<<20), bytes.NewReader(head[end:]))
	req := httptest.NewRequest(http.MethodPost, "/try", body)
	req.Header.Set("Content-Type", contentType)
	w := httptest.NewRecorder()
	d.ServeHTTP(w, req)
	if page := w.Body.String(); w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(page, "Try it takes files up to 64 MB") || strings.Contains(page, "Code <code>") {
		t.Errorf("a 65 MB file: %d, want 413 and the page's limit\n%s", w.Code, page)
	}
	if called {
		t.Error("the API was called with a file past the page's bound")
	}
}

// zeros reads as zero bytes without end.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestTryUploadCrossOriginRefused: an upload forged on another site is
// refused as every dashboard POST is, and charges nothing.
func TestTryUploadCrossOriginRefused(t *testing.T) {
	s := newSite(t, upscaletest.NewClock(start))
	if status, _, _ := s.upload("acme", "cross-site", s.options(), "a.png", upscaletest.TestImagePNG(t, 8, 8)); status != http.StatusForbidden {
		t.Errorf("a cross-site upload: %d, want 403", status)
	}
	if b, _ := s.ledger.Balance(context.Background(), "acme"); b.Free != 10 {
		t.Errorf("free images left %d after a forged upload, want 10", b.Free)
	}
}

// TestTryUploadCurlIsShellSafe runs the upload's curl command through sh,
// with curl a function that keeps its arguments: whatever the file's name
// and the fields hold, curl gets them as it reads -F (a name quoted where
// it holds a ; or a ,), the key from the environment, and nothing else
// runs.
func TestTryUploadCurlIsShellSafe(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to run the command with")
	}
	api := "https://api.test/api/v1/upscale"
	d, err := dashboard.New(dashboard.Config{Account: func(*http.Request) string { return "acme" }, Keys: upscale.NewMemoryKeyStore(),
		Ledger: upscale.NewMemoryLedger(upscale.LedgerOptions{}), API: http.NotFoundHandler(), APIURL: api, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		filename, imageType string
		want                []string // curl's arguments before -H
	}{
		{"cat.png", "photo", []string{"-F", "image=@cat.png", "-F", "scale=2", "-F", "imageType=photo"}},
		{"a'b.png", "photo", []string{"-F", "image=@a'b.png", "-F", "scale=2", "-F", "imageType=photo"}},
		{"'; touch pwned; '.png", "photo", []string{"-F", `image=@"'; touch pwned; '.png"`, "-F", "scale=2", "-F", "imageType=photo"}},
		{"$(touch pwned).png", "photo", []string{"-F", `image=@"$(touch pwned).png"`, "-F", "scale=2", "-F", "imageType=photo"}},
		{"`touch pwned`.png", "photo", []string{"-F", "image=@\"`touch pwned`.png\"", "-F", "scale=2", "-F", "imageType=photo"}},
		{"a;type=text,b.png", "photo", []string{"-F", `image=@"a;type=text,b.png"`, "-F", "scale=2", "-F", "imageType=photo"}},
		{`say "cheese" \o.png`, "photo", []string{"-F", `image=@"say \"cheese\" \\o.png"`, "-F", "scale=2", "-F", "imageType=photo"}},
		{"cat.png", "@/etc/passwd", []string{"-F", "image=@cat.png", "-F", "scale=2", "--form-string", "imageType=@/etc/passwd"}},
		{"cat.png", "photo;type=x", []string{"-F", "image=@cat.png", "-F", "scale=2", "--form-string", "imageType=photo;type=x"}},
	} {
		contentType, body := tryForm(t, []field{{"scale", "2"}, {"imageType", tc.imageType}}, tc.filename, []byte("png"))
		req := httptest.NewRequest(http.MethodPost, "/try", bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		w := httptest.NewRecorder()
		d.ServeHTTP(w, req)
		code := regexp.MustCompile(`<code id="curl">([^<]+)</code>`).FindStringSubmatch(w.Body.String())
		if code == nil {
			t.Fatalf("no curl command for a file named %q:\n%s", tc.filename, w.Body)
		}
		curl := html.UnescapeString(code[1])
		want := append(tc.want, "-H", "Authorization: Bearer upk_from_env", api)
		if got := runCurl(t, sh, curl); !slices.Equal(got, want) {
			t.Errorf("a file named %q, imageType %q: the command\n%s\ngave curl %q; want %q", tc.filename, tc.imageType, curl, got, want)
		}
	}
}
