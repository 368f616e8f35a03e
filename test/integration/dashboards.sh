#!/bin/bash
# The ready-made dashboards (issue 29) name only what payflow exports:
#   deploy/grafana/payflow.json   the Grafana dashboard: valid, every panel with
#       targets on the Prometheus data source variable, unique ids, no overlap;
#       every PromQL expression names only sample names the programs serve,
#       with labels they carry, counters and histograms through rate() or
#       increase(), buckets in histogram_quantile() by le, gauges never in rate();
#   deploy/aws/observability.yaml's AWS::CloudWatch::Dashboard: its Fn::Sub
#       body is JSON once its variables are filled; every metric is one the
#       metrics task publishes (namespace Payflow, with its dimensions), one of
#       the stack's metric filters, or an AWS service's (SQS, ALB, Container
#       Insights, with dimensions the alarms give the same parameters); every
#       Logs Insights field a number of payflow.metrics(); every alarm shown.
# Both show what the issue asks: backlog, ages, step latencies, failure rate,
# retries, dead letters, step limits and breakers.
#
# What payflow exports is read from the programs, not from a copy: on a
# scratch database of the running cluster (dropped at the end), a fixture
# that reaches every branch of payflow.metrics() (a step limit, a breaker, an
# operation completed, a retry, a failure), then the /metrics of payflow-api
# (its own series and payflow.metrics() flattened) and of payflow-worker,
# and the metrics task's METRICS_SQL run there (its CloudWatch EMF line).
# The scrape must hold every family workers/src prints and at least 50
# names. Each check is then shown failing on a broken copy.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib/cluster.sh
source test/lib/assert.sh
source test/lib/proc.sh
source test/lib/free_port.sh

BIN=workers/bin
for b in payflow-api payflow-worker; do
	[ -x "$BIN/$b" ] || { echo "not ok - $BIN/$b is missing (make -C workers)"; exit 1; }
