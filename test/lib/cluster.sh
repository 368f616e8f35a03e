# test/lib/cluster.sh — a throwaway PostgreSQL 15 cluster for tests, demo
# and benchmarks.  Sourced, not run.  initdb refuses root, so the cluster
# belongs to the postgres user; it listens on 127.0.0.1 and a private
# socket directory only.
#
#   pf_cluster_start   initdb (once) and start, payflow + pg_cron preloaded
#   pf_cluster_stop    stop (fast) and keep the data directory
#   pf_cluster_destroy stop and remove everything
#   pf_psql [args]     psql as postgres into $PF_DB

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

pf_cluster_start() {
	local data=$PF_CLUSTER_DIR/data
	if [ ! -f "$data/PG_VERSION" ]; then
		mkdir -p "$PF_CLUSTER_DIR/sock"
		chown -R postgres:postgres "$PF_CLUSTER_DIR"
		pf_as_postgres "$PF_PGBIN/initdb" -D "$data" -U postgres --auth=trust \
			--encoding=UTF8 --locale=C.UTF-8 >"$PF_CLUSTER_DIR/initdb.log"
		cat >>"$data/postgresql.conf" <<-CONF
		listen_addresses = '127.0.0.1'
		port = $PF_PGPORT
		unix_socket_directories = '$PF_CLUSTER_DIR/sock'
		max_connections = 300
		shared_buffers = 256MB
		shared_preload_libraries = 'payflow,pg_cron'
		payflow.database_name = '$PF_DB'
		payflow.scheduler_naptime = '1s'
		cron.database_name = '$PF_DB'
		log_min_messages = warning
		log_line_prefix = '%m [%p] %q%a '
		CONF
		if [ -n "${PF_CLUSTER_EXTRA_CONF:-}" ]; then
			echo "$PF_CLUSTER_EXTRA_CONF" >>"$data/postgresql.conf"
		fi
	fi
	pf_as_postgres "$PF_PGBIN/pg_ctl" -D "$data" -l "$PF_CLUSTER_DIR/postgres.log" -w -t 60 start >/dev/null
	if ! pf_as_postgres "$PF_PGBIN/psql" -h "$PGHOST" -p "$PF_PGPORT" -U postgres -d postgres -Atqc \
		"SELECT 1 FROM pg_database WHERE datname = '$PF_DB'" | grep -q 1; then
		pf_as_postgres "$PF_PGBIN/createdb" -h "$PGHOST" -p "$PF_PGPORT" -U postgres "$PF_DB"
		pf_psql -qc "CREATE EXTENSION pg_cron; CREATE EXTENSION payflow;" >/dev/null
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
