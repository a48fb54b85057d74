// Package servertest starts the real servers the onprem providers manage,
// for tests: a throwaway PostgreSQL cluster (Debian's postgresql package,
// initdb and postgres) and an authoritative Knot DNS server (Debian's
// knot package) serving a zone that takes RFC 2136 updates signed with a
// TSIG key. Each runs in t.TempDir() on 127.0.0.1 at a free port and is
// stopped by its pid in t.Cleanup.
//
// Read first: StartPostgres, StartDNS.
//
// # Caveats
//
// initdb refuses to run as root, and CI runs as root: as root, the cluster
// is made and run as the package's own user (`runuser -u postgres`) in a
// directory that user owns. A test that cannot start its server fails; it
// never skips (the packages are installed by .ci/run).
//
// examples/onprem/servers.sh starts the same servers for a person; the two
// are kept alike by hand (one in Go for tests' cleanups and free ports, one
// in sh for a terminal).
package servertest

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds a server's start, up to readiness.
const startTimeout = 60 * time.Second

// Postgres is a running throwaway PostgreSQL cluster.
type Postgres struct {
	// Host and Port are where it listens (127.0.0.1 and a free port).
	Host string
	Port int
	// User and Password are the superuser's.
	User, Password string
	// Dir holds the cluster (Dir/data), its socket and its log.
	Dir string

	bin string
	cmd *exec.Cmd
	as  string // the user the server runs as, "" for this process's
}

// PostgresBin returns the newest of Debian's /usr/lib/postgresql/*/bin, or
// the directory of initdb on PATH.
func PostgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("postgresql: no /usr/lib/postgresql/*/bin/postgres and no initdb on PATH (apt-get install postgresql)")
}

// StartPostgres makes a cluster in a temporary directory and starts it on
// 127.0.0.1 at a free port; it is stopped when t ends. It fails t if the
// server does not start.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	p, err := NewPostgres(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("stop postgres: %v", err)
		}
	})
	return p
}

// NewPostgres makes (initdb) a cluster under dir without starting it.
func NewPostgres(dir string) (*Postgres, error) {
	bin, err := PostgresBin()
	if err != nil {
		return nil, err
	}
	p := &Postgres{Host: "127.0.0.1", User: "converge_admin", Password: randomHex(16), Dir: filepath.Join(dir, "pg"), bin: bin}
	if os.Geteuid() == 0 {
		p.as = "postgres"
	}
	if err := os.MkdirAll(filepath.Join(p.Dir, "run"), 0o700); err != nil {
		return nil, err
	}
	pwfile := filepath.Join(p.Dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(p.Password+"\n"), 0o600); err != nil {
		return nil, err
	}
	if p.as != "" {
		if err := handTo(p.Dir, p.as); err != nil {
			return nil, err
		}
	}
	out, err := p.command(filepath.Join(bin, "initdb"), "-D", filepath.Join(p.Dir, "data"), "-U", p.User,
		"--pwfile", pwfile, "--auth", "scram-sha-256", "--encoding", "UTF8", "--locale", "C", "--no-sync").CombinedOutput()
	os.Remove(pwfile)
	if err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	return p, nil
}

// command runs name as the server's user.
func (p *Postgres) command(name string, args ...string) *exec.Cmd {
	if p.as == "" {
		return exec.Command(name, args...)
	}
	return exec.Command("runuser", append([]string{"-u", p.as, "--", name}, args...)...)
}

// Start starts the server (again, after Stop) at a free port, or at the
// port it had if it was started before, and waits until it accepts
// connections.
func (p *Postgres) Start() error {
	if p.cmd != nil {
		return errors.New("postgres: already running")
	}
	fresh := p.Port == 0
	for attempt := 0; ; attempt++ {
		if fresh {
			port, err := FreePort()
			if err != nil {
				return err
			}
			p.Port = port
		}
		err := p.start()
		if err == nil || !fresh || attempt == 4 || !strings.Contains(err.Error(), "could not") {
			return err
		}
	}
}

