// Package postgres is the onprem example's PostgreSQL providers: a login
// role (pgrole) whose password converge generates, and a database
// (pgdatabase) owned by a role. It is the only package that imports pgx.
//
// Read first: Providers, Config, RoleSpec, DatabaseSpec.
//
// # Basics
//
// Every handler connects with the provider config's superuser (a pool per
// config) and reads the catalog before it writes, so a reconcile of an
// object as declared sends no write (the acceptance test checks it on the
// catalog rows' xmin). What converge creates or adopts carries a mark, the
// comment "managed by converge: KIND/NAME" (COMMENT ON ROLE / DATABASE):
//
//   - an existing object without the mark is refused, permanently, unless
//     the spec says adopt: true (the mark is then set; an adopted role's
//     password is reset to one converge generates);
//   - teardown drops only a marked object (an unmarked one is a permanent
//     error, never a drop), and an object already gone is success;
//   - deletion_policy: "orphan" leaves the object in place on teardown and
//     takes the mark off (converge no longer manages it: declaring it
//     again needs adopt).
//
// A role's password never travels or is stored in clear: converge sends
// PostgreSQL a SCRAM-SHA-256 verifier it computes, and checks the stored
// verifier against the status's password to tell a password changed by
// hand (drift, healed by reconcile).
//
// Errors: a server that cannot be reached (refused, down, shutting down)
// is Transient, naming the server and the error; credentials refused, a
// missing admin database or privilege is Permanent (the admin password is
// never part of a message); a database with open sessions is Transient
// with that reason unless the config's terminate_sessions ends them.
//
// # Caveats
//
// CREATE DATABASE cannot run in a transaction with its COMMENT: a crash
// between the two leaves an unmarked database, which the next reconcile
// refuses like any unmarked one (adopt: true takes it).
package postgres

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/convergehq/converge/providers/sdk"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Kind names.
const (
	RoleKind     = "pgrole"
	DatabaseKind = "pgdatabase"
)

// Config is a pgrole or pgdatabase provider config: where the server is
// and the superuser converge acts as.
type Config struct {
	Host          string `json:"host"`
	Port          int    `json:"port"`
	AdminUser     string `json:"admin_user"`
	AdminPassword string `json:"admin_password"`
	// AdminDatabase is the database converge connects to ("postgres").
	AdminDatabase string `json:"admin_database,omitempty"`
	// SSLMode is libpq's sslmode ("prefer" when empty).
	SSLMode string `json:"sslmode,omitempty"`
	// TerminateSessions lets a database's teardown end its open
	// sessions (DROP DATABASE … WITH (FORCE)); otherwise a database in
	// use is retried with that reason.
	TerminateSessions bool `json:"terminate_sessions,omitempty"`
}

// addr is the server as messages name it.
func (c Config) addr() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) }

// Policy is what every managed object's spec may say besides its fields.
type Policy struct {
	// Adopt takes over an existing object converge did not create.
	Adopt bool `json:"adopt,omitempty"`
	// DeletionPolicy is "delete" (the default) or "orphan".
	DeletionPolicy string `json:"deletion_policy,omitempty"`
}

func (p Policy) check() error {
	switch p.DeletionPolicy {
	case "", "delete", "orphan":
		return nil
	}
	return sdk.Permanent(fmt.Errorf("spec.deletion_policy %q: want \"delete\" or \"orphan\"", p.DeletionPolicy))
}

// Providers returns pgrole v1 and pgdatabase v1, sharing one pool per
// provider config.
func Providers() []sdk.Provider {
	s := &servers{pools: map[string]*pgxpool.Pool{}}
	return []sdk.Provider{
		{Kind: RoleKind, Version: 1, Reconcile: s.reconcileRole, Observe: s.observeRole, Teardown: s.teardownRole},
		{Kind: DatabaseKind, Version: 1, Reconcile: s.reconcileDatabase, Observe: s.observeDatabase, Teardown: s.teardownDatabase},
	}
}

// servers holds a connection pool per provider config.
type servers struct {
	mu    sync.Mutex // guards pools
	pools map[string]*pgxpool.Pool
}

