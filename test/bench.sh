#!/bin/bash
# make bench: payflow's throughput beside baselines measured in the same
# cluster and run.  The machine is shared and noisy, so every figure is the
# median of several rounds and the interesting number is the ratio.
#
#   submit:     payflow.submit() vs a raw single-row INSERT (4 clients,
#               synchronous_commit on), what a NOTIFY per submit costs, and
#               payflow.submit_many() of 100 vs single submits (operations/s)
#   outbox:     claim + ack rows/s vs a plain SKIP LOCKED delete queue
#   metrics:    payflow.metrics() with nothing and with 300,000 operations
#               retained, beside a plain count per status
#
# The submit and outbox sections also run in a second cluster with the
# C-free flavour (dist/payflow--<version>.sql installed by a non-superuser,
# pg_cron running the scheduler: test/lib/cluster.sh with PF_FLAVOUR=sql),
# up at the same time on its own port; rounds of the two flavours are
# interleaved and each figure gets the ratio C-free/C.  The relay and
# pipeline scripts do the same for the relay's commit-to-SQS latency and the
# end-to-end burst; a summary of every C-free/C ratio closes the run.
#
#   ROUNDS=3 SECONDS_PER_RUN=10 CLIENTS=4 TX_PER_CLIENT=300
#   PF_BENCH_PGPORT=54339  PF_BENCH_SQL_PGPORT=54338
#   BENCH_FLAVOURS="c sql"   (c alone: the C extension only)
#   BENCH_PARTS="step_engine step_limit_claims purge retained outbox_log id_width relay worker_scale pipeline api tracing"   the scripts run afterwards
# Each part prints the time it took.
set -euo pipefail
cd "$(dirname "$0")/.."
source test/bench/lib.sh
bench_flavours "${PF_BENCH_PGPORT:-54339}" "${PF_BENCH_SQL_PGPORT:-54338}" bench

bench_started=$SECONDS
ROUNDS=${ROUNDS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
CLIENTS=${CLIENTS:-4}

bench_build
export BENCH_RESULTS
BENCH_RESULTS=$(mktemp /tmp/payflow-bench-results.XXXXXX)
destroy_all() {
	local f
	for f in $BENCH_FLAVOURS; do
		bench_use "$f"
		pf_cluster_destroy
	done
}
destroy_all
trap 'destroy_all; rm -f "$BENCH_RESULTS"' EXIT
for f in $BENCH_FLAVOURS; do
	bench_use "$f"
	pf_cluster_start
	pf_psql -Atq -c "SHOW synchronous_commit" | grep -qx on
	pf_psql -Atq -c "CREATE TABLE bench_raw (id bigserial PRIMARY KEY, payment_id text NOT NULL, details jsonb NOT NULL,
								created_at timestamptz NOT NULL DEFAULT now())"
done
bench_use c
q() { pf_psql -Atq "$@"; }

run_pgbench() {
	local script=$1
	shift
	"$PF_PGBIN/pgbench" -n -c "$CLIENTS" -j 2 "$@" -f "test/bench/$script" "$PF_DB" 2>/dev/null | bench_tps
}

echo "payflow bench: PostgreSQL $(q -c 'SHOW server_version'), $CLIENTS clients, synchronous_commit=on,"
echo "$ROUNDS rounds of ${SECONDS_PER_RUN}s, medians; $(nproc) cores; flavours: $(for f in $BENCH_FLAVOURS; do
	printf '%s (port %s) ' "$(bench_label "$f")" "${BENCH_PGPORT[$f]}"; done)"
echo

# tps[FLAVOUR.KIND]: the rounds' figures
declare -A tps
kinds="raw_insert submit submit_notify submit_many"
for round in $(seq 1 "$ROUNDS"); do
	# interleaved so that a noisy neighbour hits every kind and both
	# flavours alike; each kind runs in both clusters, so they grow alike
	for kind in $kinds; do
		for f in $(bench_order "$round"); do
			bench_use "$f"
			tps[$f.$kind]+="$(run_pgbench $kind.sql -T "$SECONDS_PER_RUN") "
		done
	done
	# keep the outbox from growing across rounds: it is the relay's job
	for f in $BENCH_FLAVOURS; do
		bench_use "$f"
		q -c "TRUNCATE payflow.outbox" >/dev/null
	done
