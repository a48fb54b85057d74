package providers

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	convergev1 "github.com/convergehq/converge/proto/converge/v1"
	"github.com/convergehq/converge/providers/sdk"
)

// Leader names a replicated control plane's current leader, for a
// follower to point workers at.
type Leader struct {
	// Name is the leader replica's name; "" when no replica leads.
	Name string
	// Workers is the address the leader serves workers on; "" for none.
	Workers string
}

// Follower serves the worker protocol for a control-plane replica that
// is not the leader: it checks each worker's token as a Server does,
// then refuses its stream with codes.Unavailable, a message naming the
// leader, and the leader's workers address in the sdk.LeaderTrailer
// trailer, so an SDK worker given several addresses goes there (or tries
// the next). It is safe for concurrent use.
type Follower struct {
	token  string
	tokens func() []string
	leader func() Leader
	grpc   *grpc.Server
	tls    *grpc.Server
	close  sync.Once
}

// NewFollower returns a Follower; opts.Token, opts.TLS and opts.Logger
// mean what they mean for NewServer. leader is asked at every refusal.
func NewFollower(opts ServerOptions, leader func() Leader) *Follower {
	f := &Follower{token: opts.Token, tokens: opts.Tokens, leader: leader}
	auth := grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if err := checkTokens(ss.Context(), f.token, f.tokens); err != nil {
			return err
		}
		return h(srv, ss)
	})
	f.grpc = grpc.NewServer(auth)
	convergev1.RegisterControlServer(f.grpc, followerService{f: f})
	if opts.TLS != nil {
		log := opts.Logger
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		f.tls = grpc.NewServer(auth, grpc.Creds(newLoggedTLS(credentials.NewTLS(opts.TLS), log)))
		convergev1.RegisterControlServer(f.tls, followerService{f: f})
	}
	return f
}

// Serve refuses workers on l until Close, then returns nil. l is closed
// when Serve returns; with TLS set, a listener that is not a unix socket
// serves TLS.
func (f *Follower) Serve(l net.Listener) error {
	srv := f.grpc
	if f.tls != nil && l.Addr().Network() != "unix" {
		srv = f.tls
	}
	if err := srv.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// Close stops serving.
func (f *Follower) Close() {
	f.close.Do(func() {
		f.grpc.Stop()
		if f.tls != nil {
			f.tls.Stop()
		}
	})
}

// followerService implements convergev1.ControlServer by refusing.
type followerService struct {
	convergev1.UnimplementedControlServer
	f *Follower
}

func (s followerService) Connect(stream convergev1.Control_ConnectServer) error {
	l := s.f.leader()
	if l.Name == "" {
		return status.Error(codes.Unavailable, "this control-plane replica is not the leader, and no replica leads now: try again, or another replica")
	}
	stream.SetTrailer(metadata.Pairs(sdk.LeaderTrailer, l.Workers))
	where := "it serves no workers (--workers-listen)"
	if l.Workers != "" {
		where = "connect to its workers address " + l.Workers
	}
	return status.Errorf(codes.Unavailable, "this control-plane replica is not the leader: the leader is %s; %s", l.Name, where)
}
