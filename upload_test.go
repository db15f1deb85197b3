package upscale_test

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

// part is one part of an upload's form: a text field, or the file when
// file is set.
type part struct {
	name, value string
	file        []byte
}

// fileField is the part "image" holding data.
func fileField(data []byte) part { return part{name: "image", file: data} }

// form is a multipart/form-data body of parts, in their order, and its
// Content-Type.
func form(t *testing.T, parts ...part) (body []byte, contentType string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		var w io.Writer
		var err error
		if p.file != nil {
			w, err = mw.CreateFormFile(p.name, "photo.png")
		} else {
			w, err = mw.CreateFormField(p.name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if p.file != nil {
			w.Write(p.file)
		} else {
			io.WriteString(w, p.value)
		}
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), mw.FormDataContentType()
}

// upload posts parts as a multipart form with key.
func (e *env) upload(key string, parts ...part) *httptest.ResponseRecorder {
	e.t.Helper()
	body, contentType := form(e.t, parts...)
	return e.serve(uploadRequest(key, contentType, bytes.NewReader(body)))
}

func uploadRequest(key, contentType string, body io.Reader) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/api/v1/upscale", body)
	r.Header.Set("Content-Type", contentType)
	r.Header.Set("Authorization", "Bearer "+key)
	return r
}

// padded is png with zeros after its end, n bytes in all: still the
// same image to a decoder, of an exact file size.
func padded(t *testing.T, png []byte, n int) []byte {
	t.Helper()
	if len(png) > n {
		t.Fatalf("a %d-byte PNG cannot be padded to %d", len(png), n)
	}
	return append(bytes.Clone(png), make([]byte, n-len(png))...)
}

// TestUploadOK: a file sent in the part "image", with its fields before
// or after it, is enlarged as the same file fetched is, and charged once.
func TestUploadOK(t *testing.T) {
	e := newEnv(t)
	fetched := checkOK(t, e.post(keyPro, body(e.url("/small.png"), `"scale": 4`, `"imageType": "anime"`)), upscale.PoolFree)
	for name, parts := range map[string][]part{
		"FileFirst": {fileField(smallPNG), {name: "scale", value: "4"}, {name: "imageType", value: "anime"}},
		"FileLast":  {{name: "scale", value: "4"}, {name: "imageType", value: "anime"}, {name: "denoise", value: ""}, fileField(smallPNG)},
	} {
		t.Run(name, func(t *testing.T) {
			w := e.upload(keyPro, parts...)
			if got := checkOK(t, w, upscale.PoolFree); !reflect.DeepEqual(got, fetched) {
				t.Error("the uploaded file's result differs from the same file's fetched")
			}
			if got := w.Header().Get("Upscale-Engine"); got != "repeat;scale=4" {
				t.Errorf("Upscale-Engine %q, want the engine's at scale 4", got)
			}
		})
	}
	if b := e.balance("pro"); b.Free != 0 {
		t.Errorf("%d free images left after three requests of three, want 0", b.Free)
	}
	if load := e.handler.Load(); load.MemoryInUse != 0 {
		t.Errorf("%d bytes of memory still granted after the uploads", load.MemoryInUse)
	}
	t.Run("URLInAForm", func(t *testing.T) {
		e := newEnv(t)
		checkOK(t, e.upload(keyFree, part{name: "imageUrl", value: e.url("/small.png")}), upscale.PoolFree)
	})
}

