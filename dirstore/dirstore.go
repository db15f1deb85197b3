// Package dirstore is an upscale.BlobStore in a directory of the local file
// system, for a single machine: results and their links survive a restart.
// It serves its own links (see upscale.LinkServer), which are signed and
// stop working at expiry.
package dirstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/link"
	"github.com/upscalekit/upscale/internal/periodic"
)

// Options configures a Store.
type Options struct {
	// Dir holds the results, one file each plus a small metadata file.
	// It is created if missing. Required.
	Dir string
	// BaseURL is where the store's handler is mounted; links are
	// BaseURL/<key>?token=... Required.
	BaseURL string
	// Secret signs the links. Nil means a random secret kept in
	// Dir/.link-secret, so links outlive a restart.
	Secret []byte
	// Now is the clock that decides expiry. Nil means time.Now.
	Now func() time.Time
	// SweepInterval is how often expired files are deleted. Zero means one
	// minute; negative turns the sweeper off, for a directory that another
	// process sweeps.
	SweepInterval time.Duration
	// Logger receives the sweeper's failures, such as a file it may not
	// delete. Nil means slog.Default().
	Logger *slog.Logger
}

// Store is a BlobStore in one directory. It is also the http.Handler that
// serves its links; a sweeper deletes expired files. It is safe for
// concurrent use. Close stops the sweeper.
type Store struct {
	dir    string
	signer *link.Signer
	now    func() time.Time
	logger *slog.Logger
	links  http.Handler // serves the signed links; unexported so nobody can swap it

	sweeper *periodic.Job
}

var (
	_ upscale.LinkServer = (*Store)(nil)
	_ upscale.BlobReader = (*Store)(nil)
)

// meta is what the metadata file beside each result holds.
type meta struct {
	ContentType string    `json:"contentType"`
	Expires     time.Time `json:"expires"`
}

const (
	metaSuffix = ".meta"
	tempPrefix = ".tmp-"
)

// New opens the store in opts.Dir and starts its sweeper.
func New(opts Options) (*Store, error) {
	if opts.Dir == "" {
		return nil, errors.New("dirstore: Options.Dir is required")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("dirstore: directory: %w", err)
	}
	if opts.Secret == nil {
		var err error
		if opts.Secret, err = loadOrCreateSecret(filepath.Join(opts.Dir, ".link-secret")); err != nil {
			return nil, err
		}
	}
	signer, err := link.New(opts.BaseURL, opts.Secret, opts.Now)
	if err != nil {
		return nil, err
	}
	s := &Store{dir: opts.Dir, signer: signer, now: opts.Now, logger: opts.Logger}
	s.links = signer.Handler(s.open)
	s.sweeper = periodic.Start(opts.SweepInterval, s.Sweep)
	return s, nil
}

// loadOrCreateSecret reads the link secret kept at path, making one the
// first time. Only the owner may read it: it forges links.
func loadOrCreateSecret(path string) ([]byte, error) {
	secret, err := os.ReadFile(path)
	switch {
	case err == nil && len(secret) < link.MinSecretBytes:
		// Replacing it would silently break every link out there, and a
		// short secret is more likely damage or tampering than anything.
		return nil, fmt.Errorf("dirstore: link secret %s is shorter than %d bytes; delete it to make a new one (outstanding links stop working)", path, link.MinSecretBytes)
	case err == nil:
		return secret, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("dirstore: link secret: %w", err)
	}
	secret = link.NewSecret()
	if err := writeFileAtomic(path, secret, 0o600); err != nil {
		return nil, fmt.Errorf("dirstore: link secret: %w", err)
	}
	return secret, nil
}

// LinkPath implements upscale.LinkServer: the path of Options.BaseURL.
func (s *Store) LinkPath() string { return s.signer.Path() }

// ServeHTTP serves the links Put returned: the item while its link is
// valid, 404 otherwise. It implements upscale.LinkServer.
func (s *Store) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.links.ServeHTTP(w, r) }

// Close stops the sweeper; calling it again does nothing. Files stay, and a
// new store on the directory serves them.
func (s *Store) Close() error {
	s.sweeper.Stop()
	return nil
}

// validKey keeps keys to one plain file name inside the directory.
func validKey(key string) error {
	if key == "" || len(key) > 200 || strings.HasPrefix(key, ".") || strings.HasSuffix(key, metaSuffix) ||
		strings.Trim(key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
		return fmt.Errorf("blob key %q: want letters, digits, '.', '_' or '-', not starting with a dot", key)
	}
	return nil
}

