// Package dnsrecord is the onprem example's DNS provider: one record
// (dnsrecord) on a zone of an authoritative server, changed by RFC 2136
// dynamic updates signed with a TSIG key. It is the only package that
// imports miekg/dns.
//
// Read first: Provider, Config, Spec.
//
// # Basics
//
// A record's type follows its target: an IPv4 address is an A record, an
// IPv6 address AAAA, a name a CNAME. converge owns the A, AAAA and CNAME
// sets at the record's name and marks them with a TXT record beside it,
// at _converge.NAME, saying "managed by converge: dnsrecord/RESOURCE" (a
// CNAME can have no other record at its own name). As for the PostgreSQL
// providers: records without the mark are refused unless the spec says
// adopt: true and never deleted; deletion_policy: "orphan" leaves the
// record and removes the mark; a record already gone is deleted.
//
// Reads are plain queries over TCP; a reconcile that finds the record as
// declared sends no update (the zone's SOA serial stays).
//
// Errors: a server that does not answer is Transient, naming the server
// and the error; an update refused for its key (NOTAUTH: a bad TSIG key)
// or its zone (REFUSED, NOTZONE: a zone the server does not serve) is
// Permanent and says which.
package dnsrecord

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/convergehq/converge/providers/sdk"
	"github.com/miekg/dns"
)

// Kind is the record's kind name.
const Kind = "dnsrecord"

// Config is a dnsrecord provider config.
type Config struct {
	// Server is the authoritative server's "host:port".
	Server string `json:"server"`
	// Zone is the zone the records live in ("converge.test.").
	Zone string `json:"zone"`
	// TSIGKey, TSIGAlgorithm ("hmac-sha256" when empty) and TSIGSecret
	// (base64) sign every update.
	TSIGKey       string `json:"tsig_key"`
	TSIGAlgorithm string `json:"tsig_algorithm,omitempty"`
	TSIGSecret    string `json:"tsig_secret"`
}

// Spec is a dnsrecord's spec.
type Spec struct {
	// Name is relative to the zone ("team-000.fd-00.db"), or a fully
	// qualified name inside it (ending in ".").
	Name string `json:"name"`
	// Target is an address (A, AAAA) or a name (CNAME); a composer flows
	// it from the database's status.host.
	Target string `json:"target,omitempty"`
	// TTL in seconds (60 when 0).
	TTL    int    `json:"ttl,omitempty"`
	Adopt  bool   `json:"adopt,omitempty"`
	Policy string `json:"deletion_policy,omitempty"`
}

// Status is a dnsrecord's status.
type Status struct {
	FQDN   string `json:"fqdn"`
	Type   string `json:"type"`
	Target string `json:"target"`
}

// Actual is what observe reads: the spec's fields as the zone has them.
type Actual struct {
	Name   string `json:"name"`
	Target string `json:"target"`
	TTL    int    `json:"ttl"`
}

// Provider returns dnsrecord v1.
func Provider() sdk.Provider {
	return sdk.Provider{Kind: Kind, Version: 1, Reconcile: reconcile, Observe: observe, Teardown: teardown}
}

const markPrefix = "managed by converge: "

func mark(r *sdk.Request) string { return markPrefix + r.Kind + "/" + r.Name }

// record is one request's view: config, spec and names.
type record struct {
	cfg        Config
	spec       Spec
	fqdn, mark string // the record's name and its marker's
}

