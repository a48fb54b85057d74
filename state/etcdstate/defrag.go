package etcdstate

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Defragmentation (doc.go, "Compaction"). Compaction frees pages inside
// each member's database; the file keeps its size, and etcd's quota is
// on the file. A member's file grown by a burst (a million-row converge
// writes every row twice or three times) stays that big until it is
// defragmented, which rewrites the file and blocks the member meanwhile
// (a few seconds a gigabyte). With Options.DefragSlack set, the writer
// defragments, after a compaction, one member whose file is bigger than
// what it uses by the slack and by half of what it uses, at most once
// every defragEvery: a follower before the raft leader when both are
// due, and the leader (whose blocked apply loop would hold up every
// write and lease renewal of the cluster) only after handing its
// leadership to a follower.

// defragEvery is how often the writer defragments a member at most.
const defragEvery = 10 * time.Minute

// defragTimeout bounds one member's defragmentation.
const defragTimeout = 2 * time.Minute

// Defrag is one member's defragmentation.
type Defrag struct {
	Endpoint      string
	Before, After int64 // the database file's size
	MovedLeader   bool  // the member led the cluster and handed it on first
}

// defragDue reports whether a member with a database file of size
// bytes, inUse of it in use, is worth defragmenting.
func (s *Store) defragDue(size, inUse int64) bool {
	slack := size - inUse
	return slack >= s.opts.DefragSlack && slack >= inUse/2
}

// maybeDefrag defragments one member if one is due (after a compaction,
// on the compaction's goroutine).
func (s *Store) maybeDefrag() {
	c := &s.compact
	now := s.opts.now()
	c.mu.Lock()
	due := s.opts.DefragSlack > 0 && (c.lastDefrag.IsZero() || now.Sub(c.lastDefrag) >= defragEvery)
	c.mu.Unlock()
	if !due {
		return
	}
	d, err := s.defragOne()
	c.mu.Lock()
	defer c.mu.Unlock()
	if d == nil && err == nil {
		return // nothing worth it; look again after the next compaction
	}
	c.lastDefrag = now
	c.defragErr = err
	if d != nil {
		c.defrags = append(c.defrags, *d)
	}
}

// defragOne picks the member most worth defragmenting (a follower
// before the raft leader) and defragments it; nil when none is due.
func (s *Store) defragOne() (*Defrag, error) {
	ctx, cancel := context.WithTimeout(s.compact.stop, defragTimeout)
	defer cancel()
	type member struct {
		ep          string
		id          uint64
		size, inUse int64
		leads       bool
		raftIndex   uint64
	}
	var ms []member
	for _, ep := range s.cli.Endpoints() {
		st, err := s.cli.Status(ctx, ep)
		if err != nil {
			continue // a member that does not answer is not defragmented now
		}
		ms = append(ms, member{ep: ep, id: st.Header.MemberId, size: st.DbSize, inUse: st.DbSizeInUse,
			leads: st.Leader == st.Header.MemberId, raftIndex: st.RaftIndex})
	}
	var pick *member
	for i := range ms {
		m := &ms[i]
		if !s.defragDue(m.size, m.inUse) {
			continue
		}
		if pick == nil || (pick.leads && !m.leads) || (pick.leads == m.leads && m.size-m.inUse > pick.size-pick.inUse) {
			pick = m
		}
	}
	if pick == nil {
		return nil, nil
	}
	d := &Defrag{Endpoint: pick.ep, Before: pick.size}
	if pick.leads {
		// Hand the leadership to the follower furthest along first.
		var to *member
		for i := range ms {
			if m := &ms[i]; !m.leads && (to == nil || m.raftIndex > to.raftIndex) {
				to = m
			}
		}
		if to == nil {
			return nil, nil // a one-member cluster: blocking its only member is the operator's call
		}
		// etcd takes a leadership transfer from the leader only: a
		// client of its endpoint alone.
		lc, err := clientv3.New(clientv3.Config{Endpoints: []string{pick.ep}, TLS: s.opts.TLS,
			Username: s.opts.Username, Password: s.opts.Password, DialTimeout: s.opts.DialTimeout, Logger: zap.NewNop()})
		if err != nil {
			return nil, fmt.Errorf("defragment %s: connect to it: %w", pick.ep, err)
		}
		_, err = lc.MoveLeader(ctx, to.id)
		lc.Close()
		if err != nil {
			return nil, fmt.Errorf("defragment %s: hand its leadership to %s first: %w", pick.ep, to.ep, err)
		}
		d.MovedLeader = true
	}
	if _, err := s.cli.Defragment(ctx, pick.ep); err != nil {
		return nil, fmt.Errorf("defragment %s: %w", pick.ep, err)
	}
	if st, err := s.cli.Status(ctx, pick.ep); err == nil {
		d.After = st.DbSize
	}
	return d, nil
}

// Defrags returns the defragmentations this writer made, oldest first,
// and the last one's failure, if it failed.
func (s *Store) Defrags() ([]Defrag, error) {
	s.compact.mu.Lock()
	defer s.compact.mu.Unlock()
	return append([]Defrag(nil), s.compact.defrags...), s.compact.defragErr
}
