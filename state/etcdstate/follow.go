package etcdstate

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// follow watches key (with opts, e.g. clientv3.WithPrefix) from revision
// rev on, until ctx is done, through the breaks a retry heals. etcd
// cancels a watch, and clientv3 does not retry it, when the member
// serving the stream does not know the client's auth token: with simple
// tokens each member learns one when it applies the authentication, so
// a member a little behind refuses a token its neighbour just issued,
// and any member refuses one left unused past --auth-token-ttl. A
// cluster without a leader cancels a watch made WithRequireLeader.
// follow then makes one unary request (which refreshes the token when
// it is stale), waits a little and watches again from the revision
// after the last event it delivered: no event is lost or repeated.
//
// Each attempt gets a watcher, so a stream, of its own (watches on one
// gRPC stream share the token it opened with, so a retry on a stale
// stream would fail forever). The channel closes when ctx is done; a break a retry
// cannot heal (the revision is compacted, permission is denied) is sent
// as the last response, its Err set.
func follow(ctx context.Context, cli *clientv3.Client, key string, rev int64, opts ...clientv3.OpOption) <-chan clientv3.WatchResponse {
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		wait := 50 * time.Millisecond
		for ctx.Err() == nil {
			w := clientv3.NewWatcher(cli) // its own streams
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			wc := w.Watch(wctx, key, append(opts[:len(opts):len(opts)], clientv3.WithRev(rev))...)
			var (
				err  error
				last clientv3.WatchResponse
			)
			for resp := range wc {
				if err = resp.Err(); err != nil {
					last = resp
					break
				}
				if n := len(resp.Events); n > 0 {
					rev = resp.Events[n-1].Kv.ModRevision + 1
					wait = 50 * time.Millisecond
				}
				select {
				case out <- resp:
				case <-ctx.Done():
					cancel()
					w.Close()
					return
				}
			}
			cancel()
			w.Close()
			if ctx.Err() != nil {
				return
			}
			if err != nil && !retryable(err) {
				select {
				case out <- last:
				case <-ctx.Done():
				}
				return
			}
			// A unary request carries the token too; the client replaces
			// a token the member refuses before it answers.
			gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
			cli.Get(gctx, key, clientv3.WithCountOnly())
			gcancel()
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, time.Second)
		}
	}()
	return out
}

// retryable reports whether a watch that ended with err heals when it
// is made again.
func retryable(err error) bool {
	switch {
	case errors.Is(err, rpctypes.ErrCompacted), errors.Is(err, rpctypes.ErrPermissionDenied):
		return false
	}
	return true
}
