#!/bin/bash
# Cost as the work grows (issue 25, storage v2): the step engine's database
# work per operation (test/bench/step_engine.sql: submit, three steps
# claimed and completed in batches of 10, the relay's claims and acks) in a
# database that retains BENCH_RETAINED_OPS completed operations over the
# last BENCH_RETAINED_DAYS days (test/bench/retained.sql: their rows in
# their days' partitions, as purge would keep them) beside an empty one, in
# the same cluster, rounds interleaved, medians.  The aim: within 1.2x of
# the empty database.  Prints figures, never fails on them.
#
#   BENCH_RETAINED_OPS=1000000  BENCH_RETAINED_DAYS=7  BENCH_STEP_OPS=2000
#   BENCH_RETAINED_ROUNDS=3  PF_BENCH_RETAINED_PGPORT=54365
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/bench/lib.sh
export PF_PGPORT=${PF_BENCH_RETAINED_PGPORT:-54365} PF_FLAVOUR=c
export PF_CLUSTER_DIR=/tmp/payflow-bench-retained-$PF_PGPORT
source test/lib/cluster.sh

RETAINED=${BENCH_RETAINED_OPS:-1000000}
DAYS=${BENCH_RETAINED_DAYS:-7}
OPS=${BENCH_STEP_OPS:-2000}
ROUNDS=${BENCH_RETAINED_ROUNDS:-3}
TICKS=$(getconf CLK_TCK)

bench_build
pf_cluster_destroy
trap 'pf_cluster_destroy' EXIT
pf_cluster_start
for db in pf_empty pf_full; do
	pf_psql -d postgres -qc "CREATE DATABASE $db" >/dev/null
	pf_psql -d "$db" -qc "CREATE EXTENSION payflow" -c "SELECT payflow.purge()" >/dev/null
done
started=$SECONDS
pf_psql -d pf_full -Atq -v run=tpl -v n=1000 -v mode=batch -v batch=10 -v ticks="$TICKS" \
	-f test/bench/step_engine.sql >/dev/null
retained=$(pf_psql -d pf_full -Atq -v run=tpl -v n="$RETAINED" -v days="$DAYS" -f test/bench/retained.sql | tail -n 1)
echo "== cost as the work grows: $OPS operations a round, $ROUNDS rounds, beside $retained retained over $DAYS days" \
	"(filled in $((SECONDS - started)) s; $(pf_psql -d pf_full -Atqc "SELECT pg_size_pretty(pg_database_size('pf_full'))"))"

declare -A CPU WAL
run() {	# run ROUND DB
	local out cpu wal finished
	out=$(pf_psql -d "$2" -Atq -v run="r$1" -v n="$OPS" -v mode=batch -v batch=10 -v ticks="$TICKS" \
		-f test/bench/step_engine.sql | tail -n 1)
	read -r cpu _ wal finished <<<"$out"
	if [ "$finished" != "$OPS" ]; then
		echo "retained: $2 completed $finished of $OPS operations"
		exit 1
	fi
	CPU[$2]+="$(awk -v c="$cpu" -v n="$OPS" 'BEGIN { printf "%.3f", c / n }') "
	WAL[$2]+="$(awk -v w="$wal" -v n="$OPS" 'BEGIN { printf "%.0f", w / n }') "
}
for round in $(seq 1 "$ROUNDS"); do
	for db in $(bench_rotate "$round" pf_empty pf_full); do
		run "$round" "$db"
	done
done
printf '%-34s %12s %12s\n' "" "CPU ms/op" "WAL B/op"
for db in pf_empty pf_full; do
	printf '%-34s %12s %12s\n' "$([ "$db" = pf_empty ] && echo "empty database" || echo "$retained retained")" \
		"$(bench_med "${CPU[$db]}")" "$(bench_med "${WAL[$db]}")"
	bench_result "retained_cpu_ms_$db" "${CPU[$db]}"
done
echo "ratio retained/empty: CPU $(bench_ratio "$(bench_med "${CPU[pf_full]}")" "$(bench_med "${CPU[pf_empty]}")")x," \
	"WAL $(bench_ratio "$(bench_med "${WAL[pf_full]}")" "$(bench_med "${WAL[pf_empty]}")")x (aim: <= 1.2x)" \
	"(rounds: empty [${CPU[pf_empty]% }], retained [${CPU[pf_full]% }])"