// TestUploadLimits: an upload is held to the plan's file size as a
// download is: a file at the plan's limit is taken and one byte over is
// 400 image_too_large; over the free tier's, 403 paid_plan_required on a
// free plan without credits, and paid for on a paid plan. A body that
// declares more than the plan's limit and the form's overhead is refused
// before a byte of it is read. Nothing refused is charged.
func TestUploadLimits(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.keys.AddKey(ctx, "upk_test_tiny_0123456789abcdef", "tiny")
	e.putAccount(upscale.Account{ID: "tiny", Plan: tinyPlan}) // 1000 bytes, under the free tier's 2000
	for _, tc := range []struct {
		name, key string
		size      int
		status    int
		code      string
		via       upscale.Pool
	}{
		{"UnderPlan", "upk_test_tiny_0123456789abcdef", 999, 200, "", upscale.PoolFree},
		{"AtPlan", "upk_test_tiny_0123456789abcdef", 1000, 200, "", upscale.PoolFree},
		{"OverPlan", "upk_test_tiny_0123456789abcdef", 1001, 400, "image_too_large", ""},
		{"AtFreeTier", keyFree, freeTierBytes, 200, "", upscale.PoolFree},
		{"OverFreeTier", keyFree, freeTierBytes + 1, 403, "paid_plan_required", ""},
		{"OverFreeTierPaid", keyPro, freeTierBytes + 1, 200, "", upscale.PoolFree},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := e.upload(tc.key, fileField(padded(t, smallPNG, tc.size)))
			if tc.status == 200 {
				checkOK(t, w, tc.via)
				return
			}
			checkProblem(t, w, tc.status, tc.code)
		})
	}
	if b := e.balance("tiny"); b.Free != 1 {
		t.Errorf("tiny: %d free images left, want 1: two charged, the refusal not", b.Free)
	}
	if b := e.balance("free"); b.Free != 2 {
		t.Errorf("free: %d free images left, want 2: one charged, the refusal not", b.Free)
	}

	t.Run("DeclaredTooLarge", func(t *testing.T) {
		unread := &readCounter{r: strings.NewReader("--x\r\n")}
		r := uploadRequest(keyFree, "multipart/form-data; boundary=x", unread)
		r.ContentLength = freePlan.MaxFileBytes + upscale.MaxRequestBytes + 1
		p := checkProblem(t, e.serve(r), 400, "image_too_large")
		if unread.n != 0 {
			t.Errorf("%d bytes read of a body declared too large", unread.n)
		}
		if !strings.Contains(p.Detail, "1 MB") {
			t.Errorf("detail %q does not name the plan's limit", p.Detail)
		}
	})
	t.Run("UnauthorizedFirst", func(t *testing.T) {
		unread := &readCounter{r: strings.NewReader("--x\r\n")}
		r := uploadRequest("upk_test_unknown_0123456789abcdef", "multipart/form-data; boundary=x", unread)
		r.ContentLength = 1 << 30
		checkProblem(t, e.serve(r), 401, "unauthorized")
		if unread.n != 0 {
			t.Errorf("%d bytes read of an unauthorized upload", unread.n)
		}
	})
	t.Run("MemoryBudget", func(t *testing.T) {
		small := newEnv(t, func(c *upscale.Config) { c.Capacity.MemoryBudget = 1000 })
		checkProblem(t, small.upload(keyFree, fileField(padded(t, smallPNG, 1500))), 400, "image_too_large")
		if b := small.balance("free"); b.Free != 3 || small.handler.Load().MemoryInUse != 0 {
			t.Errorf("after a file larger than the memory budget: %d free images, %d bytes granted; want 3 and 0", b.Free, small.handler.Load().MemoryInUse)
		}
	})
}

// readCounter counts the bytes read from r.
type readCounter struct {
	r io.Reader
	n int
}

