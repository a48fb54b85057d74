package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers/onprem/servertest"
	"github.com/convergehq/converge/providers/sdk"
	"github.com/convergehq/converge/providers/sdk/sdktest"
	"github.com/jackc/pgx/v5/pgxpool"
)

func config(pg *servertest.Postgres) json.RawMessage {
	b, _ := json.Marshal(Config{Host: pg.Host, Port: pg.Port, AdminUser: pg.User, AdminPassword: pg.Password})
	return b
}

func psql(t *testing.T, pg *servertest.Postgres, sql string) string {
	t.Helper()
	out, err := pg.Psql(sql)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fingerprint is the xmin of the catalog rows of an object and of its
// comment: any write to either changes it.
func fingerprint(pg *servertest.Postgres, catalog, nameCol, name string) func(t *testing.T) string {
	return func(t *testing.T) string {
		return psql(t, pg, fmt.Sprintf(`SELECT c.xmin::text || '/' || coalesce(d.xmin::text, '-') FROM %s c
			LEFT JOIN pg_shdescription d ON d.objoid = c.oid WHERE c.%s = '%s'`, catalog, nameCol, name))
	}
}

func TestAcceptanceRole(t *testing.T) {
	pg := servertest.StartPostgres(t)
	var password string
	sdktest.RunAcceptance(t, sdktest.Acceptance{
		Providers: Providers(), Kind: RoleKind, Version: 1, Name: "acc-role", Config: config(pg),
		Create: json.RawMessage(`{"name":"acc_role","connection_limit":5}`),
		Update: json.RawMessage(`{"name":"acc_role","connection_limit":7}`),
		OutOfBand: func(t *testing.T) {
			psql(t, pg, `ALTER ROLE acc_role CONNECTION LIMIT 1`)
		},
		WantDrift:   []string{"connection_limit"},
		Fingerprint: fingerprint(pg, "pg_authid", "rolname", "acc_role"),
		CheckStatus: func(t *testing.T, status json.RawMessage) {
			var st RoleStatus
			if err := json.Unmarshal(status, &st); err != nil || st.Name != "acc_role" || len(st.Password) != 48 {
				t.Fatalf("status %s: want name acc_role and a 48-character password", status)
			}
			if password != "" && st.Password != password {
				t.Errorf("the password changed on a reconcile")
			}
			password = st.Password
			// The password logs in, and is not what the server stores.
			if got := psql(t, pg, `SELECT rolpassword LIKE 'SCRAM-SHA-256$%' AND rolpassword NOT LIKE '%`+st.Password+`%' FROM pg_authid WHERE rolname = 'acc_role'`); got != "t" {
				t.Errorf("stored password: want a SCRAM verifier without the password, got %s", got)
			}
		},
	})
}

func TestAcceptanceDatabase(t *testing.T) {
	pg := servertest.StartPostgres(t)
	psql(t, pg, `CREATE ROLE acc_owner; CREATE ROLE acc_owner2`)
	sdktest.RunAcceptance(t, sdktest.Acceptance{
		Providers: Providers(), Kind: DatabaseKind, Version: 1, Name: "acc-db", Config: config(pg),
		Create: json.RawMessage(`{"name":"acc_db","owner":"acc_owner"}`),
		Update: json.RawMessage(`{"name":"acc_db","owner":"acc_owner2"}`),
		OutOfBand: func(t *testing.T) {
			psql(t, pg, `ALTER DATABASE acc_db OWNER TO acc_owner`)
		},
		WantDrift:   []string{"owner"},
		Fingerprint: fingerprint(pg, "pg_database", "datname", "acc_db"),
		CheckStatus: func(t *testing.T, status json.RawMessage) {
			var st DatabaseStatus
			if err := json.Unmarshal(status, &st); err != nil || st.Host != pg.Host || st.Port != pg.Port {
				t.Fatalf("status %s: want the server's host and port", status)
			}
		},
	})
	// A database dropped by hand is drift too: observe says it is gone and
	// reconcile brings it back.
	sdktest.RunAcceptance(t, sdktest.Acceptance{
		Providers: Providers(), Kind: DatabaseKind, Version: 1, Name: "acc-db2", Config: config(pg),
		Create:    json.RawMessage(`{"name":"acc_db2","owner":"acc_owner"}`),
		OutOfBand: func(t *testing.T) { psql(t, pg, `DROP DATABASE acc_db2`) },
		WantDrift: []string{},
	})
}

// call runs one handler of the providers directly (the acceptance runs go
// through the control plane; these check outcomes and messages).
func call(t *testing.T, reaction, kind, name, spec string, cfg json.RawMessage) (any, *sdk.Observation, error) {
	t.Helper()
	for _, p := range Providers() {
		if p.Kind != kind {
			continue
		}
		r := &sdk.Request{Reaction: reaction, Kind: kind, KindVersion: 1, Name: name, Spec: json.RawMessage(spec), Config: cfg}
		switch reaction {
		case converge.ReactionReconcile:
			st, err := p.Reconcile(context.Background(), r)
			return st, nil, err
		case converge.ReactionObserve:
			o, err := p.Observe(context.Background(), r)
			return nil, o, err
		case converge.ReactionTeardown:
			return nil, nil, p.Teardown(context.Background(), r)
		}
	}
	t.Fatalf("no %s %s", kind, reaction)
	return nil, nil, nil
}

func wantOutcome(t *testing.T, err error, want converge.Outcome, contains ...string) {
	t.Helper()
	if got := sdk.OutcomeOf(err); got != want {
		t.Fatalf("outcome %s (%v), want %s", got, err, want)
	}
	for _, s := range contains {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
}

func TestAdoptionAndOrphan(t *testing.T) {
	pg := servertest.StartPostgres(t)
	cfg := config(pg)
	psql(t, pg, `CREATE ROLE handmade LOGIN`)
	psql(t, pg, `CREATE DATABASE handmade_db OWNER handmade`)

	// Refused: it exists and carries no mark.
	_, _, err := call(t, "reconcile", RoleKind, "team", `{"name":"handmade"}`, cfg)
	wantOutcome(t, err, converge.OutcomePermanent, `role "handmade" already exists`, "adopt: true")
	_, o, err := call(t, "observe", RoleKind, "team", `{"name":"handmade"}`, cfg)
	if err != nil || !o.Exists || o.Managed {
		t.Fatalf("observe unmarked role: %+v, %v; want exists, not managed", o, err)
	}
	_, _, err = call(t, "teardown", RoleKind, "team", `{"name":"handmade"}`, cfg)
	wantOutcome(t, err, converge.OutcomePermanent, "not dropping it")
	if got := psql(t, pg, `SELECT count(*) FROM pg_roles WHERE rolname = 'handmade'`); got != "1" {
		t.Fatal("an unmarked role was dropped")
	}

	// Adopted: marked, and from then on converge's.
	if _, _, err := call(t, "reconcile", RoleKind, "team", `{"name":"handmade","adopt":true}`, cfg); err != nil {
		t.Fatal(err)
	}
	if got := psql(t, pg, `SELECT shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = 'handmade'`); got != "managed by converge: pgrole/team" {
		t.Errorf("comment after adoption = %q", got)
	}
	// Another resource naming the same role is refused.
	_, _, err = call(t, "reconcile", RoleKind, "other", `{"name":"handmade","adopt":true}`, cfg)
	wantOutcome(t, err, converge.OutcomePermanent, "belongs to converge resource pgrole/team")

	// The database: refused, adopted, then orphaned on teardown.
	_, _, err = call(t, "reconcile", DatabaseKind, "team", `{"name":"handmade_db","owner":"handmade"}`, cfg)
	wantOutcome(t, err, converge.OutcomePermanent, `database "handmade_db" already exists`, "adopt: true")
	if _, _, err := call(t, "reconcile", DatabaseKind, "team", `{"name":"handmade_db","owner":"handmade","adopt":true}`, cfg); err != nil {
		t.Fatal(err)
	}
	if _, _, err := call(t, "teardown", DatabaseKind, "team", `{"name":"handmade_db","owner":"handmade","deletion_policy":"orphan"}`, cfg); err != nil {
		t.Fatal(err)
	}
	if got := psql(t, pg, `SELECT coalesce(shobj_description(oid, 'pg_database'), '(none)') FROM pg_database WHERE datname = 'handmade_db'`); got != "(none)" {
		t.Errorf("orphaned database: comment %q, want it left in place without converge's mark", got)
	}
	// The role owns the orphaned database: dropping it is refused by the
	// server, and says why.
	_, _, err = call(t, "teardown", RoleKind, "team", `{"name":"handmade"}`, cfg)
	wantOutcome(t, err, converge.OutcomeTransient, "drop role handmade", "handmade_db")
}

func TestOpenSessions(t *testing.T) {
	pg := servertest.StartPostgres(t)
	cfg := config(pg)
	psql(t, pg, `CREATE ROLE sess_owner`)
	spec := `{"name":"sess_db","owner":"sess_owner"}`
	if _, _, err := call(t, "reconcile", DatabaseKind, "sess", spec, cfg); err != nil {
		t.Fatal(err)
	}
	// A session held open on the database by a pool of the same provider
	// set (its admin database pointed at sess_db).
	held := Config{Host: pg.Host, Port: pg.Port, AdminUser: pg.User, AdminPassword: pg.Password, AdminDatabase: "sess_db"}
	hb, _ := json.Marshal(held)
	s := &servers{pools: map[string]*pgxpool.Pool{}}
	c, _, err := s.conn(context.Background(), &sdk.Request{Kind: DatabaseKind, Name: "holder", Config: hb})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	_, _, err = call(t, "teardown", DatabaseKind, "sess", spec, cfg)
	wantOutcome(t, err, converge.OutcomeTransient, "open sessions", "terminate_sessions")
	force := Config{Host: pg.Host, Port: pg.Port, AdminUser: pg.User, AdminPassword: pg.Password, TerminateSessions: true}
	fb, _ := json.Marshal(force)
	if _, _, err := call(t, "teardown", DatabaseKind, "sess", spec, fb); err != nil {
		t.Fatal(err)
	}
	if got := psql(t, pg, `SELECT count(*) FROM pg_database WHERE datname = 'sess_db'`); got != "0" {
		t.Error("database still there after a forced teardown")
	}
}

func TestServerErrors(t *testing.T) {
	pg := servertest.StartPostgres(t)
	bad := Config{Host: pg.Host, Port: pg.Port, AdminUser: pg.User, AdminPassword: "wrong-password-123"}
	bb, _ := json.Marshal(bad)
	_, _, err := call(t, "reconcile", RoleKind, "r", `{"name":"r1"}`, bb)
	wantOutcome(t, err, converge.OutcomePermanent, "postgres 127.0.0.1:", "credentials of \""+pg.User+"\" refused")
	if strings.Contains(err.Error(), "wrong-password-123") {
		t.Errorf("the error shows the password: %v", err)
	}

	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	_, _, err = call(t, "reconcile", RoleKind, "r", `{"name":"r1"}`, config(pg))
	wantOutcome(t, err, converge.OutcomeTransient, fmt.Sprintf("postgres 127.0.0.1:%d: connect:", pg.Port))
	if strings.Contains(err.Error(), pg.Password) {
		t.Errorf("the error shows the password: %v", err)
	}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := call(t, "reconcile", RoleKind, "r", `{"name":"r1"}`, config(pg)); err != nil {
		t.Fatalf("after the server came back: %v", err)
	}
}

func TestScram(t *testing.T) {
	v, err := scramVerifier("pencil")
	if err != nil {
		t.Fatal(err)
	}
	if !scramMatches(v, "pencil") || scramMatches(v, "pen") || scramMatches("md5abc", "pencil") {
		t.Errorf("scramMatches wrong for %s", v)
	}
}
