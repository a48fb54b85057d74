package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/state/etcdtest"
)

// workersPKI is a test CA's PEM files: a server certificate for
// 127.0.0.1 and localhost, a worker's client certificate, a client certificate from
// another CA, and an expired server certificate.
type workersPKI struct {
	ca, serverCert, serverKey string
	clientCert, clientKey     string
	otherCert, otherKey       string // signed by another CA
	// otherCA and its server certificate: what a rotation moves to.
	otherCA, otherServerCert, otherServerKey string
	expiredCert, expiredKey                  string // a server certificate that expired
}

func newWorkersPKI(t *testing.T) *workersPKI {
	t.Helper()
	dir := t.TempDir()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	serial := int64(0)
	issue := func(tmpl, parent *x509.Certificate, parentKey, key *ecdsa.PrivateKey) *x509.Certificate {
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		if tmpl.NotAfter.IsZero() {
			tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		}
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	writeCert := func(name string, c *x509.Certificate) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	writeKey := func(name string, k *ecdsa.PrivateKey) string {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caTmpl := func(cn string) *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	}
	serverTmpl := func() *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: "converge serve"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	}
	clientTmpl := func(cn string) *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: cn},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	}
	p := &workersPKI{}
	caKey := newKey()
	ca := issue(caTmpl("converge test CA"), nil, nil, caKey)
	p.ca = writeCert("ca.pem", ca)
	srvKey := newKey()
	p.serverCert, p.serverKey = writeCert("server.pem", issue(serverTmpl(), ca, caKey, srvKey)), writeKey("server.key", srvKey)
	cliKey := newKey()
	p.clientCert, p.clientKey = writeCert("worker.pem", issue(clientTmpl("worker"), ca, caKey, cliKey)), writeKey("worker.key", cliKey)
	otherCAKey := newKey()
	otherCA := issue(caTmpl("someone else"), nil, nil, otherCAKey)
	otherKey := newKey()
	p.otherCert, p.otherKey = writeCert("other.pem", issue(clientTmpl("intruder"), otherCA, otherCAKey, otherKey)), writeKey("other.key", otherKey)
	p.otherCA = writeCert("other-ca.pem", otherCA)
	otherSrvKey := newKey()
	p.otherServerCert = writeCert("other-server.pem", issue(serverTmpl(), otherCA, otherCAKey, otherSrvKey))
	p.otherServerKey = writeKey("other-server.key", otherSrvKey)
	expKey := newKey()
	exp := serverTmpl()
	exp.NotBefore, exp.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
	p.expiredCert, p.expiredKey = writeCert("expired.pem", issue(exp, ca, caKey, expKey)), writeKey("expired.key", expKey)
	return p
}

