package servertest

import (
	"os/exec"
	"strings"
	"testing"
)

// TestServers starts both servers, asks each a question a client would,
// and restarts PostgreSQL at the same port.
func TestServers(t *testing.T) {
	pg := StartPostgres(t)
	dns := StartDNS(t)
	if got, err := pg.Psql("SELECT current_user"); err != nil || got != pg.User {
		t.Fatalf("psql current_user = %q, %v; want %q", got, err, pg.User)
	}
	host, port, _ := strings.Cut(dns.Addr, ":")
	out, err := exec.Command("kdig", "@"+host, "-p", port, "+short", dns.Zone, "SOA").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hostmaster."+dns.Zone) {
		t.Fatalf("kdig SOA: %v: %s", err, out)
	}
	was := pg.Port
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Psql("SELECT 1"); err == nil {
		t.Fatal("psql succeeded on a stopped server")
	}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	if pg.Port != was {
		t.Errorf("restarted on port %d, want %d", pg.Port, was)
	}
	if _, err := pg.Psql("SELECT 1"); err != nil {
		t.Fatal(err)
	}
}
