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
#   submit only     pgbench of payflow.submit() (4 clients,
#                   BENCH_PIPELINE_SUBMIT_SECONDS each) before the edge
#                   processes start, beside pgmq's SQL send() (pgmq 1.5.1
#                   installed SQL-only from test/bench/peers/vendor/pgmq, no C
#                   extension) and a raw single-row INSERT in the C cluster,
#                   ROUNDS rounds, kinds interleaved (the tables are emptied
#                   and pgmq dropped afterwards)
#   burst           BENCH_PIPELINE_OPS operations submitted at once (100 a
#                   statement); operations/s from the first submit to the
#                   last COMPLETED; BENCH_PIPELINE_ROUNDS rounds, the two
#                   flavours interleaved (which goes first changes every
#                   round), medians
#   peers           in the C flavour's cluster, the same rounds interleaved
#                   with payflow's bursts: graphile-worker and pg-boss (npm,
#                   pinned in test/bench/peers/package-lock.json, their
#                   batching settings in test/bench/peers/chain.mjs), each in
#                   a schema of its own, running bursts of as many 3-hop
#                   chains of no-op jobs (hop 1 enqueues hop 2, which
#                   enqueues hop 3); payflow's idle stack stays up meanwhile
#   ceiling         the burst's bound on this machine: the stand-ins
#                   (emulator, legacy fixture sessions, invoice API) need CPU
#                   per operation too, so nproc / their CPU per operation is
#                   the most any pipeline could do here; the burst's rate as a
#                   fraction of it (issue 25's aim: at least 0.7)
#   cost            per operation, for every burst and pgbench run
#                   (test/bench/cost.sh): PostgreSQL CPU ms (every process
#                   of the cluster, the legacy fixture's sessions apart),
#                   commits and WAL bytes of the database, statements (with
#                   BENCH_PIPELINE_STATEMENTS=1), for payflow SQS calls (the
#                   emulator front's counters) and the CPU of the relay, each
#                   worker, the emulator and the fixtures; one table of
#                   medians, and the aims of issue 13 met or missed
#   steady load     pgbench -R at half the slower flavour's burst rate for
#                   BENCH_PIPELINE_SECONDS, the same rate for both:
#                   submit -> COMPLETED p50/p95/p99, and where the time goes
#                   (per step)
#   snapshot held   the C flavour's steady load again, with and without a
#                   report holding a REPEATABLE READ snapshot throughout
#                   (test/bench/pipeline_snapshot.sh; 0 seconds skips it)
#   autovacuum      every run logged (log_autovacuum_min_duration = 0); the
#                   cost table's detail gives the CPU its log reports per
#                   operation, by table (part of the PostgreSQL CPU)
#
# The C-free flavour has no wake-up per commit: its relay and workers see
# new events through run_scheduler's NOTIFY (at most once a second) or
# their fallback poll (PAYFLOW_POLL_INTERVAL_MS, 200 ms here for both).
#
#   BENCH_PIPELINE_OPS=2000  BENCH_PIPELINE_SECONDS=20  BENCH_PIPELINE_CONCURRENCY=16
#   BENCH_PIPELINE_ROUNDS=3  BENCH_FLAVOURS="c sql"  BENCH_PIPELINE_SUBMIT_SECONDS=5
#   BENCH_PIPELINE_SNAPSHOT_SECONDS=60  BENCH_PIPELINE_SNAPSHOT_ROUNDS=2
#   BENCH_PIPELINE_PEERS="graphile-worker pg-boss" ("" for none)  BENCH_PIPELINE_PEER_PORT=4710 (and +1)
#   BENCH_PIPELINE_STATEMENTS=1   pg_stat_statements loaded (track = all,
#                                 track_planning): the statements per operation,
#                                 those that took the most time during the
#                                 bursts, and those planned again and again
#   PF_BENCH_PIPELINE_PGPORT=54363  PF_BENCH_PIPELINE_SQL_PGPORT=54362
#   BENCH_PIPELINE_EMULATOR_PORT=4695 (and +1)  BENCH_PIPELINE_INVOICE_API_PORT=4697
#   BENCH_PIPELINE_SQL_EMULATOR_PORT=4705 (and +1)  BENCH_PIPELINE_SQL_INVOICE_API_PORT=4707
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/bench/lib.sh
source test/lib/assert.sh
source test/bench/cost.sh

