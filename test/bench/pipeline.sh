#!/bin/bash
# The pipeline's end-to-end throughput and latency, beside the submit-only
# rate measured in the same run, with external systems that take no time:
# the legacy DBMS fixture without faults (through psqlODBC) and the invoice
# API stand-in.  A private cluster, the local SQS emulator, payflow-relay and
# one worker of each role.  Prints figures; fails only when the pipeline
# broke (an operation not completed, a duplicate charge or invoice), never
# on timing.
#
#   submit only     pgbench of payflow.submit() (4 clients) in a database of
#                   its own in the same cluster: no relay drains its outbox
#   burst           BENCH_PIPELINE_OPS operations submitted at once (100 a
#                   statement); operations/s from the first submit to the
#                   last COMPLETED
#   steady load     pgbench -R at half the burst rate for
#                   BENCH_PIPELINE_SECONDS: submit -> COMPLETED p50/p95/p99,
#                   and where the time goes (per step)
#
#   BENCH_PIPELINE_OPS=2000  BENCH_PIPELINE_SECONDS=20  BENCH_PIPELINE_CONCURRENCY=16
#   BENCH_PIPELINE_STATEMENTS=1   also print the statements that took the most
#                                 time during the burst (pg_stat_statements)
#   PF_BENCH_PIPELINE_PGPORT=54363
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD

OPS=${BENCH_PIPELINE_OPS:-2000}
STEADY_SECONDS=${BENCH_PIPELINE_SECONDS:-20}
CONCURRENCY=${BENCH_PIPELINE_CONCURRENCY:-16}
export PF_PGPORT=${PF_BENCH_PIPELINE_PGPORT:-54363}
export PF_CLUSTER_DIR=/tmp/payflow-bench-pipeline-$PF_PGPORT
EMU_PORT=${BENCH_PIPELINE_EMULATOR_PORT:-4695}
INV_PORT=${BENCH_PIPELINE_INVOICE_API_PORT:-4697}

source test/lib/deps.sh
source test/lib/cluster.sh
source test/lib/assert.sh
pf_install_deps
make -s >/dev/null && make -s install >/dev/null
make -s -C workers >/dev/null 2>&1 || make -s -C workers bin/payflow-worker bin/payflow-relay >/dev/null
for bin in payflow-worker payflow-relay; do
	[ -x "workers/bin/$bin" ] || { echo "bench: workers/bin/$bin does not build"; exit 1; }
done

q() { pf_psql -Atq "$@"; }
legacy() { pf_psql -d legacy -Atq "$@"; }

DIR=$(mktemp -d /tmp/payflow-bench-pipeline.XXXXXX)
PIDS=()
cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do rm -f "/tmp/psqlodbc_payflow-worker_$(id -un)$pid.log"; done
	PAYFLOW_INVOICE_API_RUN_DIR=$DIR/invoice-api test/fixtures/invoice-api/stop.sh >/dev/null 2>&1 || true
	test/emulator/stop.sh >/dev/null 2>&1 || true
	pf_cluster_destroy
	rm -rf "$DIR"
}
pf_cluster_destroy
trap cleanup EXIT
STATEMENTS=${BENCH_PIPELINE_STATEMENTS:-0}
if [ "$STATEMENTS" = 1 ]; then
	# a later line wins in postgresql.conf
	export PF_CLUSTER_EXTRA_CONF="shared_preload_libraries = 'payflow,pg_cron,pg_stat_statements'
pg_stat_statements.track = all"
fi
pf_cluster_start
[ "$STATEMENTS" != 1 ] || q -c "CREATE EXTENSION pg_stat_statements" >/dev/null

# ---- submit only, first, in a database of its own ----
pf_as_postgres "$PF_PGBIN/createdb" -h "$PGHOST" -p "$PF_PGPORT" -U postgres bench_submit
pf_psql -d bench_submit -qc "CREATE EXTENSION payflow" >/dev/null
submit_tps=$("$PF_PGBIN/pgbench" -n -c 4 -j 2 -T 10 -f test/bench/submit.sql bench_submit 2>/dev/null |
	grep -oP 'tps = \K[0-9.]+(?= \(without initial)')

# ---- the stack ----
export PAYFLOW_EMULATOR_PORT=$EMU_PORT PAYFLOW_EMULATOR_BACKEND_PORT=$((EMU_PORT + 1))
export PAYFLOW_EMULATOR_RUN_DIR=$DIR/emulator PAYFLOW_EMULATOR_MAX_RECEIVE_COUNT=5
test/emulator/stop.sh >/dev/null 2>&1 || true
eval "$(test/emulator/start.sh 2>"$DIR/emulator-start.log")"
export AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY PAYFLOW_QUEUE_URLS
queue_url() { echo "$PAYFLOW_QUEUE_URLS" | tr ',' '\n' | sed -n "s/^$1=//p"; }
export PAYFLOW_INVOICE_API_PORT=$INV_PORT PAYFLOW_INVOICE_API_RUN_DIR=$DIR/invoice-api
eval "$(test/fixtures/invoice-api/start.sh 2>"$DIR/invoice-api-start.log")"
export PAYFLOW_INVOICE_URL
export PAYFLOW_LEGACY_ODBC
PAYFLOW_LEGACY_ODBC=$(test/fixtures/legacy/setup.sh 2>"$DIR/legacy-setup.log")
export PAYFLOW_DATABASE_URL="postgresql://postgres@127.0.0.1:$PF_PGPORT/$PF_DB"
export PAYFLOW_LEGACY_CALL='SELECT * FROM charge(:idempotency_key, :payment_id, :details.amount, :details.currency)'
export PAYFLOW_POSTPROCESS_FUNCTION='payflow.default_postprocess(text,jsonb)'
export PAYFLOW_LOG_LEVEL=warn PAYFLOW_POLL_INTERVAL_MS=200 PAYFLOW_VISIBILITY_TIMEOUT=30
export PAYFLOW_CONCURRENCY=$CONCURRENCY

