package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/convergehq/converge/sync/gittest"
)

// httpAddr waits up to 30s for the http.addr file of the converge serve
// using STATEDIR and returns the address in it.
func httpAddr(ts *testscript.TestScript, stateDir string) string {
	deadline := time.Now().Add(30 * time.Second)
	for {
		addr, err := os.ReadFile(filepath.Join(ts.MkAbs(stateDir), "http.addr"))
		if err == nil {
			return strings.TrimSpace(string(addr))
		}
		if time.Now().After(deadline) {
			ts.Fatalf("no http.addr in %s: %v", stateDir, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cmdForgeWebhook POSTs the push event FORGE documents (github, gitea,
// forgejo or gitlab; testdata/fixtures/webhooks) to /hooks/git of the
// converge serve using STATEDIR, with the headers that forge sends for
// SECRET ("-" sends no signature or token), and checks the HTTP status
// is CODE.
func cmdForgeWebhook(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 4 {
		ts.Fatalf("usage: forge-webhook STATEDIR FORGE SECRET CODE")
	}
	addr := httpAddr(ts, args[0])
	body, err := gittest.PushPayload(args[1])
	ts.Check(err)
	var secret []byte
	if args[2] != "-" {
		secret = []byte(args[2])
	}
	hd, err := gittest.ForgeDelivery(args[1], secret, body)
	ts.Check(err)
	req, err := http.NewRequest("POST", "http://"+addr+"/hooks/git", bytes.NewReader(body))
	ts.Check(err)
	req.Header = hd
	resp, err := http.DefaultClient.Do(req)
	ts.Check(err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := strconv.Itoa(resp.StatusCode); got != args[3] {
		ts.Fatalf("%s webhook: status %s (%s), want %s", args[1], got, strings.TrimSpace(string(b)), args[3])
	}
	fmt.Fprintf(ts.Stdout(), "%s webhook: %d\n", args[1], resp.StatusCode)
}

// cmdMetrics GETs /metrics of the converge serve using STATEDIR; its body
// is then what stdout matches.
func cmdMetrics(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: metrics STATEDIR")
	}
	resp, err := http.Get("http://" + httpAddr(ts, args[0]) + "/metrics")
	ts.Check(err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	ts.Check(err)
	if resp.StatusCode != http.StatusOK {
		ts.Fatalf("GET /metrics: %d %s", resp.StatusCode, b)
	}
	ts.Stdout().Write(b)
}

// resourceGauge is one converge_resources sample.
var resourceGauge = regexp.MustCompile(`(?m)^converge_resources\{kind="([^"]+)",kind_version="(\d+)",phase="(\w+)"\} (\S+)$`)

// cmdMetricsMatch scrapes /metrics of the converge serve using STATEDIR
// and checks every converge_resources sample against LISTJSON, the
// output of `converge list --all -o json`: each kind, version and
// phase's count, zeros included, and no resource counted that the list
// lacks. It prints "KIND vVERSION PHASE N" for every non-zero count.
func cmdMetricsMatch(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: metrics-match STATEDIR LISTJSON")
	}
	var list struct {
		Resources []struct {
			Kind        string `json:"kind"`
			KindVersion int    `json:"kind_version"`
			Phase       string `json:"phase"`
		} `json:"resources"`
	}
	ts.Check(json.Unmarshal([]byte(ts.ReadFile(args[1])), &list))
	want := map[string]int{}
	for _, r := range list.Resources {
		want[fmt.Sprintf("%s v%d %s", r.Kind, r.KindVersion, r.Phase)]++
	}
	resp, err := http.Get("http://" + httpAddr(ts, args[0]) + "/metrics")
	ts.Check(err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	ts.Check(err)
	got := map[string]int{}
	samples := resourceGauge.FindAllStringSubmatch(string(b), -1)
	if len(samples) == 0 {
		ts.Fatalf("no converge_resources in /metrics:\n%.3000s", b)
	}
	for _, m := range samples {
		v, err := strconv.ParseFloat(m[4], 64)
		ts.Check(err)
		if v != 0 {
			got[m[1]+" v"+m[2]+" "+m[3]] = int(v)
		}
	}
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if got[k] != want[k] {
			ts.Fatalf("converge_resources %s = %d, converge list counts %d", k, got[k], want[k])
		}
		fmt.Fprintf(ts.Stdout(), "%s %d\n", k, got[k])
	}
}
