package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/enginebench"
	"github.com/upscalekit/upscale/internal/testservers"
	"github.com/upscalekit/upscale/s3store"
)

const (
	key     = "upk_loadtest_0123456789abcdef"
	account = "load"
	// The account whose sources drip, in the slow-key scenario.
	dripKey     = "upk_loadtest_drip_0123456789abcdef"
	dripAccount = "drip"
	// The account crowded by the normal one, in the crowding scenarios.
	otherKey     = "upk_loadtest_other_0123456789abcdef"
	otherAccount = "other"
)

// rig is everything the scenarios share: the standalone binary, a
// PostgreSQL database and an S3 bucket each reached through a proxy that
// can be cut, direct connections to both for the ledger check, and an
// origin serving the source images.
type rig struct {
	dir, bin, config string
	dsn              string // through pgProxy
	pgProxy, s3Proxy *testservers.Proxy
	db               *sql.DB // direct
	s3               testservers.S3Server
	bucket           string
	bucketClient     *s3.Client // direct
	origin           *http.Server
	originURL        string
	sources          map[string][]byte // the origin's files by path, but drip.jpg

	dropDatabase func()
}

// newRig starts the rig; one that fails on the way gives back what it
// had started (its database, servers and directory).
func newRig() (_ *rig, err error) {
	r := &rig{}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.dir, err = os.MkdirTemp("", "upscale-loadtest-"); err != nil {
		return nil, err
	}
	r.bin = filepath.Join(r.dir, "standalone")
	if out, err := exec.Command("go", "build", "-o", r.bin, "github.com/upscalekit/upscale/examples/standalone").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the standalone: %v\n%s", err, out)
	}
	dsn, drop, err := testservers.NewPostgresDatabase()
	if err != nil {
		return nil, err
	}
	r.dropDatabase = drop
	if r.db, err = sql.Open("pgx", dsn); err != nil {
		return nil, err
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, err
	}
	if r.pgProxy, err = testservers.StartProxy(u.Host); err != nil {
		return nil, err
	}
	u.Host = r.pgProxy.Addr
	r.dsn = u.String()

	if r.s3, err = testservers.StartS3(); err != nil {
		return nil, err
	}
	os.Setenv("AWS_ACCESS_KEY_ID", r.s3.AccessKey)
	os.Setenv("AWS_SECRET_ACCESS_KEY", r.s3.SecretKey)
	os.Setenv("AWS_CONFIG_FILE", filepath.Join(r.dir, "none"))
	os.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(r.dir, "none"))
	ctx := context.Background()
	if r.bucketClient, err = s3store.NewClient(ctx, r.s3.Endpoint, ""); err != nil {
		return nil, err
	}
	r.bucket = "upscale-load-" + strings.ToLower(upscale.NewKey(""))[:10]
	if _, err := r.bucketClient.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &r.bucket}); err != nil {
		return nil, fmt.Errorf("create bucket: %w", err)
	}
	s3URL, _ := url.Parse(r.s3.Endpoint)
	if r.s3Proxy, err = testservers.StartProxy(s3URL.Host); err != nil {
		return nil, err
	}

	r.config = filepath.Join(r.dir, "config.json")
	config := fmt.Sprintf(`{
		"plans": {"paid": {"paid": true, "maxFileBytes": %d}},
		"accounts": [{"id": %q, "plan": "paid", "credits": 1000000000}, {"id": %q, "plan": "paid", "credits": 1000000000}, {"id": %q, "plan": "paid", "credits": 1000000000}],
		"keys": [{"key": %q, "account": %q}, {"key": %q, "account": %q}, {"key": %q, "account": %q}]
	}`, 50<<20, account, dripAccount, otherAccount, key, account, dripKey, dripAccount, otherKey, otherAccount)
	if err := os.WriteFile(r.config, []byte(config), 0o600); err != nil {
		return nil, err
	}
	// A first start creates the schema and seeds the account, so that the
	// ledger can be read before any scenario.
	srv, err := r.start()
	if err != nil {
		return nil, err
	}
	if err := srv.stop(); err != nil {
		return nil, err
	}
	return r, r.startOrigin()
}

