package dnsrecord

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers/onprem/servertest"
	"github.com/convergehq/converge/providers/sdk"
	"github.com/convergehq/converge/providers/sdk/sdktest"
	"github.com/miekg/dns"
)

func config(d *servertest.DNS) Config {
	return Config{Server: d.Addr, Zone: d.Zone, TSIGKey: d.KeyName, TSIGAlgorithm: d.KeyAlgorithm, TSIGSecret: d.KeySecret}
}

func raw(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// serial is the zone's SOA serial: every update raises it.
func serial(d *servertest.DNS) func(t *testing.T) string {
	return func(t *testing.T) string {
		t.Helper()
		out, err := d.Knotc("zone-read", d.Zone, "@", "SOA")
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(out)
		if len(f) < 7 {
			t.Fatalf("knotc SOA: %q", out)
		}
		return f[6]
	}
}

// knotSet replaces name's type records with value, on the server itself
// (an operator's edit, not an update converge sends).
func knotSet(t *testing.T, d *servertest.DNS, name, typ, value string) {
	t.Helper()
	steps := [][]string{{"zone-begin", d.Zone}, {"zone-unset", d.Zone, name, typ}, {"zone-set", d.Zone, name, "60", typ, value}, {"zone-commit", d.Zone}}
	if value == "" {
		steps = [][]string{{"zone-begin", d.Zone}, {"zone-unset", d.Zone, name, typ}, {"zone-commit", d.Zone}}
	}
	for _, s := range steps {
		if _, err := d.Knotc(s...); err != nil && !strings.Contains(err.Error(), "no such record") && !strings.Contains(err.Error(), "no such node") {
			_, _ = d.Knotc("zone-abort", d.Zone)
			t.Fatal(err)
		}
	}
}

func TestAcceptance(t *testing.T) {
	d := servertest.StartDNS(t)
	sdktest.RunAcceptance(t, sdktest.Acceptance{
		Providers: []sdk.Provider{Provider()}, Kind: Kind, Version: 1, Name: "acc", Config: raw(config(d)),
		Create: json.RawMessage(`{"name":"acc.db","target":"127.0.0.1"}`),
		Update: json.RawMessage(`{"name":"acc.db","target":"db.example.net","ttl":120}`),
		OutOfBand: func(t *testing.T) {
			knotSet(t, d, "acc.db", "CNAME", "elsewhere.example.net.")
		},
		WantDrift:   []string{"target", "ttl"},
		Fingerprint: serial(d),
	})
	// Deleted by hand: observe says it is gone, reconcile brings it back.
	sdktest.RunAcceptance(t, sdktest.Acceptance{
		Providers: []sdk.Provider{Provider()}, Kind: Kind, Version: 1, Name: "acc2", Config: raw(config(d)),
		Create:    json.RawMessage(`{"name":"acc2.db","target":"::1"}`),
		OutOfBand: func(t *testing.T) { knotSet(t, d, "acc2.db", "AAAA", "") },
		WantDrift: []string{},
	})
}

func call(t *testing.T, reaction, name, spec string, cfg Config) (*sdk.Observation, error) {
	t.Helper()
	p := Provider()
	r := &sdk.Request{Reaction: reaction, Kind: Kind, KindVersion: 1, Name: name, Spec: json.RawMessage(spec), Config: raw(cfg)}
	switch reaction {
	case converge.ReactionReconcile:
		_, err := p.Reconcile(context.Background(), r)
		return nil, err
	case converge.ReactionObserve:
		return p.Observe(context.Background(), r)
	}
	return nil, p.Teardown(context.Background(), r)
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
	d := servertest.StartDNS(t)
	cfg := config(d)
	knotSet(t, d, "handmade", "A", "192.0.2.1")
	spec := `{"name":"handmade","target":"127.0.0.1"}`
	_, err := call(t, "reconcile", "team", spec, cfg)
	wantOutcome(t, err, converge.OutcomePermanent, "handmade.converge.test. already exists", "adopt: true")
	_, err = call(t, "teardown", "team", spec, cfg)
	wantOutcome(t, err, converge.OutcomePermanent, "not deleting it")
	o, err := call(t, "observe", "team", spec, cfg)
	if err != nil || !o.Exists || o.Managed {
		t.Fatalf("observe: %+v, %v: want exists, not managed", o, err)
	}
	if _, err := call(t, "reconcile", "team", `{"name":"handmade","target":"127.0.0.1","adopt":true}`, cfg); err != nil {
		t.Fatal(err)
	}
	if out, _ := d.Knotc("zone-read", d.Zone, "_converge.handmade", "TXT"); !strings.Contains(out, "managed by converge: dnsrecord/team") {
		t.Errorf("marker after adoption: %q", out)
	}
	_, err = call(t, "reconcile", "other", `{"name":"handmade","target":"127.0.0.1","adopt":true}`, cfg)
	wantOutcome(t, err, converge.OutcomePermanent, "belongs to converge resource dnsrecord/team")
	if _, err := call(t, "teardown", "team", `{"name":"handmade","target":"127.0.0.1","deletion_policy":"orphan"}`, cfg); err != nil {
		t.Fatal(err)
	}
	out, _ := d.Knotc("zone-read", d.Zone, "handmade", "A")
	mk, _ := d.Knotc("zone-read", d.Zone, "_converge.handmade", "TXT")
	if !strings.Contains(out, "127.0.0.1") || strings.Contains(mk, "managed by converge") {
		t.Errorf("orphaned record: A %q, marker %q; want the record kept and the mark gone", out, mk)
	}
}

func TestRefusedUpdates(t *testing.T) {
	d := servertest.StartDNS(t)
	spec := `{"name":"x","target":"127.0.0.1"}`

	bad := config(d)
	bad.TSIGSecret = base64.StdEncoding.EncodeToString([]byte("not-the-key-not-the-key-not-the-"))
	_, err := call(t, "reconcile", "x", spec, bad)
	wantOutcome(t, err, converge.OutcomePermanent, "dns "+d.Addr, "TSIG key")
	if strings.Contains(err.Error(), bad.TSIGSecret) {
		t.Errorf("the error shows the secret: %v", err)
	}

	other := config(d)
	other.Zone = "elsewhere.test."
	_, err = call(t, "reconcile", "x", spec, other)
	wantOutcome(t, err, converge.OutcomePermanent, "does not serve zone elsewhere.test.")

	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err = call(t, "reconcile", "x", spec, config(d))
	wantOutcome(t, err, converge.OutcomeTransient, "dns "+d.Addr)
}

func TestSpecChecks(t *testing.T) {
	cfg := Config{Server: "127.0.0.1:1", Zone: "converge.test.", TSIGKey: "k.", TSIGSecret: "c2VjcmV0"}
	for _, tc := range []struct{ name, spec, want string }{
		{"outside zone", `{"name":"a.example.org.","target":"127.0.0.1"}`, "not a name inside zone"},
		{"no target", `{"name":"a"}`, "spec.target: empty"},
		{"bad policy", `{"name":"a","target":"127.0.0.1","deletion_policy":"keep"}`, "deletion_policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := call(t, "reconcile", "x", tc.spec, cfg)
			wantOutcome(t, err, converge.OutcomePermanent, tc.want)
		})
	}
	if _, ok := dns.IsDomainName("a.converge.test."); !ok {
		t.Fatal("dns.IsDomainName")
	}
}
