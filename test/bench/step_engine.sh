#!/bin/bash
# The database work per operation of the step engine, measured in the
# same cluster and run against the previous release: BENCH_STEP_OPS
# operations from submit to COMPLETED (three no-op steps, a relay claiming
# and acking 100 events at a time), one COMMIT per call as the edge
# processes make them (test/bench/step_engine.sql), in three databases:
#
#   0.3.0 single   payflow 0.3.0 (CREATE EXTENSION ... VERSION '0.3.0'),
#                  claim_step + payload_get + complete_step per step: the
#                  baseline, what 0.3 cost
#   0.4.1 batch    the last release, claim_steps + complete_steps of 10
#                  (payflow-worker 0.4): what storage v2 is measured against
#   CUR single     the current version (CUR), the same single-item calls
#   CUR batch      claim_steps + complete_steps of 10
#
# Then a worker's batch claim with a backlog in flight (claim_backlog.sql):
# 1,000 and 20,000 operations open, planned on statistics taken before the
# backlog, for 0.4.1 and the current version.
#
# Then a step call's cost and an item's (step_call_cost.sql): claim_steps
# and complete_steps calls of 1 and of 10 items, for 0.4.1 and the current
# version.
#
# Then the relay's claim after VACUUM of an empty outbox (outbox_vacuum.sql):
# the time BENCH_STEP_OPS events take to drain in a session whose outbox_claim plan was
# made for the truncated, empty table, beside a round with fresh statistics,
# for both versions (autovacuum off on the outbox meanwhile, so no ANALYZE
# comes to the rescue).  The aim: within 0.9x of the normal round.
#
# Then the relay's claim while another session holds a snapshot open
# (outbox_snapshot.sql): the time a drain of BENCH_STEP_OPS events in claims
# of 10 takes after as many were drained before, with and without a
# REPEATABLE READ transaction open in another session meanwhile, for both
# versions.  0.4.0's claim starts where the live rows begin
# (payflow._outbox_cursor).
#
# Rounds interleaved (the order rotates), medians.  Per operation: the
# backend's CPU (from /proc/self/stat; one backend does all the work, no
# other client runs), commits and WAL bytes.  The edge processes, SQS and
# the scheduler's NOTIFYs are not in it: test/bench/pipeline.sh measures
# the whole pipeline.  Prints figures, never fails on them.
#
#   BENCH_STEP_OPS=2000  BENCH_STEP_ROUNDS=3  PF_BENCH_STEP_PGPORT=54367  BENCH_STEP_CALL_OPS=1000
#   BENCH_STEP_BACKLOG_SMALL=1000  BENCH_STEP_BACKLOG_LARGE=20000
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/bench/lib.sh
export PF_PGPORT=${PF_BENCH_STEP_PGPORT:-54367} PF_FLAVOUR=c
export PF_CLUSTER_DIR=/tmp/payflow-bench-step-$PF_PGPORT
source test/lib/cluster.sh

OPS=${BENCH_STEP_OPS:-2000}
ROUNDS=${BENCH_STEP_ROUNDS:-3}
TICKS=$(getconf CLK_TCK)

bench_build
pf_cluster_destroy
trap 'pf_cluster_destroy' EXIT
pf_cluster_start
for db in pf_v030 pf_v041 pf_v040; do
	pf_psql -d postgres -qc "CREATE DATABASE $db" >/dev/null
done
# 0.3.0 as released: its full script built from tag v0.3.0 (test/lib/released.sh)
source test/lib/released.sh
released_dir=$(mktemp -d)
trap 'pf_released_cleanup; rm -rf "$released_dir"; pf_cluster_destroy' EXIT
pf_released_install 0.3.0 "$released_dir" || { echo "the step engine bench needs 0.3.0's released commit (extension/released-versions)"; exit 1; }
pf_psql -d pf_v030 -qc "CREATE EXTENSION payflow VERSION '0.3.0'" >/dev/null
pf_released_install 0.4.1 "$released_dir" || { echo "the step engine bench needs 0.4.1's released commit (extension/released-versions)"; exit 1; }
pf_psql -d pf_v041 -qc "CREATE EXTENSION payflow VERSION '0.4.1'" >/dev/null
pf_psql -d pf_v040 -qc "CREATE EXTENSION payflow" >/dev/null
# its days' partitions, as purge makes them in production (0.5.0,
# partitions.sql): the rounds write into today's
pf_psql -d pf_v040 -qc "SELECT payflow.purge()" >/dev/null
echo "== step engine: database work per operation ($OPS operations a round, $ROUNDS rounds, payflow $(pf_psql -d pf_v040 -Atqc "SELECT extversion FROM pg_extension WHERE extname = 'payflow'") vs 0.3.0)"

