#!/bin/bash
# payflow-worker checks payflow.pipeline() (the newest version) against its
# own event table at start-up (workers/src/worker/pipeline_check.c):
#   - every role starts against the shipped pipeline;
#   - after add_step puts RISK_CHECK before PROCESS_PAYMENT, every role
#     still starts: their steps are unchanged, and a step no role serves
#     stops nobody (a generic worker serves it);
#   - a step whose request event or input field differs from what the
#     worker parses, or terminal events the webhook role does not know,
#     make the worker exit 2 with one line saying what differs, before it
#     receives anything;
#   - a role whose step the pipeline lacks exits 2 naming the step;
#   - the generic roles (--role http|sql --step NAME) start for a step the
#     pipeline has, learning its request event there, and exit 2 naming a
#     step it lacks; --step is refused for the other roles and required for
#     these two.
# A database not reachable at start-up keeps the worker waiting for it, as
# before: config_startup.sh's positive controls.
#
# Runs on a scratch database of the running cluster (test/lib/cluster.sh),
# dropped at the end. Versions are immutable through the API, so the
# mismatches are made as the test's superuser by UPDATEs of the newest
# version's rows (payflow.step_definitions and payflow.pipelines have no
# trigger against it); the queue URL points where nothing listens, which
# the worker only notices once it receives.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib/cluster.sh
source test/lib/assert.sh
source test/lib/proc.sh

BIN=workers/bin
[ -x "$BIN/payflow-worker" ] || { echo "not ok - $BIN/payflow-worker is missing (make -C workers)"; exit 1; }
SCRATCH=pf_pipeline_check
DIR=$(mktemp -d /tmp/payflow-pipeline-check.XXXXXX)
PIDS=()
cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do
		pf_kill_ours 9 "$pid"
		wait "$pid" 2>/dev/null || true
	done
	pf_psql -d postgres -qc "DROP DATABASE IF EXISTS $SCRATCH WITH (FORCE)" >/dev/null 2>&1 || true
	rm -rf "$DIR"
}
trap cleanup EXIT

pf_psql -d postgres -qc "DROP DATABASE IF EXISTS $SCRATCH WITH (FORCE)" -c "CREATE DATABASE $SCRATCH" >/dev/null 2>&1
pf_psql -d "$SCRATCH" -qc "CREATE EXTENSION payflow CASCADE" >/dev/null
sq() { pf_psql -d "$SCRATCH" -Atq "$@"; }

NOWHERE=http://127.0.0.1:1
role_env() {
	echo "PAYFLOW_DATABASE_URL=postgresql://postgres@127.0.0.1:$PF_PGPORT/$SCRATCH"
	echo AWS_REGION=us-east-1
	echo AWS_ACCESS_KEY_ID=AKIDPIPELINECHECK
	echo AWS_SECRET_ACCESS_KEY=pipeline-check-secret
	echo "AWS_ENDPOINT_URL=$NOWHERE"
	echo "PAYFLOW_QUEUE_URL=$NOWHERE/000000000000/q"
	case $1 in
		payment)
			echo "PAYFLOW_LEGACY_ODBC=Driver=PostgreSQL Unicode;Server=127.0.0.1;Port=1"
			echo "PAYFLOW_LEGACY_CALL=SELECT * FROM charge(:idempotency_key)" ;;
		postprocess) echo "PAYFLOW_POSTPROCESS_FUNCTION=payflow.default_postprocess(text,jsonb)" ;;
		invoice) echo "PAYFLOW_INVOICE_URL=$NOWHERE/invoices" ;;
		http*) echo "PAYFLOW_STEP_URL=$NOWHERE/risk" ;;
		sql*) echo "PAYFLOW_STEP_FUNCTION=payflow.default_postprocess(text,jsonb)" ;;
	esac
}

N=0
# run_role ROLE: start it in the background; sets PID and OUT. ROLE may
# carry more arguments: "http --step RISK_CHECK".
run_role() {
	local -a envs args
	mapfile -t envs < <(role_env "$1")
	read -ra args <<<"$1"
	N=$((N + 1))
	OUT=$DIR/$N.out
	env -i PATH="$PATH" HOME="$DIR" "${envs[@]}" "$BIN/payflow-worker" --role "${args[@]}" >"$OUT" 2>&1 &
	PID=$!
	PIDS+=("$PID")
}

# starts ROLE WHY: it says it started and is still running
starts() {
	local role=$1 why=$2
	run_role "$role"
	if pf_wait_for 10 grep -q '"payflow-worker started"' "$OUT" && sleep 0.3 && kill -0 "$PID" 2>/dev/null; then
		echo "ok - $role starts: $why"
	else
		echo "not ok - $role starts: $why: $(head -c 600 "$OUT" | tr '\n' '|')"
		PF_FAILURES=$((PF_FAILURES + 1))
	fi
	pf_kill_ours 9 "$PID"
	wait "$PID" 2>/dev/null || true
}

