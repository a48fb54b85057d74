#!/bin/sh
# servers.sh starts and stops the real servers examples/onprem manages, the
# way a person would on a Debian machine (apt-get install postgresql knot):
#
#   - a throwaway PostgreSQL cluster (initdb + postgres) on 127.0.0.1:$PG_PORT
#     with the superuser converge_admin, password $PG_PASSWORD;
#   - Knot DNS (knotd) on 127.0.0.1:$DNS_PORT, authoritative for
#     converge.test., taking RFC 2136 updates signed with the TSIG key
#     converge-key. (hmac-sha256, $TSIG_SECRET).
#
# Usage:
#   servers.sh start [DIR]      start both in DIR (default /tmp/converge-onprem) and return
#   servers.sh stop [DIR]       stop both, by the pids they wrote
#   servers.sh run [DIR]        start both and stay in the foreground; INT or TERM stops them
#   servers.sh configure REPO [DIR]
#                               point REPO/configs/servers.yaml at the ports DIR's servers use
#
# The defaults match examples/onprem/configs/servers.yaml. PG_PORT=auto or
# DNS_PORT=auto picks a random free port (what the testscript does). DIR/env
# records what was started (ports, passwords) for psql and kdig:
#   . DIR/env; psql -h 127.0.0.1 -p $PG_PORT -U converge_admin postgres
#   kdig @127.0.0.1 -p $DNS_PORT team-000.fd-00.db.converge.test.
#
# As root (CI), initdb refuses to run: the cluster is made and run as the
# package's own user, postgres, in a directory it owns. The Go tests start
# the same servers through providers/onprem/servertest.
set -eu

cmd=${1:-}
[ $# -gt 0 ] && shift

PG_PASSWORD=${PG_PASSWORD:-converge-example-admin}
TSIG_SECRET=${TSIG_SECRET:-Y29udmVyZ2UtZXhhbXBsZS10c2lnLWtleS0zMmJ5dGVz}
ZONE=converge.test.

pgbin() {
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -n -r); do
		[ -x "$d/postgres" ] && { echo "$d"; return; }
	done
	echo "servers.sh: no /usr/lib/postgresql/*/bin/postgres (apt-get install postgresql)" >&2
	exit 2
}