OPS=${BENCH_PIPELINE_OPS:-2000}
STEADY_SECONDS=${BENCH_PIPELINE_SECONDS:-20}
CONCURRENCY=${BENCH_PIPELINE_CONCURRENCY:-16}
ROUNDS=${BENCH_PIPELINE_ROUNDS:-3}
SUBMIT_SECONDS=${BENCH_PIPELINE_SUBMIT_SECONDS:-5}
PEERS=${BENCH_PIPELINE_PEERS-graphile-worker pg-boss}
declare -A PEER_PORT PEER_SCHEMA PEER_VERSION
i=0
for peer in $PEERS; do
	PEER_PORT[$peer]=$((${BENCH_PIPELINE_PEER_PORT:-4710} + i))
	PEER_SCHEMA[$peer]=bench_peer_${peer//-/_}
	i=$((i + 1))
done
bench_flavours "${PF_BENCH_PIPELINE_PGPORT:-54363}" "${PF_BENCH_PIPELINE_SQL_PGPORT:-54362}" bench-pipeline
declare -A EMU_PORT=([c]=${BENCH_PIPELINE_EMULATOR_PORT:-4695} [sql]=${BENCH_PIPELINE_SQL_EMULATOR_PORT:-4705})
declare -A INV_PORT=([c]=${BENCH_PIPELINE_INVOICE_API_PORT:-4697} [sql]=${BENCH_PIPELINE_SQL_INVOICE_API_PORT:-4707})

bench_build
make -s -C workers >/dev/null 2>&1 || make -s -C workers bin/payflow-worker bin/payflow-relay >/dev/null
for bin in payflow-worker payflow-relay; do
	[ -x "workers/bin/$bin" ] || { echo "bench: workers/bin/$bin does not build"; exit 1; }
done
PEER_CACHE=
[ -z "$PEERS" ] || PEER_CACHE=$(test/bench/peers/install.sh)
for peer in $PEERS; do
	PEER_VERSION[$peer]=$(node -p "require('$PEER_CACHE/node_modules/$peer/package.json').version")
done

q() { pf_psql -Atq "$@"; }
legacy() { pf_psql -d legacy -Atq "$@"; }

DIR=$(mktemp -d /tmp/payflow-bench-pipeline.XXXXXX)
declare -A PID # PID[FLAVOUR.ROLE]: the edge processes (roles relay payment postprocess invoice); PID[peer.NAME]
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
	rm -rf "$DIR" "$COST_DIR"
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
	# the WAL of a burst stays on disk until cost.sh's pg_waldump has read
	# it, whatever checkpoints run meanwhile
	# every autovacuum run logged with its CPU (cost.sh reads it back)
	export PF_CLUSTER_EXTRA_CONF="wal_keep_size = '2GB'
log_autovacuum_min_duration = 0"
	if [ "$STATEMENTS" = 1 ]; then
		# a later line wins in postgresql.conf
		preload="payflow,pg_cron"
		[ "$f" = c ] || preload="pg_cron,pg_tle"
		PF_CLUSTER_EXTRA_CONF+="
shared_preload_libraries = '$preload,pg_stat_statements'
pg_stat_statements.track = all
pg_stat_statements.track_planning = on"
	fi
	pf_cluster_start
	[ "$STATEMENTS" != 1 ] || q -c "CREATE EXTENSION pg_stat_statements" >/dev/null
done

# ---- submit only, first, before any edge process drains the outbox ----
# beside pgmq's send() and a raw INSERT in the C cluster; tps[FLAVOUR.KIND]
# holds the rounds' figures, cost.sh's keys are FLAVOUR.KIND
bench_use c
q -f test/bench/peers/vendor/pgmq/pgmq.sql >/dev/null
q -c "SELECT pgmq.create('bench')" \
  -c "CREATE TABLE bench_raw (id bigserial PRIMARY KEY, payment_id text NOT NULL, details jsonb NOT NULL,
							   created_at timestamptz NOT NULL DEFAULT now())" >/dev/null
declare -A tps
submit_runs="c.submit c.pgmq_send c.raw_insert"
! bench_has sql || submit_runs+=" sql.submit"
for round in $(seq 1 "$ROUNDS"); do
	for run in $(bench_rotate "$round" $submit_runs); do
		bench_use "${run%%.*}"
		cost_begin
		out=$("$PF_PGBIN/pgbench" -n -c 4 -j 2 -T "$SUBMIT_SECONDS" -f "test/bench/${run#*.}.sql" "$PF_DB" 2>/dev/null)
		cost_end "$run" "$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")"
		tps[$run]+="$(bench_tps <<<"$out") "
	done
