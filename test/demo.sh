#!/bin/bash
# make demo: the whole pipeline on this machine, end to end.
#
# Starts a throwaway PostgreSQL cluster (payflow + pg_cron, installed with
# deploy/sql/install.sql: login roles, purge scheduled), the local SQS/S3
# emulator with its queues and DLQs, the legacy DBMS fixture (reached
# through psqlODBC), the invoice API stand-in, a webhook receiver, the relay,
# the workers (payment, postprocess, invoice, webhook) and the HTTP edge;
# submits payments in SQL and over HTTP with transient faults and one
# permanent fault injected; follows one over server-sent events; shows live
# progress until every operation has settled; prints a summary; stops
# everything.
#
#   make demo                 # as root on a fresh Debian 12 machine
#   make demo FLAVOUR=sql     # the C-free flavour (Amazon RDS, Aurora)
#   make demo KEEP=1          # leave the stack running, print how to use it
#   make demo PAYMENTS=500 API_PAYMENTS=50
#   make demo OTEL=1          # spans to a local OTLP receiver; one operation's trace printed as a tree
#   OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318 make demo   # spans to your collector
#
# FLAVOUR=c (the default): the C extension, CREATE EXTENSION payflow by
# install.sql as the superuser, the scheduler background worker, settings
# with ALTER SYSTEM.  FLAVOUR=sql: a PostgreSQL without payflow's C library
# (test/lib/cluster.sh, PF_FLAVOUR=sql), payflow installed from
# dist/payflow--<version>.sql by payflow_owner, a role with CREATEROLE and
# CREATEDB only (RDS's master user), install.sql run by that role too,
# pg_cron running the scheduler, settings with payflow.set_setting().
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

PAYMENTS=${PAYMENTS:-300}
API_PAYMENTS=${API_PAYMENTS:-20}
TOTAL=$((PAYMENTS + API_PAYMENTS))
KEEP=${KEEP:-0}
FLAVOUR=${FLAVOUR:-c}
case "$FLAVOUR" in
	c | sql) ;;
	*) echo "demo: FLAVOUR must be c or sql, not '$FLAVOUR'" >&2; exit 2 ;;
esac
export PF_FLAVOUR=$FLAVOUR
if [ "$FLAVOUR" = sql ]; then
	# The stand-in for the DB parameter group: bind parameters are never
	# logged (install.sql cannot set log_parameter_max_length per role
	# without a superuser; see there).
	export PF_CLUSTER_EXTRA_CONF="log_parameter_max_length = 0"
fi
export PF_PGPORT=${PF_DEMO_PGPORT:-54359}
export PF_CLUSTER_DIR=/tmp/payflow-demo-cluster
RUN=$REPO/.cache/run/demo
export PAYFLOW_EMULATOR_PORT=${PAYFLOW_DEMO_EMULATOR_PORT:-4600}
export PAYFLOW_EMULATOR_BACKEND_PORT=$((PAYFLOW_EMULATOR_PORT + 1))
export PAYFLOW_EMULATOR_RUN_DIR=$RUN/emulator
INVOICE_PORT=${PAYFLOW_DEMO_INVOICE_PORT:-4590}
export PAYFLOW_WEBHOOK_RECEIVER_PORT=${PAYFLOW_DEMO_WEBHOOK_PORT:-4591}
export PAYFLOW_WEBHOOK_RECEIVER_RUN_DIR=$RUN/webhook-receiver
API_PORT=${PAYFLOW_DEMO_API_PORT:-4592}
API=http://127.0.0.1:$API_PORT
OTEL=${OTEL:-0}
OTLP_PORT=${PAYFLOW_DEMO_OTLP_PORT:-4593}

source test/lib/deps.sh
source test/lib/cluster.sh
source test/lib/proc.sh

say() { printf '\033[1m%s\033[0m\n' "$*"; }
q() { pf_psql -Atq "$@"; }