func (p *Postgres) start() error {
	logf, err := os.OpenFile(filepath.Join(p.Dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := p.command(filepath.Join(p.bin, "postgres"), "-D", filepath.Join(p.Dir, "data"),
		"-p", strconv.Itoa(p.Port), "-c", "listen_addresses=127.0.0.1", "-k", filepath.Join(p.Dir, "run"),
		"-c", "fsync=off", "-c", "max_connections=200")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	p.cmd = cmd
	deadline := time.Now().Add(startTimeout)
	for {
		if st, _ := os.ReadFile(filepath.Join(p.Dir, "data", "postmaster.pid")); strings.Contains(string(st), "ready") {
			go func() { <-exited }()
			return nil
		}
		select {
		case err := <-exited:
			p.cmd = nil
			log, _ := os.ReadFile(filepath.Join(p.Dir, "postgres.log"))
			return fmt.Errorf("postgres on port %d exited: %v\n%s", p.Port, err, tail(log))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = p.Stop()
			return fmt.Errorf("postgres on port %d not ready within %s", p.Port, startTimeout)
		}
	}
}

// Stop stops the server by the pid in postmaster.pid (a fast shutdown:
// SIGINT) and waits until that process is gone. Stopping a stopped
// server does nothing.
func (p *Postgres) Stop() error {
	if p.cmd == nil {
		return nil
	}
	p.cmd = nil
	b, err := os.ReadFile(filepath.Join(p.Dir, "data", "postmaster.pid"))
	if err != nil {
		return nil // never got as far as writing it: runuser ended with it
	}
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		return fmt.Errorf("postmaster.pid: %w", err)
	}
	return stopPid(pid, syscall.SIGINT)
}

// Running reports whether the server was started and not stopped.
func (p *Postgres) Running() bool { return p.cmd != nil }

// DSN returns the superuser's connection string for database db.
func (p *Postgres) DSN(db string) string {
	return fmt.Sprintf("postgres://%s:%s@%s:%d/%s?sslmode=disable", p.User, p.Password, p.Host, p.Port, db)
}

// Psql runs psql as the superuser on database postgres with the SQL
// given and returns its unaligned, tuples-only output.
func (p *Postgres) Psql(sql string) (string, error) {
	cmd := exec.Command(filepath.Join(p.bin, "psql"), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
		"-h", p.Host, "-p", strconv.Itoa(p.Port), "-U", p.User, "-d", "postgres", "-c", sql)
	cmd.Env = append(os.Environ(), "PGPASSWORD="+p.Password)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("psql %q: %v: %s", sql, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// DNS is a running Knot DNS server, authoritative for Zone.
type DNS struct {
	// Addr is "127.0.0.1:PORT", both UDP and TCP.
	Addr string
	// Zone is the zone it serves, fully qualified ("converge.test.").
	Zone string
	// KeyName, KeyAlgorithm and KeySecret are the TSIG key that may
	// update the zone (the secret base64, as in RFC 2845's examples).
	KeyName, KeyAlgorithm, KeySecret string
	// Dir holds its configuration, zone, journal and log.
	Dir string

	cmd    *exec.Cmd
	exited chan struct{}
}

// StartDNS starts knotd serving the zone converge.test. on 127.0.0.1 at a
// free port, updatable with a fresh TSIG key; it is stopped when t ends.
func StartDNS(t testing.TB) *DNS {
	t.Helper()
	d := &DNS{Zone: "converge.test.", KeyName: "converge-key.", KeyAlgorithm: "hmac-sha256",
		KeySecret: base64.StdEncoding.EncodeToString(randomBytes(32))}
	// A short directory: the control socket's path is limited to about
	// 100 bytes, and t.TempDir embeds the test's name.
	dir, err := os.MkdirTemp("", "knot")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d.Dir = dir
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Stop(); err != nil {
			t.Errorf("stop knotd: %v", err)
		}
	})
	return d
}

// KnotConfig returns knotd's configuration for a server listening on
// addr (host@port) with its files in dir.
func KnotConfig(dir, listen, zone, keyName, keyAlg, keySecret string) string {
	return fmt.Sprintf(`server:
    rundir: %[1]q
    listen: %[2]s
control:
    listen: %[7]q
log:
  - target: stderr
    any: info
database:
    storage: %[1]q
key:
  - id: %[4]s
    algorithm: %[5]s
    secret: %[6]s
acl:
  - id: converge-update
    key: %[4]s
    action: update
template:
  - id: default
    storage: %[1]q
    zonefile-sync: -1
    zonefile-load: whole
    journal-content: changes
zone:
  - domain: %[3]s
    file: "zone.db"
    acl: converge-update
`, dir, listen, zone, keyName, keyAlg, keySecret, filepath.Join(dir, "knot.sock"))
}

// ZoneFile is the zone's starting content: its SOA (serial 1), NS and the
// name server's address.
func ZoneFile(zone string) string {
	return fmt.Sprintf("$ORIGIN %s\n$TTL 60\n@ SOA ns hostmaster 1 3600 600 86400 60\n@ NS ns\nns A 127.0.0.1\n", zone)
}

func (d *DNS) start() error {
	if err := os.MkdirAll(d.Dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d.Dir, "zone.db"), []byte(ZoneFile(d.Zone)), 0o600); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		port, err := FreePort()
		if err != nil {
			return err
		}
		d.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		err = d.startAt(port)
		if err == nil || attempt == 4 {
			return err
		}
	}
}

