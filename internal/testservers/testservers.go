// Package testservers starts the real servers that integration tests run
// against (PostgreSQL, versitygw for S3, stripe-mock, Mailpit), as
// throwaway instances on free loopback ports, each once per test process
// (lazy) and stopped by Stop.
//
// A missing server skips the test with a message saying what to install,
// except when the environment variable UPSCALE_REQUIRE_SERVERS is set (CI
// sets it): then a missing server fails the test, so nothing is skipped
// silently.
package testservers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/upscalekit/upscale"
)

// Unavailable skips t, or fails it when servers are required, explaining
// why the server it needs cannot be had.
func Unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("UPSCALE_REQUIRE_SERVERS") != "" {
		t.Fatalf("%s (UPSCALE_REQUIRE_SERVERS is set, so this fails instead of skipping)", why)
	}
	t.Skip(why)
}

// lazy is a server started once per test process, on first use, and
// what came of its start: each server's start function returns what its
// tests need to reach it, and an error saying why it could not start.
type lazy[T any] struct {
	once   sync.Once
	server T
	err    error
}

// get starts the server with start on its first call, and returns it.
func (l *lazy[T]) get(start func() (T, error)) (T, error) {
	l.once.Do(func() { l.server, l.err = start() })
	return l.server, l.err
}

// postgres is the URL of the cluster's maintenance database, "postgres".
var postgres lazy[string]

// PostgresDatabase returns the URL of a new, empty PostgreSQL database,
// dropped when t ends. It uses UPSCALE_TEST_POSTGRES_URL when set (a
// server the tests may create databases on); otherwise it starts one
// cluster per test process with Debian's initdb and pg_ctl (package
// postgresql), stopped by Stop.
func PostgresDatabase(t testing.TB) string {
	t.Helper()
	dsn, drop, err := NewPostgresDatabase()
	if errors.Is(err, errNoPostgres) {
		Unavailable(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drop)
	return dsn
}

var errNoPostgres = errors.New("PostgreSQL")

// NewPostgresDatabase is PostgresDatabase for a program: it returns the
// URL of a new, empty database and a function that drops it.
func NewPostgresDatabase() (dsn string, drop func(), err error) {
	cluster, err := postgres.get(startPostgres)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %w", errNoPostgres, err)
	}
	db, err := sql.Open("pgx", cluster)
	if err != nil {
		return "", nil, err
	}
	defer db.Close()
	name := "upscale_test_" + strings.ToLower(upscale.NewKey(""))[:12]
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		return "", nil, fmt.Errorf("create database: %w", err)
	}
	drop = func() {
		db, err := sql.Open("pgx", cluster)
		if err == nil {
			db.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
			db.Close()
		}
	}
	u, err := url.Parse(cluster)
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	return u.String(), drop, nil
}

func startPostgres() (string, error) {
	if u := os.Getenv("UPSCALE_TEST_POSTGRES_URL"); u != "" {
		return u, nil
	}
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		return "", fmt.Errorf("no initdb under /usr/lib/postgresql; install Debian's postgresql package or set UPSCALE_TEST_POSTGRES_URL")
	}
	bin := filepath.Dir(bins[len(bins)-1])
	dir, err := os.MkdirTemp("", "upscale-pg-")
	if err != nil {
		return "", err
	}
	ports, err := freePorts(1)
	if err != nil {
		return "", err
	}
	port := ports[0]
	// initdb refuses to run as root, so a root test process runs the server
	// as the postgres user, which must own the directory.
	asUser := func(name string, args ...string) *exec.Cmd { return exec.Command(name, args...) }
	if os.Geteuid() == 0 {
		pg, err := user.Lookup("postgres")
		if err != nil {
			return "", fmt.Errorf("running as root and there is no postgres user to run the server as")
		}
		if out, err := exec.Command("chown", pg.Username, dir).CombinedOutput(); err != nil {
			return "", fmt.Errorf("chown: %v: %s", err, out)
		}
		asUser = func(name string, args ...string) *exec.Cmd {
			return exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := asUser(filepath.Join(bin, "initdb"), "-D", data, "-U", "test", "--auth=trust", "--no-sync").CombinedOutput(); err != nil {
		return "", fmt.Errorf("initdb: %v: %s", err, out)
	}
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -k %s -c fsync=off -c max_connections=300", port, dir)
	if out, err := asUser(filepath.Join(bin, "pg_ctl"), "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "start").CombinedOutput(); err != nil {
		return "", fmt.Errorf("pg_ctl start: %v: %s", err, out)
	}
	cluster := fmt.Sprintf("postgres://test@127.0.0.1:%d/postgres?sslmode=disable", port)
	onStop(func() {
		asUser(filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "stop").Run()
		os.RemoveAll(dir)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, _ := sql.Open("pgx", cluster)
	defer db.Close()
	return cluster, db.PingContext(ctx)
}

var stoppers struct {
	sync.Mutex
	funcs []func()
}

func onStop(f func()) {
	stoppers.Lock()
	defer stoppers.Unlock()
	stoppers.funcs = append(stoppers.funcs, f)
}

// Main runs a package's tests, stops the servers they started and exits
// with the tests' code: a package that starts servers calls it from its
// TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop stops the servers this process started; a program that is not a
// test calls it before it exits.
func Stop() {
	stoppers.Lock()
	defer stoppers.Unlock()
	for _, f := range stoppers.funcs {
		f()
	}
	stoppers.funcs = nil
}

// tool finds the server binary name, the one the environment variable env
// names or else the one on PATH, and makes a temporary directory for its
// run; the error says how to get it (module is its go install path).
func tool(env, name, module string) (bin, dir string, err error) {
	if bin = os.Getenv(env); bin == "" {
		if bin, err = exec.LookPath(name); err != nil {
			return "", "", fmt.Errorf("no %s binary; run make test-deps, or build it with CGO_ENABLED=0 go install %s and set %s", name, module, env)
		}
	}
	dir, err = os.MkdirTemp("", "upscale-"+name+"-")
	return bin, dir, err
}

// freePorts returns n ports free on loopback now, each another.
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close() // held until all are chosen, so that none is chosen twice
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}
