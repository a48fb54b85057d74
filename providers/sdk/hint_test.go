package sdk

import (
	"crypto/tls"
	"errors"
	"strings"
	"testing"
)

// TestConnectHint: the transport errors of a TLS mismatch between a
// worker and serve --workers-tls-* get a hint naming what to set; other
// errors get none. (TestServeWorkersMutualTLS in cmd/converge sees the
// real errors.)
func TestConnectHint(t *testing.T) {
	withTLS := &tls.Config{}
	tests := []struct {
		name string
		err  string
		cfg  *tls.Config
		want string // in the hint; "" for no hint
	}{
		{name: "plain TCP to a TLS port", err: `rpc error: code = Unavailable desc = connection error: desc = "error reading server preface: EOF"`, want: EnvTLSCA},
		{name: "TLS to a plain port", cfg: withTLS, err: `connection error: desc = "transport: authentication handshake failed: tls: first record does not look like a TLS handshake"`, want: "does not serve TLS"},
		{name: "no client certificate", cfg: withTLS, err: `error reading server preface: remote error: tls: certificate required`, want: EnvTLSCert},
		{name: "closed after the handshake", cfg: withTLS, err: `write tcp 127.0.0.1:1->127.0.0.1:2: write: broken pipe`, want: EnvTLSKey},
		{name: "unknown server CA", cfg: withTLS, err: `tls: failed to verify certificate: x509: certificate signed by unknown authority`, want: EnvTLSCA},
		{name: "wrong token", err: `rpc error: code = Unauthenticated desc = bad token`},
		{name: "broken pipe without TLS", err: `write: broken pipe`},
		{name: "nil"},
	}
	for _, tt := range tests {
		var err error
		if tt.err != "" {
			err = errors.New(tt.err)
		}
		got := connectHint(err, tt.cfg)
		if (got == "") != (tt.want == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%s: hint %q, want one naming %q", tt.name, got, tt.want)
		}
	}
}
