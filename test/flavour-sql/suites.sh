#!/bin/bash
# The C-free flavour under every SQL-level suite of the C extension: each
# pg_regress file, each isolation spec and each pgTAP test, with the same
# expected outputs, against payflow installed from dist/payflow--<version>.sql
# by a role that is no superuser, in a cluster of a PostgreSQL copy that has
# no payflow library at all (test/lib/cluster.sh, PF_FLAVOUR=sql); and the
# pg_regress files once more with payflow registered through pg_tle (built
# from ../shared/vendor/) and made by CREATE EXTENSION.
#
# Each suite gets a fresh cluster of its own (pg_cron lives in one database
# per cluster, and the C-free install needs it), on ports PF_SQL_PORT_BASE
# and up, so this runs beside the C flavour's tiers.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
BASE=${PF_SQL_PORT_BASE:-54340}
PGXS_DIR=$(dirname "$(/usr/lib/postgresql/15/bin/pg_config --pgxs)")/..
OUT=${PF_SQL_SUITES_OUT:-$REPO/test/flavour-sql/results}
rm -rf "$OUT"
mkdir -p "$OUT"
make -s dist-sql >/dev/null

failed=0
# suite NAME PORT INSTALL COMMAND...: a fresh C-free cluster, the command, clean-up
suite() {
	local name=$1 port=$2 install=$3
	shift 3
	echo "== C-free flavour ($install): $name"
	(
		export PF_FLAVOUR=sql PF_SQL_INSTALL=$install PF_PGPORT=$port PF_DB=payflow_regress
		export PF_CLUSTER_DIR=/tmp/payflow-sql-$name-$port
		unset PF_PGBIN
		source test/lib/cluster.sh
		pf_cluster_destroy
		trap pf_cluster_destroy EXIT
		pf_cluster_start
		quiet_scheduler
		"$@"
	) || { echo "!! C-free flavour ($install): $name FAILED"; failed=1; }
}

# The install scheduled run_scheduler with pg_cron and started a pass every
# second for the first minute (test/lib/cluster.sh).  The suites call
# run_scheduler themselves and count what it did, as they do in the C
# flavour, whose scheduler worker runs in another database: a pass of
# pg_cron's between a spec's setup and its own pass took the expired lease
# of scheduler_sweep first.  So no pass runs here but theirs.
quiet_scheduler() {
	pf_psql -U "$PF_OWNER" -Atqc "SELECT cron.unschedule('payflow-scheduler')" >/dev/null
	pf_psql -Atqc "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
					WHERE query LIKE 'CALL payflow.run_scheduler_for(%' AND pid <> pg_backend_pid()" >/dev/null
	for _ in $(seq 1 100); do
		[ "$(pf_psql -Atqc "SELECT count(*) FROM pg_stat_activity
							  WHERE query LIKE 'CALL payflow.run_scheduler_for(%' AND pid <> pg_backend_pid()")" = 0 ] &&
			return 0
		sleep 0.1
	done
	echo "the background run_scheduler_for did not end" >&2
	return 1
}

regress() {
	local out=$OUT/regress-$PF_SQL_INSTALL
	mkdir -p "$out"
	# shellcheck disable=SC2046  # test names: no blanks
	if ! "$PGXS_DIR/test/regress/pg_regress" --inputdir=. --outputdir="$out" --bindir="$PF_PGBIN" \
		--use-existing --dbname="$PF_DB" --host="$PGHOST" --port="$PGPORT" --user=postgres \
		$(cd sql && ls *.sql | sed 's/\.sql$//'); then
		cat "$out/regression.diffs"
		return 1
	fi
}

isolation() {
	local out=$OUT/isolation
	mkdir -p "$out"
	# shellcheck disable=SC2046  # spec names: no blanks
	if ! "$PGXS_DIR/test/isolation/pg_isolation_regress" --inputdir=test/isolation --outputdir="$out" \
		--bindir="$PF_PGBIN" --use-existing --dbname="$PF_DB" --host="$PGHOST" --port="$PGPORT" --user=postgres \
		$(cd test/isolation/specs && ls *.spec | sed 's/\.spec$//'); then
		cat "$out/regression.diffs"
		return 1
	fi
}

pgtap() {
	pg_prove --ext .sql -d "$PF_DB" -h "$PGHOST" -p "$PGPORT" -U postgres test/pgtap/
}

suite pg_regress "$BASE" dist regress
suite isolation "$((BASE + 1))" dist isolation
suite pgTAP "$((BASE + 2))" dist pgtap
suite pg_regress-tle "$((BASE + 3))" tle regress

[ $failed -eq 0 ] && echo "C-free flavour: every suite passed"
exit $failed
