#!/bin/bash
# Issue 27: what a step limit costs the claims and completions that it
# admits.  The PROCESS_PAYMENT steps of N operations are claimed and
# completed by one backend, one commit a call (single-item calls, and
# batches of 10), under three settings of the step, rounds interleaved in
# one database: no limit; max_running alone; max_running, a per-tenant cap
# and a rate.  Every limit is far above what the run needs, so each claim
# is admitted and the figures are the price of enforcing it: the
# step_limits row locked, the running slots counted, a slot recorded and
# deleted.  Backend CPU per step (ms), medians, and each limit's ratio to
# no limit (aim: at most 1.1).  Prints figures, never fails on them.
#
#   BENCH_LIMIT_OPS=2000  BENCH_LIMIT_ROUNDS=3  PF_BENCH_LIMIT_PGPORT=54356
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/bench/lib.sh
export PF_PGPORT=${PF_BENCH_LIMIT_PGPORT:-54356} PF_FLAVOUR=c
export PF_CLUSTER_DIR=/tmp/payflow-bench-limit-$PF_PGPORT
source test/lib/cluster.sh

N=${BENCH_LIMIT_OPS:-2000}
ROUNDS=${BENCH_LIMIT_ROUNDS:-3}
TICKS=$(getconf CLK_TCK)

bench_build
pf_cluster_destroy
trap 'pf_cluster_destroy' EXIT
pf_cluster_start
pf_psql -qc "CREATE EXTENSION IF NOT EXISTS payflow" >/dev/null

limit_sql() {
	case $1 in
		none) echo "SELECT payflow.clear_step_limit('PROCESS_PAYMENT')" ;;
		max) echo "SELECT payflow.clear_step_limit('PROCESS_PAYMENT');
				   SELECT payflow.set_step_limit('PROCESS_PAYMENT', 1000000)" ;;
		all) echo "SELECT payflow.clear_step_limit('PROCESS_PAYMENT');
				   SELECT payflow.set_step_limit('PROCESS_PAYMENT', 1000000, 1000000, 1000000)" ;;
	esac
}

declare -A CLAIM COMPLETE
measure() {	# measure ROUND MODE LIMIT
	local out claim complete claimed
	pf_psql -qc "$(limit_sql "$3")" >/dev/null
	out=$(pf_psql -Atq -F' ' -v run="r$1-$2-$3" -v n="$N" -v mode="$2" -f test/bench/step_limit_claims.sql | tail -n 1)
	read -r claim complete claimed <<<"$out"
	if [ "$claimed" != "$N" ]; then
		echo "step_limit_claims: $2/$3 claimed $claimed of $N"
		exit 1
	fi
	CLAIM[$2:$3]+="$(awk -v t="$claim" -v n="$N" -v hz="$TICKS" 'BEGIN { printf "%.4f", t * 1000 / hz / n }') "
	COMPLETE[$2:$3]+="$(awk -v t="$complete" -v n="$N" -v hz="$TICKS" 'BEGIN { printf "%.4f", t * 1000 / hz / n }') "
	# the operations stay for the next rounds' tables to grow alike
}

for round in $(seq 1 "$ROUNDS"); do
	for mode in single batch; do
		for limit in $(bench_rotate "$round" none max all); do
			measure "$round" "$mode" "$limit"
		done
	done
done
pf_psql -qc "$(limit_sql none)" >/dev/null

echo "== the claims and completions a step limit admits ($N operations a round, $ROUNDS rounds, backend CPU ms per step, medians)"
printf '%-8s %-34s %10s %8s %12s %8s\n' "calls" "limit" "claim" "ratio" "completion" "ratio"
for mode in single batch; do
	base_claim=$(bench_med "${CLAIM[$mode:none]}")
	base_complete=$(bench_med "${COMPLETE[$mode:none]}")
	for limit in none max all; do
		claim=$(bench_med "${CLAIM[$mode:$limit]}")
		complete=$(bench_med "${COMPLETE[$mode:$limit]}")
		case $limit in
			none) label="no limit" ;;
			max) label="max_running" ;;
			all) label="max_running, per tenant, per second" ;;
		esac
		printf '%-8s %-34s %10s %8s %12s %8s\n' "$mode" "$label" "$claim" "$(bench_ratio "$claim" "$base_claim")" \
			"$complete" "$(bench_ratio "$complete" "$base_complete")"
		bench_result "step_limit_claim_ms_${mode}_$limit" "${CLAIM[$mode:$limit]}"
	done
done
echo "(claim rounds: $(for k in "${!CLAIM[@]}"; do printf '%s [%s] ' "$k" "${CLAIM[$k]% }"; done))"