done
python3 -c 'import yaml' 2>/dev/null || { echo "not ok - python3 with PyYAML (cfn-lint brings it)"; exit 1; }
SCRATCH=pf_dashboards
work=$(mktemp -d /tmp/payflow-dashboards.XXXXXX)
PIDS=()
cleanup() {
	pf_kill_ours 9 "${PIDS[@]}"
	wait 2>/dev/null || true
	pf_psql -d postgres -qc "DROP DATABASE IF EXISTS $SCRATCH WITH (FORCE)" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

# ---- the checker: test/dashboards/check.py ROOT SCRAPES EMF DOC (what each
# argument is: there); one ok/not ok line per check, exit 1 when any failed
CHECKER=$PWD/test/dashboards/check.py

# ---- what payflow exports, from the programs
pf_psql -d postgres -qc "SELECT 1" >/dev/null 2>&1 || { echo "not ok - a test cluster is up (make check T=dashboards starts one)"; exit 1; }
pf_psql -d postgres -qc "DROP DATABASE IF EXISTS $SCRATCH WITH (FORCE)" -c "CREATE DATABASE $SCRATCH" >/dev/null 2>&1
pf_psql -d "$SCRATCH" -qc "SET client_min_messages = warning" -c "CREATE EXTENSION payflow CASCADE" >/dev/null
# every branch of payflow.metrics(): a limit and a breaker on the payment
# step, operations in flight and ended, every step finished once, a retry
# waiting and a failure (a dead letter)
pf_psql -d "$SCRATCH" -Atq -v ON_ERROR_STOP=1 >/dev/null <<-'SQL'
	SELECT payflow.set_step_limit('PROCESS_PAYMENT', 50, 10, 100);
	SELECT payflow.set_step_breaker('PROCESS_PAYMENT');
	SELECT payflow.submit('dash-' || n, jsonb_build_object('amount', n, 'currency', 'EUR')) FROM generate_series(1, 3) n;
	SELECT payflow.claim_step(id, 'PROCESS_PAYMENT', 'dash') FROM payflow.operations;
	SELECT payflow.complete_step(id, 'PROCESS_PAYMENT', 'dash', '{"charge_id": "ch_1"}') FROM payflow.operations WHERE payment_id = 'dash-1';
	SELECT payflow.claim_step(id, 'POST_PROCESS', 'dash') FROM payflow.operations WHERE payment_id = 'dash-1';
	SELECT payflow.complete_step(id, 'POST_PROCESS', 'dash', '{}') FROM payflow.operations WHERE payment_id = 'dash-1';
	SELECT payflow.claim_step(id, 'CREATE_INVOICE', 'dash') FROM payflow.operations WHERE payment_id = 'dash-1';
	SELECT payflow.complete_step(id, 'CREATE_INVOICE', 'dash', '{"invoice_id": "inv_1"}') FROM payflow.operations WHERE payment_id = 'dash-1';
	SELECT payflow.fail_step(id, 'PROCESS_PAYMENT', 'dash', '{"code": "timeout"}', true) FROM payflow.operations WHERE payment_id = 'dash-2';
	SELECT payflow.fail_step(id, 'PROCESS_PAYMENT', 'dash', '{"code": "declined"}', false) FROM payflow.operations WHERE payment_id = 'dash-3';
SQL
pf_eq "the fixture: one operation completed, one waiting for its retry, one failed" "COMPLETED PAYMENT_PROCESSING FAILED" \
	"$(pf_psql -d "$SCRATCH" -Atqc "SELECT string_agg(status, ' ' ORDER BY payment_id) FROM payflow.operations")"

url="postgresql://postgres@127.0.0.1:$PF_PGPORT/$SCRATCH"
api_port=$(pf_free_port)
env -i PATH="$PATH" HOME="$work" PAYFLOW_DATABASE_URL="$url" PAYFLOW_LISTEN="127.0.0.1:$api_port" \
	"$BIN/payflow-api" >"$work/api.log" 2>&1 &
PIDS+=($!)
worker_port=$(pf_free_port)
# its queue is where nothing listens: it serves /metrics all the same
env -i PATH="$PATH" HOME="$work" PAYFLOW_DATABASE_URL="$url" AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=AKIDDASHBOARDS \
	AWS_SECRET_ACCESS_KEY=dashboards-secret AWS_ENDPOINT_URL=http://127.0.0.1:1 PAYFLOW_QUEUE_URL=http://127.0.0.1:1/000000000000/q \
	PAYFLOW_POSTPROCESS_FUNCTION='payflow.default_postprocess(text,jsonb)' PAYFLOW_METRICS_LISTEN="127.0.0.1:$worker_port" \
	"$BIN/payflow-worker" --role postprocess >"$work/worker.log" 2>&1 &
PIDS+=($!)
mkdir -p "$work/scrapes"
answers() { curl -sf -o /dev/null "$1"; }
if pf_wait_for 20 answers "http://127.0.0.1:$api_port/healthz" && pf_wait_for 20 answers "http://127.0.0.1:$worker_port/metrics"; then
	echo "ok - payflow-api and payflow-worker serve /metrics"
else
	echo "not ok - payflow-api and payflow-worker serve /metrics"
	tail -n 5 "$work/api.log" "$work/worker.log" | sed 's/^/# /'
	exit 1
fi
# a first scrape, so that /metrics has its own request counted and timed
curl -sf -o /dev/null "http://127.0.0.1:$api_port/metrics"
curl -sf "http://127.0.0.1:$api_port/metrics" >"$work/scrapes/payflow-api.prom"
curl -sf "http://127.0.0.1:$worker_port/metrics" >"$work/scrapes/payflow-worker.prom"
pf_kill_ours TERM "${PIDS[@]}"
wait 2>/dev/null || true
PIDS=()

# the metrics task's query, with the stack's default Environment
environment=$(python3 -c 'import yaml; print(yaml.safe_load(open("deploy/aws/observability.yaml"))["Parameters"]["Environment"]["Default"])')
metrics_sql=$(python3 -c '
import json, sys
env = json.load(open("deploy/ecs/payflow-metrics.json"))["containerDefinitions"][0]["environment"]
print(next(e["value"] for e in env if e["name"] == "METRICS_SQL").replace("${Environment}", sys.argv[1]))' "$environment")
pf_psql -d "$SCRATCH" -X -A -t -q -v ON_ERROR_STOP=1 -c "$metrics_sql" >"$work/emf.json"
pf_psql -d "$SCRATCH" -X -A -t -q -v ON_ERROR_STOP=1 -c "SELECT payflow.metrics()" >"$work/metrics.json"

# ---- the dashboards pass
run_check() {	# run_check ROOT SCRAPES: the checker's output in $work/check.out
	python3 "$CHECKER" "$1" "$2" "$work/emf.json" "$work/metrics.json" >"$work/check.out" 2>&1
}
if run_check "$PWD" "$work/scrapes"; then
	cat "$work/check.out"
else
	cat "$work/check.out"
	echo "not ok - the dashboards pass the checker"
	PF_FAILURES=$((PF_FAILURES + 1))
fi

# ---- and fail on broken copies, each naming what broke
copy_tree() {
	rm -rf "$work/tree" "$work/tree-scrapes"
	mkdir -p "$work/tree/deploy/aws" "$work/tree/deploy/ecs" "$work/tree/workers"
	cp -r deploy/grafana "$work/tree/deploy/"
	cp deploy/aws/observability.yaml "$work/tree/deploy/aws/"
	cp deploy/ecs/payflow-metrics.json "$work/tree/deploy/ecs/"
	cp -r workers/src "$work/tree/workers/"
	cp -r "$work/scrapes" "$work/tree-scrapes"
}
# edit FILE OLD NEW: OLD's first occurrence replaced (an edit that finds
# nothing would leave the copy intact and prove nothing: it fails)
edit() {
	python3 -c '
import sys
path, old, new = sys.argv[1:4]
text = open(path).read()
if old not in text:
	sys.exit(f"the edit finds no {old!r} in {path}")
open(path, "w").write(text.replace(old, new, 1))' "$@"
}
# broken NAME PATTERN EDIT...: the edit, made in a copy, must make the
# checker fail with a "not ok" line matching PATTERN
broken() {
	local name=$1 pattern=$2
	shift 2
	copy_tree
	if ! (cd "$work/tree" && "$@") 2>"$work/edit.err"; then
		echo "not ok - broken copy ($name): $(cat "$work/edit.err")"
		PF_FAILURES=$((PF_FAILURES + 1))
	elif run_check "$work/tree" "$work/tree-scrapes"; then
		echo "not ok - broken copy ($name): the checker passed"
		PF_FAILURES=$((PF_FAILURES + 1))
	elif grep '^not ok' "$work/check.out" | grep -F -- "$pattern" >"$work/match.out"; then
		echo "ok - broken copy ($name) fails: $pattern"
	else
		grep '^not ok' "$work/check.out" | sed 's/^/    /'
		echo "not ok - broken copy ($name): failed, but not on '$pattern'"
		PF_FAILURES=$((PF_FAILURES + 1))
	fi
}
G=deploy/grafana/payflow.json
CW=deploy/aws/observability.yaml
scrapes=../tree-scrapes

broken "grafana: a metric payflow does not export" "payflow_outbox_backlogs is no metric payflow exports" \
	edit $G '"max(payflow_outbox_backlog)"' '"max(payflow_outbox_backlogs)"'
broken "grafana: a histogram by its family name" "is a histogram: name its _bucket, _sum or _count" \
	edit $G 'rate(payflow_api_request_duration_seconds_bucket[' 'rate(payflow_api_request_duration_seconds['
broken "grafana: buckets summed without le" "must keep le" \
	edit $G 'sum by (route, le) (rate(payflow_api_request_duration_seconds_bucket' 'sum by (route) (rate(payflow_api_request_duration_seconds_bucket'
broken "grafana: a counter read as a gauge" "payflow_api_requests_total (counter) is read without rate() or increase()" \
	edit $G 'sum by (route, status) (rate(payflow_api_requests_total[$__rate_interval]))' 'sum by (route, status) (payflow_api_requests_total)'
broken "grafana: rate() of a gauge" "rate() of payflow_outbox_backlog (untyped): only counters count" \
	edit $G '"max(payflow_outbox_backlog)"' '"max(rate(payflow_outbox_backlog[5m]))"'
broken "grafana: a label the metric does not have" "payflow_steps_pending has no label step" \
	edit $G 'payflow_steps_pending{key=~' 'payflow_steps_pending{step=~'
broken "grafana: a function PromQL does not have" "histogram_quantil() is no PromQL function" \
	edit $G 'histogram_quantile(0.99' 'histogram_quantil(0.99'
broken "grafana: a variable on a metric payflow does not export" "payflow_step_pending is no metric payflow exports" \
	edit $G '"query": "label_values(payflow_steps_pending, key)"' '"query": "label_values(payflow_step_pending, key)"'
broken "grafana: two panels with one id" "each with its own integer id" \
	edit $G '"id": 3,' '"id": 2,'
broken "grafana: a panel without targets" "no targets" \
	edit $G '"targets": [' '"targets": [], "unused": ['
broken "grafana: not JSON" "payflow.json parses as JSON" \
	edit $G '"schemaVersion": 39,' '"schemaVersion": 39,,'
broken "cloudwatch: a Payflow metric the metrics task does not publish" "Payflow BreakerOpen" \
	edit $CW '["Payflow", "BreakersOpen",' '["Payflow", "BreakerOpen",'
broken "cloudwatch: a Payflow metric with a dimension it is not published with" "published with the dimensions" \
	edit $CW '["Payflow", "OutboxBacklog", "Environment", "${Environment}",' '["Payflow", "OutboxBacklog", "Environment", "${Environment}", "ServiceName", "${RelayServiceName}",'
broken "cloudwatch: an SQS metric SQS does not have" "AWS/SQS has no such metric" \
	edit $CW '["AWS/SQS", "ApproximateAgeOfOldestMessage",' '["AWS/SQS", "ApproximateAgeOfTheOldestMessage",'
broken "cloudwatch: a queue dimension that is no queue" "QueueName is none of the parameters the alarms use for it" \
	edit $CW '"QueueName", "${OperationEventsQueueName}"' '"QueueName", "${ClusterName}"'
broken "cloudwatch: a namespace nobody writes" "a namespace neither the stack nor AWS writes" \
	edit $CW '["Payflow/S3Sweep", "PassesDone",' '["Payflow/Sweep", "PassesDone",'
broken "cloudwatch: a field payflow.metrics() does not have" "payflow.steps.PROCESS_PAYMENT.runSecondsP99 is null" \
	edit $CW 'max(payflow.steps.PROCESS_PAYMENT.runSecondsP95)' 'max(payflow.steps.PROCESS_PAYMENT.runSecondsP99)'
broken "cloudwatch: a variable the template does not declare" "every \${} of DashboardBody" \
	edit $CW '"region": "${AWS::Region}"' '"region": "${Region}"'
broken "cloudwatch: an alarm left out" "LoadBalancerFiveXxAlarm" \
	edit $CW ', "${LoadBalancerFiveXxAlarm.Arn}"' ''
broken "cloudwatch: not JSON" "DashboardBody is JSON" \
	edit $CW '"start": "-PT6H",' '"start": "-PT6H"'
broken "cloudwatch: a queue's backlog left out" "ApproximateNumberOfMessagesVisible of PaymentRequestsQueueName" \
	edit $CW '["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "${PaymentRequestsQueueName}", {"label": "payment-requests"}],' ''
broken "exports: payflow-worker not scraped" "the scrapes hold every family workers/src prints" \
	rm "$scrapes/payflow-worker.prom"
broken "exports: too few names (a scrape cut short)" "at least 50" \
	sed -i '40,$d' "$scrapes/payflow-api.prom"
pf_done
