package controlplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/convergehq/converge"
	"github.com/convergehq/converge/providers"
)

// StartWorkersAlone starts workers (a local repository's, their commands
// relative to repoDir) on a worker service of their own, with no store
// and no scheduler: what plan's dry-run composes and plan --refresh's
// observes are dispatched to (scheduler.DryRunner, scheduler.TaskRunner)
// when no daemon holds the state. builtinEnv is Options.BuiltinEnv; the
// workers' output is discarded. stop stops them and removes the service's
// socket directory.
func StartWorkersAlone(ctx context.Context, repoDir string, workers []converge.WorkerSpec, builtinEnv []string) (srv *providers.Server, stop func(), err error) {
	tmp, err := os.MkdirTemp("", "converge-plan-")
	if err != nil {
		return nil, nil, fmt.Errorf("create plan directory: %w", err)
	}
	var b [16]byte
	rand.Read(b[:]) // crypto/rand never fails (it crashes the program instead)
	token := hex.EncodeToString(b[:])
	srv = providers.NewServer(providers.ServerOptions{Token: token})
	sock := filepath.Join(tmp, "worker.sock")
	l, err := providers.ListenUnix(sock)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, nil, fmt.Errorf("listen for workers: %w", err)
	}
	go srv.Serve(l)
	self, err := os.Executable()
	if err != nil {
		srv.Close()
		os.RemoveAll(tmp)
		return nil, nil, fmt.Errorf("locate converge binary: %w", err)
	}
	sup, err := providers.StartWorkers(ctx, workers, providers.SupervisorOptions{
		Addr: "unix://" + sock, Token: token, Dir: repoDir, Self: self, Stdout: io.Discard, Stderr: io.Discard,
		BuiltinEnv: builtinEnv,
	})
	if err != nil {
		srv.Close()
		os.RemoveAll(tmp)
		return nil, nil, fmt.Errorf("start workers: %w", err)
	}
	return srv, func() {
		sup.Stop()
		srv.Close()
		os.RemoveAll(tmp)
	}, nil
}