func load(r *sdk.Request) (*record, error) {
	cfg, err := sdk.Config[Config](r)
	if err != nil {
		return nil, err
	}
	spec, err := sdk.Spec[Spec](r)
	if err != nil {
		return nil, err
	}
	if cfg.Server == "" || cfg.Zone == "" || cfg.TSIGKey == "" || cfg.TSIGSecret == "" {
		return nil, sdk.Permanent(fmt.Errorf("%s/%s: provider config: server, zone, tsig_key and tsig_secret are required", r.Kind, r.Name))
	}
	switch spec.Policy {
	case "", "delete", "orphan":
	default:
		return nil, sdk.Permanent(fmt.Errorf("%s/%s: spec.deletion_policy %q: want \"delete\" or \"orphan\"", r.Kind, r.Name, spec.Policy))
	}
	cfg.Zone = dns.Fqdn(strings.ToLower(cfg.Zone))
	cfg.TSIGKey = dns.Fqdn(strings.ToLower(cfg.TSIGKey))
	if cfg.TSIGAlgorithm == "" {
		cfg.TSIGAlgorithm = "hmac-sha256"
	}
	name := strings.ToLower(spec.Name)
	if name == "" {
		return nil, sdk.Permanent(fmt.Errorf("%s/%s: spec.name: empty", r.Kind, r.Name))
	}
	fqdn := name
	if !strings.HasSuffix(name, ".") {
		fqdn = name + "." + cfg.Zone
	}
	if _, ok := dns.IsDomainName(fqdn); !ok || !dns.IsSubDomain(cfg.Zone, fqdn) || fqdn == cfg.Zone {
		return nil, sdk.Permanent(fmt.Errorf("%s/%s: spec.name %q: not a name inside zone %s", r.Kind, r.Name, spec.Name, cfg.Zone))
	}
	if spec.TTL == 0 {
		spec.TTL = 60
	}
	return &record{cfg: cfg, spec: spec, fqdn: fqdn, mark: "_converge." + fqdn}, nil
}

// managedTypes are the record types converge owns at a name.
var managedTypes = []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeCNAME}

// found is what the zone holds at a record's name.
type found struct {
	rrs    []dns.RR // A, AAAA and CNAME records
	marker string   // the marker's text, "" for none
}

// read queries the server for the record's managed types and marker.
func (rec *record) read(ctx context.Context) (*found, error) {
	f := &found{}
	for _, t := range append(managedTypes, dns.TypeTXT) {
		name := rec.fqdn
		if t == dns.TypeTXT {
			name = rec.mark
		}
		m := new(dns.Msg)
		m.SetQuestion(name, t)
		m.RecursionDesired = false
		in, err := rec.exchange(ctx, m)
		if err != nil {
			return nil, err
		}
		switch in.Rcode {
		case dns.RcodeSuccess, dns.RcodeNameError:
		case dns.RcodeRefused, dns.RcodeNotAuth:
			return nil, sdk.Permanent(fmt.Errorf("dns %s: query %s: %s: the server does not serve zone %s",
				rec.cfg.Server, name, dns.RcodeToString[in.Rcode], rec.cfg.Zone))
		default:
			return nil, sdk.Transient(fmt.Errorf("dns %s: query %s: %s", rec.cfg.Server, name, dns.RcodeToString[in.Rcode]))
		}
		for _, rr := range in.Answer {
			h := rr.Header()
			if !strings.EqualFold(h.Name, name) || h.Rrtype != t {
				continue
			}
			if t == dns.TypeTXT {
				f.marker = strings.Join(rr.(*dns.TXT).Txt, "")
			} else {
				f.rrs = append(f.rrs, rr)
			}
		}
	}
	return f, nil
}

