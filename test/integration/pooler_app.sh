#!/bin/bash
# The application's side of payflow through pgbouncer in transaction mode,
# which most applications put before PostgreSQL: eight clients share two
# server connections, so consecutive transactions of different clients
# (and tenants) run on the same server session.
#
#   - submit, submit_many, status and history work through it, with no
#     failed transaction under concurrent load (pgbench, simple protocol);
#   - a tenant bound by authenticate() lasts its transaction only: every
#     operation submitted with tenant A's key belongs to A, with B's key to
#     B, and every one submitted without a key to no tenant, though they
#     all ran on the same two server sessions;
#   - a transaction without a key sees no tenant's operations (PF003).
#
# Uses the running cluster (make check's) and its own pgbouncer on port
# PAYFLOW_TEST_BOUNCER_PORT (6441), run as postgres (pgbouncer refuses root).
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib/cluster.sh
source test/lib/assert.sh

q() { pf_psql -Atq "$@"; }
port=${PAYFLOW_TEST_BOUNCER_PORT:-6441}
run=pool$$
dir=$(mktemp -d /tmp/payflow-pooler.XXXXXX)
chown postgres "$dir"
cleanup() {
	[ -f "$dir/pgbouncer.pid" ] && kill "$(cat "$dir/pgbouncer.pid")" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT

# the application's login: payflow_app's rights, nothing more
q -c "DO \$\$ BEGIN
		IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pooler_app') THEN
			CREATE ROLE pooler_app LOGIN IN ROLE payflow_app;
		END IF;
	  END \$\$" >/dev/null
key_a=$(q -c "SELECT payflow.create_api_key('$run-a')")
key_b=$(q -c "SELECT payflow.create_api_key('$run-b')")

cat >"$dir/pgbouncer.ini" <<-INI
	[databases]
	payflow = host=127.0.0.1 port=$PGPORT dbname=$PF_DB user=pooler_app
	[pgbouncer]
	listen_addr = 127.0.0.1
	listen_port = $port
	unix_socket_dir =
	auth_type = any
	pool_mode = transaction
	default_pool_size = 2
	max_client_conn = 100
	logfile = $dir/pgbouncer.log
	pidfile = $dir/pgbouncer.pid
	ignore_startup_parameters = extra_float_digits
INI
chown postgres "$dir/pgbouncer.ini"
runuser -u postgres -- pgbouncer -d "$dir/pgbouncer.ini"
bouncer() { psql -X -h 127.0.0.1 -p "$port" -d payflow -U pooler_app -v ON_ERROR_STOP=1 -Atq "$@"; }
bouncer_up() { bouncer -c "SELECT 1" >/dev/null 2>&1; }
pf_ok "pgbouncer answers (transaction mode, two server connections)" pf_wait_for 10 bouncer_up

# --- concurrent load: a transaction with tenant A's key, one with B's in a
# single statement, one without a key; the same pool of two sessions
cat >"$dir/tenant_a.sql" <<-'SQL'
	\set n random(1, 1000000000)
	BEGIN;
	SELECT payflow.authenticate(':key_a');
	SELECT payflow.submit(':run' || '-a-' || :client_id || '-' || :n, '{"amount": 1}');
	SELECT count(*) FROM payflow.history(payflow.submit(':run' || '-a-' || :client_id || '-' || :n, '{"amount": 1}'));
	COMMIT;
SQL
cat >"$dir/tenant_b.sql" <<-'SQL'
	\set n random(1, 1000000000)
	SELECT payflow.submit(':run' || '-b-' || :client_id || '-' || :n, '{"amount": 2}') AS op FROM payflow.authenticate(':key_b') \gset
	SELECT payflow.status(':op') ->> 'status' FROM payflow.authenticate(':key_b');
SQL
cat >"$dir/no_tenant.sql" <<-'SQL'
	\set n random(1, 1000000000)
	SELECT payflow.submit(':run' || '-none-' || :client_id || '-' || :n, '{"amount": 3}');
	SELECT payflow.submit_many(jsonb_build_array(jsonb_build_object('payment_id', ':run' || '-none-many-' || :client_id || '-' || :n, 'details', '{"amount": 4}'::jsonb)));
SQL
chown postgres "$dir"/*.sql
rc=0
pgbench -n -h 127.0.0.1 -p "$port" -U pooler_app -c 8 -j 2 -T 5 -D key_a="$key_a" -D key_b="$key_b" -D run="$run" \
	-f "$dir/tenant_a.sql" -f "$dir/tenant_b.sql" -f "$dir/no_tenant.sql" payflow >"$dir/pgbench.log" 2>&1 || rc=$?
[ "$rc" = 0 ] || grep -v "^progress" "$dir/pgbench.log" | grep -i "error\|abort" | head -n 5 | sed 's/^/# /'
pf_eq "pgbench through pgbouncer: 8 clients, 5 s, no client aborted" 0 "$rc"
grep -E "^(number of transactions actually processed|number of failed transactions|tps)" "$dir/pgbench.log" | sed 's/^/# /' || true
pf_eq "no failed transaction" "0" \
	"$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$dir/pgbench.log")"

counts=$(q -c "SELECT count(*) FILTER (WHERE payment_id LIKE '$run-a-%') > 0,
					  count(*) FILTER (WHERE payment_id LIKE '$run-b-%') > 0,
					  count(*) FILTER (WHERE payment_id LIKE '$run-none-%') > 0
				 FROM payflow.operations")
pf_eq "operations were submitted by all three kinds of client" "t|t|t" "$counts"
pf_eq "every operation submitted with A's key belongs to A, with B's to B, without a key to none" "0" \
	"$(q -c "SELECT count(*) FROM payflow.operations
			  WHERE payment_id LIKE '$run-%'
			    AND tenant <> CASE WHEN payment_id LIKE '$run-a-%' THEN '$run-a'
								   WHEN payment_id LIKE '$run-b-%' THEN '$run-b' ELSE '' END")"
pf_ok "the server sessions were shared (pgbouncer's pool is two)" \
	test "$(q -c "SELECT count(DISTINCT pid) FROM pg_stat_activity WHERE usename = 'pooler_app'")" -le 2

# --- after a keyed transaction, the next one on the same session has no tenant
op_a=$(q -c "SELECT id FROM payflow.operations WHERE payment_id LIKE '$run-a-%' LIMIT 1")
pf_eq "with A's key, status() finds A's operation" "$op_a" \
	"$(bouncer -c "BEGIN" -c "SELECT FROM payflow.authenticate('$key_a')" \
		-c "SELECT payflow.status('$op_a') ->> 'operationId'" -c "COMMIT")"
pf_eq "the next transaction, without a key, does not (PF003)" "PF003" \
	"$(bouncer -c "DO \$\$ BEGIN PERFORM payflow.status('$op_a'); RAISE NOTICE 'found';
				 EXCEPTION WHEN SQLSTATE 'PF003' THEN RAISE NOTICE 'PF003'; END \$\$" 2>&1 | sed -n 's/.*NOTICE: *//p')"
pf_eq "nor do its reads of the operations table (row-level security)" "0" \
	"$(bouncer -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$run-a-%'")"

pf_done
