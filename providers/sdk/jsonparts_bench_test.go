package sdk

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// BenchmarkArrayField cuts the parts of a BOM-like spec of 1,000 domains
// (about 150 KB), as a worker's Parts does on every compose task.
func BenchmarkArrayField(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"name":"bom","functional_domains":[`)
	for i := range 1000 {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `{"name":"fd-%03d","networking":true,"service_teams":[{"name":"t-1"},{"name":"t-2","note":"a \"quoted\" \u00e9"}],"cidr":"10.%d.0.0/16"}`, i, i%250)
	}
	sb.WriteString(`],"owner":"platform"}`)
	spec := json.RawMessage(sb.String())
	b.SetBytes(int64(len(spec)))
	b.ReportAllocs()
	for b.Loop() {
		parts, err := ArrayField(spec, "functional_domains")
		if err != nil || len(parts) != 1000 {
			b.Fatal(len(parts), err)
		}
	}
}
