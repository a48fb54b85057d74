package classic

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge/providers/sdk"
)

func TestAccountReconcile(t *testing.T) {
	acct := find(t, Providers(Options{}), "account", 1)
	ctx := context.Background()
	st, err := acct.Reconcile(ctx, request(t, "account", 1, "payments-ledger", AccountSpec{TeamName: "payments-ledger"}))
	if err != nil {
		t.Fatal(err)
	}
	got := roundTrip[AccountStatus](t, st)
	if !regexp.MustCompile(`^[0-9]{12}$`).MatchString(got.AccountID) {
		t.Errorf("account_id = %q, want 12 digits", got.AccountID)
	}
	again, err := acct.Reconcile(ctx, request(t, "account", 1, "payments-ledger", AccountSpec{TeamName: "payments-ledger"}))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := got.AccountID, roundTrip[AccountStatus](t, again).AccountID; a != b {
		t.Errorf("account_id not deterministic: %q then %q", a, b)
	}
	if a, b := AccountID("team-a"), AccountID("team-b"); a == b {
		t.Errorf("AccountID(team-a) = AccountID(team-b) = %q", a)
	}
	if _, err := acct.Reconcile(ctx, request(t, "account", 1, "x", AccountSpec{})); !isPermanent(err) {
		t.Errorf("empty team_name: err = %v, want permanent", err)
	}
	if err := acct.Teardown(ctx, request(t, "account", 1, "x", AccountSpec{TeamName: "x"})); err != nil {
		t.Errorf("teardown: %v", err)
	}
}

func TestVPC(t *testing.T) {
	ps := Providers(Options{})
	ctx := context.Background()
	acctID := AccountID("payments-ledger")
	tests := []struct {
		name       string
		version    int
		spec       VPCSpec
		config     string
		wantRegion string
		wantErr    string // "" for success; else a substring of a permanent error
	}{
		{name: "v1", version: 1, spec: VPCSpec{AccountID: acctID, CIDR: "10.0.0.0/24"}},
		{name: "v1 ignores region", version: 1, spec: VPCSpec{AccountID: acctID, CIDR: "10.0.0.0/24", Region: "eu-west-1"}},
		{name: "v2 echoes region", version: 2, spec: VPCSpec{AccountID: acctID, CIDR: "10.0.0.0/24", Region: "us-west-2"}, wantRegion: "us-west-2"},
		{name: "v2 default region", version: 2, spec: VPCSpec{AccountID: acctID, CIDR: "10.0.0.0/24"}, config: `{"default_region":"eu-central-1"}`, wantRegion: "eu-central-1"},
		{name: "v2 no region", version: 2, spec: VPCSpec{AccountID: acctID, CIDR: "10.0.0.0/24"}, wantErr: "region: empty"},
		{name: "no account", version: 1, spec: VPCSpec{CIDR: "10.0.0.0/24"}, wantErr: "want 12 characters"},
		{name: "short account", version: 1, spec: VPCSpec{AccountID: "123", CIDR: "10.0.0.0/24"}, wantErr: "want 12 characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := find(t, ps, "vpc", tt.version)
			r := request(t, "vpc", tt.version, "payments-ledger", tt.spec)
			if tt.config != "" {
				r.Config = json.RawMessage(tt.config)
			}
			st, err := p.Reconcile(ctx, r)
			if tt.wantErr != "" {
				if !isPermanent(err) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want a permanent error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := roundTrip[map[string]any](t, st)
			if id, _ := got["vpc_id"].(string); !regexp.MustCompile(`^vpc-[0-9a-f]{17}$`).MatchString(id) {
				t.Errorf("vpc_id = %q, want vpc- and 17 hex digits", id)
			}
			region, has := got["region"]
			if tt.wantRegion == "" && has {
				t.Errorf("status.region = %v on v%d, want none", region, tt.version)
			}
			if tt.wantRegion != "" && region != tt.wantRegion {
				t.Errorf("status.region = %v, want %q", region, tt.wantRegion)
			}
		})
	}
}