func (c *readCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestUploadFormRefused: a form that is not one image and the API's
// fields is 400 with a sentence that says what to send, and charges
// nothing.
func TestUploadFormRefused(t *testing.T) {
	e := newEnv(t)
	whole, contentType := form(t, fileField(smallPNG), part{name: "scale", value: "2"})
	for _, tc := range []struct {
		name        string
		body        []byte
		contentType string
		code        string
		detail      string
	}{
		{"FileAndURL", mustForm(t, fileField(smallPNG), part{name: "imageUrl", value: e.url("/small.png")}), "", "invalid_request", "not both"},
		{"Neither", mustForm(t, part{name: "scale", value: "2"}), "", "invalid_request", `part "image"`},
		{"UnknownPart", mustForm(t, fileField(smallPNG), part{name: "Scale", value: "2"}), "", "invalid_request", `"Scale"`},
		{"TwoFiles", mustForm(t, fileField(smallPNG), fileField(smallPNG)), "", "invalid_request", "twice"},
		{"EmptyFile", mustForm(t, fileField([]byte{})), "", "invalid_request", "empty"},
		{"BadScale", mustForm(t, fileField(smallPNG), part{name: "scale", value: "3"}), "", "invalid_scale", "scale"},
		{"BadFormat", mustForm(t, fileField(smallPNG), part{name: "format", value: "bmp"}), "", "invalid_request", "format"},
		{"NotAnImage", mustForm(t, fileField([]byte("this is not an image"))), "", "unsupported_image", ""},
		{"Truncated", whole[:len(whole)-20], contentType, "invalid_request", "cut short"},
		{"NoBoundary", whole, "multipart/form-data", "invalid_request", "boundary"},
		{"FieldsTooLarge", mustForm(t, fileField(smallPNG), part{name: "denoise", value: strings.Repeat("x", upscale.MaxRequestBytes)}), "", "invalid_request", "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := tc.contentType
			if ct == "" {
				ct = "multipart/form-data; boundary=" + testBoundary
			}
			p := checkProblem(t, e.serve(uploadRequest(keyFree, ct, bytes.NewReader(tc.body))), 400, tc.code)
			if !strings.Contains(p.Detail, tc.detail) {
				t.Errorf("detail %q does not say %q", p.Detail, tc.detail)
			}
		})
	}
	t.Run("FileInJSON", func(t *testing.T) {
		p := checkProblem(t, e.post(keyFree, `{"image": "aGVsbG8="}`), 400, "invalid_request")
		if !strings.Contains(p.Detail, "multipart/form-data") {
			t.Errorf("detail %q does not say how to send a file", p.Detail)
		}
	})
	if b := e.balance("free"); b.Free != 3 || e.blobs.Len() != 0 || e.handler.Load().MemoryInUse != 0 {
		t.Errorf("after the refusals: %d free images, %d items stored, %d bytes granted; want 3, 0 and 0", b.Free, e.blobs.Len(), e.handler.Load().MemoryInUse)
	}
}

// testBoundary is mustForm's boundary.
const testBoundary = "upload-test-boundary"

// mustForm is form's body with testBoundary.
func mustForm(t *testing.T, parts ...part) []byte {
	t.Helper()
	body, contentType := form(t, parts...)
	_, boundary, _ := strings.Cut(contentType, "boundary=")
	return bytes.ReplaceAll(body, []byte(boundary), []byte(testBoundary))
}

// TestUploadIdempotent: an Idempotency-Key covers the uploaded bytes: the
// same file again is the kept answer, charged once; another file with the
// key is 422.
func TestUploadIdempotent(t *testing.T) {
	e := newEnv(t)
	send := func(file []byte) *httptest.ResponseRecorder {
		body, contentType := form(t, fileField(file))
		r := uploadRequest(keyFree, contentType, bytes.NewReader(body))
		r.Header.Set("Idempotency-Key", "upload-once")
		return e.serve(r)
	}
	first := send(smallPNG)
	checkOK(t, first, upscale.PoolFree)
	again := send(smallPNG)
	if again.Code != 200 || again.Header().Get("Idempotent-Replayed") != "true" || again.Body.String() != first.Body.String() {
		t.Errorf("the same upload again: %d %s, want the kept answer replayed", again.Code, again.Body)
	}
	checkProblem(t, send(padded(t, smallPNG, len(smallPNG)+1)), 422, "idempotency_key_reused")
	if b := e.balance("free"); b.Free != 2 {
		t.Errorf("%d free images left, want 2: the upload charged once", b.Free)
	}
}

// TestUploadJob: the job form takes an upload: the file is kept in the
// BlobStore for the worker, the job enlarges it, and the kept file is
// deleted once the job has run.
func TestUploadJob(t *testing.T) {
	e := newEnv(t)
	body, contentType := form(t, fileField(smallPNG), part{name: "scale", value: "4"})
	r := uploadRequest(keyFree, contentType, bytes.NewReader(body))
	r.Header.Set("Prefer", "respond-async")
	w := e.serve(r)
	location := w.Header().Get("Location")
	if w.Code != http.StatusAccepted || location == "" {
		t.Fatalf("submit an upload: %d %s", w.Code, w.Body)
	}
	job := e.waitJob(location, keyFree)
	if job.Status != upscale.JobSucceeded || job.Result == nil {
		t.Fatalf("job %+v, want succeeded", job)
	}
	if size := upscaletest.ResultPNG(t, job.Result.URL).Bounds().Size(); size.X != 64 {
		t.Errorf("result %v, want the upload at scale 4: 64 wide", size)
	}
	if n := e.blobs.Len(); n != 1 {
		t.Errorf("%d items stored after the job, want its result alone: the kept upload deleted", n)
	}
}

