#!/usr/bin/env bash
# Stop the local SQS/S3 stack started by start.sh: the front first (so no
# client sees a half-served request turn into a 503), then fauxqs.
# Each process gets SIGTERM, then SIGKILL if it is still there after
# PAYFLOW_EMULATOR_STOP_TIMEOUT seconds (default 10). Only the pids in the
# run dir's pid files are signalled, and only while they still run our
# programs. Safe to call when nothing runs, and twice.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

run_dir=$PAYFLOW_EMULATOR_RUN_DIR
stop_timeout=${PAYFLOW_EMULATOR_STOP_TIMEOUT:-10}

[ -d "$run_dir" ] || exit 0

# start.sh calls this while holding the lock itself.
if [ "${PAYFLOW_EMULATOR_LOCK_HELD:-0}" != 1 ]; then
	exec 8>"$run_dir/.lock"
	# Stopping must not hang on a lock something else forgot to release:
	# wait a while for a start in progress, then go ahead.
	flock -w 30 8 || emulator_log "run dir still locked after 30s; stopping anyway"
fi

stop_one()
{
	local name=$1 program=$2 pid deadline

	if ! pid=$(emulator_live_pid "$run_dir/$name.pid" "$program"); then
		rm -f "$run_dir/$name.pid"
		return 0
	fi
	kill -TERM "$pid" 2>/dev/null || true
	deadline=$((SECONDS + stop_timeout))
	while kill -0 "$pid" 2>/dev/null; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			emulator_log "$name (pid $pid) ignored SIGTERM for ${stop_timeout}s; sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			break
		fi
		sleep 0.1
	done
	# A killed process lingers until the kernel reaps it; wait for that so
	# its port is free when stop.sh returns and a restart can bind it.
	while [ -d "/proc/$pid" ] && emulator_live_pid "$run_dir/$name.pid" "$program" >/dev/null; do
		sleep 0.1
	done
	rm -f "$run_dir/$name.pid"
	emulator_log "stopped $name (pid $pid)"
}

stop_one front sigv4-front.mjs
stop_one fauxqs fauxqs-server.mjs
