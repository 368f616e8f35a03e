#!/bin/bash
# The pipeline's end-to-end throughput and latency, beside the submit-only
# rate measured in the same run, with external systems that take no time:
# the legacy DBMS fixture without faults (through psqlODBC) and the invoice
# API stand-in.  A stack per flavour, both up at once: the C extension and
# the C-free flavour (dist/payflow--<version>.sql, pg_cron running the
# scheduler; test/lib/cluster.sh with PF_FLAVOUR=sql), each with a private
# cluster, SQS emulator, invoice API, payflow-relay and one worker of each
# role.  Prints figures; fails only when the pipeline broke (an operation
# not completed, a duplicate charge or invoice), never on timing.
#
#   submit only     pgbench of payflow.submit() (4 clients, 10 s) before the
#                   edge processes start (the tables are emptied afterwards)
#   burst           BENCH_PIPELINE_OPS operations submitted at once (100 a
#                   statement); operations/s from the first submit to the
#                   last COMPLETED; BENCH_PIPELINE_ROUNDS rounds, the two
#                   flavours interleaved (which goes first changes every
#                   round), medians
#   steady load     pgbench -R at half the slower flavour's burst rate for
#                   BENCH_PIPELINE_SECONDS, the same rate for both:
#                   submit -> COMPLETED p50/p95/p99, and where the time goes
#                   (per step)
#
# The C-free flavour has no wake-up per commit: its relay and workers see
# new events through run_scheduler's NOTIFY (at most once a second) or
# their fallback poll (PAYFLOW_POLL_INTERVAL_MS, 200 ms here for both).
#
#   BENCH_PIPELINE_OPS=2000  BENCH_PIPELINE_SECONDS=20  BENCH_PIPELINE_CONCURRENCY=16
#   BENCH_PIPELINE_ROUNDS=3  BENCH_FLAVOURS="c sql"
#   BENCH_PIPELINE_STATEMENTS=1   also print the statements that took the most
#                                 time during the bursts (pg_stat_statements)
#   PF_BENCH_PIPELINE_PGPORT=54363  PF_BENCH_PIPELINE_SQL_PGPORT=54362
#   BENCH_PIPELINE_EMULATOR_PORT=4695 (and +1)  BENCH_PIPELINE_INVOICE_API_PORT=4697
#   BENCH_PIPELINE_SQL_EMULATOR_PORT=4705 (and +1)  BENCH_PIPELINE_SQL_INVOICE_API_PORT=4707
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/bench/lib.sh
source test/lib/assert.sh

OPS=${BENCH_PIPELINE_OPS:-2000}
STEADY_SECONDS=${BENCH_PIPELINE_SECONDS:-20}
CONCURRENCY=${BENCH_PIPELINE_CONCURRENCY:-16}
ROUNDS=${BENCH_PIPELINE_ROUNDS:-3}
bench_flavours "${PF_BENCH_PIPELINE_PGPORT:-54363}" "${PF_BENCH_PIPELINE_SQL_PGPORT:-54362}" bench-pipeline
declare -A EMU_PORT=([c]=${BENCH_PIPELINE_EMULATOR_PORT:-4695} [sql]=${BENCH_PIPELINE_SQL_EMULATOR_PORT:-4705})
declare -A INV_PORT=([c]=${BENCH_PIPELINE_INVOICE_API_PORT:-4697} [sql]=${BENCH_PIPELINE_SQL_INVOICE_API_PORT:-4707})

bench_build
make -s -C workers >/dev/null 2>&1 || make -s -C workers bin/payflow-worker bin/payflow-relay >/dev/null
for bin in payflow-worker payflow-relay; do
	[ -x "workers/bin/$bin" ] || { echo "bench: workers/bin/$bin does not build"; exit 1; }
done

q() { pf_psql -Atq "$@"; }
legacy() { pf_psql -d legacy -Atq "$@"; }