// TestUploadSlow: an upload that arrives slowly, its length declared
// and its bytes dripping in, holds a place but no engine slot, so other
// requests are enlarged meanwhile; it is cut off at Fetch.Timeout and
// answered 400 then, not once the caller has sent the rest, and charged
// nothing; and uploads that hold every place leave the next request
// refused at once with 503.
func TestUploadSlow(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) {
		// Both uploads must still hold their places when the third
		// request comes, which took up to 126 ms on a loaded machine.
		c.Fetch.Timeout = 2 * time.Second
		c.Capacity.EngineConcurrency, c.Capacity.QueueLength = 1, 1
	})
	srv := httptest.NewServer(e.handler)
	defer srv.Close()
	file, contentType := form(t, fileField(padded(t, smallPNG, 100<<10))) // 50 s at the drip's pace
	slow := func() (answer chan *http.Response, stall *io.PipeWriter) {
		pr, pw := io.Pipe()
		answer = make(chan *http.Response, 1)
		go func() {
			r, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/upscale", pr)
			r.ContentLength = int64(len(file))
			r.Header.Set("Content-Type", contentType)
			r.Header.Set("Authorization", "Bearer "+keyPro)
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Error(err)
				close(answer)
				return
			}
			answer <- resp
		}()
		go func() {
			for rest := file; len(rest) > 0; rest = rest[min(100, len(rest)):] {
				if _, err := pw.Write(rest[:min(100, len(rest))]); err != nil {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		return answer, pw
	}
	start := time.Now()
	first, stall := slow()
	defer stall.Close()
	waitFor(t, "the upload on a place", func() bool { return e.handler.Load().Queued == 1 })
	if load := e.handler.Load(); load.InEngine != 0 {
		t.Errorf("load %+v while an upload arrives: want it on no engine slot", load)
	}
	checkOK(t, e.post(keyFree, body(e.url("/small.png"))), upscale.PoolFree)
	second, stall2 := slow()
	defer stall2.Close()
	waitFor(t, "both uploads on a place", func() bool { return e.handler.Load().Queued == 2 })
	refusedAt := time.Now()
	checkProblem(t, e.post(keyFree, body(e.url("/small.png"))), 503, "overloaded")
	if took := time.Since(refusedAt); took > time.Second {
		t.Errorf("the refusal took %v, want it at once", took)
	}
	for _, answer := range []chan *http.Response{first, second} {
		resp := <-answer
		if resp == nil {
			continue
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("a stalled upload answered after %v, want soon after its 2 s", took)
		}
		text, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(text), "longer than 2s") {
			t.Errorf("a stalled upload: %d %s; want 400 saying it took longer than Fetch.Timeout", resp.StatusCode, text)
		}
	}
	if b := e.balance("pro"); b.Free != 3 {
		t.Errorf("%d free images left, want 3: stalled uploads are not charged", b.Free)
	}
}

// waitFor polls cond for up to 5 s, for what.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s, still not %s", what)
		}
	}
}

// TestUploadFormGuard: what a form adds beside its file is read only up
// to its allowance: a part header of a megabyte, a field of a megabyte or
// a megabyte of preamble is refused with 400 after at most 32 KiB of the
// body is read.
func TestUploadFormGuard(t *testing.T) {
	e := newEnv(t)
	mb := strings.Repeat("a", 1<<20)
	for name, body := range map[string]string{
		"PartHeader": "--b\r\nContent-Disposition: form-data; name=\"scale\"\r\nX-Pad: " + mb + "\r\n\r\n2\r\n--b--\r\n",
		"Field":      "--b\r\nContent-Disposition: form-data; name=\"imageType\"\r\n\r\n" + mb + "\r\n--b--\r\n",
		"Preamble":   strings.Repeat("x\r\n", 1<<18) + "--b\r\nContent-Disposition: form-data; name=\"scale\"\r\n\r\n2\r\n--b--\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			read := &readCounter{r: strings.NewReader(body)}
			checkProblem(t, e.serve(uploadRequest(keyFree, "multipart/form-data; boundary=b", read)), 400, "invalid_request")
			if read.n > 32<<10 {
				t.Errorf("%d bytes of the body read, want at most 32 KiB", read.n)
			}
		})
	}
}