// exchange sends m over TCP, signed when it is an update.
func (rec *record) exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, error) {
	c := &dns.Client{Net: "tcp", Timeout: 5 * time.Second}
	if m.Opcode == dns.OpcodeUpdate {
		c.TsigSecret = map[string]string{rec.cfg.TSIGKey: rec.cfg.TSIGSecret}
		m.SetTsig(rec.cfg.TSIGKey, dns.Fqdn(rec.cfg.TSIGAlgorithm), 300, time.Now().Unix())
	}
	in, _, err := c.ExchangeContext(ctx, m, rec.cfg.Server)
	if err == nil {
		return in, nil
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || isConnErr(err) {
		return nil, sdk.Transient(fmt.Errorf("dns %s: %w", rec.cfg.Server, err))
	}
	if errors.Is(err, dns.ErrAuth) || errors.Is(err, dns.ErrSig) || errors.Is(err, dns.ErrSecret) || errors.Is(err, dns.ErrKeyAlg) || errors.Is(err, dns.ErrAlg) {
		return nil, sdk.Permanent(fmt.Errorf("dns %s: update of zone %s: TSIG key %s refused (%v): check tsig_key, tsig_algorithm and tsig_secret in the provider config",
			rec.cfg.Server, rec.cfg.Zone, rec.cfg.TSIGKey, err))
	}
	return nil, sdk.Transient(fmt.Errorf("dns %s: %w", rec.cfg.Server, err))
}

func isConnErr(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe)
}

// update sends one signed update of the zone.
func (rec *record) update(ctx context.Context, build func(m *dns.Msg)) error {
	m := new(dns.Msg)
	m.SetUpdate(rec.cfg.Zone)
	build(m)
	in, err := rec.exchange(ctx, m)
	if err != nil {
		return err
	}
	switch in.Rcode {
	case dns.RcodeSuccess:
		return nil
	case dns.RcodeNotAuth:
		return sdk.Permanent(fmt.Errorf("dns %s: update of zone %s refused (NOTAUTH): the TSIG key %s is not accepted for it, or the server does not serve it",
			rec.cfg.Server, rec.cfg.Zone, rec.cfg.TSIGKey))
	case dns.RcodeRefused, dns.RcodeNotZone:
		return sdk.Permanent(fmt.Errorf("dns %s: update of zone %s refused (%s): the server does not serve that zone or takes no updates for it",
			rec.cfg.Server, rec.cfg.Zone, dns.RcodeToString[in.Rcode]))
	}
	return sdk.Transient(fmt.Errorf("dns %s: update of zone %s: %s", rec.cfg.Server, rec.cfg.Zone, dns.RcodeToString[in.Rcode]))
}

// desired is the record the spec asks for.
func (rec *record) desired() (dns.RR, string, error) {
	t := strings.TrimSpace(rec.spec.Target)
	if t == "" {
		return nil, "", sdk.Permanent(fmt.Errorf("spec.target: empty (it flows from the database's status.host)"))
	}
	h := dns.RR_Header{Name: rec.fqdn, Class: dns.ClassINET, Ttl: uint32(rec.spec.TTL)}
	if a, err := netip.ParseAddr(t); err == nil {
		if a.Is4() {
			h.Rrtype = dns.TypeA
			return &dns.A{Hdr: h, A: a.AsSlice()}, "A", nil
		}
		h.Rrtype = dns.TypeAAAA
		return &dns.AAAA{Hdr: h, AAAA: a.AsSlice()}, "AAAA", nil
	}
	if _, ok := dns.IsDomainName(t); !ok {
		return nil, "", sdk.Permanent(fmt.Errorf("spec.target %q: neither an address nor a name", t))
	}
	h.Rrtype = dns.TypeCNAME
	return &dns.CNAME{Hdr: h, Target: dns.Fqdn(t)}, "CNAME", nil
}

// target is an RR's target as a spec writes it.
func target(rr dns.RR) string {
	switch v := rr.(type) {
	case *dns.A:
		return v.A.String()
	case *dns.AAAA:
		return v.AAAA.String()
	case *dns.CNAME:
		return v.Target
	}
	return ""
}

// claim refuses what converge may not touch: a marker of another
// resource, or records without a marker and no adoption.
func (rec *record) claim(r *sdk.Request, f *found) error {
	switch {
	case f.marker == mark(r):
		return nil
	case strings.HasPrefix(f.marker, markPrefix):
		return sdk.Permanent(fmt.Errorf("dns record %s belongs to converge resource %s, not %s/%s",
			rec.fqdn, strings.TrimPrefix(f.marker, markPrefix), r.Kind, r.Name))
	case len(f.rrs) > 0 && !rec.spec.Adopt:
		return sdk.Permanent(fmt.Errorf("dns record %s already exists and converge did not create it (no TXT %q at %s): "+
			"to manage it, set adopt: true in %s/%s's spec, or choose another name", rec.fqdn, mark(r), rec.mark, r.Kind, r.Name))
	}
	return nil
}

