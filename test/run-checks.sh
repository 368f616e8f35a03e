#!/bin/bash
# make check: every test tier on a throwaway cluster.  Runs as root on a
# fresh Debian 12 machine: installs what it needs, builds, starts what it
# needs, and stops it all on exit (also on failure).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

source test/lib/deps.sh
source test/lib/cluster.sh

pf_install_deps

echo "== build"
make -s >/dev/null
make -s install >/dev/null
make -s -C workers >/dev/null

# A fresh cluster per run: tests must not depend on what an earlier run left.
pf_cluster_destroy
trap 'pf_cluster_destroy' EXIT
pf_cluster_start

failed=0
run_tier() {
	local name=$1 started=$SECONDS
	shift
	echo "== $name"
	if ! "$@"; then
		echo "!! $name FAILED"
		failed=1
	fi
	timings+=("$((SECONDS - started)) s  $name")
}
timings=()

run_tier "workers: unit tests (config, SigV4 vectors, events, clients)" make -s -C workers check
run_tier "emulator: SQS/S3 behind the SigV4 front" test/emulator/selftest.sh
run_tier "workers: SQS/S3 and PostgreSQL smoke" make -s -C workers smoke
run_tier "fixture: legacy DBMS through psqlODBC" test/fixtures/legacy/selftest.sh
run_tier "fixture: invoice API stand-in" test/fixtures/invoice-api/selftest.sh
run_tier "pg_regress + isolation" make -s installcheck
run_tier "pgTAP" pg_prove --ext .sql -d "$PF_DB" -h "$PGHOST" -p "$PGPORT" -U postgres test/pgtap/
# The C-free flavour (dist/, for Amazon RDS and Aurora): the same suites,
# then the edge processes against it; its own clusters and ports.
run_tier "C-free flavour: pg_regress, isolation, pgTAP (plain SQL; pg_regress again via pg_tle)" test/flavour-sql/suites.sh
run_tier "C-free flavour: pipeline_e2e and worker_takeover" test/flavour-sql/integration.sh
for t in test/integration/*.sh; do
	[ -e "$t" ] || continue
	run_tier "$(basename "$t" .sh)" "$t"
done

echo "== time per tier"
printf '%s\n' "${timings[@]}"

if [ $failed -ne 0 ]; then
	for f in regression.diffs test/isolation/output_iso/regression.diffs; do
		[ -f "$f" ] && { echo "--- $f"; cat "$f"; }
	done
	echo "make check: FAILED"
	exit 1
fi
echo "make check: all tiers passed"
