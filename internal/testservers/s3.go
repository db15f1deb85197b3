package testservers

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// S3Server is a running S3-compatible server. Buckets are created by the
// tests themselves.
type S3Server struct {
	Endpoint  string // http://127.0.0.1:PORT, for path-style requests
	AccessKey string
	SecretKey string
}

var s3 lazy[S3Server]

// S3 returns a versitygw server with a POSIX back end in a temporary
// directory, started once per test process and stopped by Stop. The binary
// is the one named by UPSCALE_VERSITYGW, else versitygw on PATH; make
// test-deps builds it.
func S3(t testing.TB) S3Server {
	t.Helper()
	server, err := StartS3()
	if err != nil {
		Unavailable(t, err.Error())
	}
	return server
}

// StartS3 is S3 for a program.
func StartS3() (S3Server, error) {
	server, err := s3.get(startS3)
	if err != nil {
		return S3Server{}, fmt.Errorf("S3: %w", err)
	}
	return server, nil
}

func startS3() (S3Server, error) {
	bin, dir, err := tool("UPSCALE_VERSITYGW", "versitygw", "github.com/versity/versitygw/cmd/versitygw@v1.8.0")
	if err != nil {
		return S3Server{}, err
	}
	ports, err := freePorts(1)
	if err != nil {
		return S3Server{}, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	server := S3Server{Endpoint: "http://" + addr, AccessKey: "test" + upscale.NewKey("")[:8], SecretKey: upscale.NewKey("")}
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o700); err != nil {
		return S3Server{}, err
	}
	return server, serve(dir, addr, bin, "--access", server.AccessKey, "--secret", server.SecretKey, "--port", addr, "posix", root)
}

// serve runs bin with args, logging to dir/log, until Stop, which then
// removes dir, and waits up to 15 s for it to listen on addr.
func serve(dir, addr, bin string, args ...string) error {
	log, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	onStop(func() {
		cmd.Process.Kill()
		<-exited
		log.Close()
		os.RemoveAll(dir)
	})
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-exited:
			out, _ := os.ReadFile(log.Name())
			exited <- err
			return fmt.Errorf("%s exited: %v: %s", bin, err, out)
		default:
		}
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not listen on %s within 15s", bin, addr)
		}
	}
}