func (d *DNS) startAt(port int) error {
	conf := filepath.Join(d.Dir, "knot.conf")
	if err := os.WriteFile(conf, []byte(KnotConfig(d.Dir, "127.0.0.1@"+strconv.Itoa(port), d.Zone, d.KeyName, d.KeyAlgorithm, d.KeySecret)), 0o600); err != nil {
		return err
	}
	logPath := filepath.Join(d.Dir, "knotd.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("knotd", "-c", conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start knotd (apt-get install knot): %w", err)
	}
	d.cmd, d.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(d.exited) }()
	deadline := time.Now().Add(startTimeout)
	for {
		// Ready: the zone is loaded and the port is ours (knotd goes on
		// without a socket it could not bind).
		log, _ := os.ReadFile(logPath)
		if strings.Contains(string(log), "cannot bind") || strings.Contains(string(log), "failed to bind") {
			_ = d.Stop()
			return fmt.Errorf("knotd: port %d taken", port)
		}
		if err := exec.Command("knotc", "-c", conf, "-t", "1", "zone-read", d.Zone, "@", "SOA").Run(); err == nil &&
			strings.Contains(string(log), "binding to interface") {
			return nil
		}
		select {
		case <-d.exited:
			d.cmd = nil
			return fmt.Errorf("knotd exited:\n%s", tail(log))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = d.Stop()
			return fmt.Errorf("knotd on %s not ready within %s:\n%s", d.Addr, startTimeout, tail(log))
		}
	}
}

// Stop stops knotd by its pid (SIGTERM) and waits until it exits.
func (d *DNS) Stop() error {
	if d.cmd == nil {
		return nil
	}
	cmd := d.cmd
	d.cmd = nil
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-d.exited:
		return nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return fmt.Errorf("knotd (pid %d) did not stop within 30s: killed", cmd.Process.Pid)
	}
}

// Knotc runs knotc on the server's control socket (for out-of-band
// changes: `zone-begin`, `zone-set`, `zone-commit`).
func (d *DNS) Knotc(args ...string) (string, error) {
	out, err := exec.Command("knotc", append([]string{"-c", filepath.Join(d.Dir, "knot.conf")}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("knotc %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago
// (the UDP one of the same number is checked too, for DNS).
func FreePort() (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		l.Close()
		if err == nil {
			u.Close()
			return port, nil
		}
	}
	return 0, errors.New("no free port on 127.0.0.1")
}

// stopPid sends sig to pid and waits (up to 30s) until it is gone.
func stopPid(pid int, sig syscall.Signal) error {
	if err := syscall.Kill(pid, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return fmt.Errorf("signal pid %d: %w", pid, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	return fmt.Errorf("pid %d did not stop within 30s: killed", pid)
}

// handTo gives dir to the user name, and lets that user reach it: every
// parent up to the root gets search permission for others (a test's
// temporary directories are 0700).
func handTo(dir, name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("user %s (apt-get install postgresql creates it): %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	err = filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
	if err != nil {
		return err
	}
	for d := filepath.Dir(dir); d != "/" && d != "."; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
				return err
			}
		}
	}
	return nil
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func randomHex(n int) string { return hex.EncodeToString(randomBytes(n)) }
