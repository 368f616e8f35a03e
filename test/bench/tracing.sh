#!/bin/bash
# What tracing costs the edge processes (issue 29, aim: at most 5 % more CPU
# per operation at 100 % sampling).  One stack (C extension, SQS emulator,
# legacy fixture, invoice API stand-in, payflow-relay and a worker of each
# of the payment, postprocess and invoice roles) runs bursts of
# BENCH_TRACING_OPS operations (submit_many, 100 a statement) with tracing
# off and with every span exported to a local OTLP receiver
# (test/otel/receiver.mjs in count-only mode: tracing.sh's test decodes
# them; here its CPU would be taken from what is measured), rounds interleaved,
# the order changing every round.  The processes start afresh for each
# burst; their CPU (utime + stime from /proc) is read just before the burst
# and once it ended and the last spans were sent; PostgreSQL's CPU per
# operation beside it (test/bench/cost.sh: the cluster's processes, the
# legacy fixture's sessions apart), which tracing should not move (the
# traceparent is read with each event either way).  Prints the medians and
# the ratios; never fails on figures.
#
#   BENCH_TRACING_OPS=1000  BENCH_TRACING_ROUNDS=3  PF_BENCH_TRACING_PGPORT=54352
#   BENCH_TRACING_PORT=4870 (emulator, +1 its back end, +2 invoice API, +3 OTLP receiver)
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/bench/lib.sh
export PF_PGPORT=${PF_BENCH_TRACING_PGPORT:-54352} PF_FLAVOUR=c
export PF_CLUSTER_DIR=/tmp/payflow-bench-tracing-$PF_PGPORT
source test/lib/cluster.sh
source test/lib/roles_env.sh
source test/lib/proc.sh
source test/lib/assert.sh
source test/bench/cost.sh

N=${BENCH_TRACING_OPS:-1000}
ROUNDS=${BENCH_TRACING_ROUNDS:-3}
PORT=${BENCH_TRACING_PORT:-4870}
OTLP_PORT=$((PORT + 3))
TICKS=$(getconf CLK_TCK)
q() { pf_psql -Atq "$@"; }

bench_build
make -s -C workers >/dev/null
DIR=$(mktemp -d /tmp/payflow-bench-tracing.XXXXXX)
PIDS=()
stop_edge() {
	pf_kill_ours TERM "${PIDS[@]}"
	for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	PIDS=()
}
cleanup() {
	stop_edge
	[ -n "${RECEIVER_PID:-}" ] && kill "$RECEIVER_PID" 2>/dev/null
	PAYFLOW_INVOICE_API_RUN_DIR=$DIR/invoice-api test/fixtures/invoice-api/stop.sh >/dev/null 2>&1 || true
	test/emulator/stop.sh >/dev/null 2>&1 || true
	pf_cluster_destroy
	rm -rf "$DIR"
}
pf_cluster_destroy
trap cleanup EXIT
pf_cluster_start
q -c "CREATE EXTENSION IF NOT EXISTS payflow" >/dev/null

export PAYFLOW_EMULATOR_PORT=$PORT PAYFLOW_EMULATOR_BACKEND_PORT=$((PORT + 1))
export PAYFLOW_EMULATOR_RUN_DIR=$DIR/emulator
eval "$(test/emulator/start.sh 2>"$DIR/emulator-start.log")"
export AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY PAYFLOW_QUEUE_URLS PAYFLOW_DLQ_URLS
queue_url() { echo "$PAYFLOW_QUEUE_URLS" | tr ',' '\n' | sed -n "s/^$1=//p"; }
export PAYFLOW_INVOICE_API_PORT=$((PORT + 2)) PAYFLOW_INVOICE_API_RUN_DIR=$DIR/invoice-api
eval "$(test/fixtures/invoice-api/start.sh 2>"$DIR/invoice-api-start.log")"
export PAYFLOW_INVOICE_URL
pf_roles_env "$DIR"
export PAYFLOW_LOG_LEVEL=warn PAYFLOW_POLL_INTERVAL_MS=200 PAYFLOW_CONCURRENCY=16

test/otel/install.sh
node test/otel/receiver.mjs "$OTLP_PORT" /dev/null count-only >"$DIR/receiver.log" 2>&1 &
RECEIVER_PID=$!
pf_wait_for 10 curl -fs "http://127.0.0.1:$OTLP_PORT/_stats" -o /dev/null

