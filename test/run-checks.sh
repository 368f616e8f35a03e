#!/bin/bash
# make check: every test tier on a throwaway cluster.  Runs as root on a
# fresh Debian 12 machine: installs what it needs, builds, starts what it
# needs, and stops it all on exit (also on failure).
#
# make check T=NAME[,NAME...] runs only the named tests, with the same
# build and cluster (names: test/run-checks.sh --list, and the README).
#
# A check that cannot run here says "SKIP - what: why" (pf_skip in
# test/lib/assert.sh) instead of passing: each tier's skips are counted
# (PF_SKIP_LOG) and listed in the summary.
set -euo pipefail
cd "$(dirname "$0")/.."

# ---- the tests by name (make check T=NAME)
integration_names() { (cd test/integration && ls *.sh | sed 's/\.sh$//'); }
list_names() {
	cat <<-LIST
	unit                  workers' C unit tests (make -C workers check)
	emulator              the SQS/S3 emulator behind the SigV4 front
	smoke                 workers' SQS/S3 and PostgreSQL smoke
	fixture-legacy        the legacy DBMS fixture through psqlODBC
	fixture-invoice       the invoice API stand-in
	regress               every pg_regress file (sql/), then every isolation spec
	regress:FILE          one pg_regress file, e.g. regress:steps (after 00_setup, which holds the helpers)
	isolation:SPEC        one isolation spec of test/isolation/specs, e.g. isolation:claim_race
	pgtap                 every pgTAP file (test/pgtap)
	pgtap:FILE            one of them, e.g. pgtap:role_privileges
	flavour-sql           the C-free flavour's suites (test/flavour-sql/suites.sh)
	flavour-sql-e2e       the C-free flavour's pipeline_e2e and takeover
	NAME                  test/integration/NAME.sh, e.g. bad_messages: $(integration_names | paste -sd' ')
	LIST
}
if [ "${1:-}" = --list ]; then
	list_names
	exit 0
fi

# run_named NAME: the tier of that name (the full run calls these in order)
run_named() {
	local t=$1 arg=${1#*:}
	case $t in
		unit) run_tier "workers: unit tests (config, SigV4 vectors, events, clients)" make -s -C workers check ;;
		emulator) run_tier "emulator: SQS/S3 behind the SigV4 front" test/emulator/selftest.sh ;;
		smoke) run_tier "workers: SQS/S3 and PostgreSQL smoke" make -s -C workers smoke ;;
		fixture-legacy) run_tier "fixture: legacy DBMS through psqlODBC" test/fixtures/legacy/selftest.sh ;;
		fixture-invoice) run_tier "fixture: invoice API stand-in" test/fixtures/invoice-api/selftest.sh ;;
		regress) run_tier "pg_regress + isolation" make -s installcheck ;;
		regress:*) run_tier "pg_regress: $arg" make -s installcheck REGRESS="$arg" ISOLATION= ;;
		isolation:*) run_tier "isolation: $arg" make -s installcheck REGRESS= ISOLATION="$arg" ;;
		pgtap) run_tier "pgTAP" pg_prove --ext .sql -d "$PF_DB" -h "$PGHOST" -p "$PGPORT" -U postgres test/pgtap/ ;;
		pgtap:*) run_tier "pgTAP: $arg" pg_prove --ext .sql -d "$PF_DB" -h "$PGHOST" -p "$PGPORT" -U postgres "test/pgtap/$arg.sql" ;;
		flavour-sql) run_tier "C-free flavour: pg_regress, isolation, pgTAP (plain SQL; pg_regress again via pg_tle)" test/flavour-sql/suites.sh ;;
		flavour-sql-e2e) run_tier "C-free flavour: pipeline_e2e and worker_takeover" test/flavour-sql/integration.sh ;;
		*) run_tier "$t" "test/integration/$t.sh" ;;
	esac
}

# A name that names nothing stops the run before anything is installed.
selected=()
if [ -n "${T:-}" ]; then
	read -r -a selected <<<"${T//,/ }"
	for t in "${selected[@]}"; do
		arg=${t#*:}
		case $t in
			unit | emulator | smoke | fixture-legacy | fixture-invoice | regress | pgtap | flavour-sql | flavour-sql-e2e) ;;
			regress:*) [ -f "sql/$arg.sql" ] || { echo "make check: T=$t: no sql/$arg.sql" >&2; exit 2; } ;;
			isolation:*) [ -f "test/isolation/specs/$arg.spec" ] || { echo "make check: T=$t: no test/isolation/specs/$arg.spec" >&2; exit 2; } ;;
			pgtap:*) [ -f "test/pgtap/$arg.sql" ] || { echo "make check: T=$t: no test/pgtap/$arg.sql" >&2; exit 2; } ;;
			*) [ -x "test/integration/$t.sh" ] || { echo "make check: T=$t names no test; the names:" >&2; list_names >&2; exit 2; } ;;
		esac
	done
fi

source test/lib/deps.sh
source test/lib/cluster.sh

