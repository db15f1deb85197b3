package upscaletest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// TestBlobStore checks that a BlobStore's links are absolute, serve exactly
// what was stored with its content type, stop working at expiry or Delete,
// and cannot be forged by editing them. newStore must return an empty store whose links
// are reachable with http.DefaultClient and which reads time from clock
// (calling clock.SleepOnAdvance if a server checks expiry on its own clock).
func TestBlobStore(t *testing.T, newStore func(t *testing.T, clock *Clock) upscale.BlobStore) {
	ctx := context.Background()
	put := func(t *testing.T, s upscale.BlobStore, key string, data []byte, contentType string, expires time.Time) string {
		t.Helper()
		link, err := s.Put(ctx, key, data, contentType, expires)
		if err != nil {
			t.Fatalf("Put(%q): %v", key, err)
		}
		u, err := url.Parse(link)
		if err != nil || !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https") {
			t.Fatalf("Put returned %q, want an absolute http(s) URL", link)
		}
		return link
	}

	t.Run("OK", func(t *testing.T) {
		clock := NewClock(time.Now())
		s := newStore(t, clock)
		data := []byte("\x89PNG\r\n\x1a\nnot really, but bytes are bytes")
		link := put(t, s, "k1.png", data, "image/png", clock.Now().Add(time.Hour))
		status, body, contentType := get(t, link)
		if status != http.StatusOK || !bytes.Equal(body, data) || contentType != "image/png" {
			t.Errorf("GET = %d, %q, %q; want 200, the stored bytes, image/png", status, body, contentType)
		}
	})

	t.Run("Expires", func(t *testing.T) {
		// Seconds rather than an hour, so that a store whose links are
		// checked by a server on the wall clock can sleep through it (see
		// Clock.SleepOnAdvance); links may be honoured up to a second late.
		clock := NewClock(time.Now())
		s := newStore(t, clock)
		link := put(t, s, "k2.jpg", []byte("jpeg"), "image/jpeg", clock.Now().Add(2*time.Second))
		clock.Advance(time.Second)
		if status, _, _ := get(t, link); status != http.StatusOK {
			t.Fatalf("GET before expiry = %d, want 200", status)
		}
		clock.Advance(2 * time.Second)
		// 404 from our own handlers, 403 from S3: any 4xx without the data.
		if status, body, _ := get(t, link); status/100 != 4 || string(body) == "jpeg" {
			t.Errorf("GET after expiry = %d, %q; want a 4xx without the data", status, body)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		clock := NewClock(time.Now())
		s := newStore(t, clock)
		expires := clock.Now().Add(time.Hour)
		gone := put(t, s, "k6.png", []byte("gone"), "image/png", expires)
		kept := put(t, s, "k7.png", []byte("kept"), "image/png", expires)
		if err := s.Delete(ctx, "k6.png", expires); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if status, body, _ := get(t, gone); status/100 != 4 || string(body) == "gone" {
			t.Errorf("GET after Delete = %d, %q; want a 4xx without the data", status, body)
		}
		if status, body, _ := get(t, kept); status != http.StatusOK || string(body) != "kept" {
			t.Errorf("GET of another item after Delete = %d, %q; want 200 and its data", status, body)
		}
		for _, key := range []string{"k6.png", "never-stored.png"} {
			if err := s.Delete(ctx, key, expires); err != nil {
				t.Errorf("Delete(%q) of an absent key: %v, want nil", key, err)
			}
		}
	})

	t.Run("Get", func(t *testing.T) {
		clock := NewClock(time.Now())
		s := newStore(t, clock)
		reader, ok := s.(upscale.BlobReader)
		if !ok {
			t.Skip("not a BlobReader")
		}
		expires := clock.Now().Add(2 * time.Second)
		data := []byte("source bytes, kept for a job")
		put(t, s, "k9.jpg", data, "image/jpeg", expires)
		if got, err := reader.Get(ctx, "k9.jpg", expires); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get = %q, %v; want the stored bytes", got, err)
		}
		if _, err := reader.Get(ctx, "never-stored.jpg", expires); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Get of an absent key: %v, want ErrNotFound", err)
		}
		put(t, s, "k10.jpg", data, "image/jpeg", expires)
		if err := s.Delete(ctx, "k10.jpg", expires); err != nil {
			t.Fatal(err)
		}
		if _, err := reader.Get(ctx, "k10.jpg", expires); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Get after Delete: %v, want ErrNotFound", err)
		}
		clock.Advance(3 * time.Second)
		if _, err := reader.Get(ctx, "k9.jpg", expires); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Get after expiry: %v, want ErrNotFound", err)
		}
	})

	t.Run("DoneContext", func(t *testing.T) {
		clock := NewClock(time.Now())
		s := newStore(t, clock)
		done, cancel := context.WithCancel(ctx)
		cancel()
		if link, err := s.Put(done, "k8.png", []byte("late"), "image/png", clock.Now().Add(time.Hour)); !errors.Is(err, context.Canceled) {
			t.Errorf("Put with a cancelled context = %q, %v; want an error wrapping context.Canceled", link, err)
		}
		if err := s.Delete(done, "k8.png", clock.Now().Add(time.Hour)); !errors.Is(err, context.Canceled) {
			t.Errorf("Delete with a cancelled context: %v, want an error wrapping context.Canceled", err)
		}
	})

	t.Run("Forged", func(t *testing.T) {
		clock := NewClock(time.Now())
		s := newStore(t, clock)
		link1 := put(t, s, "k3.png", []byte("one"), "image/png", clock.Now().Add(time.Hour))
		link2 := put(t, s, "k4.png", []byte("two"), "image/png", clock.Now().Add(time.Hour))
		u1, _ := url.Parse(link1)
		u2, _ := url.Parse(link2)
		swapped := *u1
		swapped.RawQuery = u2.RawQuery // k3's path with k4's signature
		tampered := *u1
		q := tampered.Query()
		for name, values := range q {
			v := []byte(values[0])
			v[len(v)/2] ^= 1 // flip one bit in the middle of each parameter
			q.Set(name, string(v))
		}
		tampered.RawQuery = q.Encode()
		bare := *u1
		bare.RawQuery = ""
		for name, link := range map[string]string{"Swapped": swapped.String(), "Tampered": tampered.String(), "Unsigned": bare.String(), "Unknown": strings.Replace(link1, "k3.png", "k5.png", 1)} {
			status, body, _ := get(t, link)
			if status/100 != 4 || bytes.Equal(body, []byte("one")) || bytes.Equal(body, []byte("two")) {
				t.Errorf("%s link %s: GET = %d, %q; want a 4xx without the data", name, link, status, body)
			}
		}
	})
}

func get(t *testing.T, link string) (status int, body []byte, contentType string) {
	t.Helper()
	resp, err := http.Get(link)
	if err != nil {
		t.Fatalf("GET %s: %v", link, err)
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", link, err)
	}
	return resp.StatusCode, body, resp.Header.Get("Content-Type")
}
