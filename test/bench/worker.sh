#!/bin/bash
# shellcheck disable=SC2154  # PID_<name>, WK_PID_<name>: set by name (printf -v) when a program starts
# How many concurrent long legacy calls one payflow-worker process carries,
# and what that costs it in memory.  A private cluster (the legacy DBMS
# fixture lives in it too), the local SQS emulator, the relay, and one
# payment worker with PAYFLOW_CONCURRENCY = the number of calls; every
# charge is made slow.  Prints figures; fails only when the pipeline itself
# broke (an operation not completed, a duplicate charge), never on timing.
#
#   BENCH_WORKER_CALLS=256          concurrent blocking calls
#   BENCH_WORKER_CALL_SECONDS=30    how long each one takes
#   BENCH_WORKER_VISIBILITY=6       visibility timeout (a heartbeat every 2 s)
#   PF_BENCH_WORKER_PGPORT=54347
#
# Each legacy session of the fixture holds a second (dblink) connection, so
# N calls need about 2N + N/16 connections: the private cluster gets
# max_connections = 2N + 100.
set -euo pipefail
cd "$(dirname "$0")/../.."

CALLS=${BENCH_WORKER_CALLS:-256}
CALL_SECONDS=${BENCH_WORKER_CALL_SECONDS:-30}
export PAYFLOW_VISIBILITY_TIMEOUT=${BENCH_WORKER_VISIBILITY:-6}
export PF_PGPORT=${PF_BENCH_WORKER_PGPORT:-54347}
export PF_CLUSTER_DIR=/tmp/payflow-bench-worker-$PF_PGPORT

source test/lib/deps.sh
source test/lib/cluster.sh
pf_install_deps
make -s >/dev/null && make -s install >/dev/null
# the worker at least; the relay as it builds (or as it was last built)
make -s -C workers >/dev/null 2>&1 || make -s -C workers bin/payflow-worker >/dev/null
pf_cluster_destroy
pf_cluster_start
pf_psql -Atqc "ALTER SYSTEM SET max_connections = $((2 * CALLS + 100))" >/dev/null
pf_cluster_stop
pf_cluster_start

source test/integration/worker_common.bash
wk_init bench-worker 4677 4678 5
trap 'wk_cleanup; pf_cluster_destroy' EXIT
wk_start_relay

legacy -c "SELECT set_fault('slow', seconds => $CALL_SECONDS, count => NULL, fn => 'charge')" >/dev/null
# BENCH_WORKER_ODBC_EXTRA="Key=value;": appended to the connection string, for experiments
PAYFLOW_LEGACY_ODBC="$PAYFLOW_LEGACY_ODBC${BENCH_WORKER_ODBC_EXTRA:-}"
# BENCH_WORKER_ENV="NAME=value ...": more of the worker's environment, for experiments
# shellcheck disable=SC2086
wk_start_worker bench PAYFLOW_CONCURRENCY="$CALLS" PAYFLOW_LEGACY_TIMEOUT=$((CALL_SECONDS * 4)) \
	PAYFLOW_METRICS_LISTEN=127.0.0.1:4693 ${BENCH_WORKER_ENV:-}
pid=$WK_PID_bench
rss_start=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")

echo "payflow-worker bench: $CALLS blocking legacy calls of ${CALL_SECONDS}s in one process;"
echo "max_connections $(q -c 'SHOW max_connections'), visibility ${PAYFLOW_VISIBILITY_TIMEOUT}s (heartbeat every $((PAYFLOW_VISIBILITY_TIMEOUT * 1000 / 3)) ms), $(nproc) cores"

t0=$(date +%s.%N)
q -c "SELECT count(payflow.submit('bench-' || n, jsonb_build_object('amount', n, 'currency', 'EUR')))
	  FROM generate_series(1, $CALLS) n" >/dev/null

