# shellcheck disable=SC2034  # sets variables for the tests that source it
# test/integration/relay_common.bash — shared by the payflow-relay tests
# (named .bash so make check does not run it as a test).  Sourced after
# cd to the repository.
#
#   relay_init PREFIX PORT  a per-run payment-id prefix in $run, a work dir
#                           in $work, the emulator on PORT/PORT+1 (or
#                           $PAYFLOW_RELAY_TEST_PORT), cleanup at exit
#   relay_test_cleanup      defined by a test for its own extra clean-up
# shellcheck source=../lib/cluster.sh
source test/lib/cluster.sh
# shellcheck source=../lib/assert.sh
source test/lib/assert.sh
# shellcheck source=../lib/proc.sh
source test/lib/proc.sh

relay_pids=()

q() { pf_psql -Atq "$@"; }

relay_init() {
	make -s -C workers bin/payflow-relay >/dev/null
	run=$1$(date +%s)$$
	work=$(mktemp -d "/tmp/payflow-$run.XXXXXX")
	export PAYFLOW_EMULATOR_PORT=${PAYFLOW_RELAY_TEST_PORT:-$2}
	export PAYFLOW_EMULATOR_BACKEND_PORT=$((PAYFLOW_EMULATOR_PORT + 1))
	export PAYFLOW_EMULATOR_RUN_DIR=$work/emulator
	trap relay_cleanup EXIT
	start_emulator
	export PAYFLOW_DATABASE_URL="host=$PGHOST port=$PGPORT user=$PGUSER dbname=$PGDATABASE"
	export PAYFLOW_LOG_LEVEL=info
}

relay_cleanup() {
	local pid
	pf_kill_ours KILL "${relay_pids[@]}"
	if declare -F relay_test_cleanup >/dev/null; then relay_test_cleanup; fi
	# no worker will ever take these operations: keep the scheduler from re-emitting them
	pf_psql -Atqc "SELECT count(payflow.cancel(id, 'relay test over')) FROM payflow.operations
				   WHERE payment_id LIKE '$run-%' AND status = 'PENDING'" >/dev/null 2>&1 || true
	test/emulator/stop.sh >/dev/null 2>&1 || true
	rm -rf "$work"
}

# (re)starts the emulator; its queues and the env (AWS_*, PAYFLOW_QUEUE_URLS…)
start_emulator() {
	local env_text
	if ! env_text=$(test/emulator/start.sh 2>>"$work/emulator-start.log"); then
		cat "$work/emulator-start.log"
		echo "not ok - the emulator starts"
		exit 1
	fi
	eval "$env_text"
}

# queue_url LIST DESTINATION: the URL of DESTINATION in a destination=url list
queue_url() { tr ',' '\n' <<<"$1" | sed -n "s|^$2=||p"; }

# start_relay NAME VAR=value...: a relay in the background, logging to $work/relay-NAME.log
start_relay() {
	local name=$1
	shift
	env "$@" workers/bin/payflow-relay 2>>"$work/relay-$name.log" &
	relay_pids+=($!)
	relay_pid=$!
}

# stop_relay PID: SIGTERM, wait; the exit status goes to $relay_status
stop_relay() {
	relay_status=0
	kill -TERM "$1"
	wait "$1" || relay_status=$?
}

in_outbox() { q -c "SELECT count(*) FROM payflow.outbox WHERE message_group_id LIKE '$1-%'"; }
outbox_empty_of() { [ "$(in_outbox "$1")" = 0 ]; }
published_of() {
	q -c "SELECT count(*) FROM payflow.outbox_published p JOIN payflow.operations o ON o.id = p.operation_id
		   WHERE o.payment_id LIKE '$1-%'"
}

# read_queue URL FILE: every message on the queue (without deleting it)
read_queue() { node test/emulator/sqs-read.mjs "$1" --idle 2 --visibility 300 >"$2"; }
