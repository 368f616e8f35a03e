#!/bin/bash
# A day's purge (issue 25, storage v2 phase 4): WAL and time per purged
# operation when the operations' rows are dropped with their day's
# partitions, beside the row-by-row purge of the same rows in the same run
# (their day without partitions: the rows in the default partitions, as
# 0.4 purged every operation).  Each round: BENCH_PURGE_OPS operations
# from submit to COMPLETED (test/bench/step_engine.sql, batches of 10),
# moved to a day past retention_completed (test/bench/purge.sql), then
# VACUUM, CHECKPOINT and purge() until it has no more.  Both include the
# operations' own rows (a heap delete each) and their events in the outbox
# log (row by row: the terminal event with its operation, the others by
# purge's pass over the published log; by day: with the day's
# partitions) and the batches that published them (row by row, or their
# hour's partition).  The aim: <= 0.2 KB of WAL per purged
# operation and <= 1 s whatever the volume.  Rounds interleaved, medians;
# prints figures, never fails on them.
#
#   BENCH_PURGE_OPS=5000  BENCH_PURGE_ROUNDS=3  PF_BENCH_PURGE_PGPORT=54366
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/bench/lib.sh
export PF_PGPORT=${PF_BENCH_PURGE_PGPORT:-54366} PF_FLAVOUR=c
export PF_CLUSTER_DIR=/tmp/payflow-bench-purge-$PF_PGPORT
source test/lib/cluster.sh

OPS=${BENCH_PURGE_OPS:-5000}
ROUNDS=${BENCH_PURGE_ROUNDS:-3}
TICKS=$(getconf CLK_TCK)

bench_build
pf_cluster_destroy
trap 'pf_cluster_destroy' EXIT
pf_cluster_start
pf_psql -d postgres -qc "CREATE DATABASE pf_purge" >/dev/null
pf_psql -d pf_purge -qc "CREATE EXTENSION payflow" >/dev/null
# today's partitions first, so that both modes write alike
pf_psql -d pf_purge -qc "SELECT payflow.purge()" >/dev/null
echo "== a day's purge: $OPS operations a round, $ROUNDS rounds (WAL and time per purged operation)"

declare -A WAL MS
# days-lz4: the same as days with wal_compression = lz4, which shrinks the
# full-page images (the operations' heap pages, most of what is left)
compression() {
	pf_psql -d postgres -qc "ALTER SYSTEM SET wal_compression = '$1'" -c "SELECT pg_reload_conf()" >/dev/null
}
run() {	# run ROUND MODE
	local run="p$1${2//-/}" day out wal ms purged dropped calls
	pf_psql -d pf_purge -Atq -v run="$run" -v n="$OPS" -v mode=batch -v batch=10 -v ticks="$TICKS" \
		-f test/bench/step_engine.sql >/dev/null
	# a day of its own per round and mode, long past retention_completed
	day=$(pf_psql -d pf_purge -Atqc "SELECT (now() AT TIME ZONE 'UTC')::date - 10 - 3 * $1
												 - CASE '$2' WHEN 'rows' THEN 0 WHEN 'days' THEN 1 ELSE 2 END")
	[ "$2" != days-lz4 ] || compression lz4
	out=$(pf_psql -d pf_purge -Atq -v run="$run" -v mode="${2%-lz4}" -v day="$day" -f test/bench/purge.sql | tail -n 1)
	[ "$2" != days-lz4 ] || compression off
	read -r wal ms purged dropped calls <<<"$out"
	if [ "$purged" != "$OPS" ]; then
		echo "purge: $2 purged $purged of $OPS operations"
		exit 1
	fi
	WAL[$2]+="$(awk -v w="$wal" -v n="$OPS" 'BEGIN { printf "%.0f", w / n }') "
	MS[$2]+="$ms "
	echo "  round $1 $2: $((wal / 1024)) KB of WAL, $ms ms, $dropped partitions dropped, $calls purge call(s)"
}
for round in $(seq 1 "$ROUNDS"); do
	for mode in $(bench_rotate "$round" rows days days-lz4); do
		run "$round" "$mode"
	done
done

printf '%-28s %14s %14s %14s\n' "" "WAL B/op" "ms in all" "ms per 1k ops"
for mode in rows days days-lz4; do
	wal=$(bench_med "${WAL[$mode]}")
	ms=$(bench_med "${MS[$mode]}")
	case $mode in
		rows) label="row by row (0.4's way)" ;;
		days) label="day's partitions dropped" ;;
		*) label="... wal_compression = lz4" ;;
	esac
	printf '%-28s %14s %14s %14s\n' "$label" \
		"$wal" "$ms" "$(awk -v m="$ms" -v n="$OPS" 'BEGIN { printf "%.1f", m * 1000 / n }')"
	bench_result "purge_wal_bytes_per_op_$mode" "${WAL[$mode]}"
done
echo "ratio days/rows: WAL $(bench_ratio "$(bench_med "${WAL[days]}")" "$(bench_med "${WAL[rows]}")")x," \
	"time $(bench_ratio "$(bench_med "${MS[days]}")" "$(bench_med "${MS[rows]}")")x (aims: <= 200 B/op, <= 1 s)"
echo "(most of what is left is the full-page image of each operations heap page a purge deletes from," \
	"once per page after a checkpoint: the operations' own rows are not partitioned, docs/design.md)"