done
bench_use c
declare -A med
for f in $BENCH_FLAVOURS; do
	for kind in $kinds; do
		med[$f.$kind]=$(bench_med "${tps[$f.$kind]}")
	done
done
raw=${med[c.raw_insert]}
sub=${med[c.submit]}
notify=${med[c.submit_notify]}
# submit_many's transactions carry 100 operations each
per_op() { awk -v t="$1" 'BEGIN { printf "%.0f", t * 100 }'; }
many=$(per_op "${med[c.submit_many]}")

# outbox: pre-filled, every event in its own message group (one per payment)
fill_outbox() {
	q -c "TRUNCATE payflow.outbox" -c "VACUUM ANALYZE payflow.outbox" >/dev/null
	q -c "INSERT INTO payflow.outbox (event_id, operation_id, event_type, destination, message_group_id, body)
		  SELECT gen_random_uuid(), 'op' || n, 'PaymentRequested', 'payment-requests', 'payment-' || n,
				 jsonb_build_object('eventType', 'PaymentRequested', 'n', n)
			FROM generate_series(1, $1) n; ANALYZE payflow.outbox" >/dev/null
}
fill_queue() {
	q -c "SET client_min_messages = warning" -c "DROP TABLE IF EXISTS bench_queue; CREATE TABLE bench_queue (id bigserial PRIMARY KEY, body jsonb NOT NULL);
		  INSERT INTO bench_queue (body) SELECT jsonb_build_object('n', n) FROM generate_series(1, $1) n; ANALYZE bench_queue" >/dev/null
}
TX_PER_CLIENT=${TX_PER_CLIENT:-300}
ROWS=$((CLIENTS * TX_PER_CLIENT * 100 + 10000))
declare -A claims
plain=""
for round in $(seq 1 "$ROUNDS"); do
	# each flavour's outbox filled the same way just before its run
	for f in $(bench_order "$round"); do
		bench_use "$f"
		fill_outbox "$ROWS"
		claims[$f]+="$(run_pgbench claim_ack.sql -t "$TX_PER_CLIENT" | awk '{ print $1 * 100 }') "
	done
	bench_use c
	fill_queue "$ROWS"
	plain+="$(run_pgbench skip_locked_delete.sql -t "$TX_PER_CLIENT" | awk '{ print $1 * 100 }') "
done
for f in $BENCH_FLAVOURS; do
	med[$f.claim]=$(bench_med "${claims[$f]}")
done
claim=${med[c.claim]}
plain=$(bench_med "$plain")
# the C-free cluster is not needed any more
if bench_has sql; then
	bench_use sql
	pf_cluster_destroy
fi
bench_use c