# as USER CMD...: run CMD as the server's user (postgres when root).
as_pg() {
	if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

randport() { echo $(( $(od -An -N2 -tu2 /dev/urandom) % 30000 + 20000 )); }

start_pg() {
	bin=$(pgbin)
	pg=$dir/pg
	mkdir -p "$pg/run"
	if [ ! -d "$pg/data" ]; then
		printf '%s\n' "$PG_PASSWORD" >"$pg/pwfile"
		if [ "$(id -u)" = 0 ]; then
			chown -R postgres: "$pg"
			# postgres must reach its directory: every parent gets o+x.
			d=$(cd "$dir" && pwd)
			while [ "$d" != / ]; do chmod o+x "$d"; d=$(dirname "$d"); done
		fi
		as_pg "$bin/initdb" -D "$pg/data" -U converge_admin --pwfile "$pg/pwfile" \
			--auth scram-sha-256 --encoding UTF8 --locale C --no-sync >"$dir/initdb.log" 2>&1 ||
			{ cat "$dir/initdb.log" >&2; exit 1; }
		rm -f "$pg/pwfile"
	fi
	tries=0
	while :; do
		port=$PG_PORT
		[ "$port" = auto ] && port=$(randport)
		# pg_ctl -w waits until the server accepts connections.
		if as_pg "$bin/pg_ctl" -D "$pg/data" -l "$pg/postgres.log" -w -t 60 \
			-o "-p $port -c listen_addresses=127.0.0.1 -k $pg/run -c max_connections=200 -c fsync=off" start >/dev/null; then
			PG_PORT=$port
			return
		fi
		tries=$((tries + 1))
		if [ "$PG_PORT" != auto ] || [ $tries -ge 5 ]; then
			tail -20 "$pg/postgres.log" >&2
			exit 1
		fi
	done
}

start_dns() {
	k=$dir/knot
	mkdir -p "$k"
	tries=0
	while :; do
		port=$DNS_PORT
		[ "$port" = auto ] && port=$(randport)
		cat >"$k/knot.conf" <<EOF
server:
    rundir: "$k"
    listen: 127.0.0.1@$port
control:
    listen: "$k/knot.sock"
log:
  - target: stderr
    any: info
database:
    storage: "$k"
key:
  - id: converge-key.
    algorithm: hmac-sha256
    secret: $TSIG_SECRET
acl:
  - id: converge-update
    key: converge-key.
    action: update
template:
  - id: default
    storage: "$k"
    zonefile-sync: -1
    zonefile-load: whole
    journal-content: changes
zone:
  - domain: $ZONE
    file: "zone.db"
    acl: converge-update
EOF
		[ -f "$k/zone.db" ] || printf '$ORIGIN %s\n$TTL 60\n@ SOA ns hostmaster 1 3600 600 86400 60\n@ NS ns\nns A 127.0.0.1\n' "$ZONE" >"$k/zone.db"
		knotd -c "$k/knot.conf" >"$k/knotd.log" 2>&1 &
		echo $! >"$k/knotd.pid"
		i=0
		while [ $i -lt 300 ]; do
			if grep -q 'cannot bind\|failed to bind' "$k/knotd.log"; then break; fi
			if knotc -c "$k/knot.conf" -t 1 zone-read "$ZONE" @ SOA >/dev/null 2>&1; then
				DNS_PORT=$port
				return
			fi
			kill -0 "$(cat "$k/knotd.pid")" 2>/dev/null || break
			sleep 0.1
			i=$((i + 1))
		done
		stop_dns
		tries=$((tries + 1))
		if [ "$DNS_PORT" != auto ] || [ $tries -ge 5 ]; then
			tail -20 "$k/knotd.log" >&2
			exit 1
		fi
	done
}

# waitgone PID: wait until PID has exited.
waitgone() {
	i=0
	while kill -0 "$1" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
}

stop_pg() {
	f=$dir/pg/data/postmaster.pid
	[ -f "$f" ] || return 0
	pid=$(head -1 "$f")
	kill -INT "$pid" 2>/dev/null || return 0 # SIGINT: a fast shutdown
	waitgone "$pid"
}

stop_dns() {
	f=$dir/knot/knotd.pid
	[ -f "$f" ] || return 0
	pid=$(cat "$f")
	kill -TERM "$pid" 2>/dev/null || true
	waitgone "$pid"
	rm -f "$f"
}

start() {
	mkdir -p "$dir"
	PG_PORT=${PG_PORT:-54329}
	DNS_PORT=${DNS_PORT:-53539}
	start_pg
	start_dns
	cat >"$dir/env" <<EOF
export PG_HOST=127.0.0.1
export PG_PORT=$PG_PORT
export PGUSER=converge_admin
export PGPASSWORD=$PG_PASSWORD
export DNS_SERVER=127.0.0.1:$DNS_PORT
export DNS_PORT=$DNS_PORT
export DNS_ZONE=$ZONE
export TSIG_SECRET=$TSIG_SECRET
EOF
	echo "postgres on 127.0.0.1:$PG_PORT, knotd on 127.0.0.1:$DNS_PORT ($ZONE); see $dir/env"
}

stop() {
	stop_dns
	stop_pg
	rm -f "$dir/env"
}

case $cmd in
start)
	dir=${1:-/tmp/converge-onprem}
	start
	;;
stop)
	dir=${1:-/tmp/converge-onprem}
	stop
	;;
run)
	dir=${1:-/tmp/converge-onprem}
	start
	trap 'stop; exit 0' INT TERM
	while :; do sleep 1; done
	;;
configure)
	repo=${1:?usage: servers.sh configure REPO [DIR]}
	dir=${2:-/tmp/converge-onprem}
	. "$dir/env"
	sed -i -e "s/^\( *port:\) [0-9]*/\1 $PG_PORT/" -e "s/^\( *server:\) .*/\1 \"127.0.0.1:$DNS_PORT\"/" "$repo/configs/servers.yaml"
	;;
*)
	echo "usage: servers.sh start|stop|run [DIR] | configure REPO [DIR]" >&2
	exit 2
	;;
esac
