package main

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// request is one POST's outcome.
type request struct {
	start      time.Time
	took       time.Duration
	status     int // 0: no answer (err)
	code       string
	retryAfter time.Duration // 0 if absent
	err        error
}

var client = &http.Client{
	Timeout:   5 * time.Minute,
	Transport: &http.Transport{MaxIdleConnsPerHost: 1000, MaxConnsPerHost: 0},
}

// post asks base, with apiKey, to enlarge the origin's path by scale.
func (r *rig) post(apiKey, base, path string, scale int) request {
	return r.postAs(apiKey, base, path, scale, nil, nil)
}

// postAs is post with the request changed by prepare, when not nil, and
// the answer's body decoded into answer, when not nil.
func (r *rig) postAs(apiKey, base, path string, scale int, prepare func(*http.Request), answer any) request {
	return postWith(client, apiKey, base, r.body(path, scale, ""), prepare, answer)
}

// body is a request's JSON: ×scale of the origin's path, posted to
// webhook once it ends as a job, when webhook is not empty.
func (r *rig) body(path string, scale int, webhook string) string {
	fields := map[string]any{"imageUrl": r.originURL + path, "scale": scale}
	if webhook != "" {
		fields["webhookUrl"] = webhook
	}
	raw, _ := json.Marshal(fields)
	return string(raw)
}

// postWith posts body to base's API with apiKey through c, as postAs
// does.
func postWith(c *http.Client, apiKey, base, body string, prepare func(*http.Request), answer any) request {
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/upscale", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	if prepare != nil {
		prepare(req)
	}
	res := request{start: time.Now()}
	resp, err := c.Do(req)
	res.took = time.Since(res.start)
	if err != nil {
		res.err = err
		return res
	}
	defer resp.Body.Close()
	res.status = resp.StatusCode
	raw, _ := io.ReadAll(resp.Body)
	var problem struct {
		Code string `json:"code"`
	}
	json.Unmarshal(raw, &problem)
	res.code = problem.Code
	if answer != nil {
		json.Unmarshal(raw, answer)
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		res.retryAfter = time.Duration(s) * time.Second
	}
	return res
}

// keepPosting has n clients post path by scale with apiKey until stop,
// each waiting out the Retry-After of a refusal, as a client that reads
// the contract does, and returns every outcome.
func (r *rig) keepPosting(apiKey, base, path string, scale, n int, stop <-chan struct{}) []request {
	return keepSending(n, stop, func() request { return r.post(apiKey, base, path, scale) })
}

// keepSending has n clients send until stop, each waiting out the
// Retry-After of a refusal, and returns every outcome.
func keepSending(n int, stop <-chan struct{}, send func() request) []request {
	results := make(chan []request, n)
	for range n {
		go func() {
			var mine []request
			for {
				select {
				case <-stop:
					results <- mine
					return
				default:
				}
				res := send()
				mine = append(mine, res)
				wait := res.retryAfter
				if res.err != nil {
					wait = 100 * time.Millisecond
				}
				select {
				case <-stop:
				case <-time.After(wait):
				}
			}
		}()
	}
	var all []request
	for range n {
		all = append(all, <-results...)
	}
	return all
}

// dripUpload uploads the origin's path for ×2 with apiKey as a caller on
// a bad line would: its form's declared length at once, then 100 bytes of
// it a second until it is answered.
func (r *rig) dripUpload(apiKey, base, path string) request {
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	file, _ := mw.CreateFormFile("image", path[1:])
	file.Write(r.sources[path])
	mw.WriteField("scale", "2")
	mw.Close()
	body, sender := io.Pipe()
	defer sender.Close() // the answer came: stop dripping
	go func() {
		for rest := form.Bytes(); len(rest) > 0; rest = rest[min(100, len(rest)):] {
			if _, err := sender.Write(rest[:min(100, len(rest))]); err != nil {
				return
			}
			time.Sleep(time.Second)
		}
	}()
	return postWith(client, apiKey, base, "", func(req *http.Request) {
		req.Body, req.ContentLength = body, int64(form.Len())
		req.Header.Set("Content-Type", mw.FormDataContentType())
	}, nil)
}

func after(d time.Duration) <-chan struct{} {
	c := make(chan struct{})
	time.AfterFunc(d, func() { close(c) })
	return c
}