// TestUploadFormValues: a form's text is held to what a JSON body's is:
// valid UTF-8, and numbers in digits; a file input left empty (no file
// name, no bytes), as a browser sends it, is absent.
func TestUploadFormValues(t *testing.T) {
	e := newEnv(t)
	for name, tc := range map[string]struct {
		parts  []part
		detail string
	}{
		"NotUTF8":      {[]part{{name: "imageUrl", value: e.url("/small\xff.png")}}, "UTF-8"},
		"SpacedNumber": {[]part{fileField(smallPNG), {name: "scale", value: " 4"}}, "digits"},
		"LongNumber":   {[]part{fileField(smallPNG), {name: "quality", value: strings.Repeat("9", 100)}}, "digits"},
	} {
		t.Run(name, func(t *testing.T) {
			if p := checkProblem(t, e.upload(keyFree, tc.parts...), 400, "invalid_request"); !strings.Contains(p.Detail, tc.detail) || strings.Contains(p.Detail, "999") {
				t.Errorf("detail %q, want it to say %q without echoing the value", p.Detail, tc.detail)
			}
		})
	}
	t.Run("EmptyFileInput", func(t *testing.T) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		mw.CreateFormFile("image", "") // what a browser sends for an empty file input
		mw.WriteField("imageUrl", e.url("/small.png"))
		mw.Close()
		checkOK(t, e.serve(uploadRequest(keyFree, mw.FormDataContentType(), &buf)), upscale.PoolFree)
	})
}

// TestUploadMemoryWaitBounded: an upload whose memory is held by others
// waits for it only until its deadline, then is refused with 503
// overloaded and a Retry-After, not blamed on the caller; and an engine
// that outlives an upload's request keeps the upload's memory counted
// until it returns.
func TestUploadMemoryWaitBounded(t *testing.T) {
	const need = 10_000
	u := &hungryUpscaler{need: need, gate: make(chan struct{})}
	e := newBudgetEnv(t, u, need+2*int64(len(smallPNG)+512)+100, func(c *upscale.Config) {
		c.EngineTimeout = 200 * time.Millisecond
		c.Fetch.Timeout = 300 * time.Millisecond
	})
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- e.upload(keyPro, fileField(smallPNG)) }()
	waitFor(t, "the first upload in the engine", func() bool { return e.handler.Load().InEngine == 1 })
	start := time.Now()
	w := e.upload(keyPro, fileField(padded(t, smallPNG, need)))
	checkProblem(t, w, http.StatusServiceUnavailable, "overloaded")
	if took := time.Since(start); w.Header().Get("Retry-After") == "" || took > 2*time.Second {
		t.Errorf("refused after %v, Retry-After %q; want at its 300 ms deadline, with a Retry-After", took, w.Header().Get("Retry-After"))
	}
	checkProblem(t, <-first, http.StatusGatewayTimeout, "upstream_timeout")
	if inUse := e.handler.Load().MemoryInUse; inUse < need+int64(len(smallPNG)) {
		t.Errorf("%d bytes granted while the engine still works on an upload, want at least its %d and the file's %d", inUse, need, len(smallPNG))
	}
	close(u.gate)
	waitForMemoryBack(t, e.handler)
	if b := e.balance("pro"); b.Free != 3 {
		t.Errorf("%d free images left, want 3", b.Free)
	}
}

// TestUploadWithinServerReadTimeout: the upload's read deadline replaces
// the connection's, so it never outlasts the server's own ReadTimeout:
// with ReadTimeout 300 ms and Fetch.Timeout 5 s, a stalled upload is cut
// within about 300 ms.
func TestUploadWithinServerReadTimeout(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) { c.Fetch.Timeout = 5 * time.Second })
	srv := httptest.NewUnstartedServer(e.handler)
	srv.Config.ReadTimeout = 300 * time.Millisecond
	srv.Start()
	defer srv.Close()
	file, contentType := form(t, fileField(smallPNG))
	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write(file[:len(file)/2])
	r, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/upscale", pr)
	r.ContentLength = int64(len(file))
	r.Header.Set("Content-Type", contentType)
	r.Header.Set("Authorization", "Bearer "+keyFree)
	start := time.Now()
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if took := time.Since(start); resp.StatusCode != 400 || took > 2*time.Second {
		t.Errorf("a stalled upload: %d after %v; want 400 at the server's 300 ms", resp.StatusCode, took)
	}
}