done
declare -A submit_tps
for f in $BENCH_FLAVOURS; do
	bench_use "$f"
	submit_tps[$f]=$(bench_med "${tps[$f.submit]}")
	bench_truncate_payflow
	q -c "VACUUM ANALYZE" >/dev/null
done
bench_use c
q -c "DROP SCHEMA pgmq CASCADE" -c "DROP TABLE bench_raw" >/dev/null 2>&1

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
# the peers, in the C cluster: each installs its schema before answering
use c
for peer in $PEERS; do
	PEER_DATABASE_URL=$PAYFLOW_DATABASE_URL PEER_SCHEMA=${PEER_SCHEMA[$peer]} PEER_CACHE_DIR=$PEER_CACHE \
		node test/bench/peers/chain.mjs "$peer" "${PEER_PORT[$peer]}" >"$DIR/peer-$peer.log" 2>&1 &
	PID[peer.$peer]=$!
done
peer_url() { echo "http://127.0.0.1:${PEER_PORT[$1]}"; }
for peer in $PEERS; do
	deadline=$((SECONDS + 60))
	until curl -fsS "$(peer_url "$peer")/health" >/dev/null 2>&1; do
		if [ $SECONDS -ge $deadline ] || ! kill -0 "${PID[peer.$peer]}" 2>/dev/null; then
			cat "$DIR/peer-$peer.log"
			echo "bench: $peer did not start"
			exit 1
		fi
		sleep 0.2
	done
done

open_ops() {
	q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$1%' AND status NOT IN ('COMPLETED', 'FAILED')"
}
# wait_done PREFIX SECONDS
wait_done() {
	local deadline=$((SECONDS + $2))
	while [ "$(open_ops "$1")" != 0 ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
}

# the invoice API's count: a burst is waited for there, so that no query
# polling PostgreSQL during it adds to its cost
invoices() { curl -fsS "http://127.0.0.1:${INV_PORT[$1]}/_stats" | sed -n 's/.*"invoices":\([0-9]*\).*/\1/p'; }
# wait_invoices FLAVOUR COUNT SECONDS
wait_invoices() {
	local deadline=$((SECONDS + $3))
	while [ "$(invoices "$1")" -lt "$2" ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
}

# warm-up: connections, ODBC sessions, queues
for f in $BENCH_FLAVOURS; do
	use "$f"
	q -c "SELECT count(payflow.submit('warm-' || n, '{\"amount\": 1, \"currency\": \"EUR\"}')) FROM generate_series(1, 20) n" >/dev/null
done
for peer in $PEERS; do
	curl -fsS -X POST "$(peer_url "$peer")/burst?n=100&prefix=warm-" >/dev/null
done
for f in $BENCH_FLAVOURS; do
	use "$f"
	wait_done warm- 60
done

# what cost.sh reports beside PostgreSQL: FLAVOUR's stack, or a peer's node
watch_payflow() {
	local f=$1
	COST_WATCH=()
	cost_watch relay "${PID[$f.relay]}"
	cost_watch payment-worker "${PID[$f.payment]}"
	cost_watch postprocess-worker "${PID[$f.postprocess]}"
	cost_watch invoice-worker "${PID[$f.invoice]}"
	cost_watch fauxqs "$(cat "$DIR/$f/emulator/fauxqs.pid")"
	cost_watch sigv4-front "$(cat "$DIR/$f/emulator/front.pid")"
	cost_watch invoice-api "$(cat "$DIR/$f/invoice-api/server.pid")"
	cost_sqs "http://127.0.0.1:${EMU_PORT[$f]}/_front/calls"
}
watch_peer() {
	COST_WATCH=()
	cost_watch node "${PID[peer.$1]}"
	cost_sqs ""
}

# ---- bursts, interleaved: payflow's flavours and the peers ----
# per flavour or peer, blank-separated lists over the rounds
declare -A burst_rate burst_span burst_submit burst_done peer_rate peer_done
for f in $BENCH_FLAVOURS; do
	use "$f"
	[ "$STATEMENTS" != 1 ] || q -c "SELECT pg_stat_statements_reset()" >/dev/null
done
burst_round() {
	local f=$1 prefix=burst$2- start end invoices0 result n_done span submitted
	use "$f"
	# the same state for every burst: what autovacuum would have done by now
	q -c "VACUUM ANALYZE" >/dev/null
	invoices0=$(invoices "$f")
	watch_payflow "$f"
	cost_begin
	# 100 a statement, each its own transaction, all in one session, as an
	# application's pooled connection sends them.  (A session per statement
	# charged each burst 20 session starts: a new session's first submit
	# takes ~27 ms, compiling PL/pgSQL, loading relation caches and making
	# plans, and 20 sessions of 100 submits cost the backends 1.7 s of CPU
	# against 0.46 s for one session: 0.64 ms per operation.)
	for start in $(seq 1 100 "$OPS"); do
		end=$((start + 99 > OPS ? OPS : start + 99))
		echo "SELECT count(payflow.submit('$prefix' || n, jsonb_build_object('amount', n || '.50', 'currency', 'EUR',
				'customer', 'C-' || (n % 17)))) FROM generate_series($start, $end) n;"
	done | q -v ON_ERROR_STOP=1 >/dev/null
	wait_invoices "$f" $((invoices0 + OPS)) $((OPS / 5 + 120))
	wait_done "$prefix" 60
	cost_end "$f.burst" "$OPS"
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
# OPS chains, from the first enqueue to the last hop-3 completion committed
peer_round() {
	local peer=$1 prefix=chain$2- out n secs
	use c
	q -c "VACUUM ANALYZE" >/dev/null
	watch_peer "$peer"
	cost_begin
	out=$(curl -fsS --max-time 400 -X POST "$(peer_url "$peer")/burst?n=$OPS&prefix=$prefix") || out='{"n":0,"seconds":0}'
	cost_end "peer.$peer" "$OPS"
	n=$(sed -n 's/.*"n":\([0-9]*\).*/\1/p' <<<"$out")
	secs=$(sed -n 's/.*"seconds":\([0-9.]*\).*/\1/p' <<<"$out")
	peer_done[$peer]+="${n:-0} "
	peer_rate[$peer]+="$(awk -v n="${n:-0}" -v s="${secs:-0}" 'BEGIN { printf "%.0f", (s > 0 ? n / s : 0) }') "
	echo "$peer $prefix $(curl -fsS "$(peer_url "$peer")/verify?prefix=$prefix")" >>"$DIR/peer-verify.log"
}
is_peer() { [[ " $PEERS " == *" $1 "* ]]; }
for round in $(seq 1 "$ROUNDS"); do
	for sys in $(bench_rotate "$round" $BENCH_FLAVOURS $PEERS); do
		if is_peer "$sys"; then
			peer_round "$sys" "$round"
		else
			burst_round "$sys" "$round"
		fi
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