func markerRR(name, text string) dns.RR {
	return &dns.TXT{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 60}, Txt: []string{text}}
}

func reconcile(ctx context.Context, r *sdk.Request) (any, error) {
	rec, err := load(r)
	if err != nil {
		return nil, err
	}
	want, typ, err := rec.desired()
	if err != nil {
		return nil, sdk.Permanent(fmt.Errorf("%s/%s: %w", r.Kind, r.Name, err))
	}
	f, err := rec.read(ctx)
	if err != nil {
		return nil, err
	}
	if err := rec.claim(r, f); err != nil {
		return nil, err
	}
	same := len(f.rrs) == 1 && f.rrs[0].Header().Rrtype == want.Header().Rrtype &&
		strings.EqualFold(target(f.rrs[0]), target(want)) && f.rrs[0].Header().Ttl == want.Header().Ttl
	if !same || f.marker != mark(r) {
		err := rec.update(ctx, func(m *dns.Msg) {
			for _, t := range managedTypes {
				m.RemoveRRset([]dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: rec.fqdn, Rrtype: t, Class: dns.ClassINET}}})
			}
			m.RemoveRRset([]dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: rec.mark, Rrtype: dns.TypeTXT, Class: dns.ClassINET}}})
			m.Insert([]dns.RR{want, markerRR(rec.mark, mark(r))})
		})
		if err != nil {
			return nil, err
		}
	}
	return Status{FQDN: rec.fqdn, Type: typ, Target: target(want)}, nil
}

func observe(ctx context.Context, r *sdk.Request) (*sdk.Observation, error) {
	rec, err := load(r)
	if err != nil {
		return nil, err
	}
	f, err := rec.read(ctx)
	if err != nil {
		return nil, err
	}
	if len(f.rrs) == 0 {
		return &sdk.Observation{}, nil
	}
	var targets []string
	for _, rr := range f.rrs {
		targets = append(targets, target(rr))
	}
	// A target the spec wrote as a name is compared as one.
	t := strings.Join(targets, ",")
	if rec.spec.Target != "" && dns.Fqdn(rec.spec.Target) == t {
		t = rec.spec.Target
	}
	return &sdk.Observation{Exists: true, Managed: f.marker == mark(r),
		Actual: Actual{Name: rec.spec.Name, Target: t, TTL: int(f.rrs[0].Header().Ttl)}}, nil
}

func teardown(ctx context.Context, r *sdk.Request) error {
	rec, err := load(r)
	if err != nil {
		return err
	}
	f, err := rec.read(ctx)
	if err != nil {
		return err
	}
	ours := f.marker == mark(r)
	switch {
	case len(f.rrs) == 0 && !ours:
		return nil // gone (a marker of someone else's is not ours to remove)
	case !ours && rec.spec.Policy == "orphan":
		return nil
	case !ours:
		return sdk.Permanent(fmt.Errorf("dns record %s does not carry converge's mark (TXT %q at %s): not deleting it "+
			"(restore the mark, or set deletion_policy: \"orphan\" to leave it)", rec.fqdn, mark(r), rec.mark))
	}
	return rec.update(ctx, func(m *dns.Msg) {
		if rec.spec.Policy != "orphan" {
			for _, t := range managedTypes {
				m.RemoveRRset([]dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: rec.fqdn, Rrtype: t, Class: dns.ClassINET}}})
			}
		}
		m.RemoveRRset([]dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: rec.mark, Rrtype: dns.TypeTXT, Class: dns.ClassINET}}})
	})
}
