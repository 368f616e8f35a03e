# shellcheck shell=bash
# Sourced by test/bench/pipeline.sh, C flavour's stack up: issue 25's
# "nothing stalls while a report holds a snapshot for 60 s".
#
# The steady load again (pgbench -R at the steady rate), for
# BENCH_PIPELINE_SNAPSHOT_SECONDS, with and without a report that holds a
# REPEATABLE READ snapshot from before the load starts until every
# operation of it ended; BENCH_PIPELINE_SNAPSHOT_ROUNDS rounds of each,
# interleaved.  While the snapshot is held no row version it can see may
# be removed: HOT pruning and vacuum keep every dead version of the
# operations' rows and of the outbox's work list, which the claims walk.
# Printed side by side: submit -> COMPLETED p50/p99/max, the longest time
# without a completion (a stall shows there first), PostgreSQL CPU per
# operation, the dead row versions left in payflow's tables at the end.

# (pipeline.sh sets steady_rate, DIR, PF_DB and the helpers used here)
# shellcheck disable=SC2154
SNAPSHOT_SECONDS=${BENCH_PIPELINE_SNAPSHOT_SECONDS:-60}
SNAPSHOT_ROUNDS=${BENCH_PIPELINE_SNAPSHOT_ROUNDS:-2}
declare -A snap_p50 snap_p99 snap_max snap_gap snap_dead snap_done snap_n

snapshot_sum() { awk -v l="$1" 'BEGIN { n = split(l, a, " "); for (i = 1; i <= n; i++) s += a[i]; print s + 0 }'; }

# the report's session: a snapshot, then idle in its transaction
snapshot_report_start() {
	printf '%s\n' 'BEGIN ISOLATION LEVEL REPEATABLE READ;' \
		'SELECT count(*) FROM payflow.operations;' \
		"SELECT pg_sleep($((SNAPSHOT_SECONDS + 600)));" 'COMMIT;' |
		PGAPPNAME=bench-report pf_psql -Atq >/dev/null 2>&1 &
	local deadline=$((SECONDS + 30))
	until [ "$(q -c "SELECT count(*) FROM pg_stat_activity
					  WHERE application_name = 'bench-report' AND backend_xmin IS NOT NULL
						AND query LIKE 'SELECT pg_sleep%'")" = 1 ]; do
		if [ $SECONDS -ge $deadline ]; then
			echo "bench: the report's session did not take its snapshot"
			exit 1
		fi
		sleep 0.1
	done
}
snapshot_report_stop() {
	q -c "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity WHERE application_name = 'bench-report'" >/dev/null
	wait "$1" 2>/dev/null || true
}

# snapshot_round ROUND held|none
snapshot_round() {
	local prefix=snap$1$2- report='' result n n_done p50 p99 pmax gap
	use c
	q -c "VACUUM ANALYZE" >/dev/null
	echo "SELECT payflow.submit('$prefix' || gen_random_uuid(), '{\"amount\": 12.50, \"currency\": \"EUR\"}');" \
		>"$DIR/snapshot.sql"
	if [ "$2" = held ]; then
		snapshot_report_start
		report=$!
	fi
	watch_payflow c
	cost_begin
	"$PF_PGBIN/pgbench" -n -c 2 -j 2 -R "$steady_rate" -T "$SNAPSHOT_SECONDS" -f "$DIR/snapshot.sql" "$PF_DB" \
		>"$DIR/c/snapshot-$1-$2.out" 2>&1
	wait_done "$prefix" 300
	result=$(q -c "SELECT count(*) || ' ' || count(*) FILTER (WHERE status = 'COMPLETED') || ' ' ||
			round(1000 * percentile_cont(0.50) WITHIN GROUP (ORDER BY extract(epoch FROM terminal_at - created_at))) || ' ' ||
			round(1000 * percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM terminal_at - created_at))) || ' ' ||
			round(1000 * max(extract(epoch FROM terminal_at - created_at))) || ' ' ||
			(SELECT round(1000 * coalesce(max(extract(epoch FROM g.next - g.at)), 0))
			   FROM (SELECT terminal_at AS at, lead(terminal_at) OVER (ORDER BY terminal_at) AS next
					   FROM payflow.operations WHERE payment_id LIKE '$prefix%') g)
			FROM payflow.operations WHERE payment_id LIKE '$prefix%'")
	read -r n n_done p50 p99 pmax gap <<<"$result"
	cost_end "snapshot.$2" "$n"
	snap_dead[$2]+="$(q -c "SELECT sum(n_dead_tup) FROM pg_stat_user_tables WHERE schemaname = 'payflow'") "
	[ -z "$report" ] || snapshot_report_stop "$report"
	snap_n[$2]+="$n "
	snap_done[$2]+="$n_done "
	snap_p50[$2]+="$p50 "
	snap_p99[$2]+="$p99 "
	snap_max[$2]+="$pmax "
	snap_gap[$2]+="$gap "
}

snapshot_section() {
	local round mode
	for round in $(seq 1 "$SNAPSHOT_ROUNDS"); do
		for mode in $(bench_rotate "$round" none held); do
			snapshot_round "$round" "$mode"
		done
	done
	echo "a report holding a REPEATABLE READ snapshot (issue 25), C: steady load $steady_rate/s for" \
		"$SNAPSHOT_SECONDS s, $SNAPSHOT_ROUNDS rounds each, interleaved, medians"
	printf '  %-44s %14s %14s %8s\n' "" "no report" "snapshot held" "ratio"
	for row in "submit -> COMPLETED p50, ms:snap_p50" "submit -> COMPLETED p99, ms:snap_p99" \
		"submit -> COMPLETED max, ms:snap_max" "longest time without a completion, ms:snap_gap"; do
		local -n values=${row##*:}
		printf '  %-44s %14s %14s %8s\n' "${row%:*}" "$(bench_med "${values[none]}")" "$(bench_med "${values[held]}")" \
			"$(bench_ratio "$(bench_med "${values[held]}")" "$(bench_med "${values[none]}")")"
	done
	printf '  %-44s %14s %14s %8s\n' "PostgreSQL CPU ms per operation" "$(cost_fmt %.2f snapshot.none pg_ms)" \
		"$(cost_fmt %.2f snapshot.held pg_ms)" \
		"$(bench_ratio "$(cost_fmt %.3f snapshot.held pg_ms)" "$(cost_fmt %.3f snapshot.none pg_ms)")"
	printf '  %-44s %14s %14s\n' "dead row versions in payflow's tables at the end" "$(bench_med "${snap_dead[none]}")" \
		"$(bench_med "${snap_dead[held]}")"
	printf '  %-44s %14s %14s\n' "operations COMPLETED (of submitted)" \
		"$(snapshot_sum "${snap_done[none]}") ($(snapshot_sum "${snap_n[none]}"))" \
		"$(snapshot_sum "${snap_done[held]}") ($(snapshot_sum "${snap_n[held]}"))"
	bench_result snapshot_held_p99_ms "${snap_p99[held]}"
	bench_result snapshot_none_p99_ms "${snap_p99[none]}"
	echo
}