// Put implements upscale.BlobStore. The result and then its metadata are each
// written to a temporary file and renamed into place, so a crash never
// leaves a half-written result behind a link: without its metadata file a
// result is not served, and the sweeper deletes it.
func (s *Store) Put(ctx context.Context, key string, data []byte, contentType string, expires time.Time) (string, error) {
	if err := validKey(key); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("put %q: %w", key, err)
	}
	if !expires.After(s.now()) {
		return "", fmt.Errorf("put %q: expiry %v is not in the future", key, expires)
	}
	meta, err := json.Marshal(meta{ContentType: contentType, Expires: expires})
	if err != nil {
		return "", err
	}
	path := filepath.Join(s.dir, key)
	if err := writeFileAtomic(path, data, 0o600); err != nil {
		return "", fmt.Errorf("put %q: %w", key, err)
	}
	if err := writeFileAtomic(path+metaSuffix, meta, 0o600); err != nil {
		os.Remove(path)
		return "", fmt.Errorf("put %q: %w", key, err)
	}
	return s.signer.URL(key, expires)
}

// Delete implements upscale.BlobStore. The metadata goes first: without it the
// result is no longer served, and a sweep removes a data file left behind.
func (s *Store) Delete(ctx context.Context, key string, _ time.Time) error {
	if err := validKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %q: %w", key, err)
	}
	path := filepath.Join(s.dir, key)
	for _, name := range []string{path + metaSuffix, path} {
		if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("delete %q: %w", key, err)
		}
	}
	return nil
}

// Get implements upscale.BlobReader.
func (s *Store) Get(ctx context.Context, key string, _ time.Time) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %q: %w", key, err)
	}
	f, _, err := s.open(ctx, key)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %w", upscale.ErrNotFound, err)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// writeFileAtomic writes data to a temporary file in path's directory,
// flushes it to disk and renames it to path.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), tempPrefix+"*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), perm)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

func (s *Store) readMeta(key string) (meta, error) {
	var m meta
	raw, err := os.ReadFile(filepath.Join(s.dir, key+metaSuffix))
	if errors.Is(err, fs.ErrNotExist) {
		return m, fmt.Errorf("blob %q: %w", key, fs.ErrNotExist)
	}
	if err == nil {
		err = json.Unmarshal(raw, &m)
	}
	return m, err
}

func (s *Store) open(_ context.Context, key string) (io.ReadSeekCloser, string, error) {
	if validKey(key) != nil {
		return nil, "", fmt.Errorf("blob %q: %w", key, fs.ErrNotExist)
	}
	m, err := s.readMeta(key)
	if err != nil {
		return nil, "", err
	}
	if !s.now().Before(m.Expires) {
		return nil, "", fmt.Errorf("blob %q: expired: %w", key, fs.ErrNotExist)
	}
	// The sweeper may remove the file while it is being served; on Unix
	// the open descriptor keeps its bytes readable until it is closed.
	f, err := os.Open(filepath.Join(s.dir, key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("blob %q: %w", key, fs.ErrNotExist)
	}
	if err != nil {
		return nil, "", err
	}
	return f, m.ContentType, nil
}

// orphanAge is how old a temporary file, or a result without metadata, must
// be before the sweeper takes it for the leftover of a crashed Put rather
// than one in progress.
const orphanAge = 10 * time.Minute

// Sweep deletes expired results now, and the leftovers of interrupted
// writes. The sweeper calls it every SweepInterval. It logs what it could
// not delete: a results directory that cannot be swept fills the disk.
func (s *Store) Sweep() {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		s.logger.Error("dirstore: sweep: expired results stay until the directory can be read", "err", err)
		return
	}
	now := s.now()
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(s.dir, name)
		switch {
		case strings.HasSuffix(name, metaSuffix):
			key := strings.TrimSuffix(name, metaSuffix)
			if m, err := s.readMeta(key); err == nil && !now.Before(m.Expires) {
				s.logFailure(s.Delete(context.Background(), key, m.Expires))
			}
		case strings.HasPrefix(name, tempPrefix) || validKey(name) == nil:
			if _, err := os.Stat(path + metaSuffix); err == nil {
				continue // a result with its metadata: the case above decides
			}
			if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) > orphanAge {
				if err := os.Remove(path); !errors.Is(err, fs.ErrNotExist) {
					s.logFailure(err)
				}
			}
		}
	}
}

func (s *Store) logFailure(err error) {
	if err != nil {
		s.logger.Error("dirstore: sweep: could not delete an expired file; it is tried again at the next sweep", "err", err)
	}
}
