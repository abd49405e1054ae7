#!/usr/bin/env bash
# A throwaway PostgreSQL server for the fleet tests (pytest -m postgres).
#
#   eval "$(.ci/pg.sh start)"   # installs Debian's postgresql if needed, starts a fresh cluster on
#                               # 127.0.0.1:<free port>, creates database autotune and prints
#                               # export AUTOTUNE_TEST_POSTGRES_URL=postgresql://postgres:<password>@127.0.0.1:<port>/autotune
#   .ci/pg.sh stop              # stops it and removes its folder
#
# Progress goes to stderr; stdout carries only the export line. The cluster lives in a temporary folder
# owned by the `postgres` user (initdb refuses to run as root); its path is kept in $AUTOTUNE_PG_STATE
# (default /tmp/autotune-pg.state) so that `stop` finds it.
set -euo pipefail

STATE="${AUTOTUNE_PG_STATE:-/tmp/autotune-pg.state}"

log() { echo "pg.sh: $*" >&2; }

find_bindir() {
    local d
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
    done
    if command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1; then
        dirname "$(readlink -f "$(command -v pg_ctl)")"
        return 0
    fi
    return 1
}

as_postgres() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

start() {
    if [ -f "$STATE" ]; then
        log "a server from an earlier start is still recorded in $STATE; stopping it first"
        stop
    fi
    local bindir
    if ! bindir="$(find_bindir)"; then
        log "no PostgreSQL binaries found: installing Debian's postgresql package"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update >&2
        apt-get install -y --no-install-recommends postgresql >&2
        bindir="$(find_bindir)" || { log "postgresql installed, but initdb/pg_ctl are still missing"; exit 2; }
    fi
    if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
        log "creating the postgres system user"
        useradd --system --user-group --home-dir /nonexistent --shell /usr/sbin/nologin postgres
    fi

    local dir port password
    dir="$(mktemp -d /tmp/autotune-pg.XXXXXX)"
    chmod 700 "$dir"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    password="at-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
    printf '%s\n' "$dir" >"$STATE"

    printf '%s\n' "$password" >"$dir/pwfile"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir/pwfile"
    log "initdb in $dir/data ($bindir)"
    as_postgres "$bindir/initdb" -D "$dir/data" -U postgres --pwfile="$dir/pwfile" \
        --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --no-locale >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 2; }
    rm -f "$dir/pwfile"
    log "starting on 127.0.0.1:$port"
    as_postgres "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=100 -c fsync=off" start >&2 \
        || { cat "$dir/server.log" >&2; exit 2; }
    printf '%s\n%s\n%s\n' "$dir" "$bindir" "$port" >"$STATE"

    if [ -x "$bindir/createdb" ]; then
        as_postgres "$bindir/createdb" -h "$dir" -p "$port" -U postgres autotune
    else
        PGPASSWORD="$password" python3 - "$port" <<'EOF'
import os, sys
import psycopg2
con = psycopg2.connect(host="127.0.0.1", port=int(sys.argv[1]), user="postgres", password=os.environ["PGPASSWORD"], dbname="postgres")
con.autocommit = True
con.cursor().execute("CREATE DATABASE autotune")
con.close()
EOF
    fi
    log "database autotune ready"
    echo "export AUTOTUNE_TEST_POSTGRES_URL=postgresql://postgres:${password}@127.0.0.1:${port}/autotune"
}

stop() {
    if [ ! -f "$STATE" ]; then
        log "nothing to stop ($STATE not found)"
        return 0
    fi
    local dir bindir
    dir="$(sed -n 1p "$STATE")"
    bindir="$(sed -n 2p "$STATE")"
    if [ -n "$bindir" ] && [ -f "$dir/data/postmaster.pid" ]; then
        as_postgres "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >&2 || log "pg_ctl stop failed; removing the folder anyway"
    fi
    case "$dir" in
        /tmp/autotune-pg.*) rm -rf "$dir" ;;
        *) log "not removing unexpected folder $dir" ;;
    esac
    rm -f "$STATE"
    log "stopped"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
