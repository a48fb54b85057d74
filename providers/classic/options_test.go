package classic

import (
	"strings"
	"testing"
	"time"
)

func TestOptionsFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    Options
		wantErr string // the variable the error must name
	}{
		{name: "unset", want: Options{}},
		{name: "all set", env: map[string]string{
			EnvFaultRate: "0.25", EnvWorkDelay: "2s", EnvDeleteDelay: "150ms",
			EnvTeardownFail: "account/*", EnvStateDir: "/var/lib/converge"},
			want: Options{FaultRate: 0.25, WorkDelay: 2 * time.Second, DeleteDelay: 150 * time.Millisecond,
				TeardownFail: "account/*", StateDir: "/var/lib/converge"}},
		{name: "rate bounds", env: map[string]string{EnvFaultRate: "1"}, want: Options{FaultRate: 1}},
		{name: "rate not a number", env: map[string]string{EnvFaultRate: "lots"}, wantErr: EnvFaultRate},
		{name: "rate above 1", env: map[string]string{EnvFaultRate: "1.5"}, wantErr: EnvFaultRate},
		{name: "rate negative", env: map[string]string{EnvFaultRate: "-0.1"}, wantErr: EnvFaultRate},
		{name: "rate NaN", env: map[string]string{EnvFaultRate: "NaN"}, wantErr: EnvFaultRate},
		{name: "work delay without unit", env: map[string]string{EnvWorkDelay: "5"}, wantErr: EnvWorkDelay},
		{name: "delete delay negative", env: map[string]string{EnvDeleteDelay: "-1s"}, wantErr: EnvDeleteDelay},
		{name: "teardown glob malformed", env: map[string]string{EnvTeardownFail: "account/[x"}, wantErr: EnvTeardownFail},
		{name: "teardown glob without slash", env: map[string]string{EnvTeardownFail: "account"}, wantErr: EnvTeardownFail},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{EnvFaultRate, EnvWorkDelay, EnvDeleteDelay, EnvTeardownFail, EnvStateDir} {
				t.Setenv(k, tt.env[k])
			}
			got, err := OptionsFromEnv()
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr+"=") {
					t.Fatalf("err = %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("OptionsFromEnv() = %+v, want %+v", got, tt.want)
			}
		})
	}
}
