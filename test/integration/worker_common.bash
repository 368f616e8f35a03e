# shellcheck disable=SC2034  # sets variables for the tests that source it
# test/integration/worker_common.bash — shared by the payflow-worker tests
# (worker_*.sh) and test/bench/worker.sh.  Sourced, not run (and not *.sh,
# so make check does not take it for a test).
#
# Uses the running cluster (test/lib/cluster.sh), sets up the legacy DBMS
# fixture in it, and starts a private emulator, a relay and workers whose
# pids it tracks; wk_cleanup (an EXIT trap) stops exactly those.
#
#   wk_init NAME FRONT_PORT BACKEND_PORT [MAX_RECEIVE_COUNT]
#   wk_start_relay
#   wk_start_worker NAME [VAR=value...]     sets WK_PID_<NAME>; log in $WK_DIR/NAME.log
#   wk_kill9 PID
#   wk_submit PAYMENT_ID [DETAILS_JSON]     prints the operation id
#   wk_wait_status OP STATUS SECONDS
#   wk_invariants OP...                     none lost, one charge per completed payment, no duplicates

WK_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$WK_REPO" || exit 1
# shellcheck source=../lib/cluster.sh
source test/lib/cluster.sh
# shellcheck source=../lib/proc.sh
source test/lib/proc.sh
# shellcheck source=../lib/assert.sh
source test/lib/assert.sh
# shellcheck source=../lib/payload_checksum.sh
source test/lib/payload_checksum.sh

WK_PIDS=()

q() { pf_psql -Atq "$@"; }
legacy() { pf_psql -d legacy -Atq "$@"; }

wk_log() { printf '# %s\n' "$*"; }

wk_init() {
	local name=$1 front=$2 backend=$3 max_receive=${4:-3}

	WK_DIR=$(mktemp -d "/tmp/payflow-$name.XXXXXX")
	export PAYFLOW_EMULATOR_PORT=$front PAYFLOW_EMULATOR_BACKEND_PORT=$backend
	export PAYFLOW_EMULATOR_RUN_DIR=$WK_DIR/emulator
	export PAYFLOW_EMULATOR_MAX_RECEIVE_COUNT=$max_receive
	trap wk_cleanup EXIT

	# make check builds them (make -C workers)
	local bin
	for bin in payflow-worker payflow-relay; do
		[ -x "workers/bin/$bin" ] || { echo "not ok - workers/bin/$bin is missing (make -C workers)"; exit 1; }
	done
	# a stack left by an interrupted run would hold the ports
	test/emulator/stop.sh >/dev/null 2>&1 || true
	pf_forget_leftovers
	eval "$(test/emulator/start.sh 2>"$WK_DIR/emulator-start.log")"
	export AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY PAYFLOW_QUEUE_URLS PAYFLOW_DLQ_URLS
	export PAYFLOW_QUEUE_URL
	PAYFLOW_QUEUE_URL=$(wk_queue_url payment-requests)
	WK_DLQ_URL=$(echo "$PAYFLOW_DLQ_URLS" | tr ',' '\n' | sed -n 's/^payment-requests=//p')

	export PAYFLOW_LEGACY_ODBC
	PAYFLOW_LEGACY_ODBC=$(test/fixtures/legacy/setup.sh 2>"$WK_DIR/legacy-setup.log")
	legacy -c "SELECT reset_fixture()" >/dev/null
	export PAYFLOW_DATABASE_URL="postgresql://postgres@127.0.0.1:$PF_PGPORT/$PF_DB"
	export PAYFLOW_LEGACY_CALL='SELECT * FROM charge(:idempotency_key, :payment_id, :details.amount, :details.currency)'
	export PAYFLOW_LEGACY_SUBMIT='SELECT * FROM submit_charge(:idempotency_key, :payment_id, :details.amount, :details.currency)'
	export PAYFLOW_LEGACY_STATUS='SELECT * FROM charge_status(:legacy_ref)'
	export PAYFLOW_LEGACY_LOOKUP='SELECT * FROM lookup_charge(:idempotency_key, :payment_id)'
	export PAYFLOW_LOG_LEVEL=info
	# the shortest leases that still leave heartbeats plenty of margin
	export PAYFLOW_VISIBILITY_TIMEOUT=${PAYFLOW_VISIBILITY_TIMEOUT:-4}
	export PAYFLOW_POLL_INTERVAL_MS=200
	# retries due in a second, not in minutes
	q -c "UPDATE payflow.step_definitions SET retry_base_delay = '1 second', retry_max_delay = '2 seconds'
		  WHERE step_name = 'PROCESS_PAYMENT'"
	WK_RUN=$$
}

