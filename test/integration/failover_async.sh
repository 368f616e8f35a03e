#!/bin/bash
# A primary failover under load with asynchronous replication (issue 30),
# on three throwaway clusters of its own: the legacy DBMS (it outlives the
# failover, as a real one would), payflow's primary A, and B, A's
# streaming standby (pg_basebackup -R).  The relay and a payment worker run
# with the host list "A,B" and are never restarted.
#
#   1. 20 payments complete on A; B replays all of it.
#   2. B stops receiving WAL (the lag an asynchronous standby can have);
#      10 more payments are submitted on A, and charged by the legacy DBMS.
#   3. A dies (immediate shutdown, as a crash) and B is promoted: the 10
#      are gone with A, the loss window of asynchronous replication.
#   4. The relay and the worker find B by themselves (target_session_attrs=
#      read-write skips the dead host); 5 new payments complete on B.
#   5. payflow.reconcile() on B, given the legacy DBMS's charges and the 35
#      ids callers were given, names exactly the 10 lost: charged but
#      unknown, and ids unknown.  Nothing else; no charge doubled.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib/cluster.sh
source test/lib/assert.sh
source test/lib/proc.sh

base=$PF_PGPORT
L_PORT=$((base + 1200)) A_PORT=$((base + 1300)) B_PORT=$((base + 1400))
L_DIR=/tmp/payflow-fo-legacy-$L_PORT A_DIR=/tmp/payflow-fo-a-$A_PORT B_DIR=/tmp/payflow-fo-b-$B_PORT
work=$(mktemp -d /tmp/payflow-failover.XXXXXX)
run=fo$$
pids=()

# in_cluster PORT DIR CMD...: CMD with test/lib/cluster.sh pointed at that cluster
in_cluster() {
	local port=$1 dir=$2
	shift 2
	(
		export PF_PGPORT=$port PF_CLUSTER_DIR=$dir
		# shellcheck source=../lib/cluster.sh
		source test/lib/cluster.sh
		"$@"
	)
}
a() { in_cluster "$A_PORT" "$A_DIR" pf_psql -Atq "$@"; }
b() { in_cluster "$B_PORT" "$B_DIR" pf_psql -Atq "$@"; }
legacy() { in_cluster "$L_PORT" "$L_DIR" pf_psql -d legacy -Atq "$@"; }
pg_ctl_at() { pf_as_postgres "$PF_PGBIN/pg_ctl" -D "$1/data" "${@:2}"; }