// conn returns a connection to the server of r's config, the config, and
// a function that classifies an error of op on that server.
func (s *servers) conn(ctx context.Context, r *sdk.Request) (*pgxpool.Conn, Config, error) {
	cfg, err := sdk.Config[Config](r)
	if err != nil {
		return nil, cfg, err
	}
	if cfg.Host == "" || cfg.Port == 0 || cfg.AdminUser == "" {
		return nil, cfg, sdk.Permanent(fmt.Errorf("%s/%s: provider config: host, port and admin_user are required", r.Kind, r.Name))
	}
	if cfg.AdminDatabase == "" {
		cfg.AdminDatabase = "postgres"
	}
	if cfg.SSLMode == "" {
		cfg.SSLMode = "prefer"
	}
	u := url.URL{Scheme: "postgres", User: url.UserPassword(cfg.AdminUser, cfg.AdminPassword), Host: cfg.addr(),
		Path: "/" + cfg.AdminDatabase, RawQuery: url.Values{"sslmode": {cfg.SSLMode}, "connect_timeout": {"5"}}.Encode()}
	key := u.String()
	s.mu.Lock()
	pool := s.pools[key]
	if pool == nil {
		pc, err := pgxpool.ParseConfig(key)
		if err != nil {
			s.mu.Unlock()
			return nil, cfg, sdk.Permanent(fmt.Errorf("postgres %s: provider config: %s", cfg.addr(), scrub(err.Error(), cfg)))
		}
		pc.MaxConns = 8
		pc.MaxConnIdleTime = time.Minute
		if pool, err = pgxpool.NewWithConfig(context.Background(), pc); err != nil {
			s.mu.Unlock()
			return nil, cfg, classify(cfg, "connect", err)
		}
		s.pools[key] = pool
	}
	s.mu.Unlock()
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, cfg, classify(cfg, "connect", err)
	}
	return c, cfg, nil
}

// classify turns an error of op on cfg's server into a Transient or
// Permanent one that names the server, never the admin password.
func classify(cfg Config, op string, err error) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Detail != "" {
		text += ": " + strings.ReplaceAll(pe.Detail, "\n", "; ")
	}
	msg := fmt.Errorf("postgres %s: %s: %s", cfg.addr(), op, scrub(text, cfg))
	if pe != nil {
		switch {
		case strings.HasPrefix(pe.Code, "28"):
			return sdk.Permanent(fmt.Errorf("postgres %s: %s: credentials of %q refused (check admin_user and admin_password in the provider config): %s",
				cfg.addr(), op, cfg.AdminUser, scrub(pe.Message, cfg)))
		case pe.Code == "3D000", pe.Code == "42501", strings.HasPrefix(pe.Code, "22"), pe.Code == "42601":
			return sdk.Permanent(msg)
		}
		return sdk.Transient(msg)
	}
	return sdk.Transient(msg)
}

// scrub removes the admin password from text.
func scrub(s string, cfg Config) string {
	if len(cfg.AdminPassword) >= 3 {
		s = strings.ReplaceAll(s, cfg.AdminPassword, "(secret)")
		s = strings.ReplaceAll(s, url.QueryEscape(cfg.AdminPassword), "(secret)")
	}
	return s
}

// mark is the comment converge puts on what it manages.
func mark(kind, name string) string { return "managed by converge: " + kind + "/" + name }

const markPrefix = "managed by converge: "

// owned says what a comment makes of an existing object for resource
// kind/name: nil if it is converge's for this resource, else the
// permanent refusal (another resource's, or nobody's and no adoption).
func owned(what, object, kind, name, comment string, adopt bool) (adoptIt bool, err error) {
	switch {
	case comment == mark(kind, name):
		return false, nil
	case strings.HasPrefix(comment, markPrefix):
		return false, sdk.Permanent(fmt.Errorf("%s %q belongs to converge resource %s, not %s/%s",
			what, object, strings.TrimPrefix(comment, markPrefix), kind, name))
	case adopt:
		return true, nil
	}
	return false, sdk.Permanent(fmt.Errorf("%s %q already exists and converge did not create it (it has no %q comment): "+
		"to manage it, set adopt: true in %s/%s's spec, or choose another name", what, object, mark(kind, name), kind, name))
}

// RoleSpec is a pgrole's spec.
type RoleSpec struct {
	// Name is the role's name in PostgreSQL.
	Name string `json:"name"`
	// ConnectionLimit is the role's CONNECTION LIMIT (-1: none).
	ConnectionLimit *int `json:"connection_limit,omitempty"`
	Policy
}

func (s RoleSpec) limit() int {
	if s.ConnectionLimit == nil {
		return -1
	}
	return *s.ConnectionLimit
}

// RoleStatus is a pgrole's status; Password is a secret field.
type RoleStatus struct {
	Name     string `json:"name"`
	Password string `json:"password"`
}

