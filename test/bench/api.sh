#!/bin/bash
# payflow-api's POST /payments under wrk, beside payflow.submit() through
# pgbench in the same cluster and run, at the same concurrency:
#
#   pgbench submit        test/bench/submit.sql (payflow.submit, no tenant)
#   pgbench API statement test/bench/api_submit.sql as pf_api: the very
#                         statement the API sends (authenticate + submit +
#                         the status of a replay), extended protocol
#   wrk POST /payments    test/bench/api_post.lua, unique payment ids, CLIENTS
#                         connections, then 8x CLIENTS connections (the pool
#                         stays at CLIENTS connections: the rest queue)
#
# requests/s, p50 and p99 latency (ms), medians of ROUNDS rounds of
# SECONDS_PER_RUN s, interleaved (each round starts with another kind); the
# outbox is truncated and the tables vacuumed between rounds.
# Prints figures; fails only if a request failed.
#
# payflow-api gathers submits that wait for a turn into submit_many
# (workers/src/api/submit_batch.h): the requests a submit statement carried
# are printed from its /metrics.
#
#   ROUNDS=3 SECONDS_PER_RUN=10 CLIENTS=4
#   BENCH_API_THREADS=CLIENTS   payflow-api's HTTP threads (the pool stays at CLIENTS)
#   PF_BENCH_API_PGPORT=54520  BENCH_API_PORT=4815
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
CLIENTS=${CLIENTS:-4}
THREADS=${BENCH_API_THREADS:-$CLIENTS}
API_PORT=${BENCH_API_PORT:-4815}
export PF_PGPORT=${PF_BENCH_API_PGPORT:-54520}
export PF_CLUSTER_DIR=/tmp/payflow-bench-api-$PF_PGPORT

source test/bench/lib.sh
source test/lib/deps.sh
source test/lib/cluster.sh
pf_install_deps
make -s >/dev/null && make -s install >/dev/null
make -s -C workers >/dev/null

work=$(mktemp -d /tmp/payflow-bench-api.XXXXXX)
api_pid=
cleanup() {
	if [ -n "$api_pid" ]; then kill -TERM "$api_pid" 2>/dev/null && wait "$api_pid" 2>/dev/null || true; fi
	pf_cluster_destroy
	rm -rf "$work"
}
trap cleanup EXIT
pf_cluster_destroy
pf_cluster_start
q() { pf_psql -Atq "$@"; }
q -c "CREATE ROLE pf_api LOGIN IN ROLE payflow_app" >/dev/null
key=$(q -c "SELECT payflow.create_api_key('bench', 'bench')")

PAYFLOW_DATABASE_URL="host=$PGHOST port=$PGPORT user=pf_api dbname=$PF_DB" PAYFLOW_LISTEN=127.0.0.1:$API_PORT \
	PAYFLOW_API_POOL_SIZE=$CLIENTS PAYFLOW_API_THREADS=$THREADS PAYFLOW_LOG_LEVEL=warn \
	workers/bin/payflow-api 2>"$work/api.log" &
api_pid=$!
for _ in $(seq 1 100); do curl -sf -o /dev/null "http://127.0.0.1:$API_PORT/healthz" && break; sleep 0.1; done

# pgbench SCRIPT USER [args]: "tps p50_ms p99_ms failed" from its per-transaction log
run_pgbench() {
	local script=$1 user=$2
	shift 2
	local prefix=$work/pgbench-$RANDOM out tps failed
	out=$(cd "$work" && "$PF_PGBIN/pgbench" -n -U "$user" -c "$CLIENTS" -j 2 -T "$SECONDS_PER_RUN" \
		-l --log-prefix="$prefix" "$@" -f "$OLDPWD/test/bench/$script" "$PF_DB" 2>&1)
	tps=$(bench_tps <<<"$out")
	failed=$(grep -oP 'number of failed transactions: \K[0-9]+' <<<"$out" || echo 0)
	cat "$prefix".* | awk '{print $3}' | sort -n >"$work/lat"
	local n
	n=$(wc -l <"$work/lat")
	echo "$tps $(awk -v n="$n" 'NR == int(n * 0.50 + 0.5) {printf "%.3f ", $1 / 1000} NR == int(n * 0.99 + 0.5) {printf "%.3f", $1 / 1000}' "$work/lat") $failed"
	rm -f "$prefix".*
}