wk_cleanup() {
	local pid user
	user=$(id -un)
	pf_kill_ours 9 "${WK_PIDS[@]}"
	for pid in "${WK_PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	# psqlODBC's CommLog (on in Debian's odbcinst.ini): one file per process
	for pid in "${WK_PIDS[@]}"; do
		rm -f "/tmp/psqlodbc_payflow-worker_$user$pid.log"
	done
	q -c "UPDATE payflow.step_definitions SET retry_base_delay = NULL, retry_max_delay = NULL" >/dev/null 2>&1 || true
	legacy -c "SELECT clear_faults()" -c "SELECT set_job_delay(2)" >/dev/null 2>&1 || true
	test/emulator/stop.sh >/dev/null 2>&1 || true
	if [ "$PF_FAILURES" -ne 0 ] && [ -n "${WK_DIR:-}" ]; then
		# show what the processes said before the evidence goes
		for f in "$WK_DIR"/*.log; do
			[ -f "$f" ] || continue
			echo "--- $(basename "$f") (last 40 lines)"
			tail -n 40 "$f" | cut -c1-400
		done
	fi
	[ -n "${WK_DIR:-}" ] && rm -rf "$WK_DIR"
	return 0
}

wk_queue_url() {
	echo "$PAYFLOW_QUEUE_URLS" | tr ',' '\n' | sed -n "s/^$1=//p"
}

wk_start_relay() {
	workers/bin/payflow-relay >"$WK_DIR/relay.log" 2>&1 &
	WK_PIDS+=($!)
	WK_PID_RELAY=$!
}

# wk_start_worker NAME [VAR=value...]: a payment worker with extra settings
wk_start_worker() {
	local name=$1
	shift
	env PAYFLOW_WORKER_ID="$name-$WK_RUN" "$@" workers/bin/payflow-worker --role payment >"$WK_DIR/$name.log" 2>&1 &
	WK_PIDS+=($!)
	printf -v "WK_PID_$name" '%s' "$!"
	# started means listening: its first line says so
	pf_wait_for 10 grep -q '"payflow-worker started"' "$WK_DIR/$name.log" ||
		echo "# worker $name did not say it started"
}

# wk_kill9 PID: as a crash would, and quietly (no "Killed" line from bash)
wk_kill9() {
	pf_kill_ours 9 "$1"
	wait "$1" 2>/dev/null || true
}

wk_submit() {
	local payment=$1 details=${2:-'{"amount": 12.50, "currency": "EUR"}'}
	q -c "SELECT payflow.submit('$payment', '$details'::jsonb, correlation_id => 'corr-$payment')"
}

wk_status() { q -c "SELECT status FROM payflow.operations WHERE id = '$1'"; }

wk_has_status() { [ "$(wk_status "$1")" = "$2" ]; }

wk_wait_status() {
	pf_wait_for "$3" wk_has_status "$1" "$2"
}

wk_attempts() { q -c "SELECT attempt FROM payflow.steps WHERE operation_id = '$1' AND step_name = 'PROCESS_PAYMENT'"; }

wk_payment_of() { q -c "SELECT payment_id FROM payflow.operations WHERE id = '$1'"; }

# wk_log_has NAME OP TEXT: the worker's log has a line about OP containing TEXT
wk_log_has() {
	grep -F "\"operationId\":\"$2\"" "$WK_DIR/$1.log" | grep -qF "$3"
}

# The checks every test ends with, over the operations it created.
wk_invariants() {
	local op lost=0 wrong=0 status payment charges
	for op in "$@"; do
		status=$(wk_status "$op")
		payment=$(wk_payment_of "$op")
		charges=$(legacy -c "SELECT charge_count('$payment')")
		case "$status" in
			PAYMENT_COMPLETED)
				[ "$charges" = 1 ] || { wrong=$((wrong + 1)); echo "# $op ($payment): $charges charges"; } ;;
			FAILED) ;;
			*) lost=$((lost + 1)); echo "# $op ($payment) is still $status" ;;
		esac
	done
	pf_eq "no operation lost (all ended)" 0 "$lost"
	pf_eq "every completed payment charged exactly once" 0 "$wrong"
	pf_eq "duplicate_charges() is empty" 0 "$(legacy -c "SELECT count(*) FROM duplicate_charges()")"
}
