package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/convergehq/converge/state/etcdstate"
	"github.com/convergehq/converge/state/etcdtest"
	gitsync "github.com/convergehq/converge/sync"
)

// termLog is TermEvents as lines on a channel.
type termLog chan string

func (l termLog) Follows(leader string)      { l <- "follows " + leader }
func (l termLog) CampaignFailed(err error)   { l <- "campaign failed: " + err.Error() }
func (l termLog) Leads(term *etcdstate.Term) { l <- "leads" }
func (l termLog) Leading(e *Engine) {
	if e == nil {
		l <- "stopped"
		return
	}
	l <- "leading"
}
func (l termLog) Lost()                  { l <- "lost" }
func (l termLog) CloseFailed(err error)  { l <- "close failed: " + err.Error() }
func (l termLog) SteppedDown(why string) { l <- "stepped down: " + why }
func (l termLog) ShuttingDown()          { l <- "shutting down" }

// expect reads events until want, failing on an event in bad or after
// a minute.
func (l termLog) expect(t *testing.T, who, want string) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case ev := <-l:
			t.Logf("%s: %s", who, ev)
			if ev == want {
				return
			}
			if strings.HasPrefix(ev, "campaign failed") || strings.HasPrefix(ev, "close failed") {
				t.Fatalf("%s: %s", who, ev)
			}
		case <-timeout:
			t.Fatalf("%s: no %q in a minute", who, want)
		}
	}
}

// TestTerms runs two replicas' terms on one etcd: one leads (its engine
// runs its work, the takeover is an event of the state), the other
// follows naming it; when the leader shuts down, the follower leads.
func TestTerms(t *testing.T) {
	cluster := etcdtest.Start(t, etcdtest.Options{ElectionMs: 1500})
	o := etcdstate.Options{Endpoints: cluster.Endpoints, Prefix: "/terms"}
	type replica struct {
		name   string
		events termLog
		worked chan *Engine
		cancel context.CancelFunc
		done   chan struct{}
	}
	start := func(name string) *replica {
		rep, err := etcdstate.NewReplica(o, name, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rep.Close() })
		r := &replica{name: name, events: make(termLog, 100), worked: make(chan *Engine, 10), done: make(chan struct{})}
		terms := NewTerms(rep, time.Minute)
		ctx, cancel := context.WithCancel(context.Background())
		r.cancel = cancel
		go func() {
			defer close(r.done)
			terms.Run(ctx, TermOptions{Advert: etcdstate.Advert{HTTP: name + ":8080"}, Log: quiet(), Events: r.events,
				Engine: Options{StateDir: filepath.Join(t.TempDir(), name), Log: quiet()},
				Work: func(ctx context.Context, e *Engine, _ <-chan struct{}, h *gitsync.Health) {
					if terms.Health() != h {
						t.Errorf("%s: the term's health is not Terms.Health", name)
					}
					r.worked <- e
					<-ctx.Done()
				}})
		}()
		t.Cleanup(func() { cancel(); <-r.done })
		return r
	}
	a := start("a")
	a.events.expect(t, "a", "leading")
	e := <-a.worked
	evs, err := e.Store().Events(context.Background(), "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || evs[len(evs)-1].Type != "Leader" || !strings.HasPrefix(evs[len(evs)-1].Message, "leader a since ") {
		t.Errorf("events after a's takeover: %+v, want a Leader event naming a", evs)
	}
	b := start("b")
	b.events.expect(t, "b", "follows a")

	a.cancel()
	a.events.expect(t, "a", "shutting down")
	b.events.expect(t, "b", "leading")
	if got, err := etcdstate.Leader(o); err != nil || got.Name != "b" || got.HTTP != "b:8080" {
		t.Errorf("leader = %+v, %v; want b with its advert", got, err)
	}
}

// TestConnSwitch: a replica's workers listener hands each connection to
// the service attached last; the one before it is closed.
func TestConnSwitch(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sw := NewConnSwitch(l)
	defer sw.Close()
	accept := func(sub net.Listener) (net.Conn, error) {
		got := make(chan net.Conn, 1)
		errs := make(chan error, 1)
		go func() {
			c, err := sub.Accept()
			if err != nil {
				errs <- err
				return
			}
			got <- c
		}()
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		select {
		case c := <-got:
			return c, nil
		case err := <-errs:
			return nil, err
		case <-time.After(10 * time.Second):
			return nil, fmt.Errorf("no connection in 10s")
		}
	}
	first := sw.attach()
	if first.Addr().String() != l.Addr().String() {
		t.Errorf("sub-listener's address %s, want %s", first.Addr(), l.Addr())
	}
	c, err := accept(first)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	second := sw.attach()
	if _, err := first.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the replaced service's Accept: %v, want net.ErrClosed", err)
	}
	c, err = accept(second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestWorkersAdvert: the workers address a leader publishes is
// --advertise, else --workers-listen's host with the bound port, else
// (no host, or an unspecified one) the bound address.
func TestWorkersAdvert(t *testing.T) {
	bound := &net.TCPAddr{IP: net.IPv6unspecified, Port: 9090}
	tests := []struct{ listen, advertise, want string }{
		{listen: ":9090", advertise: "m1.example.com:9090", want: "m1.example.com:9090"},
		{listen: "m1.example.com:9090", want: "m1.example.com:9090"},
		{listen: "127.0.0.1:0", want: "127.0.0.1:9090"},
		{listen: "[::1]:0", want: "[::1]:9090"},
		{listen: ":9090", want: "[::]:9090"},
		{listen: "0.0.0.0:9090", want: "[::]:9090"},
		{listen: "[::]:9090", want: "[::]:9090"},
	}
	for _, tt := range tests {
		if got := WorkersAdvert(tt.listen, tt.advertise, bound); got != tt.want {
			t.Errorf("WorkersAdvert(%q, %q) = %q, want %q", tt.listen, tt.advertise, got, tt.want)
		}
	}
}