PIDS=()
stop_all() {
	local pid
	pf_kill_ours TERM "${PIDS[@]}"
	for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	test/fixtures/invoice-api/stop.sh >/dev/null 2>&1 || true
	test/fixtures/webhook-receiver/stop.sh >/dev/null 2>&1 || true
	test/emulator/stop.sh >/dev/null 2>&1 || true
	pf_cluster_destroy
}

say "== installing and building"
pf_install_deps
VERSION=$(sed -n "s/^default_version = '\(.*\)'/\1/p" extension/payflow.control)
if [ "$FLAVOUR" = c ]; then
	make -s >/dev/null && make -s install >/dev/null
else
	make -s dist-sql >/dev/null
fi
make -s -C workers >/dev/null
mkdir -p "$RUN"

if [ "$FLAVOUR" = c ]; then
	say "== starting PostgreSQL 15 with payflow and pg_cron (port $PF_PGPORT)"
else
	say "== starting PostgreSQL 15 without payflow's C library, pg_cron and pg_tle preloaded (port $PF_PGPORT)"
fi
pf_cluster_destroy
if [ "$KEEP" != 1 ]; then trap stop_all EXIT; fi
pf_cluster_start
# the production install script: login roles payflow_api / payflow_edge_<program> /
# payflow_monitor, purge (and where no background worker runs, the
# scheduler) scheduled with pg_cron.  C flavour: run by the superuser, it
# creates the extension.  C-free flavour: run by the role that installed
# the dist file (test/lib/cluster.sh did, as payflow_owner).
INSTALLER=postgres
[ "$FLAVOUR" = sql ] && INSTALLER=$PF_OWNER
PGOPTIONS="-c client_min_messages=warning" q -U "$INSTALLER" -f deploy/sql/install.sql >/dev/null
# what was installed, and by whom, as the database says it
INSTALLED_FLAVOUR=$(q -c "SELECT payflow._flavour()")
if [ "$INSTALLED_FLAVOUR" = c ]; then
	INSTALLED_VERSION=$(q -c "SELECT extversion FROM pg_extension WHERE extname = 'payflow'")
else
	INSTALLED_VERSION=$(q -c "SELECT payflow._dist_version()")
fi
IFS='|' read -r OWNER OWNER_SUPER OWNER_ATTRS <<<"$(q -c "
	SELECT r.rolname, r.rolsuper,
		   concat_ws(' ', CASE WHEN r.rolcreaterole THEN 'CREATEROLE' END, CASE WHEN r.rolcreatedb THEN 'CREATEDB' END)
	  FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner WHERE n.nspname = 'payflow'")"
if [ "$INSTALLED_FLAVOUR" != "$FLAVOUR" ]; then
	echo "demo: asked for flavour $FLAVOUR, the database has $INSTALLED_FLAVOUR" >&2
	exit 1
fi
cron_jobs() {
	q -c "SELECT string_agg(jobname || ' (job ' || jobid || ', ' || schedule || ')', ', ' ORDER BY jobname)
			FROM cron.job WHERE jobname LIKE 'payflow-%'"
}
if [ "$FLAVOUR" = c ]; then
	echo "flavour: c, the C extension payflow $INSTALLED_VERSION (CREATE EXTENSION as $OWNER, a superuser; its background worker runs the scheduler)"
	echo "installed with deploy/sql/install.sql; purge scheduled with pg_cron: job $(q -c "SELECT jobid FROM cron.job WHERE jobname = 'payflow-purge'")"
else
	[ "$OWNER_SUPER" = f ] || { echo "demo: payflow's owner $OWNER is a superuser" >&2; exit 1; }
	[ "$(q -c "SELECT count(*) FROM pg_available_extensions WHERE name = 'payflow'")" = 0 ] ||
		{ echo "demo: this server has the C extension payflow" >&2; exit 1; }
	echo "flavour: sql, the C-free flavour: payflow $INSTALLED_VERSION installed from dist/payflow--$VERSION.sql by $OWNER, not a superuser (${OWNER_ATTRS:-no attributes}); no payflow extension on this server"
	echo "installed with deploy/sql/install.sql by $OWNER; pg_cron runs $(cron_jobs)"
	echo "log_parameter_max_length = $(q -c 'SHOW log_parameter_max_length') for the whole server (on RDS: the DB parameter group), as $OWNER may not set it per role"
