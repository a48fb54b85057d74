package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/convergehq/converge/providers/onprem/dnsrecord"
	"github.com/convergehq/converge/providers/onprem/postgres"
	"golang.org/x/sync/errgroup"
)

// bench --onprem: examples/onprem with --teams teams (a role, a database
// and a DNS record each) converged from empty by `converge sync` (the
// user's path: a new process, its workers, an empty store), against the
// same objects made by a plain client in the same run: a pgx loop and
// direct RFC 2136 updates, at the onprem worker's concurrency (its
// PostgreSQL pool, onpremConcurrency connections). Then a sync of the same
// revision must send nothing to either server: counted on the servers,
// the sum of pg_stat_database.xact_commit (autovacuum off meanwhile) and
// the zone's SOA serial.

// onpremConcurrency is the onprem worker's PostgreSQL pool size
// (providers/onprem/postgres: MaxConns).
const onpremConcurrency = 8

type OnpremReport struct {
	Teams            int     `json:"teams"`
	Objects          int     `json:"objects"`
	Concurrency      int     `json:"concurrency"`
	BaselineSeconds  float64 `json:"baseline_seconds"`
	BaselinePerSec   float64 `json:"baseline_objects_per_second"`
	ConvergeSeconds  float64 `json:"converge_sync_seconds"`
	ConvergePerSec   float64 `json:"converge_objects_per_second"`
	Ratio            float64 `json:"ratio"`
	NoopSeconds      float64 `json:"noop_sync_seconds"`
	NoopTransactions int64   `json:"noop_pg_transactions"`
	// NoopControl is the same count over a window with no sync: what
	// the server does by itself.
	NoopControl   int64  `json:"noop_pg_transactions_control"`
	NoopSOABefore uint32 `json:"noop_soa_serial_before"`
	NoopSOAAfter  uint32 `json:"noop_soa_serial_after"`
}

