package classic

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/convergehq/converge/providers/sdk"
)

// AccountSpec is the spec of an account.
type AccountSpec struct {
	TeamName string `json:"team_name"`
}

// AccountStatus is the status of an account.
type AccountStatus struct {
	AccountID string `json:"account_id"`
}

// VPCSpec is the spec of a vpc v1 and v2. Region is required by v2 and
// ignored by v1. Fields the fake does not use (v1's optional tags, an
// additive owner) are accepted and ignored, so additive schema changes
// need no provider change.
type VPCSpec struct {
	// AccountID arrives by value flow from the team's account: a
	// composer leaves it out ("known after apply").
	AccountID string `json:"account_id,omitempty"`
	CIDR      string `json:"cidr"`
	Region    string `json:"region,omitempty"`
}

// VPCConfig is a vpc provider config. DefaultRegion exists only in v2's
// config schema.
type VPCConfig struct {
	FlowLogsBucket string `json:"flow_logs_bucket,omitempty"`
	DefaultRegion  string `json:"default_region,omitempty"`
}

// VPCStatus is the status of a vpc. Region is set only by the v2 code path.
type VPCStatus struct {
	VPCID    string    `json:"vpc_id"`
	Region   string    `json:"region,omitempty"`
	FlowLogs *FlowLogs `json:"flow_logs,omitempty"`
}

// FlowLogs is what the enable_flow_logs verb records.
type FlowLogs struct {
	Enabled bool   `json:"enabled"`
	Bucket  string `json:"bucket"`
}

// TGWSpec is the spec of a tgw.
type TGWSpec struct {
	Name string `json:"name"`
}

// TGWStatus is the status of a tgw.
type TGWStatus struct {
	TGWID string `json:"tgw_id"`
}

// RouteSpec is the spec of a route; both ids arrive by value flow, so a
// composer leaves them out ("known after apply").
type RouteSpec struct {
	VPCID string `json:"vpc_id,omitempty"`
	TGWID string `json:"tgw_id,omitempty"`
}

// RouteStatus is the status of a route.
type RouteStatus struct {
	RouteID string `json:"route_id"`
}

// AccountID returns the fake 12-digit account id of a team: FNV-1a of the
// team name modulo 10^12, zero-padded.
func AccountID(teamName string) string {
	h := fnv.New64a()
	h.Write([]byte(teamName))
	return fmt.Sprintf("%012d", h.Sum64()%1_000_000_000_000)
}

func (c *chaos) reconcileAccount(ctx context.Context, r *sdk.Request) (any, error) {
	var spec AccountSpec
	if err := decodeSpec(r, &spec); err != nil {
		return nil, err
	}
	if spec.TeamName == "" {
		return nil, sdk.Permanent(errors.New("account spec: team_name: empty"))
	}
	if err := c.work(ctx, r); err != nil {
		return nil, err
	}
	return AccountStatus{AccountID: AccountID(spec.TeamName)}, nil
}

// reconcileVPC is vpc's reconcile for version v (1 or 2). v2 requires a
// region (spec, else the config's default_region) and echoes it into the
// status. A flow_logs record already in the status is kept: re-reconciling
// does not switch off what the operator enabled.
func (c *chaos) reconcileVPC(v int) func(context.Context, *sdk.Request) (any, error) {
	return func(ctx context.Context, r *sdk.Request) (any, error) {
		st, err := vpcStatus(r, v)
		if err != nil {
			return nil, err
		}
		if err := c.work(ctx, r); err != nil {
			return nil, err
		}
		var old VPCStatus
		if len(r.Status) > 0 && r.DecodeStatus(&old) == nil {
			st.FlowLogs = old.FlowLogs
		}
		return st, nil
	}
}