fi
# short retries so the demo's transient faults resolve in seconds, not minutes
if [ "$FLAVOUR" = c ]; then
	q -c "ALTER SYSTEM SET payflow.retry_base_delay = '1s'" -c "ALTER SYSTEM SET payflow.retry_max_delay = '5s'" \
		-c "SELECT pg_reload_conf()" >/dev/null
	echo "settings: payflow.retry_base_delay = 1s, payflow.retry_max_delay = 5s (ALTER SYSTEM, reloaded)"
else
	q -U "$OWNER" -c "SELECT payflow.set_setting('retry_base_delay', '1s')" \
		-c "SELECT payflow.set_setting('retry_max_delay', '5s')" >/dev/null
	echo "settings: retry_base_delay = 1s, retry_max_delay = 5s (payflow.set_setting as $OWNER; GUCs have no effect here)"
fi

say "== starting the SQS/S3 emulator behind a SigV4-checking front (port $PAYFLOW_EMULATOR_PORT)"
eval "$(test/emulator/start.sh 2>"$RUN/emulator-start.log")"
export AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY PAYFLOW_QUEUE_URLS PAYFLOW_DLQ_URLS
echo "queues: $(echo "$PAYFLOW_QUEUE_URLS" | tr ',' '\n' | sed 's/=.*//' | tr '\n' ' ')(each with a DLQ)"

say "== starting the legacy DBMS fixture (database legacy, through psqlODBC)"
export PAYFLOW_LEGACY_ODBC
PAYFLOW_LEGACY_ODBC=$(test/fixtures/legacy/setup.sh --reset)
# each edge process logs in as its own role install.sql made: no superuser,
# and only the functions its program calls
edge_url() { echo "postgresql://payflow_edge_$1@127.0.0.1:$PF_PGPORT/$PF_DB"; }
export PAYFLOW_LOG_LEVEL=${PAYFLOW_LOG_LEVEL:-info}

if [ -x test/fixtures/invoice-api/start.sh ]; then
	say "== starting the invoice API stand-in (port $INVOICE_PORT)"
	PAYFLOW_INVOICE_API_PORT=$INVOICE_PORT test/fixtures/invoice-api/start.sh >/dev/null
fi

say "== a tenant for the HTTP edge: an API key, and a webhook to a receiver that checks signatures (port $PAYFLOW_WEBHOOK_RECEIVER_PORT)"
eval "$(test/fixtures/webhook-receiver/start.sh 2>"$RUN/webhook-receiver-start.log")"
API_KEY=$(q -c "SELECT payflow.create_api_key('demo-shop', 'demo')")
HOOK_SECRET=$(q -c "SELECT payflow.set_webhook('demo-shop', '$PAYFLOW_WEBHOOK_RECEIVER_URL/demo-shop')")
curl -fsS -X POST -H 'Content-Type: application/json' -d "{\"path\":\"/demo-shop\",\"secret\":\"$HOOK_SECRET\"}" \
	"$PAYFLOW_WEBHOOK_RECEIVER_URL/_secrets" >/dev/null
echo "tenant demo-shop: API key ${API_KEY:0:8}…, webhook $PAYFLOW_WEBHOOK_RECEIVER_URL/demo-shop (secret ${HOOK_SECRET:0:10}…)"

start_process() {
	local name=$1
	shift
	"$@" >"$RUN/$name.log" 2>&1 &
	PIDS+=($!)
	echo "$name: pid $!"
}

if [ "$OTEL" = 1 ] && [ -z "${OTEL_EXPORTER_OTLP_ENDPOINT:-}${OTEL_EXPORTER_OTLP_TRACES_ENDPOINT:-}" ]; then
	say "== starting a local OTLP receiver (port $OTLP_PORT): every span decoded with OpenTelemetry's protobuf definitions"
	test/otel/install.sh
	: >"$RUN/spans.jsonl"
	start_process otlp-receiver node test/otel/receiver.mjs "$OTLP_PORT" "$RUN/spans.jsonl"
	export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$OTLP_PORT OTEL_BSP_SCHEDULE_DELAY=500
