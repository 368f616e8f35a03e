#!/bin/bash
# shellcheck shell=bash
# The settings the payment and postprocess roles read, pointed at the
# fixtures: the legacy DBMS's ODBC connection (test/fixtures/legacy), its
# charge and lookup statements, the stock post-processing hook, and the
# payflow database of test/lib/cluster.sh. Shared by the tests and benches
# that run the whole pipeline with the stock roles.
#
#   pf_roles_env DIR   (the fixture's set-up log goes to DIR/legacy-setup.log)
pf_roles_env() {
	export PAYFLOW_LEGACY_ODBC
	PAYFLOW_LEGACY_ODBC=$(test/fixtures/legacy/setup.sh 2>"$1/legacy-setup.log")
	export PAYFLOW_DATABASE_URL="postgresql://postgres@127.0.0.1:$PF_PGPORT/$PF_DB"
	export PAYFLOW_LEGACY_CALL='SELECT * FROM charge(:idempotency_key, :payment_id, :details.amount, :details.currency)'
	export PAYFLOW_LEGACY_LOOKUP='SELECT * FROM lookup_charge(:idempotency_key, :payment_id)'
	export PAYFLOW_POSTPROCESS_FUNCTION='payflow.default_postprocess(text,jsonb)'
}
