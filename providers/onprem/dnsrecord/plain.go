package dnsrecord

import (
	"context"
	"fmt"
	"time"

	"github.com/miekg/dns"
)

// PlainUpdate sends one RFC 2136 update of zone to server adding rrs
// (zone-file lines), signed with the TSIG key keyName (hmac-sha256,
// secret in base64): what a plain client sends, converge bench
// --onprem's baseline.
func PlainUpdate(ctx context.Context, server, zone, keyName, secret string, rrs ...string) error {
	m := new(dns.Msg)
	m.SetUpdate(zone)
	var ins []dns.RR
	for _, s := range rrs {
		rr, err := dns.NewRR(s)
		if err != nil {
			return fmt.Errorf("record %q: %w", s, err)
		}
		ins = append(ins, rr)
	}
	m.Insert(ins)
	m.SetTsig(keyName, dns.HmacSHA256, 300, time.Now().Unix())
	c := &dns.Client{Net: "tcp", Timeout: 5 * time.Second, TsigSecret: map[string]string{keyName: secret}}
	in, _, err := c.ExchangeContext(ctx, m, server)
	if err != nil {
		return err
	}
	if in.Rcode != dns.RcodeSuccess {
		return fmt.Errorf("update refused: %s", dns.RcodeToString[in.Rcode])
	}
	return nil
}

// SOASerial asks server for zone's SOA serial.
func SOASerial(server, zone string) (uint32, error) {
	m := new(dns.Msg)
	m.SetQuestion(zone, dns.TypeSOA)
	in, _, err := (&dns.Client{Net: "tcp", Timeout: 5 * time.Second}).Exchange(m, server)
	if err != nil {
		return 0, fmt.Errorf("SOA %s: %w", zone, err)
	}
	for _, rr := range in.Answer {
		if soa, ok := rr.(*dns.SOA); ok {
			return soa.Serial, nil
		}
	}
	return 0, fmt.Errorf("SOA %s: no answer", zone)
}