// TestServeWorkersTLSFlags: every misuse of --workers-tls-* is a usage
// error (exit 2) that names the flag and, for a bad file, the file; serve
// checks them before it starts anything.
func TestServeWorkersTLSFlags(t *testing.T) {
	pki := newWorkersPKI(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM at all\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	listen := []string{"--workers-listen", "127.0.0.1:0"}
	tests := []struct {
		name string
		args []string
		want []string // substrings of the error
	}{
		{name: "without --workers-listen", args: []string{"--workers-tls-cert", pki.serverCert, "--workers-tls-key", pki.serverKey},
			want: []string{"need --workers-listen"}},
		{name: "client CA without --workers-listen", args: []string{"--workers-tls-client-ca", pki.ca},
			want: []string{"need --workers-listen"}},
		{name: "cert without key", args: append([]string{"--workers-tls-cert", pki.serverCert}, listen...),
			want: []string{"--workers-tls-cert and --workers-tls-key go together"}},
		{name: "key without cert", args: append([]string{"--workers-tls-key", pki.serverKey}, listen...),
			want: []string{"--workers-tls-cert and --workers-tls-key go together"}},
		{name: "client CA without cert", args: append([]string{"--workers-tls-client-ca", pki.ca}, listen...),
			want: []string{"--workers-tls-cert and --workers-tls-key go together"}},
		{name: "unreadable cert", args: append([]string{"--workers-tls-cert", missing, "--workers-tls-key", pki.serverKey}, listen...),
			want: []string{"--workers-tls-cert", missing, "no such file"}},
		{name: "cert not PEM", args: append([]string{"--workers-tls-cert", garbage, "--workers-tls-key", pki.serverKey}, listen...),
			want: []string{"--workers-tls-cert " + garbage + ": no PEM certificate"}},
		{name: "key file holds a certificate", args: append([]string{"--workers-tls-cert", pki.serverCert, "--workers-tls-key", pki.serverCert}, listen...),
			want: []string{"--workers-tls-key " + pki.serverCert + ": no PEM private key"}},
		{name: "key of another certificate", args: append([]string{"--workers-tls-cert", pki.serverCert, "--workers-tls-key", pki.clientKey}, listen...),
			want: []string{"--workers-tls-cert " + pki.serverCert + " with --workers-tls-key " + pki.clientKey, "private key does not match"}},
		{name: "expired cert", args: append([]string{"--workers-tls-cert", pki.expiredCert, "--workers-tls-key", pki.expiredKey}, listen...),
			want: []string{"--workers-tls-cert " + pki.expiredCert + ": the certificate expired on"}},
		{name: "client CA not PEM", args: append([]string{"--workers-tls-cert", pki.serverCert, "--workers-tls-key", pki.serverKey, "--workers-tls-client-ca", garbage}, listen...),
			want: []string{"--workers-tls-client-ca " + garbage + ": no PEM certificate"}},
		{name: "unreadable client CA", args: append([]string{"--workers-tls-cert", pki.serverCert, "--workers-tls-key", pki.serverKey, "--workers-tls-client-ca", missing}, listen...),
			want: []string{"--workers-tls-client-ca", missing, "no such file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// No --repo: serve must refuse the flags before it looks for one.
			out, err := runCLI(append([]string{"--state", t.TempDir(), "serve", "--listen", ""}, tt.args...)...)
			if err == nil {
				t.Fatalf("serve %q succeeded:\n%s", tt.args, out)
			}
			var f errFailed
			if errors.As(err, &f) {
				t.Errorf("serve %q: exit 1 (%v), want a usage error (exit 2)", tt.args, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("serve %q: %v\nwant it to say %q", tt.args, err, w)
				}
			}
		})
	}
}

// TestServeWorkersMutualTLS runs a real `converge serve` whose workers'
// TCP listener requires mutual TLS, on a small classic example that
// declares no workers: external `converge worker classic` processes
// alone can converge it. A worker speaking plain TCP, one with no client
// certificate and one whose certificate another CA signed are refused
// (each logs why) and the root stays unconverged; a worker with the
// client certificate connects and the example converges.
func TestServeWorkersMutualTLS(t *testing.T) {
	pki := newWorkersPKI(t)
	repo := replicaRepo(t, []byte(smallBOM), true)
	stateDir := t.TempDir()
	const token = "tls-token"
	srv := startProc(t, "serve", []string{"CONVERGE_WORKER_TOKEN=" + token}, "--repo", repo, "--state", stateDir,
		"serve", "--listen", "", "--workers-listen", "127.0.0.1:0", "--poll", "1h",
		"--workers-tls-cert", pki.serverCert, "--workers-tls-key", pki.serverKey, "--workers-tls-client-ca", pki.ca)
	addr := readAddr(t, filepath.Join(stateDir, "workers.addr"))
	waitUntil(t, 30*time.Second, "serve to apply the commit", func() bool { return strings.Contains(srv.output(), " applied: ") })
	if want := "serve: workers on " + addr + " (mutual TLS)"; !strings.Contains(srv.output(), want) {
		t.Errorf("serve does not say %q:\n%s", want, srv.output())
	}
	worker := func(name string, env ...string) *proc {
		return startProc(t, name, append([]string{"CONVERGE_ADDR=" + addr, "CONVERGE_TOKEN=" + token,
			"CONVERGE_WORKER_NAME=" + name, "CONVERGE_STATE_DIR=" + t.TempDir()}, env...), "worker", "classic")
	}
	refused := []struct {
		name string
		env  []string
		log  string // serve's log of the refusal; "" when the client sends nothing to tell
	}{
		{name: "plaintext", log: "first record does not look like a TLS handshake"},
		{name: "no-client-cert", env: []string{"CONVERGE_TLS_CA=" + pki.ca}, log: "client didn't provide a certificate"},
		// A client certificate of another CA is not even offered (the
		// server names the CAs it accepts): refused as having none.
		{name: "other-ca", env: []string{"CONVERGE_TLS_CA=" + pki.ca, "CONVERGE_TLS_CERT=" + pki.otherCert, "CONVERGE_TLS_KEY=" + pki.otherKey},
			log: "client didn't provide a certificate"},
	}
	var bad []*proc
	for _, r := range refused {
		bad = append(bad, worker(r.name, r.env...))
	}
	for i, r := range refused {
		// The worker says it was refused, with a hint about TLS.
		waitUntil(t, 15*time.Second, r.name+" worker refused with a hint", func() bool {
			return strings.Contains(bad[i].output(), "reconnecting") && strings.Contains(bad[i].output(), "hint=")
		})
		// serve logs the refusal once its handshake gives up, which
		// may be after the worker saw its connection end.
		want := "worker connection refused: TLS handshake failed"
		logged := func() bool { return strings.Contains(srv.output(), want) && strings.Contains(srv.output(), r.log) }
		deadline := time.Now().Add(10 * time.Second)
		for !logged() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if !logged() {
			t.Errorf("serve does not log %q with %q for the %s worker", want, r.log, r.name)
		}
	}
	if out := srv.output(); strings.Contains(out, " converged: ") {
		t.Fatalf("the example converged with no accepted worker:\n%s", out)
	}
	for _, p := range bad {
		if strings.Contains(p.output(), "worker registered") {
			t.Errorf("the %s worker registered:\n%s", p.name, p.output())
		}
		p.cmd.Process.Kill()
	}

	good := worker("mtls", "CONVERGE_TLS_CA="+pki.ca, "CONVERGE_TLS_CERT="+pki.clientCert, "CONVERGE_TLS_KEY="+pki.clientKey)
	waitUntil(t, 60*time.Second, "the example converged through the mutual-TLS worker", func() bool {
		return strings.Contains(srv.output(), " converged: ")
	})
	if out := good.output(); strings.Contains(out, "reconnecting") || !strings.Contains(out, "worker registered") {
		t.Errorf("the worker with a client certificate was refused:\n%s", good.output())
	}
	srv.stop(t)
}

// TestReplicasWorkersMutualTLS: two `serve --replica` processes on one
// etcd state, both with a mutual-TLS workers listener on 127.0.0.1 that
// they --advertise as localhost:PORT (the name the worker's TLS checks
// the certificate against). A worker with the client certificate that
// lists the follower first is refused by it over TLS, naming the
// leader's advertised address, goes there and converges the example; a
// plain-TCP worker is refused by the follower's TLS listener too.
func TestReplicasWorkersMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two serve replicas on an etcd cluster")
	}
	pki := newWorkersPKI(t)
	cluster := etcdtest.Start(t, etcdtest.Options{ElectionMs: 1500})
	url := cluster.URL("/converge/tls")
	o, err := parseEtcdState(url, "", "", "", os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	repo := replicaRepo(t, []byte(smallBOM), true)
	const token = "tls-token"
	procs := map[string]*proc{}
	addrs := map[string]string{} // advertised: localhost:PORT
	for _, name := range []string{"a", "b"} {
		port := freePort(t)
		addrs[name] = "localhost:" + port
		procs[name] = startProc(t, name, []string{"CONVERGE_WORKER_TOKEN=" + token}, "serve", "--replica", name, "--lease-ttl", "2s",
			"--repo", repo, "--state", url, "--listen", "", "--workers-listen", "127.0.0.1:"+port, "--advertise", addrs[name], "--poll", "1h",
			"--workers-tls-cert", pki.serverCert, "--workers-tls-key", pki.serverKey, "--workers-tls-client-ca", pki.ca)
	}
	for _, name := range []string{"a", "b"} {
		readAddr(t, filepath.Join(repo, ".converge", "replicas", name, "workers.addr")) // listening
	}
	var leader etcdstate.Advert
	waitUntil(t, 30*time.Second, "a leader", func() bool { leader = leaderOf(o); return leader.Name != "" })
	follower := map[string]string{"a": "b", "b": "a"}[leader.Name]
	if leader.Workers != addrs[leader.Name] {
		t.Errorf("the leader advertises workers address %q, want its --advertise %s", leader.Workers, addrs[leader.Name])
	}

	plain := startProc(t, "plaintext", []string{"CONVERGE_ADDR=" + addrs[follower], "CONVERGE_TOKEN=" + token,
		"CONVERGE_WORKER_NAME=plaintext", "CONVERGE_STATE_DIR=" + t.TempDir()}, "worker", "classic")
	waitUntil(t, 15*time.Second, "the follower to refuse a plain-TCP worker", func() bool {
		return strings.Contains(procs[follower].output(), "first record does not look like a TLS handshake") &&
			strings.Contains(plain.output(), "hint=")
	})
	plain.cmd.Process.Kill()

	good := startProc(t, "mtls", []string{"CONVERGE_ADDR=" + addrs[follower] + "," + addrs[leader.Name], "CONVERGE_TOKEN=" + token,
		"CONVERGE_WORKER_NAME=mtls", "CONVERGE_STATE_DIR=" + t.TempDir(),
		"CONVERGE_TLS_CA=" + pki.ca, "CONVERGE_TLS_CERT=" + pki.clientCert, "CONVERGE_TLS_KEY=" + pki.clientKey}, "worker", "classic")
	waitUntil(t, 60*time.Second, "the example converged through the mutual-TLS worker", func() bool {
		ph, c := rootRollup(o)
		return ph == converge.PhaseReady && c.Total > 0 && c.Ready == c.Total
	})
	out := good.output()
	if want := "the leader is " + leader.Name + "; connect to its workers address " + addrs[leader.Name]; !strings.Contains(out, want) {
		t.Errorf("the worker was not refused by the follower over TLS (want %q):\n%s", want, out)
	}
	if !strings.Contains(out, "worker registered") {
		t.Errorf("the worker never registered:\n%s", out)
	}
	for _, p := range procs {
		p.stop(t)
	}
}

