package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/convergehq/converge/state"
	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/sync/controlplane"
)

// etcdScheme starts a --state value that names an etcd store.
const etcdScheme = "etcd://"

// The environment variables etcd credentials come from (never flags, so
// they stay out of process listings and shell history).
const (
	envEtcdUser     = "CONVERGE_ETCD_USER"
	envEtcdPassword = "CONVERGE_ETCD_PASSWORD"
)

// isEtcd reports whether a --state value names an etcd store.
func isEtcd(stateFlag string) bool { return strings.HasPrefix(stateFlag, etcdScheme) }

// parseEtcdState parses --state etcd://HOST:PORT[,HOST:PORT…]/PREFIX
// with the TLS files (all optional; --etcd-cert and --etcd-key go
// together) and the credentials of getenv's CONVERGE_ETCD_USER and
// CONVERGE_ETCD_PASSWORD.
func parseEtcdState(v, caFile, certFile, keyFile string, getenv func(string) string) (*etcdstate.Options, error) {
	rest := strings.TrimPrefix(v, etcdScheme)
	hosts, prefix, _ := strings.Cut(rest, "/")
	if hosts == "" {
		return nil, usageErr("--state %s: no HOST:PORT (want etcd://HOST:PORT[,HOST:PORT…]/PREFIX)", v)
	}
	if strings.Trim(prefix, "/") == "" {
		return nil, usageErr("--state %s: no key prefix (want etcd://HOST:PORT[,HOST:PORT…]/PREFIX)", v)
	}
	o := &etcdstate.Options{Prefix: "/" + strings.Trim(prefix, "/")}
	tlsOn := caFile != "" || certFile != "" || keyFile != ""
	for _, h := range strings.Split(hosts, ",") {
		if h == "" || !strings.Contains(h, ":") || strings.ContainsAny(h, "/?#@") {
			return nil, usageErr("--state %s: %q is not HOST:PORT", v, h)
		}
		scheme := "http://"
		if tlsOn {
			scheme = "https://"
		}
		o.Endpoints = append(o.Endpoints, scheme+h)
	}
	if (certFile == "") != (keyFile == "") {
		return nil, usageErr("--etcd-cert and --etcd-key go together: give both or neither")
	}
	if tlsOn {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if caFile != "" {
			pem, err := os.ReadFile(caFile)
			if err != nil {
				return nil, usageErr("--etcd-cacert: %v", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, usageErr("--etcd-cacert %s: no PEM certificate in it", caFile)
			}
		}
		if certFile != "" {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, usageErr("--etcd-cert/--etcd-key: %v", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		o.TLS = cfg
	}
	o.Username, o.Password = getenv(envEtcdUser), getenv(envEtcdPassword)
	if o.Username == "" && o.Password != "" {
		return nil, usageErr("%s is set without %s", envEtcdPassword, envEtcdUser)
	}
	return o, nil
}

// hasState reports whether there is a store to read: a bbolt file in
// dir, or an etcd store (an empty prefix reads as an empty store). A
// file that cannot be looked at (a state directory without permission)
// is an error, never "no state".
func hasState(g *globals, dir string) (bool, error) {
	if g.etcd != nil {
		return true, nil
	}
	return stateFileExists(dir)
}

// stateFileExists reports whether dir holds a state file; an error other
// than its absence (permission denied) says so, naming the file.
func stateFileExists(dir string) (bool, error) {
	ok, err := exists(filepath.Join(dir, state.FileName))
	if err != nil {
		return false, fmt.Errorf("open state: %w", err)
	}
	return ok, nil
}

// stateName names the store in messages: dir, or the etcd address.
func stateName(g *globals, dir string) string {
	if g.etcd != nil {
		return g.state
	}
	return dir
}

// openState opens the store: bbolt in dir, or the etcd store --state
// names. write takes the writer's lock (bbolt's always does), waiting
// lockTimeout; a reader of etcd takes none.
func openState(g *globals, dir string, write bool, lockTimeout time.Duration) (state.Backend, error) {
	if g.etcd == nil {
		st, err := state.Open(dir, state.Options{LockTimeout: lockTimeout})
		if err != nil {
			return nil, err
		}
		return st, nil
	}
	return controlplane.OpenEtcd(g.etcd, !write, lockTimeout)
}