DIR=$(mktemp -d /tmp/payflow-bench-pipeline.XXXXXX)
declare -A PID # PID[FLAVOUR.ROLE]: the edge processes (roles relay payment postprocess invoice)
cleanup() {
	local f pid
	for pid in "${PID[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${PID[@]}"; do wait "$pid" 2>/dev/null || true; done
	for pid in "${PID[@]}"; do rm -f "/tmp/psqlodbc_payflow-worker_$(id -un)$pid.log"; done
	for f in $BENCH_FLAVOURS; do
		PAYFLOW_INVOICE_API_RUN_DIR=$DIR/$f/invoice-api test/fixtures/invoice-api/stop.sh >/dev/null 2>&1 || true
		PAYFLOW_EMULATOR_RUN_DIR=$DIR/$f/emulator test/emulator/stop.sh >/dev/null 2>&1 || true
		bench_use "$f"
		pf_cluster_destroy
	done
	rm -rf "$DIR"
}
for f in $BENCH_FLAVOURS; do
	bench_use "$f"
	pf_cluster_destroy
done
trap cleanup EXIT
STATEMENTS=${BENCH_PIPELINE_STATEMENTS:-0}

# ---- the clusters ----
for f in $BENCH_FLAVOURS; do
	mkdir -p "$DIR/$f"
	bench_use "$f"
	if [ "$STATEMENTS" = 1 ]; then
		# a later line wins in postgresql.conf
		preload="payflow,pg_cron"
		[ "$f" = c ] || preload="pg_cron,pg_tle"
		export PF_CLUSTER_EXTRA_CONF="shared_preload_libraries = '$preload,pg_stat_statements'
pg_stat_statements.track = all"
	fi
	pf_cluster_start
	[ "$STATEMENTS" != 1 ] || q -c "CREATE EXTENSION pg_stat_statements" >/dev/null
done

# ---- submit only, first, before any edge process drains the outbox ----
declare -A submit_tps
for f in $(bench_order 1); do
	bench_use "$f"
	submit_tps[$f]=$("$PF_PGBIN/pgbench" -n -c 4 -j 2 -T 10 -f test/bench/submit.sql "$PF_DB" 2>/dev/null | bench_tps)
	q -c "TRUNCATE payflow.outbox, payflow.operations, payflow.steps, payflow.operation_history, payflow.payloads" \
		-c "VACUUM ANALYZE" >/dev/null
done

