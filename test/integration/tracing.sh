#!/bin/bash
# shellcheck disable=SC2154  # PID_<name>: set by name (printf -v) when a program starts
# One OpenTelemetry trace per operation (issue 29): payflow-api, the relay
# and the payment, postprocess, invoice and webhook workers export spans over
# OTLP/HTTP (JSON) to a local receiver that decodes them with
# OpenTelemetry's own protobuf definitions (test/otel/receiver.mjs). Then:
#
#   - each operation's spans are one trace, the caller's (its traceparent
#     header), from the API request to the last step, across the five
#     services; every parent a span names is in the trace (the API's
#     request span's parent is the caller's span); the chain is API request
#     -> submit -> publish -> attempt -> its calls (claim, the legacy
#     statement, the SQL hook, the invoice POST, completion), and heartbeats
#     are events; the webhook delivered for the operation is in it too;
#   - the invoice worker, given an ECS task metadata endpoint (a stand-in
#     serving ECS's documented answers), puts the task's attributes on its
#     spans' resource;
#   - a step that failed once and was retried shows two attempt spans;
#   - the relay's batches link to the publish spans they carried;
#   - no span holds the card number or the API key;
#   - a collector that hangs, then one that refuses, changes nothing: every
#     operation ends, and the spans it did not take are counted as dropped
#     on /metrics.
#
# Ports: emulator 4860/4861, invoice stand-in 4862, payflow-api 4863, the
# receiver 4864, the worker's metrics 4865, the webhook receiver 4866, the
# ECS metadata stand-in 4867.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib/cluster.sh
source test/lib/roles_env.sh
source test/lib/assert.sh
source test/lib/proc.sh

EMU_PORT=4860 INV_PORT=4862 API_PORT=4863 OTLP_PORT=4864 METRICS_PORT=4865 RECV_PORT=4866 ECS_PORT=4867
RUN=$$
P=trace-$RUN
N=12
CARD=4000056655665556
TRACE=0af7651916cd43dd8448eb211c80319c
CALLER_SPAN=b7ad6b7169203331

q() { pf_psql -Atq "$@"; }
legacy() { pf_psql -d legacy -Atq "$@"; }
say() { printf '# %s\n' "$*"; }