# ---- a report holding its snapshot (issue 25) ----
source test/bench/pipeline_snapshot.sh
snapshot_out=
if bench_has c && [ "$SNAPSHOT_SECONDS" -gt 0 ]; then
	snapshot_out=$(snapshot_section)
fi

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
		"submit only (pgbench, 4 clients, $ROUNDS x $SUBMIT_SECONDS s)" "$(printf '%.0f' "${submit_tps[$f]}") operations/s (rounds: $(printf '%.0f ' ${tps[$f.submit]}| sed 's/ $//'))" \
		"end to end, burst of $OPS (submitted in $(bench_med "${burst_submit[$f]}") s)" \
		"${rate[$f]} operations/s (rounds: $(echo ${burst_rate[$f]}); COMPLETED: $(echo ${burst_done[$f]}) in $(echo ${burst_span[$f]}) s)" \
		"  ratio to submit only" "$(bench_ratio "${rate[$f]}" "${submit_tps[$f]}")" \
		"  CPU seconds per burst ($(nproc) cores x ${span} s)" \
		"$(k=$f.burst; awk -v n="$OPS" -v pg="$(cost_med "$k" pg_ms)" -v legacy="$(cost_med "$k" pg_legacy)" \
			-v emu="$(cost_med "$k" proc_fauxqs) $(cost_med "$k" proc_sigv4-front)" -v relay="$(cost_med "$k" proc_relay)" \
			-v w="$(cost_med "$k" proc_payment-worker) $(cost_med "$k" proc_postprocess-worker) $(cost_med "$k" proc_invoice-worker)" \
			-v inv="$(cost_med "$k" proc_invoice-api)" \
			'BEGIN { split(emu, e, " "); split(w, x, " "); d = n / 1000
					 printf "PostgreSQL %.1f (and legacy fixture sessions %.1f), SQS emulator %.1f, relay %.1f, workers %.1f, invoice API %.1f",
					 pg * d, legacy * d, (e[1] + e[2]) * d, relay * d, (x[1] + x[2] + x[3]) * d, inv * d }')" \
		"  the stand-ins' ceiling (issue 25)" \
		"$(k=$f.burst; awk -v cores="$(nproc)" -v rate="${rate[$f]}" -v legacy="$(cost_med "$k" pg_legacy)" \
			-v emu="$(cost_med "$k" proc_fauxqs) $(cost_med "$k" proc_sigv4-front)" -v inv="$(cost_med "$k" proc_invoice-api)" \
			'BEGIN { split(emu, e, " "); ms = legacy + e[1] + e[2] + inv
					 if (ms <= 0) { print "n/a"; exit }
					 ceiling = cores * 1000 / ms
					 printf "%.0f operations/s (%d cores / %.2f ms of the emulator, legacy fixture and invoice API CPU per operation); this burst %.2f of it (aim >= 0.7)",
						 ceiling, cores, ms, rate / ceiling }')" \
		"steady load: $steady_rate/s for ${STEADY_SECONDS} s ($steady_n operations)" \
		"submit -> COMPLETED p50 ${p50} ms, p95 ${p95} ms, p99 ${p99} ms, max ${pmax} ms" \
		"  median per status (from the previous one)" "${stages[$f]}"
	bench_result "$f.burst" "${burst_rate[$f]}"