running_calls() { legacy -c "SELECT count(*) FROM call_log WHERE fn = 'charge' AND ended_at IS NULL"; }
peak_running=0
rss_kinds=
peak_threads=0
peak_legacy_sessions=0
peak_db_sessions=0
# The heartbeat's cost per held message: CPU of the worker and of its
# lease-renewal backend over a window in which all CALLS calls run and
# nothing else happens (no receive, claim or completion), per message and
# renewal (SQS visibility + database lease).
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hb_window=$((PAYFLOW_VISIBILITY_TIMEOUT * 1000 / 3 * 3))	# three heartbeats, ms
hb_started=
hb_cost="(not measured: the calls never all ran at once for $((hb_window / 1000)) s)"
deadline=$((SECONDS + CALL_SECONDS * 3 + 60))
while :; do
	done_count=$(q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE 'bench-%' AND status = 'PAYMENT_COMPLETED'")
	r=$(running_calls)
	if [ "$r" -gt "$peak_running" ]; then
		peak_running=$r
		rss_kinds=$(awk -v stack_kib=512 -f test/bench/rss_by_kind.awk "/proc/$pid/smaps" | sed 's/, $//')
	fi
	now_ms=$(date +%s%3N)
	if [ "$r" -ge "$CALLS" ] && [ -z "$hb_started" ]; then
		hb_backend=$(q -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'payflow-worker heartbeat'")
		hb_started=$now_ms hb_cpu0=$(ticks "$pid") hb_db0=$(ticks "$hb_backend")
	elif [ -n "$hb_started" ] && [ -n "${hb_cpu0:-}" ] && [ $((now_ms - hb_started)) -ge "$hb_window" ]; then
		if [ "$r" -ge "$CALLS" ]; then
			hb_cost=$(awk -v w=$(( $(ticks "$pid") - hb_cpu0 )) -v d=$(( $(ticks "$hb_backend") - hb_db0 )) \
				-v ms=$((now_ms - hb_started)) -v every=$((PAYFLOW_VISIBILITY_TIMEOUT * 1000 / 3)) -v n="$CALLS" \
				'BEGIN { r = ms / every * n; printf "%.0f us worker + %.0f us database CPU per message and renewal (%d renewals in %.1f s)", w * 1e4 / r, d * 1e4 / r, r, ms / 1000 }')
		fi
		hb_cpu0=
	fi
	th=$(awk '/Threads/ {print $2}' "/proc/$pid/status")
	[ "$th" -gt "$peak_threads" ] && peak_threads=$th
	ls=$(q -c "SELECT count(*) FROM pg_stat_activity WHERE usename = 'legacy_client'")
	[ "$ls" -gt "$peak_legacy_sessions" ] && peak_legacy_sessions=$ls
	ds=$(q -c "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'payflow-worker%'")
	[ "$ds" -gt "$peak_db_sessions" ] && peak_db_sessions=$ds
	[ "$done_count" -ge "$CALLS" ] && break
	if [ $SECONDS -ge $deadline ]; then
		echo "bench: only $done_count of $CALLS completed in time"
		break
	fi
	sleep 1
done
t1=$(date +%s.%N)
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
rss_end=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
cpu=$(awk '{print ($14 + $15) / 100}' "/proc/$pid/stat")
# CPU by thread name (pf-executor, pf-leases, the main thread's payflow-worker):
# schedstat's nanoseconds, as a thread's stat rounds down to whole ticks
cpu_threads=$(for t in /proc/$pid/task/*; do
	printf '%s %s\n' "$(tr ' ' _ <"$t/comm")" "$(cut -d' ' -f1 "$t/schedstat")"
done | awk '{s[$1] += $2} END {for (n in s) printf "%s %.2f s, ", n, s[n] / 1e9}' | sed 's/, $//')

redelivered=$(grep -c '"receiveCount":[02-9]' "$WK_DIR/bench.log" || true)
lost=$(grep -c '"lease lost' "$WK_DIR/bench.log" || true)
attempts=$(q -c "SELECT count(*) FILTER (WHERE attempt > 1) FROM payflow.steps s JOIN payflow.operations o ON o.id = s.operation_id
				 WHERE o.payment_id LIKE 'bench-%' AND s.step_name = 'PROCESS_PAYMENT'")
calls=$(legacy -c "SELECT call_count('charge')")
max_overlap=$(legacy -c "SELECT max(running) FROM (SELECT sum(d) OVER (ORDER BY at, d) AS running
						 FROM (SELECT started_at AS at, 1 AS d FROM call_log WHERE fn = 'charge'
							   UNION ALL SELECT ended_at, -1 FROM call_log WHERE fn = 'charge' AND ended_at IS NOT NULL) e) r")
span=$(legacy -c "SELECT round(extract(epoch FROM max(ended_at) - min(started_at))::numeric, 1) FROM call_log WHERE fn = 'charge'")

kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
# the worker's log outlives the run, for a look at what went wrong
cp "$WK_DIR/bench.log" "${BENCH_WORKER_LOG:-/tmp/payflow-bench-worker-$CALLS.log}"

# The floor under "KiB per call": one legacy session through unixODBC and
# psqlODBC with a statement run, in a program of its own (no worker).
driver_floor="(not measured: odbc_session_memory did not build)"
if cc -O2 -o "$WK_DIR/odbc_session_memory" test/bench/odbc_session_memory.c -lodbc 2>"$WK_DIR/odbc_session_memory.err"; then
	driver_floor=$("$WK_DIR/odbc_session_memory" $((CALLS < 300 ? CALLS : 300)) "$PAYFLOW_LEGACY_ODBC" 'SELECT 1' 2>&1 || true)
fi

printf '%-52s %s\n' \
	"operations completed" "$done_count of $CALLS in $(printf '%.1f' "$(echo "$t1 - $t0" | bc)") s (calls span ${span} s)" \
	"legacy calls at once (peak seen / from call_log)" "$peak_running / $max_overlap" \
	"legacy calls made" "$calls" \
	"redelivered messages / lost leases / attempts > 1" "$redelivered / $lost / $attempts" \
	"peak RSS (VmHWM)" "$((hwm / 1024)) MiB ($(((hwm - rss_start) / CALLS)) KiB per call over $((rss_start / 1024)) MiB idle)" \
	"RSS at the end" "$((rss_end / 1024)) MiB" \
	"RSS at the peak of calls, by kind" "$rss_kinds" \
	"legacy driver alone (odbc_session_memory)" "$driver_floor" \
	"heartbeat cost" "$hb_cost" \
	"threads (peak)" "$peak_threads" \
	"sessions: legacy_client / payflow-worker (peak)" "$peak_legacy_sessions / $peak_db_sessions" \
	"worker CPU time" "${cpu} s ($cpu_threads)" \
	"exit status after SIGTERM" "$rc"

pf_eq "all $CALLS operations completed" "$CALLS" "$done_count"
pf_eq "no duplicate charges" 0 "$(legacy -c "SELECT count(*) FROM duplicate_charges()")"
pf_done
