#!/bin/bash
# An edge program given a list of database hosts (issue 30: failover,
# bad input): payflow-relay with "host=a,b,c" where the first host is
# unreachable and the second a streaming standby of the cluster (a real
# one: pg_basebackup -R, hot standby), the third the primary.
#
#   - it skips the unreachable host and the standby by itself and relays
#     every event (connections ask for target_session_attrs=read-write);
#     before, it stayed on the standby and every claim failed with 25006;
#   - the primary turning read-only under its connection (what a demoted
#     primary does; here default_transaction_read_only = on): claims fail
#     with 25006, the relay drops the connection, finds no writable host,
#     retries with back-off and says so once (not once per attempt), loses
#     nothing and relays every event once the primary is writable again.
#
# Uses the running cluster from test/lib/cluster.sh, its own emulator
# (ports 4644/4645) and a standby on port PF_PGPORT + 1100.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/integration/relay_common.bash

relay_init ph 4644
standby_port=$((PF_PGPORT + 1100))
standby_dir=$(mktemp -d /tmp/payflow-standby.XXXXXX)	# not under $work: postgres cannot enter it
relay_test_cleanup() {
	pf_psql -Atqc "ALTER SYSTEM RESET default_transaction_read_only" -c "SELECT pg_reload_conf()" >/dev/null 2>&1 || true
	pf_as_postgres "$PF_PGBIN/pg_ctl" -D "$standby_dir/data" -m immediate stop >/dev/null 2>&1 || true
	rm -rf "$standby_dir"
}

# --- a streaming standby of the running cluster
pf_standby_start "$PGHOST" "$PGPORT" "$standby_dir" "$standby_port"
standby() { pf_as_postgres "$PF_PGBIN/psql" -X -h 127.0.0.1 -p "$standby_port" -U postgres -d "$PGDATABASE" -Atqc "$1"; }
pf_eq "the second host is a standby in recovery" t "$(standby 'SELECT pg_is_in_recovery()')"

# unreachable (nothing listens on port 1), the standby, the primary
export PAYFLOW_DATABASE_URL="host=127.0.0.1,127.0.0.1,127.0.0.1 port=1,$standby_port,$PGPORT user=$PGUSER dbname=$PGDATABASE"
submit() {	# submit FROM TO: payments $run-FROM … $run-TO, in a read-write transaction
	q -c "SET default_transaction_read_only = off" \
		-c "SELECT count(payflow.submit('$run-' || g, jsonb_build_object('amount', g))) FROM generate_series($1, $2) g" >/dev/null
}

submit 1 20
start_relay main
relay=$relay_pid
pf_ok "the relay skips the unreachable host and the standby and relays the 20 events" pf_wait_for 60  outbox_empty_of "$run"
pf_eq "all 20 are in the published log" 20 "$(published_of "$run")"
pf_eq "its session is on the primary, none on the standby" "1|0" \
	"$(q -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'payflow-relay'")|$(standby \
		"SELECT count(*) FROM pg_stat_activity WHERE application_name = 'payflow-relay'")"

# --- the primary turns read-only under the relay's connection
q -c "ALTER SYSTEM SET default_transaction_read_only = on" -c "SELECT pg_reload_conf()" >/dev/null
sleep 1
submit 21 40
logged() { grep -q "$1" "$work/relay-main.log"; }
pf_ok "a claim on the read-only primary is answered 25006 and the relay reconnects" \
	pf_wait_for 30 logged "the PostgreSQL server is read-only"
pf_ok "no host is writable: the relay says it retries with back-off" pf_wait_for 30  logged "retrying with back-off"
sleep 6	# several attempts (back-off 0.1 s doubling), a single warning
pf_eq "the failed attempts are logged once, not once each" 1 \
	"$(grep -c 'retrying with back-off\|still retrying' "$work/relay-main.log")"
pf_eq "the relay's failed outbox statements are logged once too" 1 \
	"$(grep -c 'outbox statement failed' "$work/relay-main.log")"
pf_eq "nothing was published meanwhile" 20 "$(published_of "$run")"
pf_ok "the relay is still running" kill -0 "$relay"

q -c "ALTER SYSTEM RESET default_transaction_read_only" -c "SELECT pg_reload_conf()" >/dev/null
pf_ok "writable again: the relay reconnects and relays the 20 events written meanwhile" pf_wait_for 60  outbox_empty_of "$run"
pf_eq "40 events published, none twice" "40|40" \
	"$(q -c "SELECT count(*), count(DISTINCT p.event_id) FROM payflow.outbox_published p JOIN payflow.operations o ON o.id = p.operation_id
			  WHERE o.payment_id LIKE '$run-%'")"
pf_eq "no event became a dead letter" 0 \
	"$(q -c "SELECT count(*) FROM payflow.dead_letters d JOIN payflow.operations o ON o.id = d.operation_id WHERE o.payment_id LIKE '$run-%'")"
stop_relay "$relay"
pf_eq "the relay exits 0 on SIGTERM" 0 "$relay_status"
pf_done
