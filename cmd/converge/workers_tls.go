package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// workersTLSOptions are serve's --workers-tls-* flags: the certificate
// and key (PEM files) the workers' TCP listener presents, and the CA
// bundle its workers' client certificates must chain to (mutual TLS);
// and --insecure, the explicit choice of plain TCP instead.
type workersTLSOptions struct {
	cert, key, clientCA string
	insecure            bool
}

// set reports whether any --workers-tls-* flag was given.
func (o workersTLSOptions) set() bool { return o.cert != "" || o.key != "" || o.clientCA != "" }

// mode names the protection the flags give: "TLS", "mutual TLS", or ""
// (plain TCP).
func (o workersTLSOptions) mode() string {
	switch {
	case o.clientCA != "":
		return "mutual TLS"
	case o.cert != "":
		return "TLS"
	case o.insecure:
		return "plain TCP, --insecure"
	}
	return ""
}

// config checks the --workers-tls-* flags against each other and against
// --workers-listen (workersListen), reads their files, and returns the
// TLS configuration of the workers' TCP listener: nil without the flags.
// Every mistake is a usage error (exit 2) naming the flag and its file.
// The files are read once: a renewed certificate takes a restart.
//
// The workers' port serves TLS: --workers-listen without the certificate
// and key is refused unless --insecure chooses plain TCP, where the
// workers' bearer token crosses the network in clear (serve warns).
func (o workersTLSOptions) config(workersListen string, now time.Time) (*tls.Config, *tlsReloader, error) {
	if o.insecure {
		switch {
		case workersListen == "":
			return nil, nil, usageErr("--insecure needs --workers-listen: it makes the workers' TCP listener plain TCP")
		case o.set():
			return nil, nil, usageErr("--insecure with --workers-tls-cert, --workers-tls-key or --workers-tls-client-ca: choose plain TCP or TLS, not both")
		}
		return nil, nil, nil
	}
	if !o.set() {
		if workersListen != "" {
			return nil, nil, usageErr("--workers-listen %s: the workers' port serves TLS, so the workers' token never crosses the network in clear: give --workers-tls-cert and --workers-tls-key (PEM; --workers-tls-client-ca for mutual TLS), or --insecure for plain TCP on a network you trust", workersListen)
		}
		return nil, nil, nil
	}
	if workersListen == "" {
		return nil, nil, usageErr("--workers-tls-cert, --workers-tls-key and --workers-tls-client-ca need --workers-listen: they secure the workers' TCP listener (the unix socket in the state directory stays plain, owner-only)")
	}
	if o.cert == "" || o.key == "" {
		return nil, nil, usageErr("--workers-tls-cert and --workers-tls-key go together: give both (the server certificate and its private key, PEM)")
	}
	r := &tlsReloader{o: o}
	cfg, err := o.load(now)
	if err != nil {
		return nil, nil, err
	}
	r.cur, r.sig = cfg, o.signature()
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: r.forClient}, r, nil
}

