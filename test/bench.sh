#!/bin/bash
# make bench: payflow's throughput beside baselines measured in the same
# cluster and run.  The machine is shared and noisy, so every figure is the
# median of several rounds and the interesting number is the ratio.
#
#   submit:     payflow.submit() vs a raw single-row INSERT (4 clients,
#               synchronous_commit on), and what a NOTIFY per submit costs
#   outbox:     claim + ack rows/s vs a plain SKIP LOCKED delete queue
#   metrics:    payflow.metrics() with nothing and with 300,000 operations
#               retained, beside a plain count per status
set -euo pipefail
cd "$(dirname "$0")/.."
source test/lib/deps.sh
export PF_PGPORT=${PF_BENCH_PGPORT:-54339}
source test/lib/cluster.sh

ROUNDS=${ROUNDS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
CLIENTS=${CLIENTS:-4}

pf_install_deps
make -s >/dev/null && make -s install >/dev/null
pf_cluster_destroy
trap pf_cluster_destroy EXIT
pf_cluster_start
q() { pf_psql -Atq "$@"; }

q -c "SHOW synchronous_commit" | grep -qx on
q -c "CREATE TABLE bench_raw (id bigserial PRIMARY KEY, payment_id text NOT NULL, details jsonb NOT NULL,
								created_at timestamptz NOT NULL DEFAULT now())"

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
tps_of() { grep -oP 'tps = \K[0-9.]+(?= \(without initial)' ; }

run_pgbench() {
	local script=$1
	shift
	"$PF_PGBIN/pgbench" -n -c "$CLIENTS" -j 2 "$@" -f "test/bench/$script" "$PF_DB" 2>/dev/null | tps_of
}

echo "payflow bench: PostgreSQL $(q -c 'SHOW server_version'), $CLIENTS clients, synchronous_commit=on,"
echo "$ROUNDS rounds of ${SECONDS_PER_RUN}s, medians; $(nproc) cores"
echo

declare -A tps
for kind in raw_insert submit submit_notify; do tps[$kind]=""; done
for round in $(seq 1 "$ROUNDS"); do
	# interleaved so that a noisy neighbour hits every kind alike
	for kind in raw_insert submit submit_notify; do
		tps[$kind]+="$(run_pgbench $kind.sql -T "$SECONDS_PER_RUN") "
	done
	# keep the outbox from growing across rounds: it is the relay's job
	q -c "TRUNCATE payflow.outbox" >/dev/null
done
raw=$(echo ${tps[raw_insert]} | tr ' ' '\n' | median)
sub=$(echo ${tps[submit]} | tr ' ' '\n' | median)
notify=$(echo ${tps[submit_notify]} | tr ' ' '\n' | median)

# outbox: pre-filled, every event in its own message group (one per payment)
fill_outbox() {
	q -c "TRUNCATE payflow.outbox" -c "VACUUM ANALYZE payflow.outbox" >/dev/null
	q -c "INSERT INTO payflow.outbox (event_id, operation_id, event_type, destination, message_group_id, body, attributes)
		  SELECT gen_random_uuid(), 'op' || n, 'PaymentRequested', 'payment-requests', 'payment-' || n,
				 jsonb_build_object('eventType', 'PaymentRequested', 'n', n), '{\"eventType\": \"PaymentRequested\"}'
			FROM generate_series(1, $1) n; ANALYZE payflow.outbox" >/dev/null
}
fill_queue() {
	q -c "DROP TABLE IF EXISTS bench_queue; CREATE TABLE bench_queue (id bigserial PRIMARY KEY, body jsonb NOT NULL);
		  INSERT INTO bench_queue (body) SELECT jsonb_build_object('n', n) FROM generate_series(1, $1) n; ANALYZE bench_queue" >/dev/null
}
TX_PER_CLIENT=${TX_PER_CLIENT:-300}
ROWS=$((CLIENTS * TX_PER_CLIENT * 100 + 10000))
claim=""; plain=""
for round in $(seq 1 "$ROUNDS"); do
	fill_outbox "$ROWS"
	claim+="$(run_pgbench claim_ack.sql -t "$TX_PER_CLIENT" | awk '{ print $1 * 100 }') "
	fill_queue "$ROWS"
	plain+="$(run_pgbench skip_locked_delete.sql -t "$TX_PER_CLIENT" | awk '{ print $1 * 100 }') "