// serversEnv reads servers.sh's DIR/env.
func serversEnv(dir string) (map[string]string, error) {
	f, err := os.Open(filepath.Join(dir, "env"))
	if err != nil {
		return nil, fmt.Errorf("bench --onprem: %w (start the servers with examples/onprem/servers.sh start DIR)", err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if ok {
			env[k] = v
		}
	}
	return env, sc.Err()
}

// OnpremOptions say what Onprem measures.
type OnpremOptions struct {
	// Servers is the directory of examples/onprem/servers.sh's running
	// servers (its env file).
	Servers string
	// Dir is the onprem example's repository directory.
	Dir string
	// Teams is how many teams (a role, a database and a record each);
	// 500 when 0.
	Teams int
	// Converge is the converge executable whose `sync` is timed (the
	// user's path: a new process).
	Converge string
}

// Onprem measures converge sync of the onprem example from empty against
// a plain client making the same objects, then a no-op sync (see the top
// of this file); it says what it is doing on progress.
func Onprem(ctx context.Context, progress io.Writer, o OnpremOptions) (*OnpremReport, error) {
	env, err := serversEnv(o.Servers)
	if err != nil {
		return nil, err
	}
	teams := o.Teams
	if teams <= 0 {
		teams = 500
	}
	exampleDir := o.Dir
	pgPort, _ := strconv.Atoi(env["PG_PORT"])
	pool, err := postgres.NewPlain(ctx, "127.0.0.1", pgPort, "converge_admin", env["PGPASSWORD"], onpremConcurrency)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	rep := OnpremReport{Teams: teams, Objects: 3 * teams, Concurrency: onpremConcurrency}

	// The baseline: the same objects, by a plain client.
	fmt.Fprintf(progress, "baseline: %d teams (%d objects) by pgx and RFC 2136 at concurrency %d...\n", teams, 3*teams, onpremConcurrency)
	start := time.Now()
	if err := onpremBaseline(ctx, pool, env, teams); err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	rep.BaselineSeconds = time.Since(start).Seconds()
	rep.BaselinePerSec = float64(rep.Objects) / rep.BaselineSeconds

	// The user's path: converge sync from an empty store.
	tmp, err := os.MkdirTemp("", "converge-bench-onprem-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	repo := filepath.Join(tmp, "repo")
	if err := onpremRepo(exampleDir, repo, env, teams); err != nil {
		return nil, err
	}
	self := o.Converge
	stateDir := filepath.Join(tmp, "state")
	sync := func() (string, float64, error) {
		cmd := exec.CommandContext(ctx, self, "sync", "--repo", repo, "--state", stateDir, "--timeout", "20m")
		t0 := time.Now()
		b, err := cmd.CombinedOutput()
		if err != nil {
			return string(b), 0, fmt.Errorf("converge sync: %v\n%s", err, b)
		}
		return string(b), time.Since(t0).Seconds(), nil
	}
	fmt.Fprintf(progress, "converge sync of %d teams from an empty store...\n", teams)
	so, secs, err := sync()
	if err != nil {
		return nil, err
	}
	if want := fmt.Sprintf("converged: %d/%d Ready", 3*teams+1, 3*teams+1); !strings.Contains(so, want) {
		return nil, fmt.Errorf("converge sync did not say %q:\n%s", want, so)
	}
	rep.ConvergeSeconds = secs
	rep.ConvergePerSec = float64(rep.Objects) / secs
	rep.Ratio = rep.ConvergePerSec / rep.BaselinePerSec

	// The no-op sync: nothing sent to either server.
	if err := pool.Exec(ctx, "ALTER SYSTEM SET autovacuum = off"); err != nil {
		return nil, err
	}
	if err := pool.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return nil, err
	}
	defer func() {
		pool.Exec(context.Background(), "ALTER SYSTEM RESET autovacuum")
		pool.Exec(context.Background(), "SELECT pg_reload_conf()")
	}()
	pool.Reset() // no connection of the bench's left in postgres
	commits := func() (int64, error) {
		// Read from template1, which converge never uses, on a
		// connection of its own: every other database's commits are
		// converge's (autovacuum is off).
		time.Sleep(1500 * time.Millisecond) // every backend's stats flushed
		return pool.Commits(ctx)
	}
	c0, err := commits()
	if err != nil {
		return nil, err
	}
	c1, err := commits() // the same, with nothing in between: the reading's own cost
	if err != nil {
		return nil, err
	}
	soa0, err := dnsrecord.SOASerial(env["DNS_SERVER"], dnsZone(env))
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(progress, "converge sync again (no-op)...")
	_, nsecs, err := sync()
	if err != nil {
		return nil, err
	}
	c2, err := commits()
	if err != nil {
		return nil, err
	}
	rep.NoopSeconds = nsecs
	rep.NoopTransactions = c2 - c1
	rep.NoopControl = c1 - c0
	rep.NoopSOABefore = soa0
	if rep.NoopSOAAfter, err = dnsrecord.SOASerial(env["DNS_SERVER"], dnsZone(env)); err != nil {
		return nil, err
	}
	return &rep, nil
}

// onpremBaseline makes every team's role, database and record as a
// plain client would: per team, CREATE ROLE with a password and the
// mark, then CREATE DATABASE owned by it and its mark, on
// onpremConcurrency connections; each team's signed DNS update (the A
// record and its TXT mark) follows its database, onpremConcurrency
// updates at a time: the same order converge keeps (record after
// database after role), pipelined as its worker is.
func onpremBaseline(ctx context.Context, pool *postgres.Plain, env map[string]string, teams int) error {
	zone := dnsZone(env)
	g, ctx := errgroup.WithContext(ctx)
	work := make(chan int)
	records := make(chan int, teams)
	names := func(i int) (fd, team, sql string) {
		fd, team = fmt.Sprintf("bfd-%02d", i/50), fmt.Sprintf("team-%03d", i%50)
		return fd, team, strings.ReplaceAll(fd+"-"+team, "-", "_")
	}
	// The roles and databases stage ends (pg) before the records stage
	// is told there is no more to come.
	var pg sync.WaitGroup
	for range onpremConcurrency {
		pg.Add(1)
		g.Go(func() error {
			defer pg.Done()
			for i := range work {
				fd, team, name := names(i)
				for _, st := range []string{
					fmt.Sprintf("CREATE ROLE %s LOGIN CONNECTION LIMIT 10 PASSWORD 'baseline-%d-password'", name, i),
					fmt.Sprintf("COMMENT ON ROLE %s IS 'managed by converge: pgrole/%s-%s'", name, fd, team),
					fmt.Sprintf("CREATE DATABASE %s OWNER %s", name, name),
					fmt.Sprintf("COMMENT ON DATABASE %s IS 'managed by converge: pgdatabase/%s-%s'", name, fd, team),
				} {
					if err := pool.Exec(ctx, st); err != nil {
						return fmt.Errorf("%s: %w", st, err)
					}
				}
				records <- i
			}
			return nil
		})
		g.Go(func() error {
			for i := range records {
				fd, team, _ := names(i)
				fqdn := team + "." + fd + ".db." + zone
				err := dnsrecord.PlainUpdate(ctx, env["DNS_SERVER"], zone, "converge-key.", env["TSIG_SECRET"],
					fqdn+" 300 IN A 127.0.0.1",
					"_converge."+fqdn+` 300 IN TXT "managed by converge: dnsrecord/`+fd+"-"+team+`"`)
				if err != nil {
					return fmt.Errorf("update %s: %w", fqdn, err)
				}
			}
			return nil
		})
	}
	g.Go(func() error {
		defer close(records)
		defer pg.Wait()
		defer close(work)
		for i := range teams {
			select {
			case work <- i:
			case <-ctx.Done():
				return nil
			}
		}
		return nil
	})
	return g.Wait()
}

// onpremRepo writes a git repository of examples/onprem at dst, its
// provider configs pointed at env's servers and its BOM holding teams
// teams (50 per functional domain).
func onpremRepo(src, dst string, env map[string]string, teams int) error {
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(dst, "configs", "servers.yaml")
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		return err
	}
	s := regexp.MustCompile(`(?m)^( *port:) [0-9]+`).ReplaceAllString(string(b), "${1} "+env["PG_PORT"])
	s = regexp.MustCompile(`(?m)^( *server:) .*`).ReplaceAllString(s, `${1} "`+env["DNS_SERVER"]+`"`)
	if err := os.WriteFile(cfgPath, []byte(s), 0o644); err != nil {
		return err
	}
	var bom strings.Builder
	bom.WriteString("type: \"resource\"\nkind: \"onprembom\"\nkind_version: 1\nname: \"onprem\"\nspec: functional_domains: [\n")
	for fd := 0; fd*50 < teams; fd++ {
		fmt.Fprintf(&bom, "\t{name: \"fd-%02d\", service_teams: [", fd)
		for t := 0; t < 50 && fd*50+t < teams; t++ {
			if t > 0 {
				bom.WriteString(", ")
			}
			fmt.Fprintf(&bom, "{name: \"team-%03d\"}", t)
		}
		bom.WriteString("]},\n")
	}
	bom.WriteString("]\n")
	if err := os.WriteFile(filepath.Join(dst, "resources", "bom.cue"), []byte(bom.String()), 0o644); err != nil {
		return err
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"},
		{"-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit", "-q", "-m", "onprem bench"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dst
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %v: %v: %s", args, err, b)
		}
	}
	return nil
}

// dnsZone is the zone servers.sh serves.
func dnsZone(env map[string]string) string {
	if z := env["DNS_ZONE"]; z != "" {
		return z
	}
	return "converge.test."
}
