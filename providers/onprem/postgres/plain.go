package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Plain is a plain pgx client of a server, what a person would write
// without converge: converge bench --onprem's baseline and its counts on
// the server.
type Plain struct {
	pool *pgxpool.Pool
	dsn  func(db string) string
}

// NewPlain connects to host:port as user with a pool of conns
// connections to the postgres database.
func NewPlain(ctx context.Context, host string, port int, user, password string, conns int) (*Plain, error) {
	dsn := func(db string) string {
		return fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s sslmode=disable", host, port, user, password, db)
	}
	pc, err := pgxpool.ParseConfig(dsn("postgres"))
	if err != nil {
		return nil, err
	}
	pc.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	return &Plain{pool: pool, dsn: dsn}, nil
}

// Exec runs sql on a pooled connection.
func (p *Plain) Exec(ctx context.Context, sql string) error {
	_, err := p.pool.Exec(ctx, sql)
	return err
}

// Reset closes the pool's idle connections.
func (p *Plain) Reset() { p.pool.Reset() }

// Close closes the pool.
func (p *Plain) Close() { p.pool.Close() }

// Commits returns the sum of pg_stat_database.xact_commit over every
// database but template1, read from template1 on a connection of its
// own (so the reading is not counted).
func (p *Plain) Commits(ctx context.Context) (int64, error) {
	c, err := pgx.Connect(ctx, p.dsn("template1"))
	if err != nil {
		return 0, err
	}
	defer c.Close(ctx)
	var n int64
	err = c.QueryRow(ctx, "SELECT coalesce(sum(xact_commit), 0)::bigint FROM pg_stat_database WHERE datname IS DISTINCT FROM 'template1'").Scan(&n)
	return n, err
}