// load reads the certificate, its key and the client CA bundle, and
// checks them as the flags' errors say.
func (o workersTLSOptions) load(now time.Time) (*tls.Config, error) {
	certPEM, err := readPEM("--workers-tls-cert", o.cert, "CERTIFICATE")
	if err != nil {
		return nil, err
	}
	keyPEM, err := readPEM("--workers-tls-key", o.key, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, usageErr("--workers-tls-cert %s with --workers-tls-key %s: %v", o.cert, o.key, err)
	}
	if leaf := pair.Leaf; leaf != nil {
		if now.After(leaf.NotAfter) {
			return nil, usageErr("--workers-tls-cert %s: the certificate expired on %s", o.cert, leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		if now.Before(leaf.NotBefore) {
			return nil, usageErr("--workers-tls-cert %s: the certificate is not valid before %s", o.cert, leaf.NotBefore.UTC().Format(time.RFC3339))
		}
	}
	// h2: gRPC's ALPN, which a config from GetConfigForClient must name itself.
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	if o.clientCA != "" {
		caPEM, err := readPEM("--workers-tls-client-ca", o.clientCA, "CERTIFICATE")
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = x509.NewCertPool()
		if !cfg.ClientCAs.AppendCertsFromPEM(caPEM) {
			return nil, usageErr("--workers-tls-client-ca %s: no valid PEM certificate in it", o.clientCA)
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// readPEM reads file (given as flag) and checks that it holds a PEM block
// whose type ends with want ("CERTIFICATE", "PRIVATE KEY": also "EC
// PRIVATE KEY", "RSA PRIVATE KEY").
// tlsReloader serves the workers' listener the certificate, key and
// client CA bundle as their files are now: a handshake after a file
// changed (its size or modification time) reads them again, so a
// certificate is rotated without a restart (SIGHUP reloads too). A
// rotation that does not load (a half-written file, a key that does not
// match) keeps the previous files' configuration and is logged once.
type tlsReloader struct {
	o workersTLSOptions

	mu     sync.Mutex
	cur    *tls.Config
	sig    string // the files' sizes and times cur was loaded from
	failed string // the signature whose load failed, logged once
	// warn logs a rotation that does not load, note says one that did
	// (serve sets them; nil: silent).
	warn func(msg string, args ...any)
	note func(msg string)
}

// forClient is the listener's GetConfigForClient.
func (r *tlsReloader) forClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	r.reload(false)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur, nil
}

// reload loads the files again when they changed (or always, force).
func (r *tlsReloader) reload(force bool) {
	sig := r.o.signature()
	r.mu.Lock()
	same := sig == r.sig || sig == r.failed
	r.mu.Unlock()
	if same && !force {
		return
	}
	cfg, err := r.o.load(time.Now())
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if r.failed != sig && r.warn != nil {
			r.warn("workers TLS: the changed files do not load; the previous certificate stays in use", "err", err)
		}
		r.failed = sig
		return
	}
	if r.note != nil && (sig != r.sig || force) {
		r.note("workers TLS: reloaded " + r.o.cert)
	}
	r.cur, r.sig, r.failed = cfg, sig, ""
}

// signature is the TLS files' sizes and modification times.
func (o workersTLSOptions) signature() string {
	var b strings.Builder
	for _, f := range []string{o.cert, o.key, o.clientCA} {
		if f == "" {
			continue
		}
		if fi, err := os.Stat(f); err == nil {
			fmt.Fprintf(&b, "%s %d %d;", f, fi.Size(), fi.ModTime().UnixNano())
		} else {
			fmt.Fprintf(&b, "%s missing;", f)
		}
	}
	return b.String()
}

func readPEM(flag, file, want string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, usageErr("%s: %v", flag, err) // the error names the file
	}
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return nil, usageErr("%s %s: no PEM %s in it", flag, file, strings.ToLower(want))
		}
		if strings.HasSuffix(blk.Type, want) {
			return b, nil
		}
	}
}

// listenWorkers opens --workers-listen (nil, and a no-op stop, when it is
// not set), writes the bound address to workers.addr in the state
// directory (for tools when it picked a free port) and says where workers
// connect and how (TLS or mutual TLS); stop removes the file. The caller
// (a worker service serving it) closes the listener.
func (s *server) listenWorkers() (l net.Listener, stop func(), err error) {
	if s.o.workersListen == "" {
		return nil, func() {}, nil
	}
	l, err = net.Listen("tcp", s.o.workersListen)
	if err != nil {
		return nil, nil, fmt.Errorf("listen for workers on %s: %w", s.o.workersListen, err)
	}
	addrFile := filepath.Join(s.dir, "workers.addr")
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		l.Close()
		return nil, nil, fmt.Errorf("create state directory: %w", err)
	}
	if err := os.WriteFile(addrFile, []byte(l.Addr().String()+"\n"), 0o600); err != nil {
		l.Close()
		return nil, nil, fmt.Errorf("write %s: %w", addrFile, err)
	}
	how := ""
	if m := s.o.workersTLS.mode(); m != "" {
		how = " (" + m + ")"
	}
	fmt.Fprintf(s.out, "serve: workers on %s%s\n", l.Addr(), how)
	if s.o.workersTLS.insecure {
		fmt.Fprintf(s.errOut, "converge: warning: --insecure: workers connect to %s over plain TCP; their token (and every task and result) crosses the network in clear\n", l.Addr())
	}
	return l, func() { os.Remove(addrFile) }, nil
}