run_wrk() {
	local connections=$1 round=$2
	PAYFLOW_BENCH_KEY=$key PAYFLOW_BENCH_RUN="$round-$connections-$$" \
		wrk -t 2 -c "$connections" -d "${SECONDS_PER_RUN}s" -s test/bench/api_post.lua \
		"http://127.0.0.1:$API_PORT" | tail -1
}

declare -A rps p50 p99
kinds="pg_submit pg_api wrk_c wrk_8c"
for k in $kinds; do rps[$k]=""; p50[$k]=""; p99[$k]=""; done
failures=0
record() {
	local k=$1 line=$2
	read -r r a b f _ <<<"$line"
	rps[$k]+="$r "; p50[$k]+="$a "; p99[$k]+="$b "
	failures=$((failures + ${f:-0}))
}
run_kind() {
	case $1 in
		pg_submit) run_pgbench submit.sql postgres ;;
		pg_api) run_pgbench api_submit.sql pf_api -M extended -D key="$key" ;;
		wrk_c) run_wrk "$CLIENTS" "$2" ;;
		wrk_8c) run_wrk $((8 * CLIENTS)) "$2" ;;
	esac
}
read -ra order <<<"$kinds"
for round in $(seq 1 "$ROUNDS"); do
	# the tables grow during a round: each round starts with another kind
	for i in 0 1 2 3; do
		k=${order[$(((i + round - 1) % 4))]}
		record "$k" "$(run_kind "$k" "$round")"
	done
	q -c "TRUNCATE payflow.outbox" -c "VACUUM ANALYZE" >/dev/null
done

base=$(bench_med "${rps[pg_submit]}")
echo "payflow-api bench: PostgreSQL $(q -c 'SHOW server_version'), $CLIENTS database connections, $THREADS HTTP threads,"
echo "$ROUNDS rounds of ${SECONDS_PER_RUN}s, medians; $(nproc) cores (wrk, the API and PostgreSQL share them)"
echo
printf "%-52s %10s %9s %9s %7s\n" "submit path" "req/s" "p50 ms" "p99 ms" "ratio"
row() {
	local label=$1 k=$2 r
	r=$(bench_med "${rps[$k]}")
	printf "%-52s %10.0f %9.2f %9.2f %7.2f\n" "$label" "$r" "$(bench_med "${p50[$k]}")" "$(bench_med "${p99[$k]}")" \
		"$(awk -v a="$r" -v b="$base" 'BEGIN { print a / b }')"
}
row "pgbench payflow.submit() ($CLIENTS clients, baseline)" pg_submit
row "pgbench the API's statement as pf_api ($CLIENTS clients)" pg_api
row "wrk POST /payments ($CLIENTS connections)" wrk_c
row "wrk POST /payments ($((8 * CLIENTS)) connections)" wrk_8c
echo
echo "POST /payments vs payflow.submit() at equal concurrency: $(bench_ratio "$(bench_med "${rps[wrk_c]}")" "$base")"
submit_metric() { curl -s "http://127.0.0.1:$API_PORT/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
echo "requests per submit statement, all runs ($THREADS HTTP threads): $(awk -v r="$(submit_metric payflow_api_submit_requests_total)" \
	-v s="$(submit_metric payflow_api_submit_statements_total)" 'BEGIN { printf "%.2f", (s > 0 ? r / s : 0) }')"
if [ "$failures" -ne 0 ]; then
	echo "bench api: $failures failed requests or transactions"
	grep -v '"level":"info"' "$work/api.log" | tail -5
	exit 1
fi