func TestVPCEnableFlowLogs(t *testing.T) {
	ctx := context.Background()
	for _, v := range []int{1, 2} {
		p := find(t, Providers(Options{}), "vpc", v)
		verb := p.Verbs["enable_flow_logs"]
		if verb == nil {
			t.Fatalf("vpc/v%d: no enable_flow_logs verb", v)
		}
		spec := VPCSpec{AccountID: AccountID("t"), CIDR: "10.1.2.0/24", Region: "us-east-1"}
		r := request(t, "vpc", v, "t", spec)
		r.Reaction = "enable_flow_logs"
		if _, err := verb(ctx, r); !isPermanent(err) || !strings.Contains(err.Error(), "flow_logs_bucket") {
			t.Errorf("v%d without a bucket: err = %v, want permanent naming flow_logs_bucket", v, err)
		}
		r.Config = json.RawMessage(`{"flow_logs_bucket":"s3://logs"}`)
		st, err := verb(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		got := roundTrip[VPCStatus](t, st)
		if got.FlowLogs == nil || !got.FlowLogs.Enabled || got.FlowLogs.Bucket != "s3://logs" {
			t.Errorf("v%d status.flow_logs = %+v, want enabled in s3://logs", v, got.FlowLogs)
		}
		if got.VPCID == "" {
			t.Errorf("v%d verb status lost vpc_id", v)
		}
		// A later reconcile keeps what the operator enabled.
		rr := request(t, "vpc", v, "t", spec)
		rr.Status = mustJSON(t, got)
		st2, err := p.Reconcile(ctx, rr)
		if err != nil {
			t.Fatal(err)
		}
		if after := roundTrip[VPCStatus](t, st2); after.FlowLogs == nil || after.VPCID != got.VPCID {
			t.Errorf("v%d reconcile after the verb: status %+v, want flow_logs kept and vpc_id %s", v, after, got.VPCID)
		}
	}
}

func TestTGWAndRoute(t *testing.T) {
	ps := Providers(Options{})
	ctx := context.Background()
	tgw := find(t, ps, "tgw", 1)
	st, err := tgw.Reconcile(ctx, request(t, "tgw", 1, "payments-tgw", TGWSpec{Name: "payments-tgw"}))
	if err != nil {
		t.Fatal(err)
	}
	tgwID := roundTrip[TGWStatus](t, st).TGWID
	if !strings.HasPrefix(tgwID, "tgw-") {
		t.Errorf("tgw_id = %q, want tgw-…", tgwID)
	}
	route := find(t, ps, "route", 1)
	tests := []struct {
		name    string
		spec    RouteSpec
		wantErr bool
	}{
		{"flowed", RouteSpec{VPCID: "vpc-0123", TGWID: tgwID}, false},
		{"both missing", RouteSpec{}, true},
		{"vpc missing", RouteSpec{TGWID: tgwID}, true},
		{"tgw missing", RouteSpec{VPCID: "vpc-0123"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := route.Reconcile(ctx, request(t, "route", 1, "r", tt.spec))
			if tt.wantErr {
				if !isPermanent(err) || !strings.Contains(err.Error(), ": empty") {
					t.Fatalf("err = %v, want a permanent error naming the empty field", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, want := roundTrip[RouteStatus](t, st).RouteID, "rtb-"+shortHash(17, tt.spec.VPCID, tt.spec.TGWID); got != want {
				t.Errorf("route_id = %q, want %q", got, want)
			}
		})
	}
}

// TestFaultRate: with p = 0.3 over 10,000 leaf reconciles the injected
// share stays within 4 standard deviations (±0.018) of p, every fault is
// transient ErrInjectedFault, and the composer and teardowns never fault.
func TestFaultRate(t *testing.T) {
	const p, n = 0.3, 10_000
	ps := Providers(Options{FaultRate: p, Rand: rand.New(rand.NewPCG(1, 2))})
	ctx := context.Background()
	leaves := []*sdk.Request{
		request(t, "account", 1, "a", AccountSpec{TeamName: "a"}),
		request(t, "vpc", 1, "a", VPCSpec{AccountID: AccountID("a"), CIDR: "10.0.0.0/24"}),
		request(t, "vpc", 2, "a", VPCSpec{AccountID: AccountID("a"), CIDR: "10.0.0.0/24", Region: "r"}),
		request(t, "tgw", 1, "a", TGWSpec{Name: "a"}),
		request(t, "route", 1, "a", RouteSpec{VPCID: "vpc-1", TGWID: "tgw-1"}),
	}
	faults := 0
	for i := range n {
		r := leaves[i%len(leaves)]
		_, err := find(t, ps, r.Kind, r.KindVersion).Reconcile(ctx, r)
		switch {
		case err == nil:
		case isTransient(err) && errors.Is(err, ErrInjectedFault):
			faults++
		default:
			t.Fatalf("%s/v%d: unexpected error %v", r.Kind, r.KindVersion, err)
		}
	}
	got := float64(faults) / n
	tol := 4 * math.Sqrt(p*(1-p)/n)
	if math.Abs(got-p) > tol {
		t.Errorf("fault share = %.4f over %d calls, want %.2f ± %.4f", got, n, p, tol)
	}
	t.Logf("fault share %.4f (%d/%d)", got, faults, n)

	all := Providers(Options{FaultRate: 1})
	for _, pr := range all {
		if pr.Teardown == nil {
			continue
		}
		if err := pr.Teardown(ctx, request(t, pr.Kind, pr.Version, "x", nil)); err != nil {
			t.Errorf("%s/v%d teardown with FaultRate 1: %v, want nil", pr.Kind, pr.Version, err)
		}
	}
	if _, err := find(t, all, "account", 1).Reconcile(ctx, leaves[0]); !isTransient(err) {
		t.Errorf("account reconcile with FaultRate 1: err = %v, want transient", err)
	}
}

func TestTeardownFail(t *testing.T) {
	ps := Providers(Options{TeardownFail: "account/*-tgw-host"})
	ctx := context.Background()
	acct := find(t, ps, "account", 1)
	for range 3 { // always, not just once
		err := acct.Teardown(ctx, request(t, "account", 1, "payments-tgw-host", nil))
		if !isTransient(err) || !errors.Is(err, ErrInjectedFault) {
			t.Fatalf("matching teardown: err = %v, want transient ErrInjectedFault", err)
		}
	}
	if err := acct.Teardown(ctx, request(t, "account", 1, "payments-ledger", nil)); err != nil {
		t.Errorf("non-matching name: %v", err)
	}
	if err := find(t, ps, "tgw", 1).Teardown(ctx, request(t, "tgw", 1, "payments-tgw-host", nil)); err != nil {
		t.Errorf("non-matching kind: %v", err)
	}
}

func TestDelays(t *testing.T) {
	ps := Providers(Options{WorkDelay: 30 * time.Millisecond, DeleteDelay: 40 * time.Millisecond})
	acct := find(t, ps, "account", 1)
	r := request(t, "account", 1, "a", AccountSpec{TeamName: "a"})

	start := time.Now()
	if _, err := acct.Reconcile(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if got := time.Since(start); got < 30*time.Millisecond {
		t.Errorf("reconcile took %v, want ≥ WorkDelay 30ms", got)
	}
	start = time.Now()
	if err := acct.Teardown(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if got := time.Since(start); got < 40*time.Millisecond {
		t.Errorf("teardown took %v, want ≥ DeleteDelay 40ms", got)
	}

	// Delays end early, transiently, when the task's context does.
	slow := Providers(Options{WorkDelay: time.Hour, DeleteDelay: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := find(t, slow, "account", 1).Reconcile(ctx, r); !isTransient(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("reconcile past its deadline: err = %v, want transient DeadlineExceeded", err)
	}
	if err := find(t, slow, "vpc", 1).Teardown(ctx, r); !isTransient(err) {
		t.Errorf("teardown past its deadline: err = %v, want transient", err)
	}
}

// TestVPCIgnoresAdditiveFields: v1's optional tags and an additive owner
// field need no provider change.
func TestVPCIgnoresAdditiveFields(t *testing.T) {
	p := find(t, Providers(Options{}), "vpc", 1)
	r := request(t, "vpc", 1, "sample-vpc-tagged", nil)
	r.Spec = json.RawMessage(`{"account_id":"123456789012","cidr":"10.0.0.0/24","tags":{"env":"dev"},"owner":"platform"}`)
	st, err := p.Reconcile(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if got := roundTrip[VPCStatus](t, st); got.VPCID == "" {
		t.Errorf("status = %+v, want a vpc_id", got)
	}
}

// TestFaultConcurrent: handlers are called from many goroutines at once;
// the shared fault source must stay consistent (run with -race).
func TestFaultConcurrent(t *testing.T) {
	acct := find(t, Providers(Options{FaultRate: 0.5, Rand: rand.New(rand.NewPCG(3, 4))}), "account", 1)
	const workers, each = 8, 200
	faults := make(chan int, workers)
	for range workers {
		go func() {
			n := 0
			for range each {
				if _, err := acct.Reconcile(context.Background(), request(t, "account", 1, "a", AccountSpec{TeamName: "a"})); errors.Is(err, ErrInjectedFault) {
					n++
				}
			}
			faults <- n
		}()
	}
	total := 0
	for range workers {
		total += <-faults
	}
	if total == 0 || total == workers*each {
		t.Errorf("faults = %d of %d at rate 0.5, want some but not all", total, workers*each)
	}
}
