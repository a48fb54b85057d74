package providers_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	convergev1 "github.com/convergehq/converge/proto/converge/v1"
	"github.com/convergehq/converge/providers"
	"github.com/convergehq/converge/providers/sdk"
)

// testPKI is a CA with one server certificate (127.0.0.1) and one client
// certificate, written as PEM files.
type testPKI struct {
	pool                *x509.CertPool
	server              tls.Certificate
	caFile, cert, key   string
	otherCert, otherKey string // signed by a different CA
}

func newPKI(t *testing.T) *testPKI {
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
	issue := func(tmpl *x509.Certificate, parent *x509.Certificate, parentKey, key *ecdsa.PrivateKey) *x509.Certificate {
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
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
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		b, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	caTmpl := func(cn string) *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	}
	caKey := newKey()
	ca := issue(caTmpl("converge test CA"), nil, nil, caKey)
	srvKey := newKey()
	srv := issue(&x509.Certificate{Subject: pkix.Name{CommonName: "control"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, ca, caKey, srvKey)
	cliKey := newKey()
	cli := issue(&x509.Certificate{Subject: pkix.Name{CommonName: "worker"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, ca, caKey, cliKey)
	otherCAKey := newKey()
	otherCA := issue(caTmpl("someone else"), nil, nil, otherCAKey)
	otherKey := newKey()
	other := issue(&x509.Certificate{Subject: pkix.Name{CommonName: "intruder"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, otherCA, otherCAKey, otherKey)

	p := &testPKI{pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.server = tls.Certificate{Certificate: [][]byte{srv.Raw}, PrivateKey: srvKey}
	p.caFile = write("ca.pem", "CERTIFICATE", ca.Raw)
	p.cert = write("worker.pem", "CERTIFICATE", cli.Raw)
	p.key = write("worker.key", "EC PRIVATE KEY", keyDER(cliKey))
	p.otherCert = write("other.pem", "CERTIFICATE", other.Raw)
	p.otherKey = write("other.key", "EC PRIVATE KEY", keyDER(otherKey))
	return p
}

// TestMutualTLS: with ServerOptions.TLS, TCP listeners require a client
// certificate from the CA, and the unix socket stays plain.
func TestMutualTLS(t *testing.T) {
	pki := newPKI(t)
	s := providers.NewServer(providers.ServerOptions{Token: testToken, TLS: &tls.Config{
		Certificates: []tls.Certificate{pki.server},
		ClientAuth:   tls.RequireAndVerifyClientCert, ClientCAs: pki.pool, MinVersion: tls.VersionTLS12,
	}})
	defer s.Close()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(tcp)
	dir, err := os.MkdirTemp("", "cvt")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	unix, err := providers.ListenUnix(filepath.Join(dir, "w.sock"))
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(unix)

	t.Run("worker with a certificate from the environment", func(t *testing.T) {
		t.Setenv(sdk.EnvAddr, tcp.Addr().String())
		t.Setenv(sdk.EnvToken, testToken)
		t.Setenv(sdk.EnvWorkerName, "mtls")
		t.Setenv(sdk.EnvTLSCA, pki.caFile)
		t.Setenv(sdk.EnvTLSCert, pki.cert)
		t.Setenv(sdk.EnvTLSKey, pki.key)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- sdk.Serve(ctx, noop("vpc", 1)) }()
		waitFor(t, 10*time.Second, "mTLS worker registered", func() bool { return hasWorker(s, "mtls") })
		if err := s.Dispatch(context.Background(), task("vpc", 1, "reconcile")); err != nil {
			t.Fatal(err)
		}
		result(t, s, 5*time.Second)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})

	refused := []struct {
		name  string
		creds func(t *testing.T) credentials.TransportCredentials
	}{
		{name: "plaintext", creds: func(*testing.T) credentials.TransportCredentials { return insecure.NewCredentials() }},
		{name: "no client certificate", creds: func(*testing.T) credentials.TransportCredentials {
			return credentials.NewTLS(&tls.Config{RootCAs: pki.pool})
		}},
		{name: "certificate from another CA", creds: func(t *testing.T) credentials.TransportCredentials {
			c, err := tls.LoadX509KeyPair(pki.otherCert, pki.otherKey)
			if err != nil {
				t.Fatal(err)
			}
			return credentials.NewTLS(&tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{c}})
		}},
	}
	for _, tt := range refused {
		t.Run("refuses "+tt.name, func(t *testing.T) {
			conn, err := grpc.NewClient("passthrough:///"+tcp.Addr().String(), grpc.WithTransportCredentials(tt.creds(t)))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+testToken)
			var code codes.Code
			stream, err := convergev1.NewControlClient(conn).Connect(ctx)
			if err == nil {
				_ = stream.Send(register("intruder", 1, &convergev1.Capability{Kind: "vpc", KindVersion: 1, Reactions: []string{"reconcile"}}))
				_, err = stream.Recv()
			}
			if code = status.Code(err); code == codes.OK || code == codes.DeadlineExceeded {
				t.Fatalf("connection without a valid client certificate: code %v (%v)", code, err)
			}
			if hasWorker(s, "intruder") {
				t.Fatal("intruder registered")
			}
		})
	}

	t.Run("unix socket stays plain", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- sdk.Connect(ctx, sdk.Options{Addr: "unix://" + unix.Addr().String(), Token: testToken, Name: "local",
				Logger: slog.New(slog.DiscardHandler)}, noop("vpc", 2))
		}()
		waitFor(t, 10*time.Second, "local worker registered", func() bool { return hasWorker(s, "local") })
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