pf_install_deps

echo "== build"
make -s >/dev/null
make -s install >/dev/null
make -s -C workers >/dev/null

# A fresh cluster per run: tests must not depend on what an earlier run left.
pf_cluster_destroy
skip_dir=$(mktemp -d /tmp/payflow-check-skips.XXXXXX)
trap 'pf_cluster_destroy; rm -rf "$skip_dir"' EXIT
pf_cluster_start

failed=0
failed_names=()	# what failed, named again at the very end (CI shows the tail)
failed_lines=()	# and the first "not ok" lines of each, there too
# not_ok_of FILE: up to five "not ok" lines of a check's output, into the list
not_ok_of() {
	[ -f "$1" ] || return 0
	mapfile -t -O "${#failed_lines[@]}" failed_lines < <(grep -a '^not ok' "$1" | head -5 | cut -c1-300)
}
check_started=$SECONDS
timings=()
# skips_of FILE TIER: FILE's skip lines, each prefixed with its tier, into the list
skip_lines=()
skips_of() {
	local line
	[ -f "$1" ] || return 0
	while IFS= read -r line; do
		skip_lines+=("$2: $line")
	done <"$1"
}
skip_note() {	# skip_note FILE: ", N skipped" when the tier skipped any
	local n=0
	[ -f "$1" ] && n=$(wc -l <"$1")
	[ "$n" -gt 0 ] && echo ", $n skipped" || true
}
run_tier() {
	local name=$1 started=$SECONDS
	shift
	echo "== $name"
	export PF_SKIP_LOG=$skip_dir/tier-${#timings[@]}
	local out=$skip_dir/out-${#timings[@]} rc=0
	# (pipefail: rc is the check's status, tee's only if it fails itself)
	"$@" 2>&1 | tee "$out" || rc=$?
	if [ "$rc" != 0 ]; then
		echo "!! $name FAILED"
		failed=1
		failed_names+=("$name")
		not_ok_of "$out"
	fi
	rm -f "$out"
	timings+=("$((SECONDS - started)) s  $name$(skip_note "$PF_SKIP_LOG")")
	skips_of "$PF_SKIP_LOG" "$name"
	unset PF_SKIP_LOG
}

# The deploy tiers share nothing with the rest (no cluster of the suite,
# ports of their own: deploy_image's TLS cluster is 54366) and take the
# longest: they run in the background beside the other tiers, their output
# shown whole when they end.
PARALLEL_TIERS="deploy_artifacts deploy_image"
bg_dir=$(mktemp -d /tmp/payflow-check-bg.XXXXXX)
bg_pids=()
bg_names=()
run_tier_bg() {
	local name=$1
	shift
	echo "== $name (in the background)"
	(
		started=$SECONDS
		rc=0
		PF_SKIP_LOG=$bg_dir/$name.skips "$@" >"$bg_dir/$name.log" 2>&1 || rc=$?
		echo "$rc $((SECONDS - started))" >"$bg_dir/$name.rc"
	) &
	bg_pids+=($!)
	bg_names+=("$name")
}
collect_bg() {
	local name rc secs
	[ ${#bg_pids[@]} -gt 0 ] && { wait "${bg_pids[@]}" 2>/dev/null || true; }
	for name in "${bg_names[@]}"; do
		echo "== $name (ran in the background)"
		cat "$bg_dir/$name.log"
		read -r rc secs <"$bg_dir/$name.rc" || { rc=1; secs=0; }
		if [ "$rc" != 0 ]; then
			echo "!! $name FAILED"
			failed=1
			failed_names+=("$name")
			not_ok_of "$bg_dir/$name.log"
		fi
		timings+=("$secs s  $name (in the background)$(skip_note "$bg_dir/$name.skips")")
		skips_of "$bg_dir/$name.skips" "$name"
	done
}

# Lanes: integration tests that share nothing with the main lane run on
# lanes of their own, beside it, each lane with its own cluster (port
# 5438N, or PF_LANE_PORT_BASE + N beside another make check on the same
# machine; its own legacy fixture and payflow database); every test has its
# own emulator and fixture ports. Tests that share a port stay on one lane
# (worker_invoice and worker_slow_credentials; pipeline_e2e, worker_nul_body
# and the C-free flavour's pipeline_e2e; api_admin and worker_webhook), and
# everything that writes pg_regress' results/ folder stays on the main lane.
# A test not named here runs on the main lane. PF_CHECK_LANES=1: one lane.
# shellcheck disable=SC2034  # LANE_1 and LANE_2 are read by name ("LANE_$n")
LANE_1="soak_short worker_protection relay_faults pg_host_list failover_async failover_sync worker_refused_entries worker_drain worker_capacity backup_restore backup_restore_sql api_asan
	relay_concurrency scheduler_horizon docs_coverage outbox_claim_plan worker_takeover pipeline_steps api_streams fair_shares worker_s3"
# shellcheck disable=SC2034
LANE_2="worker_legacy_drivers sqs_batches api_admin worker_webhook relay_delivery relay_refused secret_leaks
	scheduler_worker console_browser api_http api_events api_tenants api_submit_batch relay_same_pid s3_purge step_breaker worker_result_after_end pooler_edge api_slow_s3 outbox_rebuild dashboards step_claim_plan"
LANES=${PF_CHECK_LANES:-3}
lane_of() {	# lane_of TEST: its lane's number
	local n list t
	for ((n = 1; n < LANES; n++)); do
		list="LANE_$n"
		for t in ${!list:-}; do
			[ "$t" = "$1" ] && { echo "$n"; return; }
		done
	done
	echo 0
}
# run_lane N TEST...: the tests on lane N's own cluster, in the background
run_lane() {
	local n=$1 port=$((${PF_LANE_PORT_BASE:-54380} + $1))
	shift
	echo "== lane $n: $* (in the background, cluster on port $port)"
	(
		export PF_PGPORT=$port PF_CLUSTER_DIR=/tmp/payflow-cluster-$port
		# shellcheck source=lib/cluster.sh
		source test/lib/cluster.sh
		pf_cluster_destroy
		trap pf_cluster_destroy EXIT
		rc=0
		pf_cluster_start || rc=1
		for t in "$@"; do
			[ "$rc" = 0 ] || break
			started=$SECONDS
			echo "== $t"
			PF_SKIP_LOG=$bg_dir/$t.skips "test/integration/$t.sh" || { echo "!! $t FAILED"; echo "$t" >>"$bg_dir/lane-$n.failed"; }
			echo "$((SECONDS - started)) s  $t (lane $n)$(skip_note "$bg_dir/$t.skips")" >>"$bg_dir/lane-$n.timings"
		done
		[ "$rc" = 0 ] || echo "lane $n: its cluster did not start" >>"$bg_dir/lane-$n.failed"
	) >"$bg_dir/lane-$n.log" 2>&1 &
	bg_pids+=($!)
	lane_numbers+=("$n")
	lane_tests[$n]="$*"
}
lane_numbers=()
declare -A lane_tests
collect_lanes() {
	local n t
	for n in "${lane_numbers[@]}"; do
		echo "== lane $n (ran in the background)"
		cat "$bg_dir/lane-$n.log"
		if [ -f "$bg_dir/lane-$n.failed" ]; then
			failed=1
			mapfile -t -O "${#failed_names[@]}" failed_names <"$bg_dir/lane-$n.failed"
			not_ok_of "$bg_dir/lane-$n.log"
		fi
		[ -f "$bg_dir/lane-$n.timings" ] && mapfile -t -O "${#timings[@]}" timings <"$bg_dir/lane-$n.timings"
		for t in ${lane_tests[$n]}; do
			skips_of "$bg_dir/$t.skips" "$t"
		done
	done
}

if [ ${#selected[@]} -gt 0 ]; then
	for t in "${selected[@]}"; do
		run_named "$t"
	done
else
	for t in $PARALLEL_TIERS; do
		run_tier_bg "$t" "test/integration/$t.sh"
	done
	declare -A on_lane
	for t in $(integration_names); do
		[[ " $PARALLEL_TIERS " == *" $t "* ]] && continue
		n=$(lane_of "$t")
		[ "$n" = 0 ] || on_lane[$n]="${on_lane[$n]:-} $t"
	done
	for ((n = 1; n < LANES; n++)); do
		# shellcheck disable=SC2086
		[ -n "${on_lane[$n]:-}" ] && run_lane "$n" ${on_lane[$n]}
	done
	for t in unit emulator smoke fixture-legacy fixture-invoice regress pgtap flavour-sql flavour-sql-e2e; do
		run_named "$t"
	done
	for t in $(integration_names); do
		[[ " $PARALLEL_TIERS " == *" $t "* ]] && continue
		[ "$(lane_of "$t")" = 0 ] || continue
		run_named "$t"
	done
fi
collect_bg
collect_lanes
rm -rf "$bg_dir"

echo "== time per tier (the tiers: $((SECONDS - check_started)) s in all)"
printf '%s\n' "${timings[@]}"
if [ ${#skip_lines[@]} -gt 0 ]; then
	echo "== skipped: ${#skip_lines[@]} check(s) did not run here"
	printf 'SKIP - %s\n' "${skip_lines[@]}"
fi

if [ $failed -ne 0 ]; then
	for f in regression.diffs test/isolation/output_iso/regression.diffs; do
		[ -f "$f" ] && { echo "--- $f"; cat "$f"; }
	done
	echo "== failed: ${failed_names[*]:-(see above)}"
	[ ${#failed_lines[@]} -gt 0 ] && printf '%s\n' "${failed_lines[@]}"
	echo "make check: FAILED"
	exit 1
fi
echo "make check: all tiers passed$([ ${#skip_lines[@]} -gt 0 ] && echo ", ${#skip_lines[@]} check(s) skipped (listed above)" || true)"