# ---- the stacks ----
export PAYFLOW_EMULATOR_MAX_RECEIVE_COUNT=5
export PAYFLOW_LEGACY_CALL='SELECT * FROM charge(:idempotency_key, :payment_id, :details.amount, :details.currency)'
export PAYFLOW_POSTPROCESS_FUNCTION='payflow.default_postprocess(text,jsonb)'
export PAYFLOW_LOG_LEVEL=warn PAYFLOW_POLL_INTERVAL_MS=200 PAYFLOW_VISIBILITY_TIMEOUT=30
export PAYFLOW_CONCURRENCY=$CONCURRENCY
# use FLAVOUR: its cluster for psql and pgbench, its emulator, invoice API
# and legacy DBMS for the edge processes started afterwards
use() {
	bench_use "$1"
	export PAYFLOW_EMULATOR_PORT=${EMU_PORT[$1]} PAYFLOW_EMULATOR_BACKEND_PORT=$((EMU_PORT[$1] + 1))
	export PAYFLOW_EMULATOR_RUN_DIR=$DIR/$1/emulator
	export PAYFLOW_INVOICE_API_PORT=${INV_PORT[$1]} PAYFLOW_INVOICE_API_RUN_DIR=$DIR/$1/invoice-api
	export PAYFLOW_DATABASE_URL="postgresql://postgres@127.0.0.1:$PF_PGPORT/$PF_DB"
	# shellcheck disable=SC1090
	[ ! -f "$DIR/$1/env.sh" ] || source "$DIR/$1/env.sh"
}
declare -A ROLE_QUEUE=([payment]=payment-requests [postprocess]=payment-completed [invoice]=invoice-requests)
queue_url() { echo "$PAYFLOW_QUEUE_URLS" | tr ',' '\n' | sed -n "s/^$1=//p"; }
for f in $BENCH_FLAVOURS; do
	use "$f"
	test/emulator/stop.sh >/dev/null 2>&1 || true
	{
		test/emulator/start.sh 2>"$DIR/$f/emulator-start.log"
		test/fixtures/invoice-api/start.sh 2>"$DIR/$f/invoice-api-start.log"
		printf 'export PAYFLOW_LEGACY_ODBC=%q\n' "$(test/fixtures/legacy/setup.sh 2>"$DIR/$f/legacy-setup.log")"
	} >"$DIR/$f/env.sh.tmp"
	mv "$DIR/$f/env.sh.tmp" "$DIR/$f/env.sh"
	use "$f"
	workers/bin/payflow-relay >"$DIR/$f/relay.log" 2>&1 &
	PID[$f.relay]=$!
	for role in payment postprocess invoice; do
		PAYFLOW_QUEUE_URL=$(queue_url "${ROLE_QUEUE[$role]}") PAYFLOW_WORKER_ID=bench-$role \
			workers/bin/payflow-worker --role "$role" >"$DIR/$f/$role.log" 2>&1 &
		PID[$f.$role]=$!
	done
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
# of the current flavour's stack: PostgreSQL, legacy sessions, emulator,
# relay, workers, invoice API
cpu_snapshot() {
	local f=$PF_FLAVOUR
	echo "$(postgres_ticks) $(legacy_ticks) $(cpu_ticks $(cat "$DIR/$f"/emulator/*.pid)) $(cpu_ticks "${PID[$f.relay]}")" \
		"$(cpu_ticks "${PID[$f.payment]}" "${PID[$f.postprocess]}" "${PID[$f.invoice]}") $(cpu_ticks $(cat "$DIR/$f/invoice-api/server.pid"))"
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
for f in $BENCH_FLAVOURS; do
	use "$f"
	q -c "SELECT count(payflow.submit('warm-' || n, '{\"amount\": 1, \"currency\": \"EUR\"}')) FROM generate_series(1, 20) n" >/dev/null
done
for f in $BENCH_FLAVOURS; do
	use "$f"
	wait_done warm- 60
done

# ---- bursts, interleaved ----
# per flavour, blank-separated lists over the rounds
declare -A burst_rate burst_span burst_submit burst_done cpu_sum
for f in $BENCH_FLAVOURS; do
	use "$f"
	[ "$STATEMENTS" != 1 ] || q -c "SELECT pg_stat_statements_reset()" >/dev/null
	for k in pg legacy emu relay workers inv; do cpu_sum[$f.$k]=0; done
done
hz=$(getconf CLK_TCK)
burst_round() {
	local f=$1 prefix=burst$2- start end
	local cpu0 cpu1 i k result n_done span submitted
	use "$f"
	# the same state for every burst: what autovacuum would have done by now
	q -c "VACUUM ANALYZE" >/dev/null
	read -r -a cpu0 <<<"$(cpu_snapshot)"
	for start in $(seq 1 100 "$OPS"); do
		end=$((start + 99 > OPS ? OPS : start + 99))
		q -c "SELECT count(payflow.submit('$prefix' || n, jsonb_build_object('amount', n || '.50', 'currency', 'EUR',
				'customer', 'C-' || (n % 17)))) FROM generate_series($start, $end) n" >/dev/null
	done
	wait_done "$prefix" $((OPS / 5 + 120))
	read -r -a cpu1 <<<"$(cpu_snapshot)"
	i=0
	for k in pg legacy emu relay workers inv; do
		cpu_sum[$f.$k]=$((${cpu_sum[$f.$k]} + ${cpu1[i]} - ${cpu0[i]}))
		i=$((i + 1))
	done
	result=$(q -c "SELECT count(*) FILTER (WHERE status = 'COMPLETED') || ' ' ||
			  round(extract(epoch FROM max(terminal_at) - min(created_at))::numeric, 2) || ' ' ||
			  round(extract(epoch FROM max(created_at) - min(created_at))::numeric, 2)
			  FROM payflow.operations WHERE payment_id LIKE '$prefix%'")
	read -r n_done span submitted <<<"$result"
	burst_done[$f]+="$n_done "
	burst_span[$f]+="$span "
	burst_submit[$f]+="$submitted "
	burst_rate[$f]+="$(awk -v n="$n_done" -v s="$span" 'BEGIN { printf "%.0f", n / s }') "
}
for round in $(seq 1 "$ROUNDS"); do
	for f in $(bench_order "$round"); do
		burst_round "$f" "$round"
	done
