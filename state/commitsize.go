package state

// commitRows is the most resource rows, and the most deletions, one
// commit should carry once the file is big (CommitRows). bbolt writes
// each B+tree node a commit changed from the node's old page in the
// map, so the commit faults every such page in again, and the kernel
// maps the 15 cached pages around each fault too (fault around,
// 64 KiB): a commit that changes n leaves adds up to n×64 KiB of file
// pages to the resident set until the releaser's next turn. A row
// changes one leaf at most (rows all over the key space, like a run's
// last retries or a cascade's deletions, each change their own), so
// 1,024 rows keep a commit's file pages near 64 MiB. At 6,144 rows a
// 1M converge's last commits changed 3,900 nodes (250 MB for the
// commit's last 20 ms); rows in key order share leaves, and smaller
// commits cost a 1M sync nothing measurable (docs/BENCHMARKS.md).
const commitRows = 1024

// CommitRows is the most resource rows (put, and deleted) the next
// Commit should carry, or 0 for no bound: commitRows once the file is
// big enough for its mapped pages to be released (releaseMin), none
// while it is small or where pages are not released. The scheduler
// takes the smaller of it and its Config.MaxCommit
// (scheduler.CommitSizer).
func (s *Store) CommitRows() int {
	if !releaseSupported || !s.big.Load() {
		return 0
	}
	return commitRows
}
