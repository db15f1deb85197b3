package main

import (
	"net"
	"testing"
	"time"
)

// TestLimitListener: with two slots taken, a third client is not accepted
// until one of the first two closes; Close wakes an Accept waiting for a
// slot.
func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newLimitListener(inner, 2)
	accepted := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first, second := <-accepted, <-accepted
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted while two were open")
	case <-time.After(100 * time.Millisecond):
	}
	first.Close()
	third := <-accepted
	if third == nil {
		t.Fatal("the third connection was not accepted after one closed")
	}
	ln.Close()
	if _, ok := <-accepted; ok {
		t.Error("Accept returned a connection after Close")
	}
	second.Close()
	third.Close()
}
