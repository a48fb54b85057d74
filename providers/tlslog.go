package providers

import (
	"errors"
	"io"
	"log/slog"
	"net"

	"google.golang.org/grpc/credentials"
)

// loggedTLS is TLS transport credentials that log every refused worker
// connection: a failed server handshake (plain TCP on a TLS port, no
// client certificate, one another CA signed). gRPC itself only closes
// such a connection, so without the log an operator could not tell why
// a worker never registered. A connection closed before it sent
// anything (a port probe, a load balancer's health check) is not logged.
type loggedTLS struct {
	credentials.TransportCredentials
	log *slog.Logger
}

// newLoggedTLS wraps creds; log receives a warning per refused
// connection.
func newLoggedTLS(creds credentials.TransportCredentials, log *slog.Logger) credentials.TransportCredentials {
	return loggedTLS{TransportCredentials: creds, log: log}
}

// ServerHandshake implements credentials.TransportCredentials.
func (c loggedTLS) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil && !errors.Is(err, io.EOF) {
		c.log.Warn("worker connection refused: TLS handshake failed", "remote", conn.RemoteAddr().String(), "err", err)
	}
	return out, info, err
}

// Clone implements credentials.TransportCredentials.
func (c loggedTLS) Clone() credentials.TransportCredentials {
	return loggedTLS{TransportCredentials: c.TransportCredentials.Clone(), log: c.log}
}
