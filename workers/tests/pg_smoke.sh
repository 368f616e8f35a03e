#!/bin/bash
# Integration check of the pg module and the pg claim-check store against a
# throwaway PostgreSQL 15 cluster with the payflow extension (test/lib/cluster.sh,
# on its own port and directory). Says SKIP (exit 0) when PostgreSQL's server or
# the installed extension is not there.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
repo=$(cd "$here/.." && pwd)

if [ ! -x /usr/lib/postgresql/15/bin/initdb ] || [ ! -f "$(pg_config --sharedir)/extension/payflow.control" ]; then
	# says SKIP, never passes in silence (make check lists PF_SKIP_LOG)
	echo "SKIP - pg_smoke: PostgreSQL 15 server or the installed payflow extension not found"
	[ -z "${PF_SKIP_LOG:-}" ] || echo "pg_smoke: PostgreSQL 15 server or the installed payflow extension not found" >>"$PF_SKIP_LOG"
	exit 0
fi

export PF_PGPORT=${PAYFLOW_SMOKE_PGPORT:-54391}
export PF_CLUSTER_DIR=/tmp/payflow-cluster-workers-smoke
. "$repo/test/lib/cluster.sh"

trap pf_cluster_destroy EXIT
pf_cluster_destroy
pf_cluster_start
PAYFLOW_DATABASE_URL="postgresql://postgres@127.0.0.1:$PF_PGPORT/$PF_DB" "$here/build/tests/pg_smoke"
