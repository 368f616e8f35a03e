#!/bin/bash
# make bench's worker part: test/bench/worker.sh at N = 256 and 1,000
# blocking calls, each beside the same bench of the last 0.2.x commit
# (the version that first carried 1,000 calls: issue 31), run in turn on
# this machine, so the two columns share its state of the day.
#
#   BENCH_WORKER_SIZES="256 1000"
#   BENCH_WORKER_BASELINE=<commit>    (default: the last 0.2.x commit; none: skip it)
#
# The baseline's tree is exported (git archive) into a scratch folder and
# builds and installs its own extension there; the current tree installs
# its own again before each of its runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
SIZES=${BENCH_WORKER_SIZES:-256 1000}
BASE=${BENCH_WORKER_BASELINE-7a066841c3f4b2838359dda50a396df135155490}
scratch=$(mktemp -d /tmp/payflow-bench-worker-scale.XXXXXX)
trap 'rm -rf "$scratch"' EXIT

base_tree=
if [ -n "$BASE" ]; then
	if git cat-file -e "$BASE^{commit}" 2>/dev/null; then
		base_tree=$scratch/baseline
		mkdir -p "$base_tree"
		git archive "$BASE" | tar -x -C "$base_tree"
	else
		echo "(baseline $BASE is not in this clone (a shallow one?): the current tree alone)"
	fi
fi

# value LOG LABEL: what worker.sh printed after LABEL
value() { awk -v l="$2" 'index($0, l) == 1 { v = substr($0, length(l) + 1); sub(/^ +/, "", v); print v; exit }' "$1"; }
cpu_of() { value "$1" "worker CPU time" | awk '{print $1}'; }

run() {	# run TREE N LOG
	(cd "$1" && BENCH_WORKER_CALLS=$2 test/bench/worker.sh) >"$3" 2>&1 || echo "(the run in $1 at N = $2 failed: $(tail -n 1 "$3"))"
}

for n in $SIZES; do
	[ -n "$base_tree" ] && run "$base_tree" "$n" "$scratch/base-$n.log"
	run "$REPO" "$n" "$scratch/now-$n.log"
done

short=${BASE:0:7}
for n in $SIZES; do
	echo
	echo "== one payment worker, N = $n blocking legacy calls of 30 s, visibility 6 s (0.2.x: commit $short)"
	for label in "operations completed" "legacy calls at once (peak seen / from call_log)" "legacy calls made" \
		"redelivered messages / lost leases / attempts > 1" "peak RSS (VmHWM)" "worker CPU time" \
		"RSS at the peak of calls, by kind" "heartbeat cost"; do
		printf '%s\n' "$label"
		if [ -n "$base_tree" ]; then
			v=$(value "$scratch/base-$n.log" "$label")
			printf '    0.2.x  %s\n' "${v:-(not measured by that version)}"
		fi
		printf '    now    %s\n' "$(value "$scratch/now-$n.log" "$label")"
	done
	if [ -n "$base_tree" ]; then
		awk -v b="$(cpu_of "$scratch/base-$n.log")" -v c="$(cpu_of "$scratch/now-$n.log")" \
			'BEGIN { if (b > 0) printf "worker CPU, now / 0.2.x: %.2f\n", c / b }'
	fi
	grep -E '^(ok|not ok) ' "$scratch/now-$n.log" | sed 's/^/    now: /'
done