declare -A CPU COMMITS WAL
run() {	# run ROUND LABEL DB MODE BATCH
	local out cpu commits wal finished
	out=$(pf_psql -d "$3" -Atq -v run="r$1-$4" -v n="$OPS" -v mode="$4" -v batch="$5" -v ticks="$TICKS" \
		-f test/bench/step_engine.sql | tail -n 1)
	read -r cpu commits wal finished <<<"$out"
	if [ "$finished" != "$OPS" ]; then
		echo "step_engine: $2 completed $finished of $OPS operations"
		exit 1
	fi
	CPU[$2]+="$(awk -v c="$cpu" -v n="$OPS" 'BEGIN { printf "%.3f", c / n }') "
	COMMITS[$2]+="$(awk -v c="$commits" -v n="$OPS" 'BEGIN { printf "%.2f", c / n }') "
	WAL[$2]+="$(awk -v w="$wal" -v n="$OPS" 'BEGIN { printf "%.0f", w / n }') "
}
cur=$(pf_psql -d pf_v040 -Atqc "SELECT extversion FROM pg_extension WHERE extname = 'payflow'")
labels=("0.3.0-single" "0.4.1-batch" "$cur-single" "$cur-batch")
for round in $(seq 1 "$ROUNDS"); do
	for label in $(bench_rotate "$round" "${labels[@]}"); do
		case $label in
			0.3.0-single) run "$round" "$label" pf_v030 single 1 ;;
			0.4.1-batch) run "$round" "$label" pf_v041 batch 10 ;;
			"$cur-single") run "$round" "$label" pf_v040 single 1 ;;
			"$cur-batch") run "$round" "$label" pf_v040 batch 10 ;;
		esac
	done
done

printf '%-14s %12s %12s %12s %10s\n' "" "CPU ms/op" "commits/op" "WAL B/op" "CPU ratio"
base=$(bench_med "${CPU[0.3.0-single]}")
for label in "${labels[@]}"; do
	cpu=$(bench_med "${CPU[$label]}")
	printf '%-14s %12s %12s %12s %10s\n' "$label" "$cpu" "$(bench_med "${COMMITS[$label]}")" \
		"$(bench_med "${WAL[$label]}")" "$(bench_ratio "$cpu" "$base")"
	bench_result "step_engine_cpu_ms_$label" "${CPU[$label]}"
done
echo "(rounds: $(for l in "${labels[@]}"; do printf '%s [%s] ' "$l" "${CPU[$l]% }"; done))"