fi
if [ -n "${OTEL_EXPORTER_OTLP_ENDPOINT:-}${OTEL_EXPORTER_OTLP_TRACES_ENDPOINT:-}" ]; then
	echo "spans go to ${OTEL_EXPORTER_OTLP_TRACES_ENDPOINT:-$OTEL_EXPORTER_OTLP_ENDPOINT} (OTLP/HTTP, JSON)"
fi
say "== starting the edge processes"
PAYFLOW_DATABASE_URL=$(edge_url relay) start_process relay workers/bin/payflow-relay
queue_of() { echo "$PAYFLOW_QUEUE_URLS" | tr ',' '\n' | sed -n "s/^$1=//p"; }
ROLES=""
if [ -x workers/bin/payflow-worker ]; then
	for role in payment postprocess invoice; do
		queue=payment-requests
		[ $role = postprocess ] && queue=payment-completed
		[ $role = invoice ] && queue=invoice-requests
		if workers/bin/payflow-worker --role "$role" --check-role >/dev/null 2>&1; then
			PAYFLOW_DATABASE_URL=$(edge_url $role) \
				PAYFLOW_QUEUE_URL=$(queue_of $queue) PAYFLOW_WORKER_ID=demo-$role PAYFLOW_CONCURRENCY=16 \
				PAYFLOW_VISIBILITY_TIMEOUT=30 \
				PAYFLOW_LEGACY_CALL='SELECT * FROM charge(:idempotency_key, :payment_id, :details.amount, :details.currency)' \
				PAYFLOW_INVOICE_URL=http://127.0.0.1:$INVOICE_PORT/invoices \
				PAYFLOW_POSTPROCESS_FUNCTION='payflow.default_postprocess(text,jsonb)' \
				start_process "worker-$role" workers/bin/payflow-worker --role "$role"
			ROLES="$ROLES $role"
		fi
	done
	PAYFLOW_DATABASE_URL=$(edge_url webhook) \
		PAYFLOW_QUEUE_URL=$(queue_of operation-events) PAYFLOW_WORKER_ID=demo-webhook PAYFLOW_WEBHOOK_ALLOW_HTTP=true \
		PAYFLOW_WEBHOOK_BACKOFF_BASE_SECONDS=1 \
		start_process worker-webhook workers/bin/payflow-worker --role webhook
fi
PAYFLOW_DATABASE_URL="postgresql://payflow_api@127.0.0.1:$PF_PGPORT/$PF_DB" PAYFLOW_LISTEN=127.0.0.1:$API_PORT \
	start_process api workers/bin/payflow-api
for _ in $(seq 1 50); do curl -fsS "$API/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
echo "payflow-api: $API (ready: $(curl -s -o /dev/null -w '%{http_code}' "$API/readyz"))"
# The step the demo waits for: the last one whose role runs here.
case "$ROLES" in
	*invoice*) FINAL=COMPLETED ;;
	*postprocess*) FINAL=INVOICE_PENDING ;;
	*payment*) FINAL=PAYMENT_COMPLETED ;;
	*) FINAL=PENDING ;;
