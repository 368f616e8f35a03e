#!/bin/bash
# shellcheck disable=SC2154  # WK_PID_<name>: set by name (printf -v) when a worker starts
# The edge programs through pgbouncer (issue 30), as a deployment with a
# pooler in front of PostgreSQL runs them.
#
#   - payflow-worker in transaction mode: its connections (executors, lease renewal) share
#     one server connection; 60 payments complete, each charged once.  Its
#     statements are prepared once in that session, under names no other
#     client uses (pg_prepared.h); its timeouts, set per session, may land
#     on another server connection: docs/operations.md says to set them on
#     its login;
#   - payflow-relay in session mode (it LISTENs, and keeps named prepared
#     statements per connection), and then in transaction mode too: its
#     notifications then reach whichever client holds the server session,
#     so it finds events by polling, and a prepared statement missing on
#     the server connection it gets (26000) is prepared again.  30 more
#     payments complete;
#   - the worker again through a transaction pool of three server
#     connections, where its prepared statements go missing (26000): each is
#     prepared again and run once more, or, on a connection that keeps
#     missing them, run unprepared.  30 more payments complete, each charged
#     once.
#
# Uses the running cluster, the emulator on 4652/4653 and its own
# pgbouncer on port PAYFLOW_TEST_BOUNCER_PORT (6442), run as postgres.
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

wk_init pooler-edge "${PAYFLOW_TEST_EMULATOR_PORT:-4652}" "${PAYFLOW_TEST_EMULATOR_BACKEND_PORT:-4653}" 5
port=${PAYFLOW_TEST_BOUNCER_PORT:-6442}
p=pe-$WK_RUN
dir=$(mktemp -d /tmp/payflow-pooler-edge.XXXXXX)
chown postgres "$dir"
bouncer_cleanup() {
	[ -f "$dir/pgbouncer.pid" ] && kill "$(cat "$dir/pgbouncer.pid")" 2>/dev/null || true
	rm -rf "$dir"
}
trap 'wk_cleanup; bouncer_cleanup' EXIT

cat >"$dir/pgbouncer.ini" <<-INI
	[databases]
	payflow_tx = host=127.0.0.1 port=$PF_PGPORT dbname=$PF_DB user=postgres pool_mode=transaction pool_size=1
	payflow_session = host=127.0.0.1 port=$PF_PGPORT dbname=$PF_DB user=postgres pool_mode=session pool_size=4
	payflow_tx3 = host=127.0.0.1 port=$PF_PGPORT dbname=$PF_DB user=postgres pool_mode=transaction pool_size=3
	[pgbouncer]
	listen_addr = 127.0.0.1
	listen_port = $port
	unix_socket_dir =
	auth_type = any
	admin_users = postgres
	max_client_conn = 200
	logfile = $dir/pgbouncer.log
	pidfile = $dir/pgbouncer.pid
	ignore_startup_parameters = extra_float_digits
INI
chown postgres "$dir/pgbouncer.ini"
runuser -u postgres -- pgbouncer -d "$dir/pgbouncer.ini"
admin() { psql -X -h 127.0.0.1 -p "$port" -d pgbouncer -U postgres -Atq -F '|' "$@"; }
bouncer_up() { psql -X -h 127.0.0.1 -p "$port" -d payflow_tx -U postgres -Atqc "SELECT 1" >/dev/null 2>&1; }
pf_ok "pgbouncer answers" pf_wait_for 10 bouncer_up

via() { echo "host=127.0.0.1 port=$port dbname=$1 user=postgres"; }
completed() { q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$p-$1-%' AND status = 'PAYMENT_COMPLETED'"; }
all_completed() { [ "$(completed "$1")" = "$2" ]; }
charged_once() { [ "$(legacy -c "SELECT count(*) FILTER (WHERE n = 1) || '|' || count(*) FROM (SELECT count(*) n FROM charges WHERE payment_id LIKE '$p-$1-%' GROUP BY payment_id) c")" = "$2|$2" ]; }

# --- the worker in transaction mode, the relay in session mode
PAYFLOW_DATABASE_URL=$(via payflow_session) workers/bin/payflow-relay >"$WK_DIR/relay.log" 2>&1 &
WK_PIDS+=($!)
relay_session=$!
wk_start_worker tx PAYFLOW_DATABASE_URL="$(via payflow_tx)" PAYFLOW_CONCURRENCY=8
q -c "SELECT count(payflow.submit('$p-a-' || g, '{\"amount\": 7, \"currency\": \"EUR\"}')) FROM generate_series(1, 60) g" >/dev/null
pf_ok "60 payments complete: worker in transaction mode, relay in session mode" pf_wait_for 90 all_completed a 60
pf_ok "... each charged once" charged_once a 60
clients=$(admin -c "SHOW CLIENTS" | awk -F'|' '$3 == "payflow_tx"' | wc -l)
servers=$(admin -c "SHOW SERVERS" | awk -F'|' '$3 == "payflow_tx"' | wc -l)
pf_ok "the worker's $clients connections shared one server connection ($servers)" test "$clients" -ge 2 -a "$servers" -le 1
pf_eq "the worker logged no failed statement" 0 "$(grep -c '"level":"error"' "$WK_DIR/tx.log" || true)"
# the pool's one server session holds them: ask it through the pool
prepared=$(psql -X -h 127.0.0.1 -p "$port" -d payflow_tx -U postgres -Atqc \
	"SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'pf\_%' AND statement LIKE '%payflow.%_steps(%'")
pf_ok "the worker's claim and completion statements are prepared in that session ($prepared)" test "$prepared" -ge 2
pf_eq "... and never went missing there" 0 "$(grep -c 'do not keep prepared statements' "$WK_DIR/tx.log" || true)"

# --- the relay in transaction mode too
kill -TERM "$relay_session"
wait "$relay_session" 2>/dev/null || true
PAYFLOW_DATABASE_URL=$(via payflow_tx) PAYFLOW_POLL_INTERVAL_MS=200 workers/bin/payflow-relay >"$WK_DIR/relay-tx.log" 2>&1 &
WK_PIDS+=($!)
relay_tx=$!
q -c "SELECT count(payflow.submit('$p-b-' || g, '{\"amount\": 8, \"currency\": \"EUR\"}')) FROM generate_series(1, 30) g" >/dev/null
pf_ok "30 more complete with the relay in transaction mode as well (polling)" pf_wait_for 90 all_completed b 30
pf_ok "... each charged once" charged_once b 30
pf_ok "the relay still runs" kill -0 "$relay_tx"

# --- the worker through a transaction pool of three server sessions
kill -TERM "$WK_PID_tx"
wait "$WK_PID_tx" 2>/dev/null || true
wk_start_worker tx3 PAYFLOW_DATABASE_URL="$(via payflow_tx3)" PAYFLOW_CONCURRENCY=8
q -c "SELECT count(payflow.submit('$p-c-' || g, '{\"amount\": 9, \"currency\": \"EUR\"}')) FROM generate_series(1, 30) g" >/dev/null
pf_ok "30 more complete through a pool of three server sessions" pf_wait_for 90 all_completed c 30
pf_ok "... each charged once" charged_once c 30
pf_eq "the worker logged no failed statement" 0 "$(grep -c '"level":"error"' "$WK_DIR/tx3.log" || true)"
echo "# connections of the worker that went on unprepared: $(grep -c 'do not keep prepared statements' "$WK_DIR/tx3.log" || true)"
pf_eq "no duplicate charges" 0 "$(legacy -c "SELECT count(*) FROM duplicate_charges()")"
pf_done
