# shellcheck shell=bash
# test/bench/lib.sh — what make bench's scripts share.  Sourced, not run,
# after test/lib/cluster.sh's settings are known (it sources cluster.sh
# itself through bench_use).
#
# Figures
#   bench_median              the median of the numbers on stdin
#   bench_med "1 2 3"         the median of a blank-separated list
#   bench_ratio A B           A / B with two decimals
#   bench_pct P FILE          the P-th percentile of a file of sorted numbers
#   bench_tps                 pgbench's tps (without initial connection time), from stdin
#   bench_result KEY ROUNDS   keeps a figure (its rounds' values) for bench.sh's
#                             closing summary (appended to $BENCH_RESULTS
#                             when that is set)
#
# Two flavours side by side: the C extension and the C-free flavour
# (dist/payflow--<version>.sql, pg_cron), each in a cluster of its own, both
# up at once, on ports of their own.
#   bench_flavours C_PORT SQL_PORT NAME
#                             declares the clusters: BENCH_FLAVOURS (default
#                             "c sql"), ports, /tmp/payflow-NAME[-sql]-PORT
#   bench_has FLAVOUR         whether BENCH_FLAVOURS holds it
#   bench_use FLAVOUR         points cluster.sh's functions (pf_cluster_start,
#                             pf_psql, ...), PF_PGBIN, PGHOST and PGPORT at that
#                             flavour's cluster; later calls switch back
#   bench_order ROUND         the flavours in the order of that round: the
#                             first one changes every round, so a noisy
#                             neighbour or a warming cache favours neither
#   bench_rotate ROUND WORD...  the same for any list
#   bench_label FLAVOUR       "C" or "C-free"
#   bench_compare_header TITLE
#   bench_compare_row LABEL C SQL [FORMAT [AIM]]
#                             a row of C beside C-free: C and SQL are the
#                             rounds' values (or one value), in round order;
#                             prints their medians, the ratio C-free/C of the
#                             medians, and "by round" the median of each
#                             round's own ratio (its C-free run beside its C
#                             run: less swayed by a neighbour that was busy
#                             for a while); AIM "higher" (the default) prints
#                             whether the ratio meets the aim "C-free within
#                             0.85x of C", "-" prints none
#   bench_build               Debian packages, the C extension (installed),
#                             the C-free flavour's dist/ files

BENCH_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BENCH_AIM=${BENCH_AIM:-0.85}

bench_median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
bench_med() { echo $1 | tr ' ' '\n' | bench_median; }
bench_ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "nan"; else printf "%.2f", a / b }'; }
bench_pct() { awk -v p="$1" '{a[NR]=$1} END { i = int(NR * p / 100 + 0.5); if (i < 1) i = 1; print (NR ? a[i] : "nan") }' "$2"; }
bench_tps() { grep -oP 'tps = \K[0-9.]+(?= \(without initial)'; }
bench_result() {
	[ -z "${BENCH_RESULTS:-}" ] || echo "$1" $2 >>"$BENCH_RESULTS"
}

bench_build() {
	source "$BENCH_REPO/test/lib/deps.sh"
	pf_install_deps
	make -s -C "$BENCH_REPO" >/dev/null && make -s -C "$BENCH_REPO" install >/dev/null
	make -s -C "$BENCH_REPO" dist-sql >/dev/null
}

declare -A BENCH_PGPORT BENCH_CLUSTER_DIR
bench_flavours() {
	BENCH_FLAVOURS=${BENCH_FLAVOURS:-c sql}
	BENCH_PGPORT=([c]=$1 [sql]=$2)
	BENCH_CLUSTER_DIR=([c]=/tmp/payflow-$3-$1 [sql]=/tmp/payflow-$3-sql-$2)
}

bench_has() { [[ " $BENCH_FLAVOURS " == *" $1 "* ]]; }

bench_use() {
	PF_FLAVOUR=$1
	export PF_PGPORT=${BENCH_PGPORT[$1]}
	export PF_CLUSTER_DIR=${BENCH_CLUSTER_DIR[$1]}
	unset PF_PGBIN
	source "$BENCH_REPO/test/lib/cluster.sh"
}

bench_order() { bench_rotate "$1" $BENCH_FLAVOURS; }
bench_rotate() {
	local round=$1 i out=
	shift
	local words=("$@")
	for ((i = 0; i < $#; i++)); do
		out+="${words[$(((i + round - 1) % $#))]} "
	done
	echo $out
}

bench_label() {
	case $1 in
		c) echo C ;;
		sql) echo C-free ;;
		*) echo "$1" ;;
	esac
}

bench_compare_header() {
	printf "%-50s %10s %10s %9s %9s  %s\n" "$1" C C-free C-free/C "by round" "aim: C-free within ${BENCH_AIM}x of C"
}

# bench_paired "C1 C2 ..." "SQL1 SQL2 ...": the median of SQLi / Ci, or "-"
# unless both lists hold the same number (two or more) of rounds
bench_paired() {
	local -a c sql
	local i
	read -ra c <<<"$1"
	read -ra sql <<<"$2"
	if [ ${#c[@]} -lt 2 ] || [ ${#c[@]} != ${#sql[@]} ]; then
		echo -
		return
	fi
	for i in "${!c[@]}"; do
		awk -v a="${sql[i]}" -v b="${c[i]}" 'BEGIN { if (b != 0) print a / b }'
	done | bench_median | xargs printf "%.2f"
}

bench_compare_row() {
	local label=$1 c sql format=${4:-%.0f} aim=${5:-higher} r verdict=
	c=$(bench_med "$2")
	sql=$(bench_med "$3")
	r=$(bench_ratio "$sql" "$c")
	if [ "$aim" = higher ]; then
		verdict=$(awk -v r="$r" -v aim="$BENCH_AIM" 'BEGIN { print (r + 0 >= aim ? "met" : "missed") }')
	fi
	# shellcheck disable=SC2059
	printf "%-50s %10s %10s %9s %9s  %s\n" "$label" "$(printf "$format" "$c")" "$(printf "$format" "$sql")" "$r" \
		"$(bench_paired "$2" "$3")" "$verdict"
}

# Empties payflow's operation tables between parts. One TRUNCATE of several
# tables locks them one after another while run_scheduler (the worker, or
# pg_cron in the C-free flavour) may hold one of them and want another: a
# deadlock, whose victim is the TRUNCATE (40P01). It is tried again.
bench_truncate_payflow() {
	local sql="TRUNCATE payflow.outbox, payflow.operations, payflow.step_results, payflow.history_events, payflow.payloads"
	local i
	for i in 1 2 3 4; do
		pf_psql -Atq -c "$sql" >/dev/null 2>&1 && return 0
		sleep 0.3
	done
	pf_psql -Atq -c "$sql" >/dev/null	# the last try shows its error
}
