package upscale_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/upscalekit/upscale"
)

// hostileFetchTimeout is the fetch deadline in these tests: short, so that a
// source that stalls is cut off quickly.
const hostileFetchTimeout = 500 * time.Millisecond

// verifyNoLeaks checks, after every other cleanup of t has run, that no
// goroutine t started is left.
func verifyNoLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// rawOrigin is a TCP listener whose connections are handed to serve, for
// sources that break HTTP in ways net/http's server will not.
func rawOrigin(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			serve(conn)
			conn.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return "http://" + ln.Addr().String() + "/a.png"
}

// readRequest consumes a request's head so that the answer is not sent
// before the question.
func readRequest(conn net.Conn) {
	buf := make([]byte, 4096)
	for got := []byte{}; !bytes.Contains(got, []byte("\r\n\r\n")); {
		n, err := conn.Read(buf)
		if err != nil {
			return
		}
		got = append(got, buf[:n]...)
	}
}

func gzipBomb(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zeros := make([]byte, 1<<20)
	for range 16 { // 16 MiB of zeros in about 16 KiB
		zw.Write(zeros)
	}
	zw.Close()
	return b.Bytes()
}

func TestHostileSources(t *testing.T) {
	bomb := gzipBomb(t)
	for _, tc := range []struct {
		name   string
		code   string
		origin func(t *testing.T, e *env) string // returns the image URL
	}{
		{"ContentLengthOverCap", "image_too_large", func(t *testing.T, e *env) string {
			return rawOrigin(t, func(c net.Conn) {
				readRequest(c)
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: %d\r\n\r\n", 1<<40)
				c.Write(smallPNG)
			})
		}},
		{"ContentLengthLongerThanBody", "source_unavailable", func(t *testing.T, e *env) string {
			return rawOrigin(t, func(c net.Conn) {
				readRequest(c)
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(smallPNG)+1000)
				c.Write(smallPNG) // and hang up early
			})
		}},
		{"EndlessChunkedBody", "image_too_large", func(t *testing.T, e *env) string {
			// A cap of 1000 bytes is crossed with the first chunk: reading
			// the free plan's MiB took up to 1.2 s of the 500 ms deadline
			// on a loaded machine under -race.
			e.putAccount(upscale.Account{ID: "free", Plan: tinyPlan})
			return rawOrigin(t, func(c net.Conn) {
				readRequest(c)
				io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
				chunk := fmt.Sprintf("%x\r\n%s\r\n", 4096, strings.Repeat("A", 4096))
				for {
					if _, err := io.WriteString(c, chunk); err != nil {
						return // the client hung up
					}
				}
			})
		}},
		{"GzipBomb", "source_unreachable", func(t *testing.T, e *env) string {
			return rawOrigin(t, func(c net.Conn) {
				readRequest(c)
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n", len(bomb))
				c.Write(bomb)
			})
		}},
		{"DripOneByteASecond", "source_unreachable", func(t *testing.T, e *env) string {
			return rawOrigin(t, func(c net.Conn) {
				readRequest(c)
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
				for i := range 1000 {
					if _, err := c.Write([]byte{smallPNG[i%len(smallPNG)]}); err != nil {
						return
					}
					time.Sleep(time.Second)
				}
			})
		}},
		{"NeverSendsHeaders", "source_unreachable", func(t *testing.T, e *env) string {
			return rawOrigin(t, func(c net.Conn) {
				readRequest(c)
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				io.Copy(io.Discard, c) // until the client gives up
			})
		}},
		{"HalfAStatusLine", "source_unreachable", func(t *testing.T, e *env) string {
			return rawOrigin(t, func(c net.Conn) {
				readRequest(c)
				io.WriteString(c, "HTTP/1.1 2")
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				io.Copy(io.Discard, c)
			})
		}},
		{"NotHTTP", "source_unreachable", func(t *testing.T, e *env) string {
			return rawOrigin(t, func(c net.Conn) {
				readRequest(c)
				io.WriteString(c, "SSH-2.0-OpenSSH_9.2\r\n")
			})
		}},
		{"RedirectsForever", "source_unreachable", func(t *testing.T, e *env) string {
			return e.url("/redirect-loop")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			verifyNoLeaks(t)
			e := newEnv(t, func(c *upscale.Config) { c.Fetch.Timeout = hostileFetchTimeout })
			t.Cleanup(e.handler.CloseIdleConnections)
			url := tc.origin(t, e)
			start := time.Now()
			checkProblem(t, e.post(keyFree, body(url)), sourceStatus(tc.code), tc.code)
			// A hang is what this guards against, so the bound is the
			// deadline with generous room for a loaded machine, not a speed
			// target.
			if took := time.Since(start); took > hostileFetchTimeout+5*time.Second {
				t.Errorf("took %v with a fetch deadline of %v", took, hostileFetchTimeout)
			}
			if got := e.balance("free").Free; got != freePlan.MonthlyImages {
				t.Errorf("free pool %d, want %d: nothing may be charged", got, freePlan.MonthlyImages)
			}
		})
	}
}

type panickingUpscaler struct{}

func (panickingUpscaler) Upscale(context.Context, []byte, upscale.Params) (upscale.Image, error) {
	panic("engine bug")
}

type panickingBlobs struct{}

func (panickingBlobs) Put(context.Context, string, []byte, string, time.Time) (string, error) {
	panic("storage bug")
}

func (panickingBlobs) Delete(context.Context, string, time.Time) error { panic("storage bug") }

type panickingKeys struct{}

func (panickingKeys) Authenticate(context.Context, string) (string, error) {
	panic("key store bug")
}

// TestPanicsAreContained: a panic in any store or in the engine (which runs
// on its own goroutine) gives 500 internal_error, charges nothing, and the
// handler goes on serving.
func TestPanicsAreContained(t *testing.T) {
	for name, configure := range map[string]func(*upscale.Config){
		"Upscaler":  func(c *upscale.Config) { c.Upscaler = panickingUpscaler{} },
		"BlobStore": func(c *upscale.Config) { c.Blobs = panickingBlobs{} },
		"KeyStore":  func(c *upscale.Config) { c.Keys = panickingKeys{} },
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, configure)
			for range 2 {
				checkProblem(t, e.post(keyFree, body(e.url("/small.png"))), http.StatusInternalServerError, "internal_error")
			}
			if got := e.balance("free").Free; got != freePlan.MonthlyImages {
				t.Errorf("free pool %d, want %d", got, freePlan.MonthlyImages)
			}
		})
	}
	t.Run("AbortHandlerStillAborts", func(t *testing.T) {
		e := newEnv(t, func(c *upscale.Config) { c.Keys = abortingKeys{} })
		defer func() {
			if v := recover(); v != http.ErrAbortHandler {
				t.Errorf("recovered %v, want http.ErrAbortHandler re-panicked for net/http", v)
			}
		}()
		e.post(keyFree, body(e.url("/small.png")))
	})
}

// abortingKeys stands for code that aborts the response the net/http way.
type abortingKeys struct{}

func (abortingKeys) Authenticate(context.Context, string) (string, error) {
	panic(http.ErrAbortHandler)
}
