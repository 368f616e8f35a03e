#!/bin/bash
# Start-up with bad configuration: every edge program (payflow-relay,
# payflow-worker for each role, payflow-api once it is built), given a
# missing required setting or an invalid one, exits at once (well under
# 3 s, before any connection), with status 2 and exactly one line on
# stdout+stderr that names the setting.  Secrets in a refused value are not
# echoed.  A positive control per program: the same environment without the
# fault keeps running (it waits for its unreachable database and queue),
# so the refusals are the settings' doing.
#
# Needs no server: the settings point at port 1, where nothing listens.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib/assert.sh
source test/lib/proc.sh

BIN=workers/bin
for b in payflow-relay payflow-worker; do
	[ -x "$BIN/$b" ] || { echo "not ok - $BIN/$b is missing (make -C workers)"; exit 1; }
done
DIR=$(mktemp -d /tmp/payflow-config-startup.XXXXXX)
PIDS=()
cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do
		pf_kill_ours 9 "$pid"
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$DIR"
}
trap cleanup EXIT

NOWHERE=http://127.0.0.1:1
DB_PASSWORD=pw-must-not-be-echoed-7c1f
# settings every program accepts; nothing listens on port 1
COMMON=(
	"PAYFLOW_DATABASE_URL=postgresql://postgres:$DB_PASSWORD@127.0.0.1:1/payflow"
	AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=AKIDCONFIGTEST AWS_SECRET_ACCESS_KEY=config-test-secret
	"AWS_ENDPOINT_URL=$NOWHERE"
)
# base_env PROGRAM: the settings that make PROGRAM start
base_env() {
	printf '%s\n' "${COMMON[@]}"
	case $1 in
		relay) echo "PAYFLOW_QUEUE_URLS=payment-requests=$NOWHERE/000000000000/payment-requests" ;;
		api) ;;
		*) echo "PAYFLOW_QUEUE_URL=$NOWHERE/000000000000/q" ;;
	esac
	case $1 in
		payment)
			# as on ECS: a well-formed agent URI starts (nothing is called until a message is held)
			echo "ECS_AGENT_URI=$NOWHERE/api/task"
			echo "PAYFLOW_LEGACY_ODBC=Driver=PostgreSQL Unicode;Server=127.0.0.1;Port=1;PWD=odbc-pw-not-echoed"
			echo "PAYFLOW_LEGACY_CALL=SELECT * FROM charge(:idempotency_key)" ;;
		postprocess) echo "PAYFLOW_POSTPROCESS_FUNCTION=payflow.default_postprocess(text,jsonb)" ;;
		invoice) echo "PAYFLOW_INVOICE_URL=$NOWHERE/invoices" ;;
		http) echo "PAYFLOW_STEP_URL=$NOWHERE/risk" ;;
		sql) echo "PAYFLOW_STEP_FUNCTION=risk.check(text,jsonb)" ;;
	esac
}
command_of() {
	case $1 in
		relay) echo "$BIN/payflow-relay" ;;
		api) echo "$BIN/payflow-api" ;;
		# the generic roles: a step added by SQL (the database, unreachable here, is waited for)
		http | sql) echo "$BIN/payflow-worker --role $1 --step RISK_CHECK" ;;
		*) echo "$BIN/payflow-worker --role $1" ;;
	esac
}
PROGRAMS=(relay payment postprocess invoice webhook http sql)
if [ -x "$BIN/payflow-api" ]; then
	PROGRAMS+=(api)
else
	pf_skip "payflow-api's refusals" "$BIN/payflow-api is not built"
fi