# ---- a worker's batch claim with a backlog in flight (claim_backlog.sql):
# milliseconds a claim_steps of ten with SMALL and LARGE operations open,
# in a database made for each run, both versions, rounds interleaved.  The
# aim: the same cost whatever the backlog.
BACKLOG_SMALL=${BENCH_STEP_BACKLOG_SMALL:-1000}
BACKLOG_LARGE=${BENCH_STEP_BACKLOG_LARGE:-20000}
declare -A BACKLOG
backlog_claim() {	# backlog_claim VERSION N: prints ms a batch
	PGOPTIONS="-c client_min_messages=warning" pf_psql -d postgres -qc "DROP DATABASE IF EXISTS pf_backlog" \
		-c "CREATE DATABASE pf_backlog" >/dev/null
	pf_psql -d pf_backlog -qc "CREATE EXTENSION payflow VERSION '$1'" -c "SELECT payflow.purge()" >/dev/null
	pf_psql -d pf_backlog -Atq -v n="$2" -f test/bench/claim_backlog.sql | tail -n 1
}
for round in $(seq 1 "$ROUNDS"); do
	for case in $(bench_rotate "$round" "0.4.1:$BACKLOG_SMALL" "0.4.1:$BACKLOG_LARGE" "$cur:$BACKLOG_SMALL" "$cur:$BACKLOG_LARGE"); do
		BACKLOG[$case]+="$(backlog_claim "${case%:*}" "${case#*:}") "
	done
done
pf_psql -d postgres -qc "DROP DATABASE pf_backlog" >/dev/null
echo "== a worker's claim_steps of ten with a backlog in flight, planned on statistics from before it (ms a batch)"
printf '%-8s %16s %16s %12s\n' "" "$BACKLOG_SMALL open" "$BACKLOG_LARGE open" "large/small"
for v in 0.4.1 "$cur"; do
	small=$(bench_med "${BACKLOG[$v:$BACKLOG_SMALL]}")
	large=$(bench_med "${BACKLOG[$v:$BACKLOG_LARGE]}")
	printf '%-8s %16s %16s %12s\n' "$v" "$small" "$large" "$(bench_ratio "$large" "$small")"
	bench_result "claim_backlog_ms_${v}_$BACKLOG_LARGE" "${BACKLOG[$v:$BACKLOG_LARGE]}"
done

# ---- a step call's fixed cost and its cost an item (step_call_cost.sql):
# backend CPU a claim_steps and a complete_steps call of 1 and of 10 items,
# both versions, rounds interleaved; a call's share is what one item costs
# beyond an item's share ((10-item call - 1-item call) / 9).
CALL_OPS=${BENCH_STEP_CALL_OPS:-1000}
declare -A CALL
for round in $(seq 1 "$ROUNDS"); do
	for case in $(bench_rotate "$round" pf_v041:1 pf_v041:10 pf_v040:1 pf_v040:10); do
		CALL[$case]+="$(pf_psql -d "${case%:*}" -Atq -v run="c$round-${case#*:}" -v n="$CALL_OPS" -v batch="${case#*:}" -f test/bench/step_call_cost.sql | tail -n 1) "
	done
done
echo "== a step call's cost and an item's, backend CPU us ($CALL_OPS operations, calls of 1 and of 10 items)"
printf '%-8s %16s %16s %16s %16s\n' "" "claim: a call" "an item" "complete: a call" "an item"
for db in pf_v041 pf_v040; do
	one=${CALL[$db:1]} ten=${CALL[$db:10]}
	c1=$(bench_med "$(for x in $one; do printf '%s ' "${x%|*}"; done)")
	c10=$(bench_med "$(for x in $ten; do printf '%s ' "${x%|*}"; done)")
	p1=$(bench_med "$(for x in $one; do printf '%s ' "${x#*|}"; done)")
	p10=$(bench_med "$(for x in $ten; do printf '%s ' "${x#*|}"; done)")
	awk -v v="$([ "$db" = pf_v041 ] && echo 0.4.1 || echo "$cur")" -v c1="$c1" -v c10="$c10" -v p1="$p1" -v p10="$p10" \
		'BEGIN { ci = (c10 - c1) / 9; pi = (p10 - p1) / 9
				 printf "%-8s %16.0f %16.0f %16.0f %16.0f\n", v, c1 - ci, ci, p1 - pi, pi }'
done

# ---- the relay's claim after VACUUM, and while a snapshot is held
# Each part drains with and without its condition (FLAG 1 and 0), for both
# versions, rounds interleaved: drain_NAME ROUND DB FLAG prints milliseconds.
declare -A MS
drain_part() {	# drain_part NAME
	local round case
	for round in $(seq 1 "$ROUNDS"); do
		for case in $(bench_rotate "$round" pf_v030:1 pf_v030:0 pf_v040:1 pf_v040:0); do
			MS[$1:$case]+="$("drain_$1" "$round" "${case%:*}" "${case#*:}") "
		done
	done
}
drain_table() {	# drain_table NAME TITLE WITHOUT-LABEL WITH-LABEL RATIO-LABEL
	local db without with
	echo "== $2"
	printf '%-8s %16s %16s %22s\n' "" "$3" "$4" "$5"
	for db in pf_v030 pf_v040; do
		without=$(bench_med "${MS[$1:$db:0]}")
		with=$(bench_med "${MS[$1:$db:1]}")
		printf '%-8s %16.0f %16.0f %22s\n' "${db#pf_v}" "$without" "$with" "$(bench_ratio "$without" "$with")x"
	done
}

drain_vacuum() {
	pf_psql -d "$2" -Atq -v run="v$1-$2-$3" -v n="$OPS" -v after_vacuum="$3" \
		-f test/bench/outbox_vacuum.sql | tail -n 1
}
for db in pf_v030 pf_v040; do
	pf_psql -d "$db" -qc "ALTER TABLE payflow.outbox SET (autovacuum_enabled = false)" >/dev/null
done
drain_part vacuum
drain_table vacuum "the relay's outbox_claim after VACUUM of an empty outbox ($OPS events drained, ms)" \
	"fresh statistics" "after VACUUM" "speed after/fresh"

# with FLAG 1, a REPEATABLE READ transaction holds its snapshot in another
# session until the drain is over
drain_snapshot() {
	local holder="" ms
	if [ "$3" = 1 ]; then
		pf_psql -d "$2" -qc "SET application_name = 'bench-snapshot-holder'" \
			-c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM payflow.operations" \
			-c "SELECT pg_sleep(3600)" >/dev/null 2>&1 &
		holder=$!
		until [ "$(pf_psql -d "$2" -Atqc "SELECT count(*) FROM pg_stat_activity
				WHERE application_name = 'bench-snapshot-holder' AND backend_xmin IS NOT NULL")" = 1 ]; do
			sleep 0.1
		done
	fi
	ms=$(pf_psql -d "$2" -Atq -v run="s$1-$2-$3" -v n="$OPS" -f test/bench/outbox_snapshot.sql | tail -n 1)
	if [ -n "$holder" ]; then
		pf_psql -d "$2" -Atqc "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE application_name = 'bench-snapshot-holder'" >/dev/null
		wait "$holder" 2>/dev/null || true
	fi
	echo "$ms"
}
for db in pf_v030 pf_v040; do
	pf_psql -d "$db" -qc "ALTER TABLE payflow.outbox RESET (autovacuum_enabled)" >/dev/null
done
drain_part snapshot
drain_table snapshot "the relay's outbox_claim while another session holds a snapshot ($OPS events drained 10 a claim after as many, ms)" \
	"no snapshot held" "snapshot held" "speed held/none"