// RoleActual is what observe reads of a role.
type RoleActual struct {
	Name            string `json:"name"`
	ConnectionLimit int    `json:"connection_limit"`
	// Login is rolcanlogin. (The password is not read back: a changed
	// one is found and healed by reconcile, which checks the stored
	// verifier against the status's password.)
	Login bool `json:"login"`
}

type roleRow struct {
	limit    int
	login    bool
	verifier string
	comment  string
}

func readRole(ctx context.Context, c *pgxpool.Conn, name string) (*roleRow, error) {
	var row roleRow
	var verifier, comment *string
	err := c.QueryRow(ctx, `SELECT rolconnlimit, rolcanlogin, rolpassword, shobj_description(oid, 'pg_authid')
		FROM pg_authid WHERE rolname = $1`, name).Scan(&row.limit, &row.login, &verifier, &comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if verifier != nil {
		row.verifier = *verifier
	}
	if comment != nil {
		row.comment = *comment
	}
	return &row, nil
}

func roleSpec(r *sdk.Request) (RoleSpec, error) {
	spec, err := sdk.Spec[RoleSpec](r)
	if err != nil {
		return spec, err
	}
	if spec.Name == "" {
		return spec, sdk.Permanent(fmt.Errorf("%s/%s: spec.name: empty", r.Kind, r.Name))
	}
	return spec, spec.check()
}

func (s *servers) reconcileRole(ctx context.Context, r *sdk.Request) (any, error) {
	spec, err := roleSpec(r)
	if err != nil {
		return nil, err
	}
	var st RoleStatus
	_ = r.DecodeStatus(&st)
	c, cfg, err := s.conn(ctx, r)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	row, err := readRole(ctx, c, spec.Name)
	if err != nil {
		return nil, classify(cfg, "read role "+spec.Name, err)
	}
	ident := pgx.Identifier{spec.Name}.Sanitize()
	password := st.Password
	if password == "" || st.Name != spec.Name {
		password = newPassword()
	}
	var stmts []string
	if row == nil {
		v, err := scramVerifier(password)
		if err != nil {
			return nil, sdk.Permanent(err)
		}
		stmts = append(stmts,
			fmt.Sprintf("CREATE ROLE %s LOGIN CONNECTION LIMIT %d PASSWORD %s", ident, spec.limit(), literal(v)),
			fmt.Sprintf("COMMENT ON ROLE %s IS %s", ident, literal(mark(r.Kind, r.Name))))
	} else {
		adopt, err := owned("role", spec.Name, r.Kind, r.Name, row.comment, spec.Adopt)
		if err != nil {
			return nil, err
		}
		if adopt {
			password = newPassword()
			stmts = append(stmts, fmt.Sprintf("COMMENT ON ROLE %s IS %s", ident, literal(mark(r.Kind, r.Name))))
		}
		if row.limit != spec.limit() || !row.login {
			stmts = append(stmts, fmt.Sprintf("ALTER ROLE %s LOGIN CONNECTION LIMIT %d", ident, spec.limit()))
		}
		if !scramMatches(row.verifier, password) {
			v, err := scramVerifier(password)
			if err != nil {
				return nil, sdk.Permanent(err)
			}
			stmts = append(stmts, fmt.Sprintf("ALTER ROLE %s PASSWORD %s", ident, literal(v)))
		}
	}
	if err := exec(ctx, c, stmts); err != nil {
		return nil, classify(cfg, "role "+spec.Name, err)
	}
	return RoleStatus{Name: spec.Name, Password: password}, nil
}

func (s *servers) observeRole(ctx context.Context, r *sdk.Request) (*sdk.Observation, error) {
	spec, err := roleSpec(r)
	if err != nil {
		return nil, err
	}
	c, cfg, err := s.conn(ctx, r)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	row, err := readRole(ctx, c, spec.Name)
	if err != nil {
		return nil, classify(cfg, "read role "+spec.Name, err)
	}
	if row == nil {
		return &sdk.Observation{}, nil
	}
	return &sdk.Observation{Exists: true, Managed: row.comment == mark(r.Kind, r.Name),
		Actual: RoleActual{Name: spec.Name, ConnectionLimit: row.limit, Login: row.login}}, nil
}

func (s *servers) teardownRole(ctx context.Context, r *sdk.Request) error {
	spec, err := roleSpec(r)
	if err != nil {
		return err
	}
	c, cfg, err := s.conn(ctx, r)
	if err != nil {
		return err
	}
	defer c.Release()
	row, err := readRole(ctx, c, spec.Name)
	if err != nil {
		return classify(cfg, "read role "+spec.Name, err)
	}
	if row == nil {
		return nil
	}
	ident := pgx.Identifier{spec.Name}.Sanitize()
	stmt, err := ending("role", spec.Name, r, row.comment, spec.Policy, "COMMENT ON ROLE "+ident+" IS NULL", "DROP ROLE "+ident)
	if err != nil || stmt == "" {
		return err
	}
	return classify(cfg, "drop role "+spec.Name, exec(ctx, c, []string{stmt}))
}

// ending returns the statement that ends converge's management of an
// existing object: unmark (orphan) or drop, "" for nothing to do (an
// unmarked object orphaned), or the permanent refusal to drop an object
// without this resource's mark.
func ending(what, object string, r *sdk.Request, comment string, p Policy, unmark, drop string) (string, error) {
	switch {
	case comment == mark(r.Kind, r.Name) && p.DeletionPolicy == "orphan":
		return unmark, nil
	case comment == mark(r.Kind, r.Name):
		return drop, nil
	case p.DeletionPolicy == "orphan":
		return "", nil
	}
	return "", sdk.Permanent(fmt.Errorf("%s %q does not carry converge's mark %q: not dropping it (restore the comment, or set deletion_policy: \"orphan\" to leave it)",
		what, object, mark(r.Kind, r.Name)))
}

// DatabaseSpec is a pgdatabase's spec.
type DatabaseSpec struct {
	Name string `json:"name"`
	// Owner is the owning role's name (flowed from a pgrole's status).
	Owner string `json:"owner,omitempty"`
	Policy
}

// DatabaseStatus is a pgdatabase's status: where clients reach it.
type DatabaseStatus struct {
	Name  string `json:"name"`
	Owner string `json:"owner"`
	Host  string `json:"host"`
	Port  int    `json:"port"`
}

// DatabaseActual is what observe reads of a database.
type DatabaseActual struct {
	Name  string `json:"name"`
	Owner string `json:"owner"`
}

func databaseSpec(r *sdk.Request) (DatabaseSpec, error) {
	spec, err := sdk.Spec[DatabaseSpec](r)
	if err != nil {
		return spec, err
	}
	if spec.Name == "" {
		return spec, sdk.Permanent(fmt.Errorf("%s/%s: spec.name: empty", r.Kind, r.Name))
	}
	return spec, spec.check()
}

func readDatabase(ctx context.Context, c *pgxpool.Conn, name string) (owner, comment string, ok bool, err error) {
	var cm *string
	err = c.QueryRow(ctx, `SELECT pg_get_userbyid(datdba), shobj_description(oid, 'pg_database')
		FROM pg_database WHERE datname = $1`, name).Scan(&owner, &cm)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", false, nil
	}
	if cm != nil {
		comment = *cm
	}
	return owner, comment, err == nil, err
}

