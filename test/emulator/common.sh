# shellcheck shell=bash
# Sourced by the emulator scripts: one place for paths, ports and defaults.
# emulator-config.mjs reads the same variables with the same defaults; the
# values are exported here so the Node programs started below see exactly
# what the shell resolved.

emulator_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$emulator_dir/../.." && pwd)

export PAYFLOW_EMULATOR_CACHE_DIR="${PAYFLOW_EMULATOR_CACHE_DIR:-${PAYFLOW_CACHE_DIR:-$repo_root/.cache}/emulator}"
export PAYFLOW_EMULATOR_RUN_DIR="${PAYFLOW_EMULATOR_RUN_DIR:-$repo_root/.cache/run/emulator}"
export PAYFLOW_EMULATOR_PORT="${PAYFLOW_EMULATOR_PORT:-4570}"
export PAYFLOW_EMULATOR_BACKEND_PORT="${PAYFLOW_EMULATOR_BACKEND_PORT:-4571}"
export PAYFLOW_EMULATOR_MAX_RECEIVE_COUNT="${PAYFLOW_EMULATOR_MAX_RECEIVE_COUNT:-5}"
export PAYFLOW_EMULATOR_VISIBILITY_TIMEOUT="${PAYFLOW_EMULATOR_VISIBILITY_TIMEOUT:-30}"
export PAYFLOW_TEST_AWS_REGION="${PAYFLOW_TEST_AWS_REGION:-us-east-1}"
export PAYFLOW_TEST_AWS_ACCESS_KEY_ID="${PAYFLOW_TEST_AWS_ACCESS_KEY_ID:-AKIDPAYFLOWTEST}"
export PAYFLOW_TEST_AWS_SECRET_ACCESS_KEY="${PAYFLOW_TEST_AWS_SECRET_ACCESS_KEY:-payflow-test-secret}"

emulator_log()
{
	printf 'emulator: %s\n' "$*" >&2
}

emulator_die()
{
	emulator_log "error: $*"
	exit 1
}

# The pid in a pid file, if that process still runs one of our programs.
# Checking the command line guards against a recycled pid after a crash:
# stop.sh must never signal a stranger.
emulator_live_pid()
{
	local pid_file=$1 program=$2 pid

	[ -f "$pid_file" ] || return 1
	pid=$(cat "$pid_file" 2>/dev/null) || return 1
	case "$pid" in
		'' | *[!0-9]*) return 1 ;;
	esac
	[ -r "/proc/$pid/cmdline" ] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$program" || return 1
	printf '%s\n' "$pid"
}