cleanup() {
	pf_kill_ours KILL "${pids[@]}"
	test/emulator/stop.sh >/dev/null 2>&1 || true
	pg_ctl_at "$B_DIR" -m immediate stop >/dev/null 2>&1 || true
	rm -rf "$B_DIR"
	in_cluster "$A_PORT" "$A_DIR" pf_cluster_destroy >/dev/null 2>&1 || true
	in_cluster "$L_PORT" "$L_DIR" pf_cluster_destroy >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

# --- the clusters
in_cluster "$L_PORT" "$L_DIR" pf_cluster_destroy >/dev/null 2>&1 || true
in_cluster "$A_PORT" "$A_DIR" pf_cluster_destroy >/dev/null 2>&1 || true
rm -rf "$B_DIR"
in_cluster "$L_PORT" "$L_DIR" pf_cluster_start
in_cluster "$A_PORT" "$A_DIR" pf_cluster_start
PAYFLOW_LEGACY_ODBC=$(in_cluster "$L_PORT" "$L_DIR" test/fixtures/legacy/setup.sh 2>"$work/legacy-setup.log")
mkdir -p "$B_DIR/sock"
chown -R postgres:postgres "$B_DIR"
pf_as_postgres "$PF_PGBIN/pg_basebackup" -h "$A_DIR/sock" -p "$A_PORT" -U postgres -D "$B_DIR/data" -R -X stream -c fast
pg_ctl_at "$B_DIR" -l "$B_DIR/postgres.log" -w -t 60 -o "-p $B_PORT -k $B_DIR/sock -c listen_addresses=127.0.0.1" start >/dev/null
pf_eq "B is A's standby" t "$(b -c 'SELECT pg_is_in_recovery()')"

# --- the edge programs, with the host list
export PAYFLOW_EMULATOR_PORT=4650 PAYFLOW_EMULATOR_BACKEND_PORT=4651 PAYFLOW_EMULATOR_RUN_DIR=$work/emulator
test/emulator/stop.sh >/dev/null 2>&1 || true
eval "$(test/emulator/start.sh 2>"$work/emulator-start.log")"
export AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY PAYFLOW_QUEUE_URLS PAYFLOW_DLQ_URLS PAYFLOW_LEGACY_ODBC
export PAYFLOW_QUEUE_URL
PAYFLOW_QUEUE_URL=$(echo "$PAYFLOW_QUEUE_URLS" | tr ',' '\n' | sed -n 's/^payment-requests=//p')
export PAYFLOW_DATABASE_URL="host=127.0.0.1,127.0.0.1 port=$A_PORT,$B_PORT user=postgres dbname=$PF_DB"
export PAYFLOW_LEGACY_CALL='SELECT * FROM charge(:idempotency_key, :payment_id, :details.amount, :details.currency)'
export PAYFLOW_LOG_LEVEL=info PAYFLOW_VISIBILITY_TIMEOUT=4 PAYFLOW_POLL_INTERVAL_MS=200
workers/bin/payflow-relay >"$work/relay.log" 2>&1 &
pids+=($!)
relay_pid=$!
PAYFLOW_WORKER_ID=fo-worker workers/bin/payflow-worker --role payment >"$work/worker.log" 2>&1 &
pids+=($!)
worker_pid=$!

# submit ON FROM TO: payments $run-FROM … $run-TO on cluster ON (a or b); their ids to $work/ids
submit() {
	"$1" -c "SELECT payflow.submit('$run-' || g, '{\"amount\": 5, \"currency\": \"EUR\"}'::jsonb)
			  FROM generate_series($2, $3) g" >>"$work/ids"
}
completed() {	# completed ON FROM TO: how many of those payments are PAYMENT_COMPLETED there
	"$1" -c "SELECT count(*) FROM payflow.operations WHERE status = 'PAYMENT_COMPLETED'
			  AND payment_id IN (SELECT '$run-' || g FROM generate_series($2, $3) g)"
}
all_completed() { [ "$(completed "$1" "$2" "$3")" = $(($3 - $2 + 1)) ]; }
charged() { [ "$(legacy -c "SELECT count(*) FROM charges WHERE payment_id IN (SELECT '$run-' || g FROM generate_series($1, $2) g)")" = $(($2 - $1 + 1)) ]; }

# --- 1. on A, replayed by B
submit a 1 20
pf_ok "20 payments complete on A" pf_wait_for 60 all_completed a 1 20
lsn=$(a -c "SELECT pg_current_wal_lsn()")
replayed() { [ "$(b -c "SELECT pg_last_wal_replay_lsn() >= '$lsn'::pg_lsn")" = t ]; }
pf_ok "B replayed all of it" pf_wait_for 30 replayed

# --- 2. B falls behind; 10 more on A, charged
b -c "ALTER SYSTEM SET primary_conninfo = ''" -c "SELECT pg_reload_conf()" >/dev/null
receiving() { [ "$(b -c "SELECT count(*) FROM pg_stat_wal_receiver")" = 0 ]; }
pf_ok "B stops receiving WAL" pf_wait_for 30 receiving
submit a 21 30
pf_ok "10 more payments complete on A" pf_wait_for 60 all_completed a 21 30
pf_ok "... charged by the legacy DBMS" charged 21 30

# --- 3. A dies, B is promoted
pg_ctl_at "$A_DIR" -m immediate stop >/dev/null
pg_ctl_at "$B_DIR" -w -t 60 promote >/dev/null
pf_eq "B is the primary" f "$(b -c 'SELECT pg_is_in_recovery()')"
pf_eq "the 10 written after B fell behind are gone with A" 0 \
	"$(b -c "SELECT count(*) FROM payflow.operations WHERE payment_id IN (SELECT '$run-' || g FROM generate_series(21, 30) g)")"

# --- 4. the edge programs follow without a restart
submit b 31 35
pf_ok "5 new payments complete on B, with the same relay and worker" pf_wait_for 90 all_completed b 31 35
pf_ok "the relay still runs (never restarted)" kill -0 "$relay_pid"
pf_ok "the worker still runs (never restarted)" kill -0 "$worker_pid"

# --- 5. reconciliation names the lost ones, and only them
legacy -c "SELECT coalesce(jsonb_agg(jsonb_build_object('idempotency_key', idempotency_key, 'payment_id', payment_id,
											 'charge_id', charge_id)), '[]') FROM charges" >"$work/charges.json"
ids=$(paste -sd, "$work/ids")
printf '%s\n' "SELECT finding || ' ' || coalesce(payment_id, operation_id) FROM payflow.reconcile(:'charges'::jsonb, string_to_array(:'ids', ','))" |
	in_cluster "$B_PORT" "$B_DIR" pf_psql -Atq -v charges="$(cat "$work/charges.json")" -v ids="$ids" >"$work/findings"
pf_eq "findings: 10 charges unknown and 10 ids unknown, nothing else" "charge_unknown 10|id_unknown 10" \
	"$(awk '{n[$1]++} END {for (f in n) print f, n[f]}' "$work/findings" | sort | paste -sd'|')"
lost_payments=$(for g in $(seq 21 30); do echo "$run-$g"; done)
pf_eq "the charges unknown are the 10 lost payments" "$lost_payments" \
	"$(awk '$1 == "charge_unknown" {print $2}' "$work/findings" | sort -V)"
lost_ids=$(sed -n '21,30p' "$work/ids" | sort)
pf_eq "the ids unknown are the 10 returned for them" "$lost_ids" \
	"$(awk '$1 == "id_unknown" {print $2}' "$work/findings" | sort)"
pf_eq "no payment charged twice" 0 "$(legacy -c "SELECT count(*) FROM duplicate_charges()")"
pf_done