func (s *servers) reconcileDatabase(ctx context.Context, r *sdk.Request) (any, error) {
	spec, err := databaseSpec(r)
	if err != nil {
		return nil, err
	}
	if spec.Owner == "" {
		return nil, sdk.Permanent(fmt.Errorf("%s/%s: spec.owner: empty", r.Kind, r.Name))
	}
	c, cfg, err := s.conn(ctx, r)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	owner, comment, ok, err := readDatabase(ctx, c, spec.Name)
	if err != nil {
		return nil, classify(cfg, "read database "+spec.Name, err)
	}
	ident, ownerIdent := pgx.Identifier{spec.Name}.Sanitize(), pgx.Identifier{spec.Owner}.Sanitize()
	var stmts []string
	if !ok {
		stmts = append(stmts, fmt.Sprintf("CREATE DATABASE %s OWNER %s", ident, ownerIdent),
			fmt.Sprintf("COMMENT ON DATABASE %s IS %s", ident, literal(mark(r.Kind, r.Name))))
	} else {
		adopt, err := owned("database", spec.Name, r.Kind, r.Name, comment, spec.Adopt)
		if err != nil {
			return nil, err
		}
		if adopt {
			stmts = append(stmts, fmt.Sprintf("COMMENT ON DATABASE %s IS %s", ident, literal(mark(r.Kind, r.Name))))
		}
		if owner != spec.Owner {
			stmts = append(stmts, fmt.Sprintf("ALTER DATABASE %s OWNER TO %s", ident, ownerIdent))
		}
	}
	if err := exec(ctx, c, stmts); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42704" {
			return nil, sdk.Transient(fmt.Errorf("postgres %s: database %s: owner role %q does not exist (yet)", cfg.addr(), spec.Name, spec.Owner))
		}
		return nil, classify(cfg, "database "+spec.Name, err)
	}
	return DatabaseStatus{Name: spec.Name, Owner: spec.Owner, Host: cfg.Host, Port: cfg.Port}, nil
}