esac
[ "$FINAL" = COMPLETED ] || echo "note: roles running:${ROLES:- none}; operations settle at $FINAL in this build"
if [ "$FLAVOUR" = c ]; then
	# started with the server, it retries every 5 s until the database exists
	for _ in $(seq 1 40); do
		scheduler=$(q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'payflow scheduler' AND datname = current_database()")
		[ -n "$scheduler" ] && break
		sleep 0.25
	done
	echo "scheduler: the background worker in database $PF_DB, ${scheduler:+pid }${scheduler:-not running yet}"
else
	echo "scheduler: pg_cron, $(q -c "SELECT command || ' (' || schedule || ')' FROM cron.job WHERE jobname = 'payflow-scheduler'")"
fi

say "== submitting $PAYMENTS payments in SQL and $API_PAYMENTS over HTTP"
# Faults: transient ones in the legacy DBMS (retried with backoff) and in
# the invoice API (503, retried), and one permanent rejection (card declined).
RETRIED=demo-7
DECLINED=demo-13
pf_psql -d legacy -Atq -c "SELECT set_fault('transient', payment_id => '$RETRIED', count => 2)" \
	-c "SELECT set_fault('transient', payment_id => 'demo-11', count => 1)" \
	-c "SELECT set_fault('permanent', payment_id => '$DECLINED', count => 1)" >/dev/null
curl -fsS -X POST -H 'Content-Type: application/json' -d '{"mode":"status","status":503,"count":3}' \
	"http://127.0.0.1:$INVOICE_PORT/_faults" >/dev/null || echo "note: could not inject invoice API faults"
START=$(date +%s.%N)
# post_payment N [curl options]
post_payment() {
	local n=$1
	shift
	curl -sS -X POST "$API/payments" -H "Authorization: Bearer $API_KEY" -H 'Content-Type: application/json' \
		-H "X-Correlation-Id: api-req-$n" -d "{\"paymentId\":\"api-$n\",\"details\":{\"amount\":$((200 + n)),\"currency\":\"EUR\",\"customer\":\"C-api\"}}" "$@"
}
if [ "$API_PAYMENTS" -gt 0 ]; then
	echo "POST /payments (the first one, in full):"
	post_payment 1 -i | tr -d '\r' | grep -E '^HTTP|^Location|^Retry-After|^\{' | sed 's/^/    /'
	FIRST_API_OP=$(q -c "SELECT id FROM payflow.operations WHERE tenant = 'demo-shop' AND payment_id = 'api-1'")
	# follow it live over server-sent events until it is terminal
	curl -sN -m 120 -H "Authorization: Bearer $API_KEY" "$API/operations/$FIRST_API_OP/events" >"$RUN/events.sse" 2>/dev/null &
	SSE_PID=$!
	for n in $(seq 2 "$API_PAYMENTS"); do post_payment "$n" -o /dev/null; done
fi
for batch in $(seq 0 9); do
	q -c "SELECT count(payflow.submit('demo-' || n,
			jsonb_build_object('amount', 100 + n, 'currency', 'EUR', 'customer', 'C-' || (n % 17)),
			correlation_id => 'demo-req-' || n))
		  FROM generate_series($((batch * PAYMENTS / 10 + 1)), $(((batch + 1) * PAYMENTS / 10))) n" >/dev/null
done

settled_sql="SELECT count(*) FILTER (WHERE status IN ('$FINAL', 'COMPLETED', 'FAILED', 'CANCELLED')) FROM payflow.operations"
bar() {
	local done=$1 total=$2 width=40
	local filled=$((done * width / total)) hashes dots
	# (printf '#%.0s' $(seq 1 0) would print one #: an empty or full bar was one too long)
	printf -v hashes '%*s' "$filled" ''
	printf -v dots '%*s' $((width - filled)) ''
	printf '[%s%s] %3d%%' "${hashes// /#}" "${dots// /.}" $((done * 100 / total))
}
say "== progress (operations per status)"
deadline=$((SECONDS + ${DEMO_TIMEOUT:-300}))
while :; do
	line=$(q -c "SELECT string_agg(status || ' ' || n, '  ' ORDER BY status) FROM (SELECT status, count(*) n FROM payflow.operations GROUP BY 1) s")
	settled=$(q -c "$settled_sql")
	printf '\r%s  %-90s' "$(bar "$settled" "$TOTAL")" "$line"
	[ "$settled" -ge "$TOTAL" ] && break
	if [ $SECONDS -ge $deadline ]; then echo; echo "demo: not settled after ${DEMO_TIMEOUT:-300}s"; break; fi
	sleep 0.5
