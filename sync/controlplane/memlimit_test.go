package controlplane

import "testing"

// The limit is the floor until the live heap needs more, then two
// fifths above it (plus the runtime's own): never below the live heap, where
// the collector would run back to back.
func TestMemoryLimitFor(t *testing.T) {
	const mib = 1 << 20
	for _, tt := range []struct{ live, want int64 }{
		{0, defaultMemoryLimit},
		{500 * mib, defaultMemoryLimit},
		{540 * mib, defaultMemoryLimit}, // 540 + 216 + 64 = 820
		{590 * mib, 890 * mib},
		{700 * mib, 1044 * mib},
		{1400 * mib, 2024 * mib},
		{4000 * mib, 5664 * mib},
	} {
		if got := memoryLimitFor(tt.live, defaultMemoryLimit); got != tt.want {
			t.Errorf("live %d MiB: limit %d MiB, want %d MiB", tt.live/mib, got/mib, tt.want/mib)
		}
		if got := memoryLimitFor(tt.live, defaultMemoryLimit); got <= tt.live {
			t.Errorf("live %d MiB: limit %d MiB is not above it", tt.live/mib, got/mib)
		}
	}
}