done
claim=$(echo $claim | tr ' ' '\n' | median)
plain=$(echo $plain | tr ' ' '\n' | median)

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
printf "%-46s %12s %8s\n" "submit path" "tx/s" "ratio"
printf "%-46s %12.0f %8s\n" "raw single-row INSERT (baseline)" "$raw" "1.00"
printf "%-46s %12.0f %8s\n" "payflow.submit()" "$sub" "$(ratio "$sub" "$raw")"
printf "%-46s %12.0f %8s\n" "payflow.submit() + NOTIFY in the transaction" "$notify" "$(ratio "$notify" "$raw")"
echo
printf "%-46s %12s %8s\n" "outbox (batches of 100, every row its own group)" "rows/s" "ratio"
printf "%-46s %12.0f %8s\n" "plain SKIP LOCKED delete queue (baseline)" "$plain" "1.00"
printf "%-46s %12.0f %8s\n" "payflow.outbox_claim + outbox_ack" "$claim" "$(ratio "$claim" "$plain")"
echo
echo "aims: submit >= 0.50 of raw INSERT; claim + ack >= 20000 rows/s"
echo "NOTIFY per submit costs $(awk -v s="$sub" -v n="$notify" 'BEGIN { printf "%.0f%%", 100 * (s - n) / s }') of submit throughput here; payflow wakes relays from the scheduler worker instead."

# metrics(): scraped every few seconds (the HTTP edge's /metrics), so its
# cost must follow the work in flight, not the retention.  Measured with
# 1,000 operations in flight, then again with 300,000 terminal operations
# (and their 900,000 steps) retained from two days ago; the baseline is a
# plain count per status over the operations table.
ms_of() {
	local sql=$1 i
	for i in 1 2 3 4 5 6 7; do
		q -c '\timing on' -c "$sql" | grep -oP 'Time: \K[0-9.]+' | tail -1
	done | median
}
# buffers (pages) a statement touches: deterministic, unlike time on this machine
metrics_body=$(awk '/^CREATE FUNCTION payflow.metrics/,/^\$\$;/' extension/sql/payflow.sql | sed -n '/AS \$\$/,/^\$\$;/p' | sed '1d;$d')
pages_of() {
	q -c "SET search_path = pg_catalog, payflow" -c "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) $1" |
		awk '/Buffers:/ && !seen { seen = 1; for (i = 1; i <= NF; i++) if ($i ~ /^(hit|read)=/) { split($i, kv, "="); s += kv[2] } }
			 END { print s + 0 }'
}
# the submit rounds above left their operations PENDING: start from none
q -c "TRUNCATE payflow.outbox, payflow.operations, payflow.steps, payflow.operation_history, payflow.payloads" \
  -c "SELECT count(payflow.submit('bench-active-' || n, '{\"amount\": 1}')) FROM generate_series(1, 1000) n" >/dev/null
metrics_small=$(ms_of "SELECT payflow.metrics() IS NOT NULL")
pages_small=$(pages_of "$metrics_body")
q <<-'SQL' >/dev/null
	INSERT INTO payflow.operations (id, payment_id, idempotency_key, request_hash, status, current_step,
									request_ref, created_at, updated_at, terminal_at)
	SELECT 'pay_BENCH' || lpad(g::text, 22, '0'), 'bench-old-' || g, 'bench-old-' || g, '\x00', 'COMPLETED',
		   'CREATE_INVOICE', '{}', now() - interval '2 days', now() - interval '2 days', now() - interval '2 days'
	  FROM generate_series(1, 300000) g;
	INSERT INTO payflow.steps (operation_id, step_name, status, attempt, input_ref, claimed_at, finished_at)
	SELECT 'pay_BENCH' || lpad(g::text, 22, '0'), st, 'SUCCEEDED', 1, '{}', now() - interval '2 days', now() - interval '2 days'
	  FROM generate_series(1, 300000) g, unnest(ARRAY['PROCESS_PAYMENT', 'POST_PROCESS', 'CREATE_INVOICE']) st;
	VACUUM ANALYZE payflow.operations;
	VACUUM ANALYZE payflow.steps;
	SQL
metrics_big=$(ms_of "SELECT payflow.metrics() IS NOT NULL")
pages_big=$(pages_of "$metrics_body")
naive_sql="SELECT status, count(*) FROM payflow.operations GROUP BY status"
naive_big=$(ms_of "$naive_sql")
pages_naive=$(pages_of "$naive_sql")
# a backlog: 100,000 more operations waiting (PENDING), as in an outage
q <<-'SQL' >/dev/null
	INSERT INTO payflow.operations (id, payment_id, idempotency_key, request_hash, request_ref)
	SELECT 'pay_WAIT' || lpad(g::text, 22, '0'), 'bench-wait-' || g, 'bench-wait-' || g, '\x00', '{}'
	  FROM generate_series(1, 100000) g;
	INSERT INTO payflow.steps (operation_id, step_name, input_ref, pending_since)
	SELECT 'pay_WAIT' || lpad(g::text, 22, '0'), 'PROCESS_PAYMENT', '{}', now()
	  FROM generate_series(1, 100000) g;
	VACUUM ANALYZE payflow.operations;
	VACUUM ANALYZE payflow.steps;
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
pf_cluster_destroy
for part in relay worker pipeline api; do
	echo
	echo "== test/bench/$part.sh"
	test/bench/$part.sh || echo "bench $part: FAILED (see above)"
done