func (s *servers) observeDatabase(ctx context.Context, r *sdk.Request) (*sdk.Observation, error) {
	spec, err := databaseSpec(r)
	if err != nil {
		return nil, err
	}
	c, cfg, err := s.conn(ctx, r)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	owner, comment, ok, err := readDatabase(ctx, c, spec.Name)
	if err != nil {
		return nil, classify(cfg, "read database "+spec.Name, err)
	}
	if !ok {
		return &sdk.Observation{}, nil
	}
	return &sdk.Observation{Exists: true, Managed: comment == mark(r.Kind, r.Name),
		Actual: DatabaseActual{Name: spec.Name, Owner: owner}}, nil
}

func (s *servers) teardownDatabase(ctx context.Context, r *sdk.Request) error {
	spec, err := databaseSpec(r)
	if err != nil {
		return err
	}
	c, cfg, err := s.conn(ctx, r)
	if err != nil {
		return err
	}
	defer c.Release()
	_, comment, ok, err := readDatabase(ctx, c, spec.Name)
	if err != nil {
		return classify(cfg, "read database "+spec.Name, err)
	}
	if !ok {
		return nil
	}
	ident := pgx.Identifier{spec.Name}.Sanitize()
	drop := "DROP DATABASE IF EXISTS " + ident
	if cfg.TerminateSessions {
		drop += " WITH (FORCE)"
	}
	stmt, err := ending("database", spec.Name, r, comment, spec.Policy, "COMMENT ON DATABASE "+ident+" IS NULL", drop)
	if err != nil || stmt == "" {
		return err
	}
	err = exec(ctx, c, []string{stmt})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "55006" {
		return sdk.Transient(fmt.Errorf("postgres %s: drop database %s: it has open sessions (%s); set terminate_sessions: true in the provider config to end them",
			cfg.addr(), spec.Name, pe.Detail))
	}
	return classify(cfg, "drop database "+spec.Name, err)
}

// exec runs stmts in order (not in one transaction: CREATE DATABASE
// cannot run in one).
func exec(ctx context.Context, c *pgxpool.Conn, stmts []string) error {
	for _, s := range stmts {
		if _, err := c.Exec(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// literal quotes s as an SQL string literal.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// newPassword returns 24 random bytes as hex: 48 characters.
func newPassword() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

const scramIterations = 4096

// scramVerifier returns PostgreSQL's SCRAM-SHA-256 verifier of password
// with a fresh salt ("SCRAM-SHA-256$iter:salt$StoredKey:ServerKey",
// RFC 5803), so the password itself never reaches the server.
func scramVerifier(password string) (string, error) {
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	stored, server, err := scramKeys(password, salt, scramIterations)
	if err != nil {
		return "", err
	}
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", scramIterations, b64(salt), b64(stored), b64(server)), nil
}

// scramMatches reports whether verifier (pg_authid.rolpassword) is one of
// password.
func scramMatches(verifier, password string) bool {
	rest, ok := strings.CutPrefix(verifier, "SCRAM-SHA-256$")
	if !ok || password == "" {
		return false
	}
	params, keys, ok := strings.Cut(rest, "$")
	iterS, saltS, ok1 := strings.Cut(params, ":")
	storedS, _, ok2 := strings.Cut(keys, ":")
	if !ok || !ok1 || !ok2 {
		return false
	}
	iter, err := strconv.Atoi(iterS)
	salt, err1 := base64.StdEncoding.DecodeString(saltS)
	want, err2 := base64.StdEncoding.DecodeString(storedS)
	if err != nil || err1 != nil || err2 != nil || iter <= 0 || iter > 1<<20 {
		return false
	}
	stored, _, err := scramKeys(password, salt, iter)
	return err == nil && hmac.Equal(stored, want)
}

func scramKeys(password string, salt []byte, iter int) (stored, server []byte, err error) {
	salted, err := pbkdf2.Key(sha256.New, password, salt, iter, sha256.Size)
	if err != nil {
		return nil, nil, fmt.Errorf("scram: %w", err)
	}
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	client := sha256.Sum256(mac(salted, "Client Key"))
	return client[:], mac(salted, "Server Key"), nil
}