DIR=$(mktemp -d /tmp/payflow-tracing.XXXXXX)
PIDS=()
cleanup() {
	local pid
	pf_kill_ours 9 "${PIDS[@]}"
	for pid in "${PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		rm -f "/tmp/psqlodbc_payflow-worker_$(id -un)$pid.log"
	done
	q -c "UPDATE payflow.step_definitions SET retry_base_delay = NULL, retry_max_delay = NULL" >/dev/null 2>&1 || true
	legacy -c "SELECT clear_faults()" >/dev/null 2>&1 || true
	PAYFLOW_INVOICE_API_RUN_DIR=$DIR/invoice-api test/fixtures/invoice-api/stop.sh >/dev/null 2>&1 || true
	PAYFLOW_WEBHOOK_RECEIVER_RUN_DIR=$DIR/receiver test/fixtures/webhook-receiver/stop.sh >/dev/null 2>&1 || true
	q -c "SELECT payflow.delete_webhook('$RUN-tenant')" >/dev/null 2>&1 || true
	test/emulator/stop.sh >/dev/null 2>&1 || true
	if [ "$PF_FAILURES" -ne 0 ]; then
		for f in "$DIR"/*.log; do
			[ -f "$f" ] || continue
			echo "--- $(basename "$f") (last 20 lines)"
			tail -n 20 "$f" | cut -c1-400
		done
	fi
	rm -rf "$DIR"
}
trap cleanup EXIT
start() {	# start NAME COMMAND...: in the background, log in $DIR/NAME.log, pid in PID_<NAME>
	local name=$1
	shift
	"$@" >"$DIR/$name.log" 2>&1 &
	PIDS+=($!)
	printf -v "PID_$name" '%s' "$!"
}
for bin in payflow-api payflow-relay payflow-worker; do
	[ -x "workers/bin/$bin" ] || { echo "not ok - workers/bin/$bin is missing (make -C workers)"; exit 1; }
done

# ---- the receiver and the stack ----
test/otel/install.sh
SPANS=$DIR/spans.jsonl
start receiver node test/otel/receiver.mjs "$OTLP_PORT" "$SPANS"
pf_wait_for 10 curl -fsS "http://127.0.0.1:$OTLP_PORT/_stats" -o /dev/null || { echo "not ok - the receiver starts"; exit 1; }
receiver() { curl -fsS -X "$1" "http://127.0.0.1:$OTLP_PORT$2" ${3:+-d "$3"}; }

export PAYFLOW_EMULATOR_PORT=$EMU_PORT PAYFLOW_EMULATOR_BACKEND_PORT=$((EMU_PORT + 1))
export PAYFLOW_EMULATOR_RUN_DIR=$DIR/emulator PAYFLOW_EMULATOR_MAX_RECEIVE_COUNT=5
test/emulator/stop.sh >/dev/null 2>&1 || true
eval "$(test/emulator/start.sh 2>"$DIR/emulator-start.log")"
export AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY PAYFLOW_QUEUE_URLS PAYFLOW_DLQ_URLS
queue_url() { echo "$PAYFLOW_QUEUE_URLS" | tr ',' '\n' | sed -n "s/^$1=//p"; }
export PAYFLOW_INVOICE_API_PORT=$INV_PORT PAYFLOW_INVOICE_API_RUN_DIR=$DIR/invoice-api
eval "$(test/fixtures/invoice-api/start.sh 2>"$DIR/invoice-api-start.log")"
export PAYFLOW_INVOICE_URL
curl -fsS -X POST "http://127.0.0.1:$INV_PORT/_reset" >/dev/null
export PAYFLOW_WEBHOOK_RECEIVER_PORT=$RECV_PORT PAYFLOW_WEBHOOK_RECEIVER_RUN_DIR=$DIR/receiver
eval "$(test/fixtures/webhook-receiver/start.sh 2>"$DIR/receiver-start.log")"
# ECS's task metadata endpoint (v4), as its documentation shows it answering
cat >"$DIR/ecs-metadata.mjs" <<'JS'
import { createServer } from "node:http";
const task = { Cluster: "arn:aws:ecs:eu-west-1:111122223333:cluster/payflow-test",
	TaskARN: "arn:aws:ecs:eu-west-1:111122223333:task/payflow-test/0123456789abcdef", Family: "payflow-worker-invoice",
	Revision: "7", AvailabilityZone: "eu-west-1b", LaunchType: "FARGATE" };
const container = { DockerId: "0123456789abcdef-1234567890", Name: "invoice",
	ContainerARN: "arn:aws:ecs:eu-west-1:111122223333:container/payflow-test/0123456789abcdef/abc" };
createServer((req, res) => {
	const body = req.url.endsWith("/task") ? task : container;
	res.writeHead(200, { "Content-Type": "application/json" }).end(JSON.stringify(body));
}).listen(Number(process.argv[2]), "127.0.0.1");
JS
start ecs node "$DIR/ecs-metadata.mjs" "$ECS_PORT"
pf_roles_env "$DIR"
export PAYFLOW_LOG_LEVEL=info PAYFLOW_POLL_INTERVAL_MS=200 PAYFLOW_VISIBILITY_TIMEOUT=4
# the standard variables; batches every 200 ms, a collector's answer awaited 1 s
export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$OTLP_PORT OTEL_EXPORTER_OTLP_PROTOCOL=http/json
export OTEL_BSP_SCHEDULE_DELAY=200 OTEL_EXPORTER_OTLP_TIMEOUT=1000 OTEL_RESOURCE_ATTRIBUTES="deployment.environment=test-$RUN"
q -c "UPDATE payflow.step_definitions SET retry_base_delay = '1 second', retry_max_delay = '2 seconds'" >/dev/null
legacy -c "SELECT clear_faults()" >/dev/null
# the first payment fails once, transiently: its retry is a second attempt span
legacy -c "SELECT set_fault('transient', payment_id => '$P-1', fn => 'charge')" >/dev/null
# the second one's call lasts 4 s, past a heartbeat (every visibility/3 s)
legacy -c "SELECT set_fault('slow', payment_id => '$P-2', seconds => 4, fn => 'charge')" >/dev/null

pf_forget_leftovers
API_KEY=$(q -c "SELECT payflow.create_api_key('$RUN-tenant', 'tracing test')")
WEBHOOK_SECRET=$(q -c "SELECT payflow.set_webhook('$RUN-tenant', '$PAYFLOW_WEBHOOK_RECEIVER_URL/trace')")
curl -fsS -X POST "$PAYFLOW_WEBHOOK_RECEIVER_URL/_secrets" -H 'Content-Type: application/json' \
	-d "{\"path\": \"/trace\", \"secret\": \"$WEBHOOK_SECRET\"}" >/dev/null
PAYFLOW_LISTEN=127.0.0.1:$API_PORT start api workers/bin/payflow-api
start relay workers/bin/payflow-relay
for role in payment postprocess invoice webhook; do
	case $role in
		payment) queue=payment-requests ;;
		postprocess) queue=payment-completed ;;
		invoice) queue=invoice-requests ;;
		webhook) queue=operation-events ;;
	esac
	extra=()
	[ "$role" = payment ] && extra=(PAYFLOW_METRICS_LISTEN="127.0.0.1:$METRICS_PORT")
	[ "$role" = invoice ] && extra=(ECS_CONTAINER_METADATA_URI_V4="http://127.0.0.1:$ECS_PORT/v4/abc")
	[ "$role" = webhook ] && extra=(PAYFLOW_WEBHOOK_ALLOW_HTTP=true)	# the receiver is on loopback
	env PAYFLOW_QUEUE_URL="$(queue_url $queue)" PAYFLOW_WORKER_ID="trace-$role-$RUN" "${extra[@]}" \
		workers/bin/payflow-worker --role "$role" >"$DIR/$role.log" 2>&1 &
	PIDS+=($!)
	printf -v "PID_$role" '%s' "$!"
done
pf_wait_for 15 curl -fsS "http://127.0.0.1:$API_PORT/healthz" -o /dev/null || say "payflow-api did not answer /healthz"
for role in payment postprocess invoice webhook; do
	pf_wait_for 15 grep -q '"payflow-worker started"' "$DIR/$role.log" || say "the $role worker did not say it started"
done

# ---- N payments through the API, under the caller's trace ----
post() {	# post N: prints the operation id
	curl -fsS -X POST "http://127.0.0.1:$API_PORT/payments" -H "Authorization: Bearer $API_KEY" \
		-H 'Content-Type: application/json' -H "traceparent: 00-$TRACE-$CALLER_SPAN-01" -H "tracestate: congo=t61rcWkgMzE" \
		--data-binary "{\"paymentId\":\"$P-$1\",\"details\":{\"amount\":\"12.50\",\"currency\":\"EUR\",\"cardNumber\":\"$CARD\"}}" |
		node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>console.log(JSON.parse(s).operationId))'
}
: >"$DIR/ops"
for n in $(seq 1 "$N"); do post "$n" >>"$DIR/ops"; done
open_ops() { q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$P-%' AND status <> 'COMPLETED'"; }
all_done() { [ "$(open_ops)" = 0 ]; }
pf_ok "all $N operations COMPLETED" pf_wait_for 90 all_done
# what the processes still hold goes out at their next batch (200 ms)
spans_settled() {
	local now
	now=$(wc -l <"$SPANS")
	[ "$now" = "${SPANS_BEFORE:-x}" ] && return 0
	SPANS_BEFORE=$now
	return 1
}
pf_wait_for 15 spans_settled || true

# ---- the traces ----
check=$(python3 - "$SPANS" "$DIR/ops" "$TRACE" "$CALLER_SPAN" "$CARD" "$API_KEY" <<'PY'
import json, sys
spans_file, ops_file, trace, caller, card, api_key = sys.argv[1:7]
ops = [l.strip() for l in open(ops_file) if l.strip()]
spans, invalid = [], []
for line in open(spans_file):
    s = json.loads(line)
    (invalid if "invalid" in s else spans).append(s)
out = {"invalid": len(invalid), "spans": len(spans)}
ours = [s for s in spans if s["traceId"] == trace]
by_id = {s["spanId"]: s for s in ours}
out["services"] = " ".join(sorted({s["service"] for s in ours}))
# every parent named is in the trace, but the caller's own span
out["orphans"] = sum(1 for s in ours if s["parentSpanId"] and s["parentSpanId"] not in by_id and s["parentSpanId"] != caller)
servers = [s for s in ours if s["name"] == "POST /payments"]
out["api_requests"] = f'{len(servers)} {sum(1 for s in servers if s["parentSpanId"] == caller and s["traceState"] == "congo=t61rcWkgMzE")}'
# each operation: a chain API request -> submit -> publish -> attempt, for each of its three steps
STEPS = {"PROCESS_PAYMENT attempt", "POST_PROCESS attempt", "CREATE_INVOICE attempt"}
def chain_ok(op):
    attempts = [s for s in ours if s["attributes"].get("payflow.operation.id") == op and s["name"] in STEPS]
    steps = set()
    for a in attempts:
        publish = by_id.get(a["parentSpanId"])
        submit = by_id.get(publish["parentSpanId"]) if publish else None
        request = by_id.get(submit["parentSpanId"]) if submit else None
        if publish and publish["name"].startswith("publish ") and publish["service"] == "payflow-relay" \
           and submit and submit["name"] == "payflow.submit" and request and request["name"] == "POST /payments":
            steps.add(a["name"])
    return steps == STEPS
out["chains"] = sum(1 for op in ops if chain_ok(op))
def children(span, name_prefix):
    return [c for c in ours if c["parentSpanId"] == span["spanId"] and c["name"].startswith(name_prefix)]
attempts = [s for s in ours if s["name"] == "PROCESS_PAYMENT attempt"]
# the attempt's calls: its claim, its run with the legacy statement under it, its completion
out["payment_calls"] = sum(1 for a in attempts if children(a, "payflow.claim_step") and
                           any(children(r, "legacy ") for r in children(a, "payment ")) and
                           (children(a, "payflow.complete_step") or children(a, "payflow.fail_step")))
out["hook_calls"] = sum(1 for a in ours if a["name"] == "POST_PROCESS attempt" and children(a, "payflow.run_hook_steps"))
invoice_posts = [c for a in ours if a["name"] == "CREATE_INVOICE attempt" for r in children(a, "invoice ") for c in children(r, "POST")]
out["invoice_posts"] = sum(1 for c in invoice_posts if c["attributes"].get("http.response.status_code") in ("201", "200"))
first = ops[0]
out["retried"] = sum(1 for s in attempts if s["attributes"].get("payflow.operation.id") == first)
out["heartbeats"] = sum(s["events"].count("heartbeat") for s in attempts if s["attributes"].get("payflow.operation.id") == ops[1])
out["retry_error"] = sum(1 for s in ours if s["name"].startswith("legacy ") and s["status"] == 2)
batches = [s for s in spans if s["service"] == "payflow-relay" and s["name"].startswith("send ")]
publish_ids = {s["spanId"] for s in ours if s["name"].startswith("publish ")}
out["batch_links"] = sum(1 for b in batches for l in b["links"] if l["spanId"] in publish_ids)
out["publish"] = len(publish_ids)
out["resource"] = sum(1 for s in ours if s["resource"].get("deployment.environment", "").startswith("test-"))
invoice_res = [s["resource"] for s in ours if s["service"] == "payflow-worker-invoice"]
out["ecs"] = sum(1 for r in invoice_res if r.get("aws.ecs.task.arn", "").endswith("task/payflow-test/0123456789abcdef")
                 and r.get("cloud.platform") == "aws_ecs" and r.get("aws.ecs.launchtype") == "fargate"
                 and r.get("cloud.availability_zone") == "eu-west-1b" and r.get("container.name") == "invoice")
out["ecs_of"] = len(invoice_res)
out["webhooks"] = len({s["attributes"].get("payflow.operation.id") for s in ours if s["service"] == "payflow-worker-webhook"
                       and s["name"].endswith(" attempt") and children(s, "POST")})
text = open(spans_file).read()
out["leaks"] = text.count(card) + text.count(api_key)
print(json.dumps(out))
PY
)
say "spans: $check"
grep '"invalid"' "$SPANS" | head -n 3 | cut -c1-300 | sed 's/^/# /' || true
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$check" "$1"; }
pf_eq "every export decoded with OpenTelemetry's protobuf definitions" 0 "$(field invalid)"
pf_eq "the trace crosses the API, the relay and the three worker roles" \
	"payflow-api payflow-relay payflow-worker-invoice payflow-worker-payment payflow-worker-postprocess payflow-worker-webhook" \
	"$(field services)"
pf_eq "every parent a span names is in the trace (or is the caller's span)" 0 "$(field orphans)"
pf_eq "each request span is the caller's child, its tracestate kept" "$N $N" "$(field api_requests)"
pf_eq "each operation: request -> submit -> publish -> attempt, for each of its three steps" "$N" "$(field chains)"
pf_ok "payment attempts hold their claim, their legacy statement and their completion" \
	test "$(field payment_calls)" -ge "$N"
pf_ok "each invoice is a POST span under its attempt, with its status" test "$(field invoice_posts)" -ge "$N"
pf_ok "each post-processing's SQL hook is a span under its attempt" test "$(field hook_calls)" -ge "$N"
pf_eq "the retried payment shows two attempt spans" 2 "$(field retried)"
pf_ok "... the first one's legacy statement marked as an error" test "$(field retry_error)" -ge 1
pf_eq "the relay's batches link to every publish span" "$(field publish)" "$(field batch_links)"
pf_ok "OTEL_RESOURCE_ATTRIBUTES is on the spans" test "$(field resource)" -gt 0
pf_eq "each operation's webhook delivery is an attempt with its POST, in the operation's trace" "$N" "$(field webhooks)"
pf_ok "the invoice worker's spans carry its ECS task's attributes, from the metadata endpoint" \
	test "$(field ecs)" -gt 0 -a "$(field ecs)" = "$(field ecs_of)"
pf_eq "no span holds the card number or the API key" 0 "$(field leaks)"
pf_ok "the 4-second legacy call's attempt holds its heartbeats as events" test "$(field heartbeats)" -ge 1

# ---- a collector that hangs, then one that refuses: the pipeline does not notice ----
for mode in hang refuse; do
	receiver POST /_mode "{\"mode\":\"$mode\"}" >/dev/null
	before=$(curl -fsS "http://127.0.0.1:$METRICS_PORT/metrics" | awk '$1 == "payflow_trace_spans_dropped_total" { print $2 }')
	for n in $(seq 1 "$N"); do post "$mode-$n" >/dev/null; done
	done_mode() {
		[ "$(q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$P-$mode-%' AND status = 'COMPLETED'")" = "$N" ]
	}
	pf_ok "collector that does $mode: all $N operations COMPLETED" pf_wait_for 90 done_mode
	say "collector that does $mode: $(q -c "SELECT 'submit -> COMPLETED p50 ' || round(percentile_cont(0.5) WITHIN GROUP
		(ORDER BY extract(epoch FROM terminal_at - created_at))::numeric, 2) || ' s' FROM payflow.operations
		 WHERE payment_id LIKE '$P-$mode-%'")"
	dropped() {
		local now
		now=$(curl -fsS "http://127.0.0.1:$METRICS_PORT/metrics" | awk '$1 == "payflow_trace_spans_dropped_total" { print $2 }')
		[ "${now:-0}" -gt "${before:-0}" ]
	}
	pf_ok "collector that does $mode: the payment worker counts the spans it dropped" pf_wait_for 20 dropped
done
receiver POST /_mode '{"mode":"ok"}' >/dev/null

# ---- the processes stop in time, a hung collector or not ----
receiver POST /_mode '{"mode":"hang"}' >/dev/null
for name in api relay payment postprocess invoice webhook; do
	pid_var="PID_$name"
	kill -TERM "${!pid_var}"
done
stopped() {
	local name pid_var
	for name in api relay payment postprocess invoice webhook; do
		pid_var="PID_$name"
		kill -0 "${!pid_var}" 2>/dev/null && return 1
	done
	return 0
}
pf_ok "SIGTERM stops every process, the export to the hung collector cut at its bound" pf_wait_for 30 stopped
pf_done
