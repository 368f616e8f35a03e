#!/bin/bash
# Storage v2, phase 1 (issue 25; the design in docs/design.md): what the
# outbox costs the database per event, beside the emission log the first
# plan priced, measured in the same cluster and run (test/bench/
# outbox_log.sql).  BENCH_OUTBOX_EVENTS events, written BENCH_OUTBOX_BATCH
# to a transaction and relayed as many at a time:
#
#   now   payflow._outbox_write_all (0.5.0: the log row, without the body's
#         envelope, with two index entries; the unlogged work list's row),
#         outbox_claim (an update of the work list: no WAL), outbox_ack (a
#         delete from it and one outbox_batches row per ack); 0.4 updated,
#         deleted and logged every event in logged tables
#   log   a prototype of the plan in a scratch schema: an insert-only row
#         per event without its body (~110 bytes, one index entry), the
#         body rendered at read from the operation's write-once fields,
#         one row per batch sent and one update of the lane's cursor
#
# Rounds interleaved, medians.  WAL bytes per event of the writes and of
# the relay's side, and the relay side's milliseconds per event (one
# session, no other client).  The prototype has no retry table, no lane
# lease and no partitions: it prices the rows the design writes, not the
# design's every path.  Prints figures, never fails on them.
#
#   BENCH_OUTBOX_EVENTS=20000  BENCH_OUTBOX_BATCH=10  BENCH_OUTBOX_ROUNDS=3  PF_BENCH_OUTBOX_PGPORT=54357
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/bench/lib.sh
export PF_PGPORT=${PF_BENCH_OUTBOX_PGPORT:-54357} PF_FLAVOUR=c
export PF_CLUSTER_DIR=/tmp/payflow-bench-outbox-$PF_PGPORT
source test/lib/cluster.sh

N=${BENCH_OUTBOX_EVENTS:-20000}
BATCH=${BENCH_OUTBOX_BATCH:-10}
ROUNDS=${BENCH_OUTBOX_ROUNDS:-3}

bench_build
pf_cluster_destroy
trap 'pf_cluster_destroy' EXIT
pf_cluster_start
# no scheduler, no NOTIFY: only what the round does writes WAL
pf_psql -qc "ALTER SYSTEM SET payflow.scheduler_naptime = '1h'" -c "SELECT pg_reload_conf()" >/dev/null
pf_psql -q >/dev/null <<SQL
CREATE SCHEMA bench_log;
CREATE TABLE bench_log.ops (id text COLLATE "C" PRIMARY KEY, payment_id text, correlation_id text, request_ref jsonb);
INSERT INTO bench_log.ops
SELECT 'pay_bench' || lpad(g::text, 21, '0'), 'bench-' || g, 'corr-' || g,
	   jsonb_build_object('store', 'pg', 'key', 'payments/pay_x/request.json', 'checksum', 'sha256:' || repeat('ab', 32), 'size', 120)
  FROM generate_series(0, $N) g;
CREATE TABLE bench_log.emissions (
	seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	lane smallint NOT NULL,
	operation_id text COLLATE "C" NOT NULL,
	event_id uuid NOT NULL,
	kind smallint NOT NULL,
	attempt integer NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE bench_log.batches (lane smallint NOT NULL, seqs bigint[] NOT NULL, message_ids text[] NOT NULL,
								 published_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE bench_log.lanes (lane smallint PRIMARY KEY, cursor bigint NOT NULL, moved_at timestamptz);
CREATE INDEX ON bench_log.emissions (lane, seq);
SQL

declare -A WW RW MS
reset_log() {
	pf_psql -qc "TRUNCATE bench_log.emissions, bench_log.batches, bench_log.lanes" \
		-c "INSERT INTO bench_log.lanes SELECT g, 0 FROM generate_series(0, 3) g" \
		-c "TRUNCATE payflow.outbox, payflow.outbox_events, payflow.outbox_batches" -c "CHECKPOINT" >/dev/null
}
for round in $(seq 1 "$ROUNDS"); do
	for mode in $(bench_rotate "$round" now log); do
		reset_log
		read -r w r ms < <(PGOPTIONS="-c bench.n=$N -c bench.batch=$BATCH -c bench.mode=$mode" \
			pf_psql -Atq -f test/bench/outbox_log.sql | tail -n 1)
		WW[$mode]+="$(awk -v w="$w" -v n="$N" 'BEGIN { printf "%.0f", w / n }') "
		RW[$mode]+="$(awk -v w="$r" -v n="$N" 'BEGIN { printf "%.0f", w / n }') "
		MS[$mode]+="$(awk -v m="$ms" -v n="$N" 'BEGIN { printf "%.4f", m / n }') "
	done
done

echo "== outbox per event: today's outbox beside the emission log of storage v2 ($N events, $BATCH a transaction and a claim, $ROUNDS rounds, medians)"
printf '%-6s %16s %16s %16s %18s\n' "" "write WAL B" "relay WAL B" "total WAL B" "relay ms/event"
for mode in now log; do
	ww=$(bench_med "${WW[$mode]}")
	rw=$(bench_med "${RW[$mode]}")
	printf '%-6s %16s %16s %16s %18s\n' "$mode" "$ww" "$rw" "$((ww + rw))" "$(bench_med "${MS[$mode]}")"
done
printf '%-6s %16s %16s %16s %18s\n' "log/now" \
	"$(bench_ratio "$(bench_med "${WW[log]}")" "$(bench_med "${WW[now]}")")" \
	"$(bench_ratio "$(bench_med "${RW[log]}")" "$(bench_med "${RW[now]}")")" \
	"$(bench_ratio "$(($(bench_med "${WW[log]}") + $(bench_med "${RW[log]}")))" "$(($(bench_med "${WW[now]}") + $(bench_med "${RW[now]}")))")" \
	"$(bench_ratio "$(bench_med "${MS[log]}")" "$(bench_med "${MS[now]}")")"
echo "(rounds: now write [${WW[now]% }] relay [${RW[now]% }]; log write [${WW[log]% }] relay [${RW[log]% }])"