// TestServeAdvertiseFlag: --advertise is refused without --replica or
// --workers-listen, and when it is not HOST:PORT (exit 2).
func TestServeAdvertiseFlag(t *testing.T) {
	etcd := "etcd://127.0.0.1:1/converge" // never dialed: the flags are refused first
	tests := []struct {
		args []string
		want string
	}{
		{args: []string{"--state", t.TempDir(), "serve", "--advertise", "m1:9090"}, want: "--advertise needs --replica"},
		{args: []string{"--state", etcd, "serve", "--replica", "a", "--advertise", "m1:9090"}, want: "--advertise needs --workers-listen"},
		{args: []string{"--state", etcd, "serve", "--replica", "a", "--workers-listen", ":0", "--advertise", "m1"}, want: `--advertise "m1": want HOST:PORT`},
		{args: []string{"--state", etcd, "serve", "--replica", "a", "--workers-listen", ":0", "--advertise", ":9090"}, want: `--advertise ":9090": want HOST:PORT`},
		{args: []string{"--state", etcd, "serve", "--replica", "a", "--workers-listen", ":0", "--advertise", "m1:http"}, want: `--advertise "m1:http": want HOST:PORT`},
	}
	t.Setenv("CONVERGE_WORKER_TOKEN", "t")
	for _, tt := range tests {
		out, err := runCLI(tt.args...)
		var f errFailed
		if err == nil || errors.As(err, &f) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v (want a usage error saying %q)\n%s", tt.args, err, tt.want, out)
		}
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago,
// for a process that must be told its port before it listens.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// TestServeWorkersTLSRotation: the workers' certificate is rotated without
// a restart. serve reads its files again at the first handshake after they
// change: a worker that trusts only the new CA is refused before the
// rotation and served after it. A rotation that does not load (a key of
// another certificate) keeps the certificate in use, said once, and
// workers go on connecting.
func TestServeWorkersTLSRotation(t *testing.T) {
	pki := newWorkersPKI(t)
	repo := replicaRepo(t, []byte(smallBOM), true)
	stateDir := t.TempDir()
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	install := func(c, k string) {
		t.Helper()
		for _, f := range [][2]string{{c, cert}, {k, key}} {
			b, err := os.ReadFile(f[0])
			if err != nil {
				t.Fatal(err)
			}
			// As a secret mount rotates: a new file renamed into place.
			if err := os.WriteFile(f[1]+".new", b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(f[1]+".new", f[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	install(pki.serverCert, pki.serverKey)
	const token = "tls-token"
	srv := startProc(t, "serve", []string{"CONVERGE_WORKER_TOKEN=" + token}, "--repo", repo, "--state", stateDir,
		"serve", "--listen", "", "--workers-listen", "127.0.0.1:0", "--poll", "1h",
		"--workers-tls-cert", cert, "--workers-tls-key", key)
	addr := readAddr(t, filepath.Join(stateDir, "workers.addr"))
	worker := func(name, ca string) *proc {
		return startProc(t, name, []string{"CONVERGE_ADDR=" + addr, "CONVERGE_TOKEN=" + token,
			"CONVERGE_WORKER_NAME=" + name, "CONVERGE_STATE_DIR=" + t.TempDir(), "CONVERGE_TLS_CA=" + ca}, "worker", "classic")
	}
	early := worker("early", pki.otherCA)
	waitUntil(t, 15*time.Second, "the worker trusting only the new CA refused", func() bool {
		return strings.Contains(early.output(), "reconnecting")
	})
	early.cmd.Process.Kill()
	if strings.Contains(early.output(), "worker registered") {
		t.Fatalf("a worker trusting another CA registered before the rotation:\n%s", early.output())
	}

	install(pki.otherServerCert, pki.otherServerKey)
	late := worker("late", pki.otherCA)
	waitUntil(t, 60*time.Second, "the example converged through the rotated certificate", func() bool {
		return strings.Contains(srv.output(), " converged: ")
	})
	if !strings.Contains(late.output(), "worker registered") {
		t.Errorf("the worker trusting the new CA was not served after the rotation:\n%s", late.output())
	}
	if want := "serve: workers TLS: reloaded " + cert; !strings.Contains(srv.output(), want) {
		t.Errorf("serve does not say %q:\n%s", want, srv.output())
	}

	// A broken rotation: the old key under the new certificate.
	install(pki.otherServerCert, pki.serverKey)
	again := worker("again", pki.otherCA)
	waitUntil(t, 30*time.Second, "a worker registered after a broken rotation", func() bool {
		return strings.Contains(again.output(), "worker registered")
	})
	waitUntil(t, 10*time.Second, "the broken rotation logged", func() bool {
		return strings.Contains(srv.output(), "the changed files do not load; the previous certificate stays in use")
	})
	srv.stop(t)
}
