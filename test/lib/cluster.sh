# shellcheck shell=bash
# test/lib/cluster.sh — a throwaway PostgreSQL 15 cluster for tests, demo
# and benchmarks.  Sourced, not run.  initdb refuses root, so the cluster
# belongs to the postgres user; it listens on 127.0.0.1 and a private
# socket directory only.
#
#   pf_cluster_start   initdb (once) and start, payflow + pg_cron preloaded
#   pf_cluster_stop    stop (fast) and keep the data directory
#   pf_cluster_destroy stop and remove everything
#   pf_standby_start SOCKDIR PORT DIR STANDBY_PORT
#                      a streaming standby (pg_basebackup -R, hot standby) of
#                      the cluster at SOCKDIR:PORT, in DIR (its data, socket
#                      and log), listening on 127.0.0.1:STANDBY_PORT
#   pf_psql [args]     psql as postgres into $PF_DB
#
# PF_FLAVOUR=sql makes the cluster a managed server's stand-in for the
# C-free flavour: PostgreSQL from test/lib/pg_tree.sh (no payflow library
# anywhere, pg_tle built in), pg_cron and pg_tle preloaded, and payflow
# installed from dist/payflow--<version>.sql by $PF_OWNER, a role with
# CREATEROLE and CREATEDB only, as the master user of Amazon RDS would
# (PF_SQL_INSTALL=tle: registered with pg_tle from dist/payflow-tle--*.sql,
# then CREATE EXTENSION payflow); pg_cron runs the scheduler.  Tests
# connect as postgres either way.

PF_FLAVOUR=${PF_FLAVOUR:-c}
PF_OWNER=${PF_OWNER:-payflow_owner}
if [ "$PF_FLAVOUR" = sql ]; then
	# shellcheck source=pg_tree.sh
	source "$(dirname "${BASH_SOURCE[0]}")/pg_tree.sh"
	PF_PGBIN=${PF_PGBIN:-$PF_PG_TREE/usr/lib/postgresql/15/bin}
fi
PF_PGBIN=${PF_PGBIN:-/usr/lib/postgresql/15/bin}
PF_PGPORT=${PF_PGPORT:-54329}
PF_CLUSTER_DIR=${PF_CLUSTER_DIR:-/tmp/payflow-cluster-$PF_PGPORT}
PF_DB=${PF_DB:-payflow}

export PGHOST=$PF_CLUSTER_DIR/sock
export PGPORT=$PF_PGPORT
export PGUSER=postgres
export PGDATABASE=$PF_DB

pf_as_postgres() {
	runuser -u postgres -- "$@"
}

# The test servers listen on fixed ports, and 54300-54599 (the clusters)
# lie inside Linux's ephemeral range (32768-60999): an outgoing connection
# of any test could hold one when a cluster starts ("could not bind ...
# Address already in use", seen in CI). As root, those ports are reserved
# from ephemeral use (ip_local_reserved_ports; listening on them still
# works). Without the right to, nothing changes.
pf_reserve_test_ports() {
	local f=/proc/sys/net/ipv4/ip_local_reserved_ports cur
	[ -w "$f" ] || return 0
	cur=$(cat "$f" 2>/dev/null) || return 0
	case ",$cur," in *,54300-54599,*) return 0 ;; esac
	echo "${cur:+$cur,}54300-54599" >"$f" 2>/dev/null || true
}

# Tests share make check's cluster, one after another. Those that run no
# relay (the API's, the console's) leave operations in flight and their
# events in the outbox: the next test that starts a relay would publish
# them into its own queues, and its workers would still be busy with them
# when it checks that its queues drained. A test that starts the pipeline
# calls this first: what earlier tests left in flight is removed (their
# history stays).
pf_forget_leftovers() {
	pf_psql -Atq -c "DELETE FROM payflow.outbox" \
		-c "DELETE FROM payflow.step_results s USING payflow.operations o WHERE o.id = s.operation_id AND o.terminal_at IS NULL" \
		-c "DELETE FROM payflow.operations WHERE terminal_at IS NULL" >/dev/null
}

# A database of the test's own, with payflow installed (one left by a run
# killed before its clean-up is dropped first; WITH (FORCE): a session the
# test left behind), and its removal for the test's EXIT trap.
pf_scratch_db() {
	PGOPTIONS="-c client_min_messages=warning" pf_psql -d postgres -qc "DROP DATABASE IF EXISTS $1 WITH (FORCE)" \
		-c "CREATE DATABASE $1" >/dev/null
	pf_psql -d "$1" -qc "SET client_min_messages = warning" -c "CREATE EXTENSION payflow CASCADE" >/dev/null
}
pf_scratch_db_drop() {
	pf_psql -d postgres -qc "DROP DATABASE IF EXISTS $1 WITH (FORCE)" >/dev/null 2>&1 || true
}