done
declare -A rate
for f in $BENCH_FLAVOURS; do
	rate[$f]=$(printf "%.0f" "$(bench_med "${burst_rate[$f]}")")
done

# ---- steady load at half the slower flavour's burst rate ----
steady_rate=$(for f in $BENCH_FLAVOURS; do echo "${rate[$f]}"; done | sort -n | head -1)
steady_rate=$((${steady_rate%.*} / 2 > 5 ? ${steady_rate%.*} / 2 : 5))
cat >"$DIR/steady.sql" <<'SQL'
SELECT payflow.submit('steady-' || gen_random_uuid(), '{"amount": 12.50, "currency": "EUR", "customer": "C-1"}');
SQL
declare -A steady stages
for f in $(bench_order 1); do
	use "$f"
	"$PF_PGBIN/pgbench" -n -c 2 -j 2 -R "$steady_rate" -T "$STEADY_SECONDS" -f "$DIR/steady.sql" "$PF_DB" >"$DIR/$f/steady.out" 2>&1
	wait_done steady- 120
	steady[$f]=$(q -c "SELECT count(*) || ' ' || count(*) FILTER (WHERE status = 'COMPLETED') || ' ' ||
		round(1000 * percentile_cont(0.50) WITHIN GROUP (ORDER BY extract(epoch FROM terminal_at - created_at))) || ' ' ||
		round(1000 * percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM terminal_at - created_at))) || ' ' ||
		round(1000 * percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM terminal_at - created_at))) || ' ' ||
		round(1000 * max(extract(epoch FROM terminal_at - created_at)))
		FROM payflow.operations WHERE payment_id LIKE 'steady-%'")
	# where the time goes: median time to reach each status, from the previous one
	stages[$f]=$(q -c "WITH t AS (
			SELECT h.operation_id, h.to_status, h.at, lag(h.at) OVER (PARTITION BY h.operation_id ORDER BY h.at) AS prev
			  FROM payflow.operation_history h JOIN payflow.operations o ON o.id = h.operation_id
			 WHERE o.payment_id LIKE 'steady-%')
		SELECT string_agg(to_status || ' ' || ms || ' ms', ', ' ORDER BY ord) FROM (
			SELECT to_status, round(1000 * percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM at - prev))) ms,
				   array_position(ARRAY['PAYMENT_PROCESSING','PAYMENT_COMPLETED','POST_PROCESSING','INVOICE_PENDING','COMPLETED'], to_status) ord
			  FROM t WHERE prev IS NOT NULL GROUP BY to_status) s")
done