workers/bin/payflow-relay >"$DIR/relay.log" 2>&1 &
PIDS+=($!)
PID_relay=$!
for role in payment postprocess invoice; do
	case $role in
		payment) queue=payment-requests ;;
		postprocess) queue=payment-completed ;;
		invoice) queue=invoice-requests ;;
	esac
	PAYFLOW_QUEUE_URL=$(queue_url $queue) PAYFLOW_WORKER_ID=bench-$role \
		workers/bin/payflow-worker --role "$role" >"$DIR/$role.log" 2>&1 &
	PIDS+=($!)
	printf -v "PID_$role" '%s' "$!"
done

# CPU ticks (user + system) used so far by processes: where the burst's
# time goes.  For the postmaster also what its exited children used.
cpu_ticks() {
	local pid total=0
	for pid in "$@"; do
		[ -r "/proc/$pid/stat" ] || continue
		total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
	done
	echo "$total"
}
postmaster_pid() { head -n 1 "$PF_CLUSTER_DIR/data/postmaster.pid"; }
postgres_ticks() {
	local pm
	pm=$(postmaster_pid)
	echo $(($(cpu_ticks "$pm" $(pgrep -P "$pm")) + $(awk '{print $16 + $17}' "/proc/$pm/stat")))
}
# the legacy DBMS fixture lives in the same cluster: its live sessions
legacy_ticks() {
	local pid pids=()
	for pid in $(pgrep -P "$(postmaster_pid)"); do
		tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q '^postgres: [^ ]* legacy ' && pids+=("$pid")
	done
	cpu_ticks "${pids[@]}"
}
cpu_snapshot() {
	echo "$(postgres_ticks) $(legacy_ticks) $(cpu_ticks $(cat "$DIR"/emulator/*.pid)) $(cpu_ticks "$PID_relay")" \
		"$(cpu_ticks "$PID_payment" "$PID_postprocess" "$PID_invoice") $(cpu_ticks $(cat "$DIR/invoice-api/server.pid"))"
}

open_ops() {
	q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$1%' AND status NOT IN ('COMPLETED', 'FAILED')"
}
# wait_done PREFIX SECONDS
wait_done() {
	local deadline=$((SECONDS + $2))
	while [ "$(open_ops "$1")" != 0 ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
}

# warm-up: connections, ODBC sessions, queues
q -c "SELECT count(payflow.submit('warm-' || n, '{\"amount\": 1, \"currency\": \"EUR\"}')) FROM generate_series(1, 20) n" >/dev/null
wait_done warm- 60

# ---- burst ----
[ "$STATEMENTS" != 1 ] || q -c "SELECT pg_stat_statements_reset()" >/dev/null
read -r cpu0_pg cpu0_legacy cpu0_emu cpu0_relay cpu0_workers cpu0_inv <<<"$(cpu_snapshot)"
for start in $(seq 1 100 "$OPS"); do
	end=$((start + 99 > OPS ? OPS : start + 99))
	q -c "SELECT count(payflow.submit('burst-' || n, jsonb_build_object('amount', n || '.50', 'currency', 'EUR',
			'customer', 'C-' || (n % 17)))) FROM generate_series($start, $end) n" >/dev/null
done
wait_done burst- $((OPS / 5 + 120))
read -r cpu1_pg cpu1_legacy cpu1_emu cpu1_relay cpu1_workers cpu1_inv <<<"$(cpu_snapshot)"
hz=$(getconf CLK_TCK)
cpu_split=$(awk -v hz="$hz" -v pg=$((cpu1_pg - cpu0_pg)) -v legacy=$((cpu1_legacy - cpu0_legacy)) \
	-v emu=$((cpu1_emu - cpu0_emu)) -v relay=$((cpu1_relay - cpu0_relay)) \
	-v w=$((cpu1_workers - cpu0_workers)) -v inv=$((cpu1_inv - cpu0_inv)) \
	'BEGIN { printf "PostgreSQL %.1f (of which legacy fixture sessions %.1f), SQS emulator %.1f, relay %.1f, workers %.1f, invoice API %.1f",
			 pg/hz, legacy/hz, emu/hz, relay/hz, w/hz, inv/hz }')