# env_for PROGRAM CHANGE...: the base environment with changes applied,
# NAME=value to set (or replace), -NAME to unset; one per line
env_for() {
	local program=$1 change name
	shift
	local -a lines
	mapfile -t lines < <(base_env "$program")
	for change in "$@"; do
		if [[ $change == -* ]]; then
			name=${change#-}
		else
			name=${change%%=*}
		fi
		local -a kept=()
		local line
		for line in "${lines[@]}"; do
			[ "${line%%=*}" = "$name" ] || kept+=("$line")
		done
		lines=("${kept[@]}")
		[[ $change == -* ]] || lines+=("$change")
	done
	printf '%s\n' "${lines[@]}"
}

N=0
# refused PROGRAM SETTING CHANGE...: PROGRAM with CHANGE exits 2 within
# 3 s, saying one line that names SETTING and no secret
refused() {
	local program=$1 setting=$2
	shift 2
	local -a envs
	mapfile -t envs < <(env_for "$program" "$@")
	N=$((N + 1))
	local out=$DIR/$N.out t0 t1 rc=0 lines
	t0=$(date +%s%N)
	# shellcheck disable=SC2046
	env -i PATH="$PATH" HOME="$DIR" "${envs[@]}" timeout 10 $(command_of "$program") >"$out" 2>&1 || rc=$?
	t1=$(date +%s%N)
	lines=$(grep -c '' "$out" || true)
	local what="$program with $* -> $setting"
	# no timing threshold (a loaded machine took 3.8 s to start a program):
	# "at once" is exit 2 before timeout's 10 s
	if [ "$rc" = 2 ] && [ "$lines" = 1 ] && grep -qF "$setting" "$out" &&
		! grep -qF -e "$DB_PASSWORD" -e odbc-pw-not-echoed -e config-test-secret "$out"; then
		echo "ok - $what: $(head -c 160 "$out")"
	else
		echo "not ok - $what (exit $rc, $lines line(s), $(((t1 - t0) / 1000000)) ms): $(head -c 400 "$out" | tr '\n' '|')"
		PF_FAILURES=$((PF_FAILURES + 1))
	fi
}

# positive control: each program with its base environment is still
# running after 1.5 s (all started together)
declare -A CONTROL_PID
for p in "${PROGRAMS[@]}"; do
	mapfile -t envs < <(env_for "$p")
	# shellcheck disable=SC2046
	env -i PATH="$PATH" HOME="$DIR" "${envs[@]}" $(command_of "$p") >"$DIR/$p.run" 2>&1 &
	CONTROL_PID[$p]=$!
	PIDS+=($!)
done
# and the post-processing role without a hook setting: the shipped default
mapfile -t envs < <(env_for postprocess -PAYFLOW_POSTPROCESS_FUNCTION)
# shellcheck disable=SC2046  # command_of: a program and its arguments
env -i PATH="$PATH" HOME="$DIR" "${envs[@]}" $(command_of postprocess) >"$DIR/postprocess-default.run" 2>&1 &
default_pid=$!
PIDS+=($!)
sleep 1.5
for p in "${PROGRAMS[@]}"; do
	pf_ok "positive control: $p starts with the base settings (and waits for its servers)" kill -0 "${CONTROL_PID[$p]}"
	kill -9 "${CONTROL_PID[$p]}" 2>/dev/null || true
	wait "${CONTROL_PID[$p]}" 2>/dev/null || true
done
pf_ok "positive control: postprocess without PAYFLOW_POSTPROCESS_FUNCTION or _URL starts, saying it runs the shipped hook" \
	bash -c "kill -0 $default_pid && grep -q 'the shipped payflow.default_postprocess(text,jsonb)' '$DIR/postprocess-default.run'"
kill -9 "$default_pid" 2>/dev/null || true
wait "$default_pid" 2>/dev/null || true

# --- every program: the database, the log level, the store, AWS endpoints and credentials
for p in "${PROGRAMS[@]}"; do
	refused "$p" PAYFLOW_DATABASE_URL -PAYFLOW_DATABASE_URL
	refused "$p" PAYFLOW_DATABASE_URL "PAYFLOW_DATABASE_URL=host=127.0.0.1 password=$DB_PASSWORD port"
	refused "$p" PAYFLOW_LOG_LEVEL PAYFLOW_LOG_LEVEL=verbose
	refused "$p" PAYFLOW_STORE PAYFLOW_STORE=gcs
	refused "$p" PAYFLOW_S3_BUCKET PAYFLOW_STORE=s3
	refused "$p" AWS_ENDPOINT_URL AWS_ENDPOINT_URL=localhost:4566
	refused "$p" AWS_ENDPOINT_URL_SQS "AWS_ENDPOINT_URL_SQS=http://local host:4566"
	refused "$p" AWS_SECRET_ACCESS_KEY -AWS_SECRET_ACCESS_KEY
	refused "$p" PAYFLOW_CONFIG_FILE "PAYFLOW_CONFIG_FILE=$DIR/no-such-file.env"
done

# --- AWS users: region and credentials
for p in relay payment postprocess invoice webhook http sql; do
	refused "$p" AWS_REGION -AWS_REGION
	refused "$p" AWS_ACCESS_KEY_ID -AWS_ACCESS_KEY_ID -AWS_SECRET_ACCESS_KEY
done

# --- the relay: its queue map
refused relay PAYFLOW_QUEUE_URLS -PAYFLOW_QUEUE_URLS
refused relay PAYFLOW_QUEUE_URLS PAYFLOW_QUEUE_URLS=payment-requests
refused relay PAYFLOW_QUEUE_URLS "PAYFLOW_QUEUE_URLS==$NOWHERE/q"
refused relay PAYFLOW_QUEUE_URLS "PAYFLOW_QUEUE_URLS=payment-requests="
refused relay PAYFLOW_QUEUE_URLS "PAYFLOW_QUEUE_URLS=payment-requests=ftp://127.0.0.1/q"
refused relay PAYFLOW_QUEUE_URLS "PAYFLOW_QUEUE_URLS=payment requests=$NOWHERE/q"
refused relay PAYFLOW_QUEUE_URLS "PAYFLOW_QUEUE_URLS=a=$NOWHERE/q1,a=$NOWHERE/q2"
refused relay PAYFLOW_RELAY_IN_FLIGHT PAYFLOW_RELAY_IN_FLIGHT=many
refused relay PAYFLOW_RELAY_LEASE_SECONDS PAYFLOW_RELAY_LEASE_SECONDS=1

# --- every worker role: queue, concurrency, time-outs
for p in payment postprocess invoice webhook http sql; do
	refused "$p" PAYFLOW_QUEUE_URL -PAYFLOW_QUEUE_URL
	refused "$p" PAYFLOW_QUEUE_URL PAYFLOW_QUEUE_URL=sqs://payment-requests
	refused "$p" PAYFLOW_CONCURRENCY PAYFLOW_CONCURRENCY=eight
	refused "$p" PAYFLOW_CONCURRENCY PAYFLOW_CONCURRENCY=8x
	refused "$p" PAYFLOW_CONCURRENCY PAYFLOW_CONCURRENCY=0
	refused "$p" PAYFLOW_CONCURRENCY PAYFLOW_CONCURRENCY=-3
	refused "$p" PAYFLOW_CONCURRENCY PAYFLOW_CONCURRENCY=99999999999
	refused "$p" PAYFLOW_VISIBILITY_TIMEOUT PAYFLOW_VISIBILITY_TIMEOUT=1
	refused "$p" PAYFLOW_DRAIN_SECONDS "PAYFLOW_DRAIN_SECONDS=1.5"
	# task scale-in protection: ECS sets ECS_AGENT_URI; a malformed one is refused, not ignored
	refused "$p" ECS_AGENT_URI ECS_AGENT_URI=169.254.170.2/api/task
	refused "$p" ECS_AGENT_URI "ECS_AGENT_URI=http://169.254.170.2/api/a task"
	refused "$p" PAYFLOW_PROTECTION_MINUTES PAYFLOW_PROTECTION_MINUTES=2881
	refused "$p" PAYFLOW_PROTECTION_MINUTES PAYFLOW_PROTECTION_MINUTES=0
	refused "$p" PAYFLOW_PROTECTION_IDLE_SECONDS PAYFLOW_PROTECTION_IDLE_SECONDS=soon
	refused "$p" PAYFLOW_PROTECTION_RENEW_SECONDS PAYFLOW_PROTECTION_RENEW_SECONDS=0
done

# --- the roles' own settings
refused payment PAYFLOW_LEGACY_ODBC -PAYFLOW_LEGACY_ODBC
refused payment PAYFLOW_LEGACY_CALL -PAYFLOW_LEGACY_CALL
refused payment PAYFLOW_LEGACY_MODE PAYFLOW_LEGACY_MODE=async
refused payment PAYFLOW_LEGACY_SUBMIT PAYFLOW_LEGACY_MODE=submit-poll
refused payment PAYFLOW_LEGACY_TIMEOUT PAYFLOW_LEGACY_TIMEOUT=forever
refused payment PAYFLOW_LEGACY_RETRYABLE_SQLSTATES PAYFLOW_LEGACY_RETRYABLE_SQLSTATES=not-a-sqlstate
# neither hook is the shipped default (a positive control below); both at once is refused
refused postprocess PAYFLOW_POSTPROCESS_URL "PAYFLOW_POSTPROCESS_URL=https://hooks.example.com/pp"
refused postprocess PAYFLOW_POSTPROCESS_FUNCTION PAYFLOW_POSTPROCESS_FUNCTION=payflow.default_postprocess
refused postprocess PAYFLOW_POSTPROCESS_URL "PAYFLOW_POSTPROCESS_URL=$NOWHERE/hook"
refused invoice PAYFLOW_INVOICE_URL -PAYFLOW_INVOICE_URL
refused http PAYFLOW_STEP_URL -PAYFLOW_STEP_URL
refused http PAYFLOW_STEP_URL PAYFLOW_STEP_URL=127.0.0.1:1/risk
refused http PAYFLOW_STEP_TLS_VERIFY "PAYFLOW_STEP_URL=https://risk.example.com/check" PAYFLOW_STEP_TLS_VERIFY=false
refused http PAYFLOW_STEP_TIMEOUT_MS PAYFLOW_STEP_TIMEOUT_MS=5
refused http PAYFLOW_STEP_AUTHORIZATION "PAYFLOW_STEP_AUTHORIZATION=Bearer a$(printf '\r')X: 1"
refused sql PAYFLOW_STEP_FUNCTION -PAYFLOW_STEP_FUNCTION
refused sql PAYFLOW_STEP_FUNCTION PAYFLOW_STEP_FUNCTION=risk.check
refused invoice PAYFLOW_INVOICE_URL PAYFLOW_INVOICE_URL=127.0.0.1:1/invoices
refused invoice PAYFLOW_INVOICE_TLS_VERIFY PAYFLOW_INVOICE_URL=https://invoices.example.com PAYFLOW_INVOICE_TLS_VERIFY=false
refused invoice PAYFLOW_INVOICE_TIMEOUT_MS PAYFLOW_INVOICE_TIMEOUT_MS=10
refused webhook PAYFLOW_WEBHOOK_MAX_ATTEMPTS PAYFLOW_WEBHOOK_MAX_ATTEMPTS=0
refused webhook PAYFLOW_WEBHOOK_BACKOFF_MAX_SECONDS PAYFLOW_WEBHOOK_BACKOFF_BASE_SECONDS=600 PAYFLOW_WEBHOOK_BACKOFF_MAX_SECONDS=60
refused webhook PAYFLOW_WEBHOOK_ALLOW_HTTP PAYFLOW_WEBHOOK_ALLOW_HTTP=maybe

# --- the API, once it exists
if [ -x "$BIN/payflow-api" ]; then
	refused api PAYFLOW_LISTEN PAYFLOW_LISTEN=8080
	refused api PAYFLOW_LISTEN PAYFLOW_LISTEN=127.0.0.1:99999
	refused api PAYFLOW_API_THREADS PAYFLOW_API_THREADS=0
	refused api PAYFLOW_API_POOL_SIZE PAYFLOW_API_POOL_SIZE=lots
	refused api PAYFLOW_API_MAX_BODY PAYFLOW_API_MAX_BODY=1
	refused api PAYFLOW_API_MAX_CONNECTIONS PAYFLOW_API_MAX_CONNECTIONS=8
	refused api PAYFLOW_API_MAX_CONNECTIONS PAYFLOW_API_MAX_CONNECTIONS=500
	refused api PAYFLOW_API_MAX_CONNECTIONS PAYFLOW_API_MAX_STREAMS=5000
	refused api PAYFLOW_API_MAX_CONNECTIONS_PER_ADDRESS PAYFLOW_API_MAX_CONNECTIONS_PER_ADDRESS=-1
	refused api PAYFLOW_API_MAX_CONNECTIONS_PER_ADDRESS PAYFLOW_API_MAX_CONNECTIONS_PER_ADDRESS=many
	refused api PAYFLOW_API_HEADER_TIMEOUT PAYFLOW_API_HEADER_TIMEOUT=0
	refused api PAYFLOW_API_HEADER_TIMEOUT PAYFLOW_API_HEADER_TIMEOUT=10s
	refused api PAYFLOW_API_MAX_STREAMS_PER_KEY PAYFLOW_API_MAX_STREAMS_PER_KEY=0
fi

# --- a configuration file with an unknown name
printf 'PAYFLOW_CONCURENCY=8\n' >"$DIR/typo.env"
refused relay PAYFLOW_CONCURENCY "PAYFLOW_CONFIG_FILE=$DIR/typo.env"

# --- the role is an argument, not a setting: an unknown one is refused at
# once with exit 2; the first line names it (the usage text follows)
N=$((N + 1))
rc=0
env -i PATH="$PATH" HOME="$DIR" "${COMMON[@]}" timeout 10 "$BIN/payflow-worker" --role refunds >"$DIR/role.out" 2>&1 || rc=$?
pf_eq "payflow-worker --role refunds exits 2" 2 "$rc"
pf_eq "its first line names the unknown role" "payflow-worker: unknown or unavailable role refunds" "$(head -n 1 "$DIR/role.out")"
rc=0
env -i PATH="$PATH" HOME="$DIR" "${COMMON[@]}" timeout 10 "$BIN/payflow-worker" >"$DIR/norole.out" 2>&1 || rc=$?
pf_eq "payflow-worker without --role exits 2" 2 "$rc"
pf_eq "its first line says --role is missing" "payflow-worker: missing --role" "$(head -n 1 "$DIR/norole.out")"

# --- more executors than the process may open files for: refused at start
# (a hard limit it cannot raise), not failing logins later one by one; with
# room under the hard limit the soft one is raised instead
mapfile -t nofile_env < <(env_for payment PAYFLOW_CONCURRENCY=400)
N=$((N + 1))
rc=0
# shellcheck disable=SC2046  # command_of: a program and its arguments
(ulimit -n 256 && env -i PATH="$PATH" HOME="$DIR" "${nofile_env[@]}" timeout 10 $(command_of payment)) \
	>"$DIR/nofile.out" 2>&1 || rc=$?
pf_eq "400 executors under a hard limit of 256 open files: exit 2" 2 "$rc"
pf_ok "... one line naming PAYFLOW_CONCURRENCY and the limit: $(head -c 200 "$DIR/nofile.out")" \
	grep -q 'invalid PAYFLOW_CONCURRENCY: 400 executors need about .* open files, and this process may open 256' "$DIR/nofile.out"

echo "# $N refusals checked"
pf_done
