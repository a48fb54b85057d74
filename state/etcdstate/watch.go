package etcdstate

import (
	"context"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convergehq/converge"
)

// Watch calls changed with the resources whose rows each committed batch
// put or deleted, or with nil for a batch that changed none (events,
// revisions, the applied revision), from now until ctx is done: a
// reader's way (a follower replica's live site) to follow the writer.
// A batch written through the journal is reported once its journal is
// gone, so a read in changed sees it whole. If the watch breaks (etcd
// compacted the revision it was at), Watch calls changed(nil) and
// resumes from the present: the caller should then reread everything.
// It returns when ctx is done.
func (s *Store) Watch(ctx context.Context, changed func(ids []converge.ID, all bool)) {
	journaled := map[converge.ID]bool{} // rows of a batch whose journal is still there
	inJournal := false
	for ctx.Err() == nil {
		wc := s.cli.Watch(clientv3.WithRequireLeader(ctx), s.p, clientv3.WithPrefix())
		for resp := range wc {
			if resp.Err() != nil {
				break
			}
			var ids []converge.ID
			other := false
			for _, ev := range resp.Events {
				k := strings.TrimPrefix(string(ev.Kv.Key), s.p)
				switch {
				case strings.HasPrefix(k, kResources):
					id := converge.ID(strings.TrimPrefix(k, kResources))
					if inJournal {
						journaled[id] = true
					} else {
						ids = append(ids, id)
					}
				case k == jCommit:
					if ev.Type == clientv3.EventTypePut {
						inJournal = true
						continue
					}
					inJournal = false
					for id := range journaled {
						ids = append(ids, id)
					}
					clear(journaled)
					other = true
				case strings.HasPrefix(k, kEvents), strings.HasPrefix(k, kRevisions), strings.HasPrefix(k, kMeta):
					other = true
				}
			}
			if len(ids) > 0 || other {
				changed(ids, false)
			}
		}
		if ctx.Err() == nil {
			changed(nil, true)
			select { // a cluster without a leader breaks the watch at once
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}
