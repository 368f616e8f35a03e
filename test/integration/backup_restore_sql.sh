#!/bin/bash
# backup_restore.sh for the C-free flavour, both ways it is installed: as a
# pg_tle extension (its tables marked for pg_dump like the C extension's)
# and as the plain SQL file (ordinary tables, which pg_dump keeps anyway).
# Each: operations in every state on a PostgreSQL without payflow's
# library, pg_dump -Fc, pg_restore into a database of a new cluster (its
# roles there first, as pg_dumpall --globals-only would bring them), then
# every row, history() and status() equal, and the restored database
# takes new work (a submit, a claim).
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib/assert.sh
source test/lib/pg_tree.sh
source test/lib/restored_rows.sh

PGTREE_BIN=$(pf_pg_tree)
work=$(mktemp -d /tmp/payflow-backup-sql.XXXXXX)

# on_cluster PORT INSTALL DB CMD...: CMD against that cluster (test/lib/cluster.sh)
on_cluster() {
	local port=$1 install=$2 db=$3
	shift 3
	(
		export PF_FLAVOUR=sql PF_SQL_INSTALL=$install PF_PGBIN=$PGTREE_BIN PF_PGPORT=$port
		export PF_CLUSTER_DIR=/tmp/payflow-cluster-$port PF_DB=$db
		# nothing may change the source between the dump and the
		# comparison: no scheduler (it would release the retrying step)
		export PF_NO_SCHEDULER=1
		# shellcheck source=../lib/cluster.sh
		source test/lib/cluster.sh
		"$@"
	)
}
cleanup() {
	local port
	for port in 54383 54384 54385 54386; do
		on_cluster "$port" dist payflow pf_cluster_destroy >/dev/null 2>&1 || true
	done
	rm -rf "$work"
}
trap cleanup EXIT

round_trip() {	# round_trip INSTALL SOURCE_PORT TARGET_PORT
	local install=$1 sport=$2 tport=$3 p="bk-$1-$$" op
	s() { on_cluster "$sport" "$install" payflow pf_psql -d payflow -Atq "$@"; }
	r() { on_cluster "$tport" "$install" payflow pf_psql -d payflow -Atq "$@"; }

	on_cluster "$sport" "$install" payflow pf_cluster_destroy >/dev/null 2>&1 || true
	on_cluster "$sport" "$install" payflow pf_cluster_start
	pf_eq "$install: no scheduler runs on the source" 0 \
		"$(s -c "SELECT count(*) FROM cron.job WHERE jobname = 'payflow-scheduler'")"
	for op in pending running retrying completed failed; do
		s -c "SELECT payflow.submit('$p-$op', '{\"amount\": 12.50, \"currency\": \"EUR\"}')" >/dev/null
	done
	id() { s -c "SELECT id FROM payflow.operations WHERE payment_id = '$p-$1'"; }
	s -c "SELECT payflow.claim_step('$(id running)', 'PROCESS_PAYMENT', 'w-before', 30)" \
		-c "SELECT payflow.claim_step('$(id retrying)', 'PROCESS_PAYMENT', 'w-before', 30)" \
		-c "SELECT payflow.fail_step('$(id retrying)', 'PROCESS_PAYMENT', 'w-before', '{\"code\": \"timeout\"}', true)" \
		-c "SELECT payflow.claim_step('$(id failed)', 'PROCESS_PAYMENT', 'w-before', 30)" \
		-c "SELECT payflow.fail_step('$(id failed)', 'PROCESS_PAYMENT', 'w-before', '{\"code\": \"card_declined\"}', false)" \
		-c "SELECT payflow.record_dead_letter('payment-requests', 'not json', '{\"code\": \"bad_message\"}')" \
		-c "SELECT payflow.create_api_key('tenant-a', 'shop backend')" \
		-c "SELECT payflow.set_webhook('tenant-a', 'https://hooks.example.test/payflow')" >/dev/null
	for step in PROCESS_PAYMENT POST_PROCESS CREATE_INVOICE; do
		s -c "SELECT payflow.claim_step('$(id completed)', '$step', 'w-before', 30)" \
			-c "SELECT payflow.complete_step('$(id completed)', '$step', 'w-before', '{\"charge_id\": \"ch-before\"}')" >/dev/null
	done
	pf_eq "$install: the source holds operations in four statuses" "COMPLETED FAILED PAYMENT_PROCESSING PENDING" \
		"$(s -c "SELECT string_agg(DISTINCT status, ' ' ORDER BY status) FROM payflow.operations")"

	on_cluster "$sport" "$install" payflow "$PGTREE_BIN/pg_dump" -U postgres -Fc -f "$work/$install.dump" payflow
	# the new cluster: its roles and extensions' libraries as the old one had
	# them; then its database emptied for the restore (pg_cron's database)
	on_cluster "$tport" "$install" payflow pf_cluster_destroy >/dev/null 2>&1 || true
	on_cluster "$tport" "$install" payflow pf_cluster_start
	on_cluster "$tport" "$install" payflow pf_psql -d postgres -qc "DROP DATABASE payflow WITH (FORCE)" \
		-c "CREATE DATABASE payflow" >/dev/null
	pf_ok "$install: pg_restore into a new cluster" \
		on_cluster "$tport" "$install" payflow "$PGTREE_BIN/pg_restore" -U postgres --exit-on-error -d payflow "$work/$install.dump"

	pf_same_restored_rows "$install: " s r
	op=$(r -c "SELECT payflow.submit('$p-after', '{\"amount\": 1}')")
	pf_eq "$install: the restored database takes new work" run \
		"$(r -c "SELECT payflow.claim_step('$op', 'PROCESS_PAYMENT', 'w-after') ->> 'action'")"
	pf_eq "$install: ... and still knows the old idempotency keys" "$(id pending)" \
		"$(r -c "SELECT payflow.submit('$p-pending', '{\"amount\": 12.50, \"currency\": \"EUR\"}')")"
}

round_trip tle 54383 54384
round_trip dist 54385 54386
pf_done