# refused ROLE TEXT WHY: it exits 2 within 5 s, saying exactly one line, which
# holds TEXT (the payment role's warning that this test gives it no legacy
# DBMS comes first: its settings are checked before the pipeline)
refused() {
	local role=$1 text=$2 why=$3 rc=0 lines out t0 t1
	local -a envs args
	mapfile -t envs < <(role_env "$role")
	read -ra args <<<"$role"
	N=$((N + 1))
	out=$DIR/$N.out
	t0=$(date +%s%N)
	env -i PATH="$PATH" HOME="$DIR" "${envs[@]}" timeout 10 "$BIN/payflow-worker" --role "${args[@]}" >"$out" 2>&1 || rc=$?
	t1=$(date +%s%N)
	lines=$(grep -vc 'the legacy DBMS cannot be reached at start-up' "$out" || true)
	if [ "$rc" = 2 ] && [ "$lines" = 1 ] && grep -qF -- "$text" "$out" && [ $(((t1 - t0) / 1000000)) -lt 5000 ]; then
		echo "ok - $role refused: $why: $(tail -n 1 "$out" | head -c 240)"
	else
		echo "not ok - $role refused: $why (exit $rc, $lines line(s), $(((t1 - t0) / 1000000)) ms): $(head -c 600 "$out" | tr '\n' '|')"
		PF_FAILURES=$((PF_FAILURES + 1))
	fi
}

ROLES=(payment postprocess invoice webhook)

# 1. the shipped pipeline
for role in "${ROLES[@]}"; do
	starts "$role" "the shipped pipeline"
done

# 2. a new step before PROCESS_PAYMENT that no role serves
sq -c "SELECT payflow.add_destination('risk-requests')" >/dev/null
v=$(sq -c "SELECT payflow.add_step('RISK_CHECK', 'RiskCheckRequested', 'risk-requests',
		before_step => 'PROCESS_PAYMENT', running_status => 'RISK_CHECKING', done_status => 'RISK_CHECKED')")
pf_ok "add_step made version 2" [ "$v" = 2 ]
for role in "${ROLES[@]}"; do
	starts "$role" "RISK_CHECK added before PROCESS_PAYMENT (no role serves it)"
done
starts "http --step RISK_CHECK" "the generic HTTP role serves the new step"
pf_ok "it learnt the step's request event from the database" \
	grep -q '"requestEvent":"RiskCheckRequested"' "$OUT"
starts "sql --step RISK_CHECK" "the generic SQL role serves it too"
starts "http --step CREATE_INVOICE" "a shipped step run by the generic HTTP role"
refused "http --step FRAUD_SCORE" "step FRAUD_SCORE does not exist in pipeline version 2 (its steps: RISK_CHECK, PROCESS_PAYMENT, POST_PROCESS, CREATE_INVOICE); add it with payflow.add_step" \
	"a step the pipeline lacks"
refused "sql --step FRAUD_SCORE" "step FRAUD_SCORE does not exist" "a step the pipeline lacks (sql)"
# a generic role waits for a database it cannot reach yet, and a SIGTERM ends that wait
N=$((N + 1))
out=$DIR/$N.out
mapfile -t envs < <(role_env http | sed "s|^PAYFLOW_DATABASE_URL=.*|PAYFLOW_DATABASE_URL=postgresql://postgres@127.0.0.1:1/nowhere|")
env -i PATH="$PATH" HOME="$DIR" "${envs[@]}" "$BIN/payflow-worker" --role http --step RISK_CHECK >"$out" 2>&1 &
pid=$!
PIDS+=("$pid")
pf_ok "http --step waits for an unreachable database, saying so" pf_wait_for 10 grep -q 'step RISK_CHECK is defined there' "$out"
t0=$(date +%s%N)
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pf_eq "... and a SIGTERM ends the wait at once: exit 1, not started" \
	"1|yes|yes" "$rc|$([ $((($(date +%s%N) - t0) / 1000000)) -lt 1500 ] && echo yes || echo no)|$(grep -q 'stopped by a signal while waiting for PostgreSQL; not started' "$out" && echo yes || echo no)"
refused "http" "missing --step: --role http runs the step it names" "no --step"
refused "http --step risk-check" "invalid --step risk-check" "a step name add_step would refuse"
refused "invoice --step RISK_CHECK" "--role invoice runs CREATE_INVOICE: --step is for --role http|sql" \
	"--step for a role with a step of its own"

# 3. the newest version's PROCESS_PAYMENT no longer what the payment role parses
sq -c "UPDATE payflow.step_definitions SET input_field = 'paymentInput'
		WHERE pipeline_version = 2 AND step_name = 'PROCESS_PAYMENT'"
refused payment "step PROCESS_PAYMENT: the database says request event PaymentRequested with input field paymentInput, this worker knows PaymentRequested with payload" \
	"another input field"
starts invoice "a step of another role differs"
sq -c "UPDATE payflow.step_definitions SET input_field = 'payload', request_event = 'PaymentWanted'
		WHERE pipeline_version = 2 AND step_name = 'PROCESS_PAYMENT'"
refused payment "the database says request event PaymentWanted with input field payload, this worker knows PaymentRequested with payload" \
	"another request event"
sq -c "UPDATE payflow.step_definitions SET request_event = 'PaymentRequested'
		WHERE pipeline_version = 2 AND step_name = 'PROCESS_PAYMENT'"
starts payment "the step restored"

# ... and the terminal events the webhook role delivers
sq -c "UPDATE payflow.pipelines SET completed_event = 'OperationDone' WHERE version = 2"
refused webhook "terminal events: the database says OperationDone and OperationFailed, this worker knows OperationCompleted and OperationFailed" \
	"another completion event"
sq -c "UPDATE payflow.pipelines SET completed_event = 'OperationCompleted' WHERE version = 2"

# 4. a role whose step the pipeline lacks
v=$(sq -c "SELECT payflow.remove_step('CREATE_INVOICE')")
refused invoice "step CREATE_INVOICE does not exist in pipeline version $v" "CREATE_INVOICE removed"
starts payment "CREATE_INVOICE removed, PROCESS_PAYMENT kept"

pf_done
