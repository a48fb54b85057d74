package main

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// hangServer is a real TCP server on loopback for scenarios about remotes
// that hang: until it is silenced it forwards every connection to a real
// remote (a git-http-serve), or from the start, without one, it accepts
// every connection and never answers.
type hangServer struct {
	l      net.Listener
	target string // host:port forwarded to; "" for silent from the start
	silent atomic.Bool
	hung   atomic.Int64 // connections accepted and never answered

	mu    sync.Mutex // guards conns
	conns []net.Conn
}

// hangServers holds each script's servers by the variable naming them.
var hangServers sync.Map // *testscript.TestScript + VAR -> *hangServer

func hangKey(ts *testscript.TestScript, name string) string { return fmt.Sprintf("%p/%s", ts, name) }

func (h *hangServer) serve() {
	for {
		c, err := h.l.Accept()
		if err != nil {
			return
		}
		h.mu.Lock()
		h.conns = append(h.conns, c)
		h.mu.Unlock()
		if h.target == "" || h.silent.Load() {
			h.hung.Add(1) // held open, never read or written
			continue
		}
		go func() {
			up, err := net.Dial("tcp", h.target)
			if err != nil {
				c.Close()
				return
			}
			go func() { io.Copy(up, c); up.Close() }()
			io.Copy(c, up)
			c.Close()
		}()
	}
}

func (h *hangServer) close() {
	h.l.Close()
	h.mu.Lock()
	for _, c := range h.conns {
		c.Close()
	}
	h.mu.Unlock()
}

// cmdHangRemote starts a hangServer and sets VAR to its http:// base URL:
// `hang-remote VAR` is silent from the start, `hang-remote VAR URL`
// forwards to URL's host until `hang-remote -silence VAR`.
func cmdHangRemote(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: hang-remote VAR [URL] | hang-remote -silence VAR")
	}
	if args[0] == "-silence" {
		h, ok := hangServers.Load(hangKey(ts, args[1]))
		if !ok {
			ts.Fatalf("no hang-remote %s", args[1])
		}
		hs := h.(*hangServer)
		hs.silent.Store(true)
		// Connections forwarded so far end: a client's kept-alive one
		// would otherwise still reach the real remote.
		hs.mu.Lock()
		for _, c := range hs.conns {
			c.Close()
		}
		hs.conns = nil
		hs.mu.Unlock()
		return
	}
	h := &hangServer{}
	if len(args) == 2 {
		u, err := url.Parse(args[1])
		ts.Check(err)
		h.target = u.Host
	}
	var err error
	h.l, err = net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	go h.serve()
	hangServers.Store(hangKey(ts, args[0]), h)
	ts.Defer(func() { h.close(); hangServers.Delete(hangKey(ts, args[0])) })
	ts.Setenv(args[0], "http://"+h.l.Addr().String())
}

// cmdWaitHung waits up to 60s until the hang-remote VAR has accepted N
// connections it leaves unanswered: a fetch or push is waiting on it.
func cmdWaitHung(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: wait-hung VAR N")
	}
	n, err := strconv.ParseInt(args[1], 10, 64)
	ts.Check(err)
	v, ok := hangServers.Load(hangKey(ts, args[0]))
	if !ok {
		ts.Fatalf("no hang-remote %s", args[0])
	}
	h := v.(*hangServer)
	deadline := time.Now().Add(60 * time.Second)
	for h.hung.Load() < n {
		if time.Now().After(deadline) {
			ts.Fatalf("hang-remote %s: %d connections hung, want %d", args[0], h.hung.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cmdSignalPid sends SIGNAL (TERM, INT or KILL) to the process whose pid
// FILE holds, waiting up to 30s for the file: testscript's own kill
// knows only INT and KILL, and a daemon is stopped with TERM.
func cmdSignalPid(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: signal-pid FILE SIGNAL")
	}
	sig, ok := map[string]syscall.Signal{"TERM": syscall.SIGTERM, "INT": syscall.SIGINT, "KILL": syscall.SIGKILL}[args[1]]
	if !ok {
		ts.Fatalf("unknown signal %s", args[1])
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(ts.MkAbs(args[0]))
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil {
			ts.Check(syscall.Kill(pid, sig))
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("no pid in %s: %v", args[0], err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
