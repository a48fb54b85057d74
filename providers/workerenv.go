package providers

import (
	"path"
	"strings"
)

// EnvWorkerPass names the operator's addition to a started worker's
// environment: a comma-separated list of variable names and NAME_*
// prefixes of converge's own environment to pass on
// (CONVERGE_WORKER_ENV=AWS_PROFILE,AWS_REGION,VAULT_*). Only the operator
// who starts converge can set it; a repository cannot.
const EnvWorkerPass = "CONVERGE_WORKER_ENV"

// BaseWorkerEnv are the variables of converge's environment every worker
// it starts gets: what a process needs to find programs, files, its
// locale and time zone, the Go runtime's settings, and where the Go
// toolchain keeps its caches and finds modules (a worker declared as
// `go run ./worker` builds as the operator's own go would, not into
// empty caches under HOME: with GOMODCACHE or GOCACHE set elsewhere, as
// CI machines do, it downloaded and compiled every dependency again at
// each start). Nothing else of
// converge's environment reaches a worker unless the operator names it
// in CONVERGE_WORKER_ENV (or, for builtin workers, the wiring in
// SupervisorOptions.BuiltinEnv). The protocol's own variables
// (CONVERGE_ADDR, CONVERGE_TOKEN, CONVERGE_WORKER_NAME, …) are set by the
// supervisor, not inherited.
var BaseWorkerEnv = []string{
	"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ", "LANG", "LANGUAGE", "LC_*",
	"SSL_CERT_FILE", "SSL_CERT_DIR",
	"GODEBUG", "GOMAXPROCS", "GOMEMLIMIT", "GOGC", "GOTRACEBACK", "GOCOVERDIR",
	"GOROOT", "GOPATH", "GOCACHE", "GOMODCACHE", "GOENV", "GOFLAGS", "GOTOOLCHAIN",
	"GOPROXY", "GONOPROXY", "GOPRIVATE", "GOSUMDB", "GONOSUMDB", "GOINSECURE",
	"CONVERGE_CONCURRENCY",
}

// NeverWorkerEnv are converge's own credentials: no allow-list passes
// them to a worker, not even CONVERGE_WORKER_ENV=CONVERGE_* (a worker is
// given its own token in CONVERGE_TOKEN).
var NeverWorkerEnv = []string{
	"CONVERGE_WEBHOOK_SECRET", "CONVERGE_WORKER_TOKEN", "CONVERGE_FORGE_TOKEN", "CONVERGE_UI_TOKEN",
	"CONVERGE_ETCD_USER", "CONVERGE_ETCD_PASSWORD", EnvWorkerPass,
}

// WorkerEnv returns the entries (KEY=VALUE) of environ whose names match
// one of allow (a name, or a prefix ending in "*") and none of
// NeverWorkerEnv, in environ's order.
func WorkerEnv(environ, allow []string) []string {
	var out []string
	for _, kv := range environ {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if matchEnv(k, NeverWorkerEnv) || !matchEnv(k, allow) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// ParseWorkerPass splits a CONVERGE_WORKER_ENV value into patterns.
func ParseWorkerPass(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func matchEnv(name string, patterns []string) bool {
	for _, p := range patterns {
		if p == name {
			return true
		}
		if strings.HasSuffix(p, "*") && !strings.ContainsAny(p[:len(p)-1], "*?[") {
			if strings.HasPrefix(name, p[:len(p)-1]) {
				return true
			}
		} else if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}
