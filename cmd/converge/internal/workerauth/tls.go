// Package workerauth holds the credentials serve's workers' TCP listener
// (--workers-listen) checks, each read again when its files change or on
// SIGHUP, so they rotate without a restart: the TLS certificate, key and
// client CA the listener presents and requires (TLSFiles, TLSReloader),
// and a file of the tokens workers present (TokenFile). Its errors name
// the flag and the file.
package workerauth

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// TLSFiles are serve's --workers-tls-* flags: the certificate
// and key (PEM files) the workers' TCP listener presents, and the CA
// bundle its workers' client certificates must chain to (mutual TLS);
// and --insecure, the explicit choice of plain TCP instead.
type TLSFiles struct {
	Cert, Key, ClientCA string
	Insecure            bool
}

// set reports whether any --workers-tls-* flag was given.
func (o TLSFiles) set() bool { return o.Cert != "" || o.Key != "" || o.ClientCA != "" }

// Mode names the protection the flags give: "TLS", "mutual TLS", or ""
// (plain TCP).
func (o TLSFiles) Mode() string {
	switch {
	case o.ClientCA != "":
		return "mutual TLS"
	case o.Cert != "":
		return "TLS"
	case o.Insecure:
		return "plain TCP, --insecure"
	}
	return ""
}

// Config checks the --workers-tls-* flags against each other and against
// --workers-listen (workersListen), reads their files, and returns the
// TLS configuration of the workers' TCP listener: nil without the flags.
// Every mistake is a usage error (exit 2) naming the flag and its file.
// The files are read once: a renewed certificate takes a restart.
//
// The workers' port serves TLS: --workers-listen without the certificate
// and key is refused unless --insecure chooses plain TCP, where the
// workers' bearer token crosses the network in clear (serve warns).
func (o TLSFiles) Config(workersListen string, now time.Time) (*tls.Config, *TLSReloader, error) {
	if o.Insecure {
		switch {
		case workersListen == "":
			return nil, nil, fmt.Errorf("--insecure needs --workers-listen: it makes the workers' TCP listener plain TCP")
		case o.set():
			return nil, nil, fmt.Errorf("--insecure with --workers-tls-cert, --workers-tls-key or --workers-tls-client-ca: choose plain TCP or TLS, not both")
		}
		return nil, nil, nil
	}
	if !o.set() {
		if workersListen != "" {
			return nil, nil, fmt.Errorf("--workers-listen %s: the workers' port serves TLS, so the workers' token never crosses the network in clear: give --workers-tls-cert and --workers-tls-key (PEM; --workers-tls-client-ca for mutual TLS), or --insecure for plain TCP on a network you trust", workersListen)
		}
		return nil, nil, nil
	}
	if workersListen == "" {
		return nil, nil, fmt.Errorf("--workers-tls-cert, --workers-tls-key and --workers-tls-client-ca need --workers-listen: they secure the workers' TCP listener (the unix socket in the state directory stays plain, owner-only)")
	}
	if o.Cert == "" || o.Key == "" {
		return nil, nil, fmt.Errorf("--workers-tls-cert and --workers-tls-key go together: give both (the server certificate and its private key, PEM)")
	}
	r := &TLSReloader{o: o}
	cfg, err := o.load(now)
	if err != nil {
		return nil, nil, err
	}
	r.cur, r.sig = cfg, o.signature()
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: r.forClient}, r, nil
}

// load reads the certificate, its key and the client CA bundle, and
// checks them as the flags' errors say.
func (o TLSFiles) load(now time.Time) (*tls.Config, error) {
	certPEM, err := readPEM("--workers-tls-cert", o.Cert, "CERTIFICATE")
	if err != nil {
		return nil, err
	}
	keyPEM, err := readPEM("--workers-tls-key", o.Key, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("--workers-tls-cert %s with --workers-tls-key %s: %v", o.Cert, o.Key, err)
	}
	if leaf := pair.Leaf; leaf != nil {
		if now.After(leaf.NotAfter) {
			return nil, fmt.Errorf("--workers-tls-cert %s: the certificate expired on %s", o.Cert, leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		if now.Before(leaf.NotBefore) {
			return nil, fmt.Errorf("--workers-tls-cert %s: the certificate is not valid before %s", o.Cert, leaf.NotBefore.UTC().Format(time.RFC3339))
		}
	}
	// h2: gRPC's ALPN, which a config from GetConfigForClient must name itself.
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	if o.ClientCA != "" {
		caPEM, err := readPEM("--workers-tls-client-ca", o.ClientCA, "CERTIFICATE")
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = x509.NewCertPool()
		if !cfg.ClientCAs.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("--workers-tls-client-ca %s: no valid PEM certificate in it", o.ClientCA)
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// TLSReloader serves the workers' listener the certificate, key and
// client CA bundle as their files are now: a handshake after a file
// changed (its size or modification time) reads them again, so a
// certificate is rotated without a restart (SIGHUP reloads too). A
// rotation that does not load (a half-written file, a key that does not
// match) keeps the previous files' configuration and is logged once.
type TLSReloader struct {
	o TLSFiles

	mu     sync.Mutex
	cur    *tls.Config
	sig    string // the files' sizes and times cur was loaded from
	failed string // the signature whose load failed, logged once
	// Warn logs a rotation that does not load, note says one that did
	// (serve sets them; nil: silent).
	Warn func(msg string, args ...any)
	Note func(msg string)
}

// forClient is the listener's GetConfigForClient.
func (r *TLSReloader) forClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	r.Reload(false)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur, nil
}

// Reload loads the files again when they changed (or always, force).
func (r *TLSReloader) Reload(force bool) {
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
		if r.failed != sig && r.Warn != nil {
			r.Warn("workers TLS: the changed files do not load; the previous certificate stays in use", "err", err)
		}
		r.failed = sig
		return
	}
	if r.Note != nil && (sig != r.sig || force) {
		r.Note("workers TLS: reloaded " + r.o.Cert)
	}
	r.cur, r.sig, r.failed = cfg, sig, ""
}

// signature is the TLS files' sizes and modification times.
func (o TLSFiles) signature() string {
	var b strings.Builder
	for _, f := range []string{o.Cert, o.Key, o.ClientCA} {
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

// readPEM reads file (given as flag) and checks that it holds a PEM block
// whose type ends with want ("CERTIFICATE", "PRIVATE KEY": also "EC
// PRIVATE KEY", "RSA PRIVATE KEY").
func readPEM(flag, file, want string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", flag, err) // the error names the file
	}
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return nil, fmt.Errorf("%s %s: no PEM %s in it", flag, file, strings.ToLower(want))
		}
		if strings.HasSuffix(blk.Type, want) {
			return b, nil
		}
	}
}