done
echo
ELAPSED=$(awk -v s="$START" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')

say "== summary"
if [ "$FLAVOUR" = c ]; then
	echo "flavour:                   c (the C extension payflow $INSTALLED_VERSION)"
else
	echo "flavour:                   sql (C-free, payflow $INSTALLED_VERSION from dist/payflow--$VERSION.sql, installed by non-superuser $OWNER)"
fi
q -F ' ' <<-SQL
	SELECT 'operations submitted:      ' || count(*) FROM payflow.operations;
	SELECT 'settled at $FINAL:' || repeat(' ', greatest(1, 9 - length('$FINAL'))) || count(*) FILTER (WHERE status = '$FINAL' OR status = 'COMPLETED') FROM payflow.operations;
	SELECT 'failed:                    ' || count(*) FILTER (WHERE status = 'FAILED') FROM payflow.operations;
	SELECT 'throughput:                ' || round($TOTAL / $ELAPSED, 1) || ' operations/s over ${ELAPSED}s';
	WITH t AS (SELECT o.id, extract(epoch FROM h.at - o.created_at) AS s
				 FROM payflow.operations o JOIN payflow.operation_history h ON h.operation_id = o.id AND h.to_status = '$FINAL')
	SELECT 'submit to $FINAL:' || repeat(' ', greatest(1, 9 - length('$FINAL'))) || 'p50 ' || round(percentile_cont(0.5) WITHIN GROUP (ORDER BY s)::numeric, 3)
		   || ' s, p95 ' || round(percentile_cont(0.95) WITHIN GROUP (ORDER BY s)::numeric, 3) || ' s' FROM t;
	SELECT 'retries:                   ' || coalesce(sum(greatest(attempt - 1, 0)), 0) FROM payflow.steps;
	SELECT 'dead letters:              ' || count(*) FROM payflow.dead_letters;
	SQL
if [ -n "$ROLES" ]; then
	echo "legacy charges:            $(pf_psql -d legacy -Atqc "SELECT charge_count()") (duplicates: $(pf_psql -d legacy -Atqc "SELECT count(*) FROM duplicate_charges()"))"
	echo "invoices:                  $(curl -fsS "http://127.0.0.1:$INVOICE_PORT/_stats" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const j=JSON.parse(s);console.log(j.invoices+" (replays answered: "+j.duplicatesAvoided+")")})')"
fi

if [ "$API_PAYMENTS" -gt 0 ]; then
	terminal_api=$(q -c "SELECT count(*) FROM payflow.operations WHERE tenant = 'demo-shop' AND terminal_at IS NOT NULL")
	hooks() { curl -fsS "$PAYFLOW_WEBHOOK_RECEIVER_URL/_deliveries?path=/demo-shop" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const j=JSON.parse(s);console.log(j.uniqueEventIds+" "+j.signatureFailures)})'; }
	# shellcheck disable=SC2046  # two numbers into $1 and $2
	for _ in $(seq 1 60); do set -- $(hooks); [ "$1" -ge "$terminal_api" ] && break; sleep 0.5; done
	echo "webhooks:                  $1 of $terminal_api terminal HTTP operations delivered, signatures verified by the receiver ($2 refused)"

	say "== GET /operations/{id} of the first HTTP payment"
	curl -sS -H "Authorization: Bearer $API_KEY" "$API/operations/$FIRST_API_OP" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.stringify(JSON.parse(s),null,2)))'
	say "== GET /operations/{id}/events: what its event stream received"
	wait "$SSE_PID" 2>/dev/null || true
	grep -E '^(event|id|data):' "$RUN/events.sse" | sed 's/^/    /' | head -40
	if [ -s "$RUN/spans.jsonl" ]; then
		say "== its trace, as the local receiver got it (service, span, duration, start)"
		sleep 1.5	# the processes' next export (OTEL_BSP_SCHEDULE_DELAY)
		node test/otel/tree.mjs "$RUN/spans.jsonl" \
			"$(curl -sS -H "Authorization: Bearer $API_KEY" "$API/operations/$FIRST_API_OP" |
				node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).traceId))')" |
			sed 's/^/    /'
	fi
	say "== GET /operations/{id} with another tenant's key, and with no key"
	OTHER_KEY=$(q -c "SELECT payflow.create_api_key('other-shop', 'demo')")
	echo "    other tenant: $(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $OTHER_KEY" "$API/operations/$FIRST_API_OP") (as if unknown)"
	echo "    no key:       $(curl -s -w ' %{http_code}' "$API/operations/$FIRST_API_OP")"