use c
echo "payflow pipeline bench: PostgreSQL $(q -c 'SHOW server_version'), $(nproc) cores, synchronous_commit=$(q -c 'SHOW synchronous_commit');"
echo "relay + one worker per role (concurrency $CONCURRENCY), SQS emulator, legacy DBMS over psqlODBC and invoice API with no latency;"
echo "a stack per flavour ($(for f in $BENCH_FLAVOURS; do printf '%s ' "$(bench_label "$f")"; done | sed 's/ $//'), both up), $ROUNDS bursts each, interleaved, medians"
for f in $BENCH_FLAVOURS; do
	use "$f"
	read -r steady_n steady_done p50 p95 p99 pmax <<<"${steady[$f]}"
	span=$(bench_med "${burst_span[$f]}")
	echo
	case $f in
		c) echo "-- C extension (payflow preloaded, the scheduler worker wakes the relay after each commit)" ;;
		sql) echo "-- C-free flavour (dist/payflow--*.sql, pg_cron runs run_scheduler; relay and workers poll every ${PAYFLOW_POLL_INTERVAL_MS} ms)" ;;
	esac
	printf '%-52s %s\n' \
		"submit only (pgbench, 4 clients, 10 s)" "$(printf '%.0f' "${submit_tps[$f]}") operations/s" \
		"end to end, burst of $OPS (submitted in $(bench_med "${burst_submit[$f]}") s)" \
		"${rate[$f]} operations/s (rounds: $(echo ${burst_rate[$f]}); COMPLETED: $(echo ${burst_done[$f]}) in $(echo ${burst_span[$f]}) s)" \
		"  ratio to submit only" "$(bench_ratio "${rate[$f]}" "${submit_tps[$f]}")" \
		"  CPU seconds per burst ($(nproc) cores x ${span} s)" \
		"$(awk -v hz="$hz" -v n="$ROUNDS" -v pg="${cpu_sum[$f.pg]}" -v legacy="${cpu_sum[$f.legacy]}" \
			-v emu="${cpu_sum[$f.emu]}" -v relay="${cpu_sum[$f.relay]}" -v w="${cpu_sum[$f.workers]}" -v inv="${cpu_sum[$f.inv]}" \
			'BEGIN { d = hz * n; printf "PostgreSQL %.1f (of which legacy fixture sessions %.1f), SQS emulator %.1f, relay %.1f, workers %.1f, invoice API %.1f",
					 pg/d, legacy/d, emu/d, relay/d, w/d, inv/d }')" \
		"steady load: $steady_rate/s for ${STEADY_SECONDS} s ($steady_n operations)" \
		"submit -> COMPLETED p50 ${p50} ms, p95 ${p95} ms, p99 ${p99} ms, max ${pmax} ms" \
		"  median per status (from the previous one)" "${stages[$f]}"
	bench_result "$f.burst" "${burst_rate[$f]}"
done
echo
if bench_has sql && bench_has c; then
	bench_compare_header "C-free flavour vs C"
	bench_compare_row "end to end, burst of $OPS, operations/s" "${burst_rate[c]}" "${burst_rate[sql]}"
	bench_compare_row "submit only, operations/s" "${submit_tps[c]}" "${submit_tps[sql]}"
	read -r _ _ c50 c95 _ <<<"${steady[c]}"
	read -r _ _ s50 s95 _ <<<"${steady[sql]}"
	bench_compare_row "steady $steady_rate/s: submit -> COMPLETED p50, ms" "$c50" "$s50" %.0f -
	bench_compare_row "steady $steady_rate/s: submit -> COMPLETED p95, ms" "$c95" "$s95" %.0f -
	echo
fi
if [ "$STATEMENTS" = 1 ]; then
	for f in $BENCH_FLAVOURS; do
		use "$f"
		echo "$(bench_label "$f"): statements by total time during the bursts and the steady load (all databases):"
		q -c "SELECT rpad(round(total_exec_time)::text || ' ms', 10) || rpad(calls::text, 8) ||
					 rpad(round((total_exec_time / calls)::numeric, 3)::text || ' ms', 12) ||
					 left(regexp_replace(query, '\s+', ' ', 'g'), 110)
				FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 15"
		echo
	done
fi

for f in $BENCH_FLAVOURS; do
	use "$f"
	label=$(bench_label "$f")
	read -r steady_n steady_done _ <<<"${steady[$f]}"
	all_ops=$(q -c "SELECT count(*) FROM payflow.operations")
	pf_eq "$label: every operation COMPLETED" "$all_ops" "$(q -c "SELECT count(*) FROM payflow.operations WHERE status = 'COMPLETED'")"
	pf_eq "$label: steady load: all completed" "$steady_n" "$steady_done"
	pf_eq "$label: no duplicate charges" 0 "$(legacy -c "SELECT count(*) FROM duplicate_charges()")"
	pf_eq "$label: one invoice per completed operation" "$all_ops" \
		"$(curl -fsS "http://127.0.0.1:${INV_PORT[$f]}/_stats" | sed -n 's/.*"invoices":\([0-9]*\).*/\1/p')"
done
pf_done