printf "%-46s %12s %8s\n" "submit path" "tx/s" "ratio"
printf "%-46s %12.0f %8s\n" "raw single-row INSERT (baseline)" "$raw" "1.00"
printf "%-46s %12.0f %8s\n" "payflow.submit()" "$sub" "$(bench_ratio "$sub" "$raw")"
printf "%-46s %12.0f %8s\n" "payflow.submit() + NOTIFY in the transaction" "$notify" "$(bench_ratio "$notify" "$raw")"
echo
printf "%-46s %12s %8s\n" "many submits at once" "ops/s" "ratio"
printf "%-46s %12.0f %8s\n" "payflow.submit(), one per commit (baseline)" "$sub" "1.00"
printf "%-46s %12.0f %8s\n" "payflow.submit_many() of 100 per commit" "$many" "$(bench_ratio "$many" "$sub")"
echo
printf "%-46s %12s %8s\n" "outbox (batches of 100, every row its own group)" "rows/s" "ratio"
printf "%-46s %12.0f %8s\n" "plain SKIP LOCKED delete queue (baseline)" "$plain" "1.00"
printf "%-46s %12.0f %8s\n" "payflow.outbox_claim + outbox_ack" "$claim" "$(bench_ratio "$claim" "$plain")"
echo
echo "aims: submit >= 0.50 of raw INSERT; submit_many of 100 >= 5x single submits; claim + ack >= 20000 rows/s"
echo "NOTIFY per submit costs $(awk -v s="$sub" -v n="$notify" 'BEGIN { printf "%.0f%%", 100 * (s - n) / s }') of submit throughput here; payflow wakes relays from the scheduler worker instead."
bench_result c.submit "${tps[c.submit]}"
bench_result c.claim "${claims[c]}"
if bench_has sql; then
	echo
	echo "the C-free flavour in its own cluster, the same rounds interleaved with the C flavour's:"
	bench_compare_header "C-free flavour vs C"
	bench_compare_row "raw single-row INSERT, tx/s (the clusters alike)" "${tps[c.raw_insert]}" "${tps[sql.raw_insert]}" %.0f -
	bench_compare_row "payflow.submit(), tx/s" "${tps[c.submit]}" "${tps[sql.submit]}"
	bench_compare_row "payflow.submit() + NOTIFY, tx/s" "${tps[c.submit_notify]}" "${tps[sql.submit_notify]}" %.0f -
	bench_compare_row "payflow.submit_many() of 100, tx/s" "${tps[c.submit_many]}" "${tps[sql.submit_many]}"
	bench_compare_row "outbox_claim + outbox_ack, rows/s" "${claims[c]}" "${claims[sql]}"
	echo "C-free payflow.submit() is $(bench_ratio "${med[sql.submit]}" "${med[sql.raw_insert]}") of its cluster's raw INSERT (C: $(bench_ratio "$sub" "$raw"))"
	bench_result sql.submit "${tps[sql.submit]}"
	bench_result sql.claim "${claims[sql]}"
fi

# metrics(): scraped every few seconds (the HTTP edge's /metrics), so its
# cost must follow the work in flight, not the retention.  Measured with
# 1,000 operations in flight, then again with 300,000 terminal operations
# (and their 900,000 steps) retained from two days ago; the baseline is a
# plain count per status over the operations table.
ms_of() {
	local sql=$1 i
	for i in 1 2 3 4 5 6 7; do
		q -c '\timing on' -c "$sql" | grep -oP 'Time: \K[0-9.]+' | tail -1
	done | bench_median
}
# buffers (pages) a statement touches: deterministic, unlike time on this machine
metrics_body=$(awk '/^CREATE (OR REPLACE )?FUNCTION payflow.metrics\(/,/^\$\$;/' extension/sql/metrics.sql | sed -n '/AS \$\$/,/^\$\$;/p' | sed '1d;$d')
pages_of() {
	q -c "SET search_path = pg_catalog, payflow" -c "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) $1" |
		awk '/Buffers:/ && !seen { seen = 1; for (i = 1; i <= NF; i++) if ($i ~ /^(hit|read)=/) { split($i, kv, "="); s += kv[2] } }
			 END { print s + 0 }'
}
# the submit rounds above left their operations PENDING: start from none
bench_truncate_payflow
q -c "SELECT count(payflow.submit('bench-active-' || n, '{\"amount\": 1}')) FROM generate_series(1, 1000) n" >/dev/null
metrics_small=$(ms_of "SELECT payflow.metrics() IS NOT NULL")
pages_small=$(pages_of "$metrics_body")
q <<-'SQL' >/dev/null
	INSERT INTO payflow.operations (id, payment_id, idempotency_key, status, current_step,
									request_ref, created_at, updated_at, terminal_at)
	SELECT 'pay_BENCH' || lpad(g::text, 22, '0'), 'bench-old-' || g, 'bench-old-' || g, 'COMPLETED',
		   'CREATE_INVOICE', '{}', now() - interval '2 days', now() - interval '2 days', now() - interval '2 days'
	  FROM generate_series(1, 300000) g;
	INSERT INTO payflow.step_results (operation_id, step_name, attempt, created_at, claimed_at, finished_at)
	SELECT 'pay_BENCH' || lpad(g::text, 22, '0'), st, 1, now() - interval '2 days', now() - interval '2 days',
		   now() - interval '2 days'
	  FROM generate_series(1, 300000) g, unnest(ARRAY['PROCESS_PAYMENT', 'POST_PROCESS', 'CREATE_INVOICE']) st;
	VACUUM ANALYZE payflow.operations;
	VACUUM ANALYZE payflow.step_results;
	SQL