pf_cluster_start() {
	local data=$PF_CLUSTER_DIR/data
	pf_reserve_test_ports
	if [ "$PF_FLAVOUR" = sql ]; then
		pf_pg_tree >/dev/null
	fi
	if [ ! -f "$data/PG_VERSION" ]; then
		mkdir -p "$PF_CLUSTER_DIR/sock"
		chown -R postgres:postgres "$PF_CLUSTER_DIR"
		pf_as_postgres "$PF_PGBIN/initdb" -D "$data" -U postgres --auth=trust \
			--encoding=UTF8 --locale=C.UTF-8 >"$PF_CLUSTER_DIR/initdb.log"
		cat >>"$data/postgresql.conf" <<-CONF
		listen_addresses = '127.0.0.1'
		port = $PF_PGPORT
		unix_socket_directories = '$PF_CLUSTER_DIR/sock'
		# worker_capacity: 250 legacy sessions, each with a dblink connection of the fixture
		max_connections = 700
		shared_buffers = 256MB
		cron.database_name = '$PF_DB'
		log_min_messages = warning
		log_line_prefix = '%m [%p] %q%a '
		CONF
		if [ "$PF_FLAVOUR" = sql ]; then
			echo "shared_preload_libraries = 'pg_cron,pg_tle'" >>"$data/postgresql.conf"
		else
			cat >>"$data/postgresql.conf" <<-CONF
			shared_preload_libraries = 'payflow,pg_cron'
			payflow.database_name = '$PF_DB'
			payflow.scheduler_naptime = '1s'
			CONF
		fi
		if [ -n "${PF_CLUSTER_EXTRA_CONF:-}" ]; then
			echo "$PF_CLUSTER_EXTRA_CONF" >>"$data/postgresql.conf"
		fi
	fi
	# already running (a test that uses the cluster from several shells)
	if ! pf_as_postgres "$PF_PGBIN/pg_ctl" -D "$data" status >/dev/null 2>&1; then
		if ! pf_as_postgres "$PF_PGBIN/pg_ctl" -D "$data" -l "$PF_CLUSTER_DIR/postgres.log" -w -t 60 start >/dev/null; then
			# say why here: the folder is gone after the test's clean-up
			echo "pf_cluster_start: PostgreSQL on port $PF_PGPORT did not start; its log:" >&2
			tail -n 20 "$PF_CLUSTER_DIR/postgres.log" >&2 || true
			return 1
		fi
	fi
	if ! pf_as_postgres "$PF_PGBIN/psql" -h "$PGHOST" -p "$PF_PGPORT" -U postgres -d postgres -Atqc \
		"SELECT 1 FROM pg_database WHERE datname = '$PF_DB'" | grep -q 1; then
		if [ "$PF_FLAVOUR" = sql ]; then
			pf_install_sql_flavour
		else
			pf_as_postgres "$PF_PGBIN/createdb" -h "$PGHOST" -p "$PF_PGPORT" -U postgres "$PF_DB"
			pf_psql -qc "CREATE EXTENSION pg_cron; CREATE EXTENSION payflow;" >/dev/null
		fi
	fi
}

# The C-free flavour the way the README's "Amazon RDS and Aurora" section
# installs it: the superuser (RDS: the master user) only creates pg_cron;
# everything else is done by $PF_OWNER, who is no superuser.
pf_install_sql_flavour() {
	local repo version
	repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
	version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$repo/extension/payflow.control")
	[ -f "$repo/dist/payflow--$version.sql" ] || make -s -C "$repo" dist-sql >/dev/null
	pf_psql -d postgres -qc "CREATE ROLE $PF_OWNER LOGIN CREATEROLE CREATEDB" >/dev/null
	pf_psql -d postgres -U "$PF_OWNER" -qc "CREATE DATABASE $PF_DB" >/dev/null
	pf_psql -qc "CREATE EXTENSION pg_cron" -c "GRANT USAGE ON SCHEMA cron TO $PF_OWNER" >/dev/null
	pf_psql -U "$PF_OWNER" -qc "CREATE EXTENSION pgcrypto" >/dev/null
	if [ "${PF_SQL_INSTALL:-dist}" = tle ]; then
		pf_psql -qc "CREATE EXTENSION pg_tle" -c "GRANT pgtle_admin TO $PF_OWNER" >/dev/null
		pf_psql -U "$PF_OWNER" -q -f "$repo/dist/payflow-tle--$version.sql" >/dev/null
		pf_psql -U "$PF_OWNER" -qc "CREATE EXTENSION payflow" >/dev/null
	else
		pf_psql -U "$PF_OWNER" -q -f "$repo/dist/payflow--$version.sql" >/dev/null
	fi
	# PF_NO_SCHEDULER=1: a cluster nothing may change behind a test's back
	# (backup_restore_sql compares the source with its restored copy)
	[ "${PF_NO_SCHEDULER:-0}" = 1 ] && return 0
	pf_psql -U "$PF_OWNER" -qAtc "SELECT payflow.schedule_scheduler()" >/dev/null
	# A pg_cron older than 1.5 (Debian 12 has 1.4) starts the scheduler at
	# the next full minute; cover the minute until then.
	if [ "$(pf_psql -Atqc "SELECT schedule FROM cron.job WHERE jobname = 'payflow-scheduler'")" = '* * * * *' ]; then
		(pf_psql -U "$PF_OWNER" -qc "CALL payflow.run_scheduler_for($((61 - $(date +%-S))))" >/dev/null 2>&1 &)
	fi
}

pf_cluster_stop() {
	local data=$PF_CLUSTER_DIR/data
	if [ -f "$data/postmaster.pid" ]; then
		pf_as_postgres "$PF_PGBIN/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null || true
	fi
}

pf_cluster_destroy() {
	pf_cluster_stop
	rm -rf "$PF_CLUSTER_DIR"
}

pf_psql() {
	"$PF_PGBIN/psql" -X -v ON_ERROR_STOP=1 "$@"
}

pf_standby_start() {
	local sockdir=$1 port=$2 dir=$3 standby_port=$4
	mkdir -p "$dir/sock"
	chown -R postgres:postgres "$dir"
	pf_as_postgres "$PF_PGBIN/pg_basebackup" -h "$sockdir" -p "$port" -U postgres -D "$dir/data" -R -X stream -c fast
	pf_as_postgres "$PF_PGBIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
		-o "-p $standby_port -k $dir/sock -c listen_addresses=127.0.0.1" start >/dev/null
}
