#!/usr/bin/env bash
# Start the local SQS/S3 stack: fauxqs on the back-end port and the SigV4
# front on the public port, both on 127.0.0.1 only, in the background.
# Then create payflow's queues, DLQs and bucket through the front and write
# <run dir>/env.sh, which is also printed on stdout (progress goes to stderr),
# so either `. "$run_dir/env.sh"` or `eval "$(start.sh)"` works.
#
# fauxqs keeps state in memory: a restart after stop.sh (the outage tests)
# comes back empty, and start.sh recreates the queues every time. Against a
# stack that is already up it only re-runs the idempotent setup.
#
# Settings (defaults):
#   PAYFLOW_EMULATOR_PORT=4570               the front; clients use this one
#   PAYFLOW_EMULATOR_BACKEND_PORT=4571       fauxqs itself
#   PAYFLOW_EMULATOR_RUN_DIR=<repo>/.cache/run/emulator   pids, logs, env.sh
#   PAYFLOW_EMULATOR_MAX_RECEIVE_COUNT=5     redrive to the DLQ after this
#   PAYFLOW_EMULATOR_VISIBILITY_TIMEOUT=30   seconds, for every queue
#   PAYFLOW_EMULATOR_START_TIMEOUT=30        seconds to wait for readiness
#   PAYFLOW_EMULATOR_LOG_REQUESTS=0          1: fauxqs logs every request
#   PAYFLOW_TEST_AWS_ACCESS_KEY_ID=AKIDPAYFLOWTEST, PAYFLOW_TEST_AWS_SECRET_ACCESS_KEY=payflow-test-secret,
#   PAYFLOW_TEST_AWS_REGION=us-east-1        what the front accepts
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

run_dir=$PAYFLOW_EMULATOR_RUN_DIR
start_timeout=${PAYFLOW_EMULATOR_START_TIMEOUT:-30}
front_port=$PAYFLOW_EMULATOR_PORT
backend_port=$PAYFLOW_EMULATOR_BACKEND_PORT

[ "$front_port" != "$backend_port" ] || emulator_die "the front and fauxqs need two different ports (both are $front_port)"

"$emulator_dir/install.sh"
mkdir -p "$run_dir"

# One start or stop at a time per run dir: parallel test setups must not
# both decide the stack is down and race for the ports.
exec 8>"$run_dir/.lock"
flock -w 120 8 || emulator_die "$run_dir is locked by another start or stop for over 120s"

port_in_use()
{
	# bash's /dev/tcp connects without needing curl or ss.
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Launch a program detached from the caller: its own log, stdin from
# /dev/null, so `$(start.sh)` does not wait on an inherited pipe, and without
# the lock's descriptor, which would otherwise keep the run dir locked for
# as long as the program lives and deadlock the next stop.sh.
launch()
{
	local name=$1 program=$2

	printf '\n--- %s start %s\n' "$name" "$(date -u +%FT%TZ)" >>"$run_dir/$name.log"
	nohup node "$emulator_dir/$program" </dev/null >>"$run_dir/$name.log" 2>&1 8>&- &
	printf '%s\n' "$!" >"$run_dir/$name.pid"
}

# True while the process we launched is alive (not a zombie) but has not
# yet become the program.
launched_still_starting()
{
	local pid state

	pid=$(cat "$1" 2>/dev/null) || return 1
	[ -r "/proc/$pid/stat" ] || return 1
	state=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 1
	[ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

wait_ready()
{
	local name=$1 program=$2 url=$3 deadline pid

	deadline=$((SECONDS + start_timeout))
	while :; do
		pid=$(emulator_live_pid "$run_dir/$name.pid" "$program") || {
			# Just after `&` the child can still be the forked shell, not
			# yet node: its command line does not name the program. That
			# is starting, not dead (CI once failed on exactly this race).
			if launched_still_starting "$run_dir/$name.pid" && [ "$SECONDS" -lt "$deadline" ]; then
				sleep 0.05
				continue
			fi
			tail -n 20 "$run_dir/$name.log" >&2 || true
			emulator_die "$name exited during start-up (log: $run_dir/$name.log)"
		}
		if node -e '
			const req = require("http").get(process.argv[1], (res) => process.exit(res.statusCode === 200 ? 0 : 1));
			req.on("error", () => process.exit(1));
			req.setTimeout(2000, () => process.exit(1));
		' "$url"; then
			return 0
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			tail -n 20 "$run_dir/$name.log" >&2 || true
			emulator_die "$name (pid $pid) not ready after ${start_timeout}s (log: $run_dir/$name.log)"
		fi
		sleep 0.2
	done
}

# A start that fails half-way takes down what it launched, so a failed
# start never leaves a process behind.
launched=0
on_exit()
{
	local status=$?

	if [ "$status" -ne 0 ] && [ "$launched" = 1 ]; then
		emulator_log "start failed; stopping what it launched"
		PAYFLOW_EMULATOR_LOCK_HELD=1 "$emulator_dir/stop.sh" || true
	fi
	exit "$status"
}
trap on_exit EXIT

backend_pid=$(emulator_live_pid "$run_dir/fauxqs.pid" fauxqs-server.mjs) || backend_pid=
front_pid=$(emulator_live_pid "$run_dir/front.pid" sigv4-front.mjs) || front_pid=

if [ -n "$backend_pid" ] && [ -n "$front_pid" ]; then
	emulator_log "already running (fauxqs pid $backend_pid, front pid $front_pid); re-applying setup"
else
	if [ -n "$backend_pid" ] || [ -n "$front_pid" ]; then
		# Half a stack is a leftover of a crash: start from nothing.
		emulator_log "half-running stack found; stopping it first"
		PAYFLOW_EMULATOR_LOCK_HELD=1 "$emulator_dir/stop.sh"
	fi
	for port in "$backend_port" "$front_port"; do
		if port_in_use "$port"; then
			emulator_die "127.0.0.1:$port is already in use; set PAYFLOW_EMULATOR_PORT / PAYFLOW_EMULATOR_BACKEND_PORT"
		fi
	done

	launched=1
	launch fauxqs fauxqs-server.mjs
	wait_ready fauxqs fauxqs-server.mjs "http://127.0.0.1:$backend_port/health"
	launch front sigv4-front.mjs
	wait_ready front sigv4-front.mjs "http://127.0.0.1:$front_port/_front/health"
	emulator_log "up: front http://127.0.0.1:$front_port -> fauxqs http://127.0.0.1:$backend_port (logs in $run_dir)"
fi

if ! node "$emulator_dir/setup.mjs"; then
	emulator_die "creating queues and bucket failed (front log: $run_dir/front.log)"
fi
emulator_log "queues and bucket ready; env file: $run_dir/env.sh"