burst=$(q -c "SELECT count(*) FILTER (WHERE status = 'COMPLETED') || '|' ||
			  round(extract(epoch FROM max(terminal_at) - min(created_at))::numeric, 2) || '|' ||
			  round(extract(epoch FROM max(created_at) - min(created_at))::numeric, 2)
			  FROM payflow.operations WHERE payment_id LIKE 'burst-%'")
burst_done=${burst%%|*}
burst_span=$(echo "$burst" | cut -d'|' -f2)
burst_submit=$(echo "$burst" | cut -d'|' -f3)
burst_rate=$(awk -v n="$burst_done" -v s="$burst_span" 'BEGIN { printf "%.0f", n / s }')

# ---- steady load at half the burst rate ----
rate=$((burst_rate / 2 > 5 ? burst_rate / 2 : 5))
cat >"$DIR/steady.sql" <<'SQL'
SELECT payflow.submit('steady-' || gen_random_uuid(), '{"amount": 12.50, "currency": "EUR", "customer": "C-1"}');
SQL
"$PF_PGBIN/pgbench" -n -c 2 -j 2 -R "$rate" -T "$STEADY_SECONDS" -f "$DIR/steady.sql" "$PF_DB" >"$DIR/steady.out" 2>&1
wait_done steady- 120
steady=$(q -c "SELECT count(*) || '|' || count(*) FILTER (WHERE status = 'COMPLETED') || '|' ||
	round(1000 * percentile_cont(0.50) WITHIN GROUP (ORDER BY extract(epoch FROM terminal_at - created_at))) || '|' ||
	round(1000 * percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM terminal_at - created_at))) || '|' ||
	round(1000 * percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM terminal_at - created_at))) || '|' ||
	round(1000 * max(extract(epoch FROM terminal_at - created_at)))
	FROM payflow.operations WHERE payment_id LIKE 'steady-%'")
IFS='|' read -r steady_n steady_done p50 p95 p99 pmax <<<"$steady"
# where the time goes: median time to reach each status, from the previous one
stages=$(q -c "WITH t AS (
		SELECT h.operation_id, h.to_status, h.at, lag(h.at) OVER (PARTITION BY h.operation_id ORDER BY h.at) AS prev
		  FROM payflow.operation_history h JOIN payflow.operations o ON o.id = h.operation_id
		 WHERE o.payment_id LIKE 'steady-%')
	SELECT string_agg(to_status || ' ' || ms || ' ms', ', ' ORDER BY ord) FROM (
		SELECT to_status, round(1000 * percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM at - prev))) ms,
			   array_position(ARRAY['PAYMENT_PROCESSING','PAYMENT_COMPLETED','POST_PROCESSING','INVOICE_PENDING','COMPLETED'], to_status) ord
		  FROM t WHERE prev IS NOT NULL GROUP BY to_status) s")

echo "payflow pipeline bench: PostgreSQL $(q -c 'SHOW server_version'), $(nproc) cores, synchronous_commit=$(q -c 'SHOW synchronous_commit');"
echo "relay + one worker per role (concurrency $CONCURRENCY), SQS emulator, legacy DBMS over psqlODBC and invoice API with no latency"
echo
printf '%-52s %s\n' \
	"submit only (pgbench, 4 clients, 10 s)" "$(printf '%.0f' "$submit_tps") operations/s" \
	"end to end, burst of $OPS (submitted in ${burst_submit} s)" "$burst_rate operations/s ($burst_done COMPLETED in ${burst_span} s)" \
	"  ratio to submit only" "$(awk -v a="$burst_rate" -v b="$submit_tps" 'BEGIN { printf "%.2f", a / b }')" \
	"  CPU seconds used meanwhile ($(nproc) cores x ${burst_span} s)" "$cpu_split" \
	"steady load: $rate/s for ${STEADY_SECONDS} s ($steady_n operations)" "submit -> COMPLETED p50 ${p50} ms, p95 ${p95} ms, p99 ${p99} ms, max ${pmax} ms" \
	"  median per status (from the previous one)" "$stages"
echo
if [ "$STATEMENTS" = 1 ]; then
	echo "statements by total time during the burst and the steady load (all databases):"
	q -c "SELECT rpad(round(total_exec_time)::text || ' ms', 10) || rpad(calls::text, 8) ||
				 rpad(round((total_exec_time / calls)::numeric, 3)::text || ' ms', 12) ||
				 left(regexp_replace(query, '\s+', ' ', 'g'), 110)
			FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 15"
	echo
fi

all_ops=$(q -c "SELECT count(*) FROM payflow.operations")
pf_eq "every operation COMPLETED" "$all_ops" "$(q -c "SELECT count(*) FROM payflow.operations WHERE status = 'COMPLETED'")"
pf_eq "steady load: all completed" "$steady_n" "$steady_done"
pf_eq "no duplicate charges" 0 "$(legacy -c "SELECT count(*) FROM duplicate_charges()")"
pf_eq "one invoice per completed operation" "$all_ops" \
	"$(curl -fsS "http://127.0.0.1:$INV_PORT/_stats" | sed -n 's/.*"invoices":\([0-9]*\).*/\1/p')"
pf_done
