package testservers

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// A Proxy forwards TCP connections to a server, and can take the server
// away as an outage would: Cut closes every connection and refuses new
// ones, Restore lets them through again on the same address, and
// LoseAnswers lets requests reach the server but drops what it answers.
type Proxy struct {
	Addr   string // host:port to dial instead of the server's
	target string
	losing atomic.Bool

	mu    sync.Mutex
	ln    net.Listener // nil while cut
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// NewProxy starts a proxy to target (host:port), closed when t ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := StartProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// StartProxy is NewProxy for a program, which calls Close when done.
func StartProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, conns: map[net.Conn]bool{}}
	p.serve(ln)
	return p, nil
}

// Close cuts every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() {
	p.Cut()
	p.wg.Wait()
}

// Cut closes the listener and every connection through the proxy.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// LoseAnswers makes the proxy, while on is true, deliver what clients
// send but close their connections instead of passing on the server's
// answer: the server does the work and the client never hears of it.
func (p *Proxy) LoseAnswers(on bool) { p.losing.Store(on) }

// Restore listens again on Addr after Cut.
func (p *Proxy) Restore() error {
	ln, err := net.Listen("tcp", p.Addr)
	if err != nil {
		return fmt.Errorf("proxy: listen again on %s: %w", p.Addr, err)
	}
	p.serve(ln)
	return nil
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			client, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			server, err := net.Dial("tcp", p.target)
			if err != nil {
				client.Close()
				continue
			}
			if !p.track(client, server) {
				continue
			}
			p.wg.Go(func() { p.pipe(server, client) })
			p.wg.Go(func() { p.answer(client, server) })
		}
	})
}

// track records a connection pair, or closes it if the proxy was cut
// meanwhile.
func (p *Proxy) track(client, server net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		client.Close()
		server.Close()
		return false
	}
	p.conns[client], p.conns[server] = true, true
	return true
}

// answer copies the server's answer to the client, unless answers are
// being lost.
func (p *Proxy) answer(client, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 && p.losing.Load() {
			break
		}
		if n > 0 {
			if _, werr := client.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	p.closePair(client, server)
}

// pipe copies until either side closes, then closes both.
func (p *Proxy) pipe(dst, src net.Conn) {
	io.Copy(dst, src)
	p.closePair(dst, src)
}

func (p *Proxy) closePair(a, b net.Conn) {
	a.Close()
	b.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, a)
	delete(p.conns, b)
}
