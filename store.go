package upscale

import (
	"context"
	"net/http"
	"time"
)

// BlobStore keeps enlarged images for a while and hands out links to them.
//
// Both methods honour ctx: once it is done they return its error, wrapped,
// without waiting further for their server. A store whose server cannot be
// reached, or refuses work for the moment, returns an error wrapping
// ErrUnavailable; the handler then answers 503 and leaves the store alone
// for a second (see Handler). Any other error is a failure of the store:
// the caller sees 500 and the log gets the message.
type BlobStore interface {
	// Put stores data, of the given content type, under key until expires
	// and returns an absolute URL from which anyone holding it can download
	// the data until expires, and not long after. Keys are unique; the
	// handler makes them from random letters, digits and a file extension.
	// A failed Put leaves nothing behind that a link could reach. A store
	// that cannot keep a link working that long says so with
	// ExpiryLimiter, and New refuses such a Config.LinkTTL.
	Put(ctx context.Context, key string, data []byte, contentType string, expires time.Time) (url string, err error)
	// Delete removes what Put stored under key, so that its link stops
	// working; expires is the value given to Put, for stores that file
	// items by expiry. Deleting a key that is not there is not an error.
	// The handler deletes a result it stored but could not charge for.
	Delete(ctx context.Context, key string, expires time.Time) error
}

// BlobReader is a BlobStore that gives back what it keeps: the job form
// keeps each job's source in it, without handing out its link, for the
// worker that runs the job, on whatever machine.
type BlobReader interface {
	BlobStore
	// Get returns the data Put stored under key; expires is the value
	// given to Put, as for Delete. It returns an error wrapping
	// ErrNotFound when nothing is stored under key, or it has expired or
	// been deleted.
	Get(ctx context.Context, key string, expires time.Time) ([]byte, error)
}

// ExpiryLimiter is a BlobStore whose links cannot work longer than
// MaxLinkTTL after Put (an S3 presigned URL lasts at most 7 days). New
// refuses a Config.LinkTTL above it, instead of every request failing.
type ExpiryLimiter interface {
	MaxLinkTTL() time.Duration
}

// LinkServer is a BlobStore that serves its own links (MemoryBlobStore and
// dirstore.Store do; an S3 bucket serves its own): it is the http.Handler
// for every path under LinkPath. Handler.Middleware routes those paths to
// it; a host that mounts the Handler itself mounts the LinkServer too.
type LinkServer interface {
	BlobStore
	http.Handler
	// LinkPath is the URL path every link starts with, ending in a slash.
	LinkPath() string
}

// deleteBlob removes what the handler stored and no longer needs (what
// says which: a result that will not be paid for, a job's source), so that
// no link to it exists once its request or job is over. It is best
// effort: what is left behind expires with its link.
func (h *Handler) deleteBlob(ctx context.Context, what, blobKey string, expires time.Time) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := h.blobs.record(h.cfg.Blobs.Delete(ctx, blobKey, expires)); err != nil {
		h.cfg.Logger.Error("upscale: delete "+what+"; it stays until it expires", "key", blobKey, "err", err)
	}
}