done
echo
[ -z "$snapshot_out" ] || printf '%s\n\n' "$snapshot_out"
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

# ---- what an operation costs, every system of this run side by side ----
echo "cost per operation (test/bench/cost.sh), medians of $ROUNDS rounds; the peers and pgmq in the C cluster, the same"
echo "rounds interleaved with payflow's; PG CPU = every process of the cluster (legacy fixture sessions apart),"
echo "commits = COMMIT records in the WAL, stmts = pg_stat_statements calls$([ "$STATEMENTS" = 1 ] || echo " (BENCH_PIPELINE_STATEMENTS=1)");"
echo "a peer's operation is a whole 3-hop chain; payflow's idle stack runs during the peers' rounds"
cost_table_header
for f in $BENCH_FLAVOURS; do
	cost_table_row "payflow $(bench_label "$f"): burst of $OPS" "$f.burst" "${burst_rate[$f]}"
done
for peer in $PEERS; do
	cost_table_row "$peer ${PEER_VERSION[$peer]}: 3-hop chains" "peer.$peer" "${peer_rate[$peer]}"
done
cost_table_row "raw single-row INSERT (pgbench)" c.raw_insert "${tps[c.raw_insert]}"
for f in $BENCH_FLAVOURS; do
	cost_table_row "payflow.submit() $(bench_label "$f") (pgbench)" "$f.submit" "${tps[$f.submit]}"
done
cost_table_row "pgmq 1.5.1 SQL-only send() (pgbench)" c.pgmq_send "${tps[c.pgmq_send]}"
echo
for f in $BENCH_FLAVOURS; do
	echo "payflow $(bench_label "$f"), burst of $OPS:"
	cost_detail "$f.burst"
done
for peer in $PEERS; do
	echo "$peer ${PEER_VERSION[$peer]} (rounds: $(echo ${peer_rate[$peer]}) chains/s):"
	cost_detail "peer.$peer"
done
for run in c.submit c.pgmq_send; do
	echo "$run (pgbench):"
	cost_detail "$run"
done
# issue 13's aims, for the C flavour (never a failure: timing is the machine's)
aim() {
	local label=$1 value=$2 op=$3 bound=$4
	printf "  %-60s %8s %s %-8s %s\n" "$label" "$value" "$op" "$bound" \
		"$(awk -v v="$value" -v b="$bound" -v op="$op" 'BEGIN { if (v == "-" || b == "-") print "-"; else print ((op == "<=" ? v <= b : v >= b) ? "met" : "missed") }')"
}
echo
echo "aims (issue 13), payflow C:"
aim "PG CPU ms per operation" "$(cost_fmt %.2f c.burst pg_ms)" "<=" 1.0
! is_peer graphile-worker || aim "PG CPU ms per operation, against graphile-worker's" "$(cost_fmt %.2f c.burst pg_ms)" "<=" \
	"$(cost_fmt %.2f peer.graphile-worker pg_ms)"