// enableFlowLogs is vpc's enable_flow_logs verb (both versions). The
// bucket comes from the provider config; none is a permanent error.
func enableFlowLogs(v int) func(context.Context, *sdk.Request) (any, error) {
	return func(_ context.Context, r *sdk.Request) (any, error) {
		st, err := vpcStatus(r, v)
		if err != nil {
			return nil, err
		}
		cfg, err := vpcConfig(r)
		if err != nil {
			return nil, err
		}
		if cfg.FlowLogsBucket == "" {
			return nil, sdk.Permanent(fmt.Errorf("enable_flow_logs %s: provider config has no flow_logs_bucket", r.Name))
		}
		st.FlowLogs = &FlowLogs{Enabled: true, Bucket: cfg.FlowLogsBucket}
		return st, nil
	}
}

// vpcStatus computes the status the spec determines.
func vpcStatus(r *sdk.Request, v int) (VPCStatus, error) {
	var spec VPCSpec
	if err := decodeSpec(r, &spec); err != nil {
		return VPCStatus{}, err
	}
	switch {
	case len(spec.AccountID) != 12:
		return VPCStatus{}, sdk.Permanent(fmt.Errorf("vpc spec: account_id %q: want 12 characters", spec.AccountID))
	case spec.CIDR == "":
		return VPCStatus{}, sdk.Permanent(errors.New("vpc spec: cidr: empty"))
	}
	st := VPCStatus{VPCID: "vpc-" + shortHash(17, r.Name, spec.AccountID)}
	if v >= 2 {
		region := spec.Region
		if region == "" {
			cfg, err := vpcConfig(r)
			if err != nil {
				return VPCStatus{}, err
			}
			region = cfg.DefaultRegion
		}
		if region == "" {
			return VPCStatus{}, sdk.Permanent(errors.New("vpc/v2 spec: region: empty and no default_region in the provider config"))
		}
		st.Region = region
	}
	return st, nil
}

func vpcConfig(r *sdk.Request) (VPCConfig, error) {
	var cfg VPCConfig
	if err := r.DecodeConfig(&cfg); err != nil {
		return cfg, sdk.Permanent(fmt.Errorf("%s/%s: %w", r.Kind, r.Name, err))
	}
	return cfg, nil
}

func (c *chaos) reconcileTGW(ctx context.Context, r *sdk.Request) (any, error) {
	var spec TGWSpec
	if err := decodeSpec(r, &spec); err != nil {
		return nil, err
	}
	name := spec.Name
	if name == "" {
		name = r.Name
	}
	if err := c.work(ctx, r); err != nil {
		return nil, err
	}
	return TGWStatus{TGWID: "tgw-" + shortHash(17, name)}, nil
}

func (c *chaos) reconcileRoute(ctx context.Context, r *sdk.Request) (any, error) {
	var spec RouteSpec
	if err := decodeSpec(r, &spec); err != nil {
		return nil, err
	}
	for _, f := range []struct{ field, v string }{{"vpc_id", spec.VPCID}, {"tgw_id", spec.TGWID}} {
		if f.v == "" {
			return nil, sdk.Permanent(fmt.Errorf("route spec: %s: empty", f.field))
		}
	}
	if err := c.work(ctx, r); err != nil {
		return nil, err
	}
	return RouteStatus{RouteID: "rtb-" + shortHash(17, spec.VPCID, spec.TGWID)}, nil
}

func decodeSpec(r *sdk.Request, v any) error {
	if err := r.DecodeSpec(v); err != nil {
		return sdk.Permanent(fmt.Errorf("%s/%s: %w", r.Kind, r.Name, err))
	}
	return nil
}

// hashBytes returns SHA-256 of the parts joined by NUL, so ("a-b","c") and
// ("a","b-c") differ.
func hashBytes(parts ...string) [32]byte {
	return sha256.Sum256([]byte(strings.Join(parts, "\x00")))
}

// shortHash returns the first n (≤ 64) lowercase hex digits of hashBytes.
func shortHash(n int, parts ...string) string {
	h := hashBytes(parts...)
	return hex.EncodeToString(h[:])[:n]
}