metrics_big=$(ms_of "SELECT payflow.metrics() IS NOT NULL")
pages_big=$(pages_of "$metrics_body")
naive_sql="SELECT status, count(*) FROM payflow.operations GROUP BY status"
naive_big=$(ms_of "$naive_sql")
pages_naive=$(pages_of "$naive_sql")
# a backlog: 100,000 more operations waiting (PENDING), as in an outage
q <<-'SQL' >/dev/null
	INSERT INTO payflow.operations (id, payment_id, idempotency_key, request_ref)
	SELECT 'pay_WAIT' || lpad(g::text, 22, '0'), 'bench-wait-' || g, 'bench-wait-' || g, '{}'
	  FROM generate_series(1, 100000) g;
	VACUUM ANALYZE payflow.operations;
	SQL
metrics_backlog=$(ms_of "SELECT payflow.metrics() IS NOT NULL")
pages_backlog=$(pages_of "$metrics_body")
echo
printf "%-62s %10s %8s\n" "payflow.metrics(), 1,000 operations in flight" "ms" "pages"
printf "%-62s %10.1f %8s\n" "... nothing retained" "$metrics_small" "$pages_small"
printf "%-62s %10.1f %8s\n" "... 300,000 terminal operations retained" "$metrics_big" "$pages_big"
printf "%-62s %10.1f %8s\n" "baseline: count per status over all operations (300,000)" "$naive_big" "$pages_naive"
printf "%-62s %10.1f %8s\n" "payflow.metrics() with 101,000 in flight (a backlog)" "$metrics_backlog" "$pages_backlog"

# The edge processes' benchmarks, each with its own cluster and emulator:
# this one is no longer needed and would only take memory and CPU from them.
destroy_all
echo "(submit, outbox and metrics took $((SECONDS - bench_started)) s)"
for part in ${BENCH_PARTS-step_engine step_limit_claims purge retained outbox_log id_width relay worker_scale pipeline api tracing}; do
	echo
	echo "== test/bench/$part.sh"
	part_started=$SECONDS
	test/bench/$part.sh || echo "bench $part: FAILED (see above)"
	echo "(test/bench/$part.sh took $((SECONDS - part_started)) s)"
done

# Every C-free/C figure of this run in one table (the scripts above wrote
# theirs to $BENCH_RESULTS).
if bench_has sql; then
	declare -A res
	while read -r k v; do res[$k]=$v; done <"$BENCH_RESULTS"
	summary_row() {
		local label=$1 key=$2
		shift 2
		if [ -n "${res[c.$key]:-}" ] && [ -n "${res[sql.$key]:-}" ]; then
			bench_compare_row "$label" "${res[c.$key]}" "${res[sql.$key]}" "$@"
		else
			printf "%-50s %s\n" "$label" "(not measured: its script failed or did not run)"
		fi
	}
	echo
	echo "== C-free flavour vs C extension, this run (medians of interleaved rounds; details above)"
	bench_compare_header "measure"
	summary_row "submit: payflow.submit(), tx/s" submit
	summary_row "outbox: claim + ack, rows/s" claim
	summary_row "pipeline: end-to-end burst, operations/s" burst
	summary_row "relay: commit-to-SQS latency p50, ms" relay_sqs_p50 %.0f -
	summary_row "relay: commit-to-SQS latency p95, ms" relay_sqs_p95 %.0f -
	echo "(C-free: no wake-up per commit; run_scheduler's NOTIFY from pg_cron at most once a second,"
	echo " and the relay's fallback poll every PAYFLOW_POLL_INTERVAL_MS, 1000 ms by default)"
fi
echo
echo "make bench took $((SECONDS - bench_started)) s"