fi

say "== payflow.status() of the declined payment ($DECLINED)"
q -c "SELECT jsonb_pretty(payflow.status(id)) FROM payflow.operations WHERE payment_id = '$DECLINED'"
pf_psql -c "SELECT source, step_name, error ->> 'code' AS code, error ->> 'message' AS message, attempts FROM payflow.dead_letters"
say "== payflow.history() of a payment whose legacy call failed twice ($RETRIED)"
pf_psql -c "SELECT at, from_status, to_status, reason, actor FROM payflow.history((SELECT id FROM payflow.operations WHERE payment_id = '$RETRIED'))"
pf_psql -c "SELECT step_name, status, attempt AS attempts, last_error FROM payflow.steps WHERE operation_id = (SELECT id FROM payflow.operations WHERE payment_id = '$RETRIED') ORDER BY created_at"
say "== payflow.metrics()"
q -c "SELECT jsonb_pretty(payflow.metrics())"
say "== the pipeline, one definition in the database (payflow.pipeline(), version $(q -c "SELECT payflow.pipeline() ->> 'version'"))"
pf_psql -c "SELECT s ->> 'step' AS step, s ->> 'readyStatus' AS waits_in, s ->> 'runningStatus' AS runs_in,
	s ->> 'doneStatus' AS done, s ->> 'requestEvent' AS request, s ->> 'destination' AS queue
	FROM jsonb_array_elements(payflow.pipeline() -> 'steps') s"
cat <<-'EOF'
	add a step by SQL (as payflow_admin; new operations take the new version, those in flight finish on theirs):
	  SELECT payflow.add_destination('risk-requests');
	  SELECT payflow.add_step('RISK_CHECK', 'RiskCheckRequested', 'risk-requests', before_step => 'PROCESS_PAYMENT',
	                          running_status => 'RISK_CHECKING', done_status => 'RISK_CHECKED');
	then map risk-requests to a queue in the relay's PAYFLOW_QUEUE_URLS and run a worker for it, no code needed:
	  PAYFLOW_QUEUE_URL=<risk-requests> PAYFLOW_STEP_URL=https://risk.internal/check payflow-worker --role http --step RISK_CHECK
	  (or --role sql --step NAME with PAYFLOW_STEP_FUNCTION='schema.fn(text,jsonb)'; docs/sql-api.md, "Statuses and steps")
	EOF

if [ "$KEEP" = 1 ]; then
	say "== the stack keeps running"
	cat <<-EOF
	psql:      psql -h $PGHOST -p $PF_PGPORT -U postgres $PF_DB
	submit:    SELECT payflow.submit('my-payment', '{"amount": 10, "currency": "EUR"}');
	http:      curl -i -X POST $API/payments -H 'Authorization: Bearer $API_KEY' \\
	             -d '{"paymentId":"my-http-payment","details":{"amount":10,"currency":"EUR"}}'
	webhooks:  curl $PAYFLOW_WEBHOOK_RECEIVER_URL/_deliveries?path=/demo-shop
	queues:    $PAYFLOW_QUEUE_URLS
	logs:      $RUN/*.log
	stop:      kill ${PIDS[*]}; test/fixtures/invoice-api/stop.sh; PAYFLOW_WEBHOOK_RECEIVER_RUN_DIR=$RUN/webhook-receiver test/fixtures/webhook-receiver/stop.sh; \\
	           PAYFLOW_EMULATOR_RUN_DIR=$RUN/emulator test/emulator/stop.sh; \\
	           PF_FLAVOUR=$PF_FLAVOUR PF_PGPORT=$PF_PGPORT PF_CLUSTER_DIR=$PF_CLUSTER_DIR bash -c 'source test/lib/cluster.sh; pf_cluster_destroy'
	EOF
fi