start_edge() {	# start_edge MODE: the relay and three workers, traced or not
	local role queue
	local otel=()
	[ "$1" = on ] && otel=(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$OTLP_PORT" OTEL_BSP_SCHEDULE_DELAY=200)
	env "${otel[@]}" workers/bin/payflow-relay >>"$DIR/relay.log" 2>&1 &
	PIDS+=($!)
	for role in payment postprocess invoice; do
		case $role in
			payment) queue=payment-requests ;;
			postprocess) queue=payment-completed ;;
			invoice) queue=invoice-requests ;;
		esac
		env "${otel[@]}" PAYFLOW_QUEUE_URL="$(queue_url $queue)" PAYFLOW_WORKER_ID="bench-$role" \
			workers/bin/payflow-worker --role "$role" >>"$DIR/$role.log" 2>&1 &
		PIDS+=($!)
	done
	sleep 2	# started, connected, listening
}
edge_ticks() {
	local pid sum=0 t
	for pid in "${PIDS[@]}"; do
		t=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
		sum=$((sum + t))
	done
	echo "$sum"
}
spans_now() { curl -fsS "http://127.0.0.1:$OTLP_PORT/_stats" | sed -n 's/.*"spans":\([0-9]*\).*/\1/p'; }

declare -A CPU SPANS RATE
burst() {	# burst ROUND MODE
	local p="b$1-$2" before after t0 t1 s0
	start_edge "$2"
	s0=$(spans_now)
	cost_sqs ""
	cost_begin
	before=$(edge_ticks)
	t0=$EPOCHREALTIME
	for ((k = 0; k < N; k += 100)); do
		q -c "SELECT count(*) FROM payflow.submit_many((SELECT jsonb_agg(jsonb_build_object('payment_id', '$p-' || n,
				'details', jsonb_build_object('amount', n, 'currency', 'EUR'))) FROM generate_series($k + 1, least($k + 100, $N)) n))" \
			>/dev/null
	done
	until [ "$(q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$p-%' AND status = 'COMPLETED'")" = "$N" ]; do
		sleep 0.2
	done
	t1=$EPOCHREALTIME
	sleep 1	# the last spans go out (every 200 ms); the same wait without them
	after=$(edge_ticks)
	COST_KEEP_BACKENDS=1 cost_end "$2" "$N" >/dev/null
	stop_edge
	CPU[$2]+="$(awk -v t=$((after - before)) -v n="$N" -v hz="$TICKS" 'BEGIN { printf "%.4f", t * 1000 / hz / n }') "
	SPANS[$2]+="$(awk -v a="$(spans_now)" -v b="$s0" -v n="$N" 'BEGIN { printf "%.1f", (a - b) / n }') "
	RATE[$2]+="$(awk -v a="$t0" -v b="$t1" -v n="$N" 'BEGIN { printf "%.0f", n / (b - a) }') "
	q -c "DELETE FROM payflow.operations WHERE payment_id LIKE '$p-%'" >/dev/null
}

for round in $(seq 1 "$ROUNDS"); do
	for mode in $(bench_rotate "$round" off on); do
		burst "$round" "$mode"
	done
done

echo "== the edge processes' CPU with tracing off and on ($N operations a burst, $ROUNDS rounds, medians)"
printf '%-12s %14s %10s %14s %10s %12s %10s\n' "tracing" "edge CPU ms/op" "ratio" "spans/op" "ops/s" "PG CPU ms/op" "ratio"
off=$(bench_med "${CPU[off]}")
pg_off=$(cost_med off pg_ms)
for mode in off on; do
	printf '%-12s %14s %10s %14s %10s %12s %10s\n' "$mode" "$(bench_med "${CPU[$mode]}")" \
		"$(bench_ratio "$(bench_med "${CPU[$mode]}")" "$off")" "$(bench_med "${SPANS[$mode]}")" "$(bench_med "${RATE[$mode]}")" \
		"$(cost_med "$mode" pg_ms)" "$(bench_ratio "$(cost_med "$mode" pg_ms)" "$pg_off")"
done
echo "(CPU rounds: off [${CPU[off]% }] on [${CPU[on]% }]; the relay and the payment, postprocess and invoice workers; aim: on within 1.05x of off)"
bench_result tracing_edge_cpu_ms_off "${CPU[off]}"
bench_result tracing_edge_cpu_ms_on "${CPU[on]}"
