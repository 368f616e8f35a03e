#!/bin/bash
# The edge processes against the C-free flavour: test/integration/
# pipeline_e2e.sh (relay and every worker role, faults in both external
# systems, charges = invoices) and worker_takeover.sh (kill -9 of a payment
# worker in the middle of its legacy call, in both legacy modes, one
# charge), unchanged, on a cluster of a PostgreSQL copy without payflow's
# library where payflow was installed from dist/payflow--<version>.sql by
# a non-superuser and pg_cron drives the scheduler (test/lib/cluster.sh,
# PF_FLAVOUR=sql).  Own ports, so it can run beside the C flavour's tiers.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PF_FLAVOUR=sql PF_PGPORT=${PF_SQL_E2E_PORT:-54360}
export PF_CLUSTER_DIR=/tmp/payflow-sql-e2e-$PF_PGPORT
unset PF_PGBIN PGHOST PGPORT
source test/lib/cluster.sh
make -s dist-sql >/dev/null
pf_cluster_destroy
trap pf_cluster_destroy EXIT
pf_cluster_start
echo "# C-free flavour $(pf_psql -Atqc "SELECT payflow._dist_version()") on port $PF_PGPORT," \
	"scheduler: pg_cron job '$(pf_psql -Atqc "SELECT command FROM cron.job WHERE jobname = 'payflow-scheduler'")'"

failed=0
PIPELINE_EMULATOR_PORT=4787 PIPELINE_INVOICE_API_PORT=4789 test/integration/pipeline_e2e.sh || failed=1
PAYFLOW_TEST_EMULATOR_PORT=4773 PAYFLOW_TEST_EMULATOR_BACKEND_PORT=4774 test/integration/worker_takeover.sh || failed=1
exit $failed
