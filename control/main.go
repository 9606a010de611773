// Command control is ratchet's frozen reference server: the accept path of a
// Go proxy, one goroutine per connection with SO_REUSEPORT fan-out (one
// listener per GOMAXPROCS). It must never change during an experiment; ratchet
// records a hash of this file in every result.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"
)

// soReusePort is SO_REUSEPORT on Linux; package syscall does not export it and
// the control may use the standard library only.
const soReusePort = 0xf

var response = []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

func reusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, soReusePort, 1)
	})
	if err != nil {
		return err
	}
	return serr
}

func handle(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 1024)
	if _, err := c.Read(buf); err != nil {
		return
	}
	_, _ = c.Write(response)
}

func serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "accept:", err)
			continue
		}
		go handle(c)
	}
}

func main() {
	port := flag.Int("port", 8080, "TCP port to listen on (127.0.0.1)")
	flag.Parse()
	addr := fmt.Sprintf("127.0.0.1:%d", *port)
	lc := net.ListenConfig{Control: reusePort}
	for i := 0; i < runtime.GOMAXPROCS(0); i++ {
		ln, err := lc.Listen(context.Background(), "tcp4", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "listen:", err)
			os.Exit(1)
		}
		go serve(ln)
	}
	select {}
}
