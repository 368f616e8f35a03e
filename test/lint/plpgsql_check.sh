#!/bin/bash
# test/lint/plpgsql_check.sh (make lint): plpgsql_check over every PL/pgSQL
# function payflow has.  The C flavour's own functions are C or SQL; every
# PL/pgSQL function of either flavour is in the C-free flavour's install
# file (the shared source plus the PL/pgSQL twins of the C functions, with
# the same signatures), so checking that install checks both.
#
# On a throwaway cluster (port $PF_LINT_PGPORT, default 54597) with pg_cron
# and plpgsql_check: dist/payflow--VERSION.sql installed as on Amazon RDS,
# then plpgsql_check_function_tb with extra warnings on each function (a
# trigger function against each table it fires on).  Each finding must be
# explained in test/lint/plpgsql_check.allow (function, SQLSTATE and
# message, with a comment saying why); a finding not there fails, and so
# does an entry nothing matches any more.
set -euo pipefail
cd "$(dirname "$0")/../.."
PGBIN=/usr/lib/postgresql/15/bin
port=${PF_LINT_PGPORT:-54597}
dir=$(mktemp -d /tmp/payflow-lint.XXXXXX)
chown postgres: "$dir"
cleanup() {
	[ -f "$dir/data/postmaster.pid" ] && runuser -u postgres -- "$PGBIN/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1
	rm -rf "$dir"
}
trap cleanup EXIT

version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" extension/payflow.control)
make -s dist-sql >/dev/null
runuser -u postgres -- "$PGBIN/initdb" -D "$dir/data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$dir/initdb.log"
cat >>"$dir/data/postgresql.conf" <<CONF
port = $port
listen_addresses = ''
unix_socket_directories = '$dir'
shared_preload_libraries = 'pg_cron'
cron.database_name = 'payflow'
CONF
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null
sql() { "$PGBIN/psql" -h "$dir" -p "$port" -U postgres -X -v ON_ERROR_STOP=1 -Atq "$@"; }
sql -d postgres -c "CREATE ROLE payflow_owner LOGIN CREATEROLE CREATEDB" -c "CREATE DATABASE payflow OWNER payflow_owner"
sql -d payflow -c "CREATE EXTENSION pg_cron" -c "GRANT USAGE ON SCHEMA cron TO payflow_owner" \
	-c "CREATE EXTENSION pgcrypto" -c "CREATE EXTENSION plpgsql_check"
sql -d payflow -U payflow_owner -f "dist/payflow--$version.sql" >/dev/null

# function|SQLSTATE|message of each finding, sorted, one line each
sql -d payflow -F '|' -c "
	WITH fn AS (
		SELECT p.oid, p.oid::regprocedure::text AS name, t.tgrelid, t.tgoldtable, t.tgnewtable
		  FROM pg_proc p
		  JOIN pg_language l ON l.oid = p.prolang AND l.lanname = 'plpgsql'
		  LEFT JOIN LATERAL (SELECT tgrelid, tgoldtable, tgnewtable FROM pg_trigger WHERE tgfoid = p.oid
							 ORDER BY tgrelid LIMIT 1) t ON true
		 WHERE p.pronamespace = 'payflow'::regnamespace
		   AND (p.prorettype <> 'trigger'::regtype OR t.tgrelid IS NOT NULL))
	SELECT DISTINCT fn.name, r.sqlstate, r.message
	  FROM fn CROSS JOIN LATERAL plpgsql_check_function_tb(fn.oid, coalesce(fn.tgrelid, 0),
			   fatal_errors => false, extra_warnings => true,
			   oldtable => fn.tgoldtable, newtable => fn.tgnewtable) r
	 ORDER BY 1, 2, 3" >"$dir/found"

allowed() { grep -v '^[[:space:]]*\(#\|$\)' test/lint/plpgsql_check.allow | sort -u; }
new=$(comm -23 <(sort -u "$dir/found") <(allowed))
stale=$(comm -13 <(sort -u "$dir/found") <(allowed))
functions=$(sql -d payflow -c "SELECT count(*) FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
								 WHERE l.lanname = 'plpgsql' AND p.pronamespace = 'payflow'::regnamespace")
if [ -z "$new$stale" ]; then
	echo "plpgsql_check: $(wc -l <"$dir/found") finding(s) over $functions PL/pgSQL functions, each explained in test/lint/plpgsql_check.allow"
	exit 0
fi
[ -z "$new" ] || { echo "plpgsql_check: not explained in test/lint/plpgsql_check.allow:"; echo "$new"; }
[ -z "$stale" ] || { echo "plpgsql_check: in test/lint/plpgsql_check.allow but no longer found (remove them):"; echo "$stale"; }
exit 1