// startOrigin serves the sources: photo-N.jpg, a N×N JPEG of a photograph
// (N 128, 256, 512 or 1024),
// noise.png, a PNG of about 20 MB that does not compress, noise-1000.png,
// one of 1000², and drip.jpg, which sends 100 bytes a second of a 1 MB
// body until the client gives up.
func (r *rig) startOrigin() error {
	photos := map[string][]byte{}
	for _, side := range []int{128, 256, 512, 1024} {
		jpg, err := enginebench.MakePhotoJPEG(side)
		if err != nil {
			return err
		}
		photos[fmt.Sprintf("/photo-%d.jpg", side)] = jpg
	}
	noise := image.NewNRGBA(image.Rect(0, 0, 2600, 2600))
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range noise.Pix {
		noise.Pix[i] = uint8(rng.Uint32())
		if i%4 == 3 {
			noise.Pix[i] = 255
		}
	}
	noise.SetNRGBA(0, 0, color.NRGBA{0, 0, 0, 255})
	var big bytes.Buffer
	if err := png.Encode(&big, noise); err != nil {
		return err
	}
	photos["/noise.png"] = big.Bytes()
	var small bytes.Buffer
	if err := png.Encode(&small, noise.SubImage(image.Rect(0, 0, 1000, 1000))); err != nil {
		return err
	}
	photos["/noise-1000.png"] = small.Bytes()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	r.originURL = "http://" + ln.Addr().String()
	r.sources = photos
	r.origin = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/drip.jpg" {
			drip(w, req)
			return
		}
		data, ok := photos[req.URL.Path]
		if !ok {
			http.NotFound(w, req)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.Write(data)
	})}
	go r.origin.Serve(ln)
	return nil
}

// drip sends 100 bytes a second of a 1 MB body until the client goes.
func drip(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Content-Length", strconv.Itoa(mib))
	chunk := make([]byte, 100)
	for {
		if _, err := w.Write(chunk); err != nil {
			return
		}
		w.(http.Flusher).Flush()
		select {
		case <-req.Context().Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (r *rig) close() {
	if r.origin != nil {
		r.origin.Close()
	}
	for _, p := range []*testservers.Proxy{r.pgProxy, r.s3Proxy} {
		if p != nil {
			p.Close()
		}
	}
	if r.db != nil {
		r.db.Close()
	}
	if r.dropDatabase != nil {
		r.dropDatabase()
	}
	testservers.Stop()
	if *keep {
		fmt.Fprintln(os.Stderr, "loadtest: logs kept in", r.dir)
		return
	}
	if r.dir != "" {
		os.RemoveAll(r.dir)
	}
}

// ledger is what the database and the bucket hold, for the check that a
// scenario charged exactly its successes and left nothing behind.
type ledger struct {
	credits, openReservations, results int64
}

func (r *rig) readLedger() (ledger, error) {
	var l ledger
	// Every account's, as the crowding scenarios charge two.
	if err := r.db.QueryRow(`SELECT sum(credits) FROM accounts`).Scan(&l.credits); err != nil {
		return l, err
	}
	if err := r.db.QueryRow(`SELECT count(*) FROM reservations`).Scan(&l.openReservations); err != nil {
		return l, err
	}
	pages := s3.NewListObjectsV2Paginator(r.bucketClient, &s3.ListObjectsV2Input{Bucket: &r.bucket})
	for pages.HasMorePages() {
		page, err := pages.NextPage(context.Background())
		if err != nil {
			return l, err
		}
		l.results += int64(len(page.Contents))
	}
	return l, nil
}

// check compares the ledger after a scenario with the one before it.
func (r *rig) check(before ledger, successes int) (string, bool, error) {
	after, err := r.readLedger()
	if err != nil {
		return "", false, err
	}
	charged, stored := before.credits-after.credits, after.results-before.results
	ok := charged == int64(successes) && stored == int64(successes) && after.openReservations == 0
	return fmt.Sprintf("%d charged, %d stored, %d open", charged, stored, after.openReservations), ok, nil
}