aim "commits per operation" "$(cost_fmt %.1f c.burst commits)" "<=" 4
aim "WAL KB per operation" "$(cost_fmt %.1f c.burst wal_kb)" "<=" 8
aim "SQS calls per operation" "$(cost_fmt %.2f c.burst sqs)" "<=" 1.5
aim "end-to-end burst, operations/s" "${rate[c]}" ">=" 500
aim "submit / raw INSERT" "$(bench_ratio "${submit_tps[c]}" "$(bench_med "${tps[c.raw_insert]}")")" ">=" 0.5
echo "  (the relay against a plain SendMessageBatch loop, aim >= 0.8: test/bench/relay.sh)"
echo
if [ "$STATEMENTS" = 1 ]; then
	for f in $BENCH_FLAVOURS; do
		use "$f"
		echo "$(bench_label "$f"): statements by total time during the bursts and the steady load (all databases):"
		q -c "SELECT rpad(round(total_exec_time)::text || ' ms', 10) || rpad(calls::text, 8) ||
					 rpad(round((total_exec_time / calls)::numeric, 3)::text || ' ms', 12) ||
					 left(regexp_replace(query, '\s+', ' ', 'g'), 110)
				FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 15"
		echo
		# where the statements per operation come from: each round trip
		# costs a backend tens of microseconds before any work
		echo "$(bench_label "$f"): statements by calls, payflow's database (top level and nested):"
		q -c "SELECT rpad(calls::text, 8) || rpad(CASE WHEN toplevel THEN 'top' ELSE 'nested' END, 8) ||
					 rpad(round((total_exec_time / calls)::numeric, 3)::text || ' ms', 12) ||
					 left(regexp_replace(query, '\s+', ' ', 'g'), 100)
				FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
			   ORDER BY calls DESC LIMIT 25"
		echo
		# how full the workers' batches are (worker/batch.c): each statement
		# pays a fixed start-up and, at its commit, a WAL flush
		echo "$(bench_label "$f"): steps per worker statement (payment and invoice claim and complete, postprocess runs its hook):"
		q -c "WITH s AS (SELECT sum(calls) FILTER (WHERE query LIKE '%FROM payflow.claim_steps(%') AS claims,
								sum(calls) FILTER (WHERE query LIKE '%FROM payflow.complete_steps(\$1%') AS completions,
								sum(calls) FILTER (WHERE query LIKE '%FROM payflow.run_hook_steps(%') AS hooks
						   FROM pg_stat_statements
						  WHERE toplevel AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())),
				   o AS (SELECT count(*) AS n FROM payflow.operations WHERE status = 'COMPLETED')
			  SELECT format('  claim_steps %s, complete_steps %s, run_hook_steps %s',
							round(2 * o.n / nullif(s.claims, 0), 1), round(2 * o.n / nullif(s.completions, 0), 1),
							round(o.n / nullif(s.hooks, 0), 1))
			    FROM s, o"
		echo
		# plans made: one per session for a statement that keeps a generic
		# plan, more when PostgreSQL keeps choosing custom plans (each call),
		# and again after an ANALYZE of a table the plan reads
		echo "$(bench_label "$f"): statements by planning time, payflow's database (plans made, calls):"
		q -c "SELECT rpad(round(total_plan_time)::text || ' ms', 10) || rpad(plans::text, 7) || rpad(calls::text, 8) ||
					 rpad(round((total_plan_time / greatest(plans, 1))::numeric, 3)::text || ' ms', 12) ||
					 left(regexp_replace(query, '\s+', ' ', 'g'), 90)
				FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
				 AND plans > 0
			   ORDER BY total_plan_time DESC LIMIT 10"
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
	pf_eq "$label: one invoice per completed operation" "$all_ops" "$(invoices "$f")"
done
use c
for peer in $PEERS; do
	pf_eq "$peer: every chain of every burst finished" "$(for r in $(seq 1 "$ROUNDS"); do printf '%s ' "$OPS"; done)" "${peer_done[$peer]}"
	kill -TERM "${PID[peer.$peer]}" && wait "${PID[peer.$peer]}" || true
	unset "PID[peer.$peer]"
	q -c "DROP SCHEMA ${PEER_SCHEMA[$peer]} CASCADE" >/dev/null 2>&1
done
pf_eq "peers: no job left behind" "" "$(grep -v -e '"left":0' -e '^pg-boss .*{"hop1 completed":'"$OPS"',"hop2 completed":'"$OPS"',"hop3 completed":'"$OPS"'}$' "$DIR/peer-verify.log" 2>/dev/null)"
pf_done
