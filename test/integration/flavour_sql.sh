#!/bin/bash
# The C-free flavour's install itself (the SQL suites run on it in
# test/flavour-sql/suites.sh):
#
#   - dist/ holds no C: no LANGUAGE C, no MODULE_PATHNAME; installed, no
#     function of schema payflow is in language C; the installer is no
#     superuser and owns every object; the PostgreSQL copy has no payflow
#     library to load
#   - the C helpers' twins answer like the C originals, compared with the C
#     extension of make check's cluster: every transition (and its error),
#     _is_terminal, backoff_delay without jitter, their errors, and the
#     settings' defaults, ranges and units against the GUCs of payflow.c
#   - settings: set_setting/reset_setting with units and their errors, and
#     the business rules follow them (max_attempts)
#   - pg_cron runs the scheduler: a retry comes due with nobody calling
#     run_scheduler, and listeners get NOTIFY payflow_outbox/payflow_status
#   - run again, the file changes nothing; a newer file updates along its
#     update scripts (plain and pg_tle: ALTER EXTENSION payflow UPDATE);
#     an older file never downgrades
#   - without pgcrypto or pg_cron the install stops with one message naming
#     what is missing and leaves nothing behind (no schema, no role)
#   - one flavour per database, both ways
#
# Uses make check's C cluster (PGPORT) for the comparisons and starts its
# own clusters on PF_FLAVOUR_TEST_PORT and the two ports after it.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
source test/lib/assert.sh

C_PORT=${PGPORT:-54329}
C_HOST=${PGHOST:-/tmp/payflow-cluster-$C_PORT/sock}
BASE=${PF_FLAVOUR_TEST_PORT:-54350}
version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" extension/payflow.control)
WORK=$(mktemp -d /tmp/payflow-flavour-sql.XXXXXX)
# the clusters this test starts (with_cluster), gone before and after it
CLUSTERS=()
for port in "$BASE" "$((BASE + 1))" "$((BASE + 2))" "$((BASE + 3))"; do
	CLUSTERS+=("/tmp/payflow-flavour-test-$port")
done
remove_clusters() {
	local dir
	for dir in "${CLUSTERS[@]}"; do
		[ -f "$dir/data/postmaster.pid" ] && runuser -u postgres -- \
			/usr/lib/postgresql/15/bin/pg_ctl -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
		rm -rf "$dir"
	done
}
cleanup() {
	remove_clusters
	rm -rf "$WORK"
}
trap cleanup EXIT
remove_clusters

make -s dist-sql >/dev/null
dist=dist/payflow--$version.sql
tle=dist/payflow-tle--$version.sql

# c_psql ARGS: the C extension (make check's cluster)
c_psql() { /usr/lib/postgresql/15/bin/psql -X -v ON_ERROR_STOP=1 -h "$C_HOST" -p "$C_PORT" -U postgres -d payflow "$@"; }

# with_cluster PORT FLAVOUR INSTALL COMMAND...: COMMAND in a shell whose
# pf_psql and PG* variables point at that cluster (started, once, and
# installed as cluster.sh does for the flavour)
with_cluster() {
	local port=$1 flavour=$2 install=$3
	shift 3
	(
		export PF_FLAVOUR=$flavour PF_SQL_INSTALL=$install PF_PGPORT=$port
		export PF_CLUSTER_DIR=/tmp/payflow-flavour-test-$port
		unset PF_PGBIN PGHOST PGPORT
		source test/lib/cluster.sh
		pf_cluster_start
		"$@"
	)
}
sql() { with_cluster "$BASE" sql dist pf_psql -Atq "$@"; }
owner_sql() { with_cluster "$BASE" sql dist pf_psql -U payflow_owner -Atq "$@"; }

# ---- no C anywhere
pf_eq "dist files hold no C function" "0" \
	"$(cat "$dist" "$tle" | grep -Eci "language[[:space:]]+c([^a-z_]|$)|MODULE_PATHNAME" || true)"
pf_eq "installed: no function of schema payflow is in language C" "0" \
	"$(sql -c "SELECT count(*) FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
				WHERE p.pronamespace = 'payflow'::regnamespace AND l.lanname IN ('c', 'internal')")"
pf_eq "the installer is no superuser, and owns every payflow object" "f|0" \
	"$(sql -c "SELECT (SELECT rolsuper FROM pg_roles WHERE rolname = 'payflow_owner'),
					  (SELECT count(*) FROM pg_class WHERE relnamespace = 'payflow'::regnamespace
						  AND relowner <> 'payflow_owner'::regrole)
					+ (SELECT count(*) FROM pg_proc WHERE pronamespace = 'payflow'::regnamespace
						  AND proowner <> 'payflow_owner'::regrole)" | tr '\n' '|' | sed 's/|$//')"
pf_eq "the PostgreSQL copy has no payflow library or control file" "0" \
	"$(find "${PF_PG_TREE:-/tmp/payflow-pgtree}/usr" -name 'payflow*' | wc -l)"
pf_eq "flavour sql, version $version" "sql|$version" \
	"$(sql -c "SELECT payflow._flavour() || '|' || payflow._dist_version()")"

# ---- the twins answer like the C originals
matrix="SELECT f, t, r, x FROM unnest('{PENDING,PAYMENT_PROCESSING,PAYMENT_COMPLETED,POST_PROCESSING,INVOICE_PENDING,COMPLETED,FAILED,CANCELLED,BOGUS}'::text[]) f,
		unnest('{PENDING,PAYMENT_PROCESSING,PAYMENT_COMPLETED,POST_PROCESSING,INVOICE_PENDING,COMPLETED,FAILED,CANCELLED,BOGUS}'::text[]) t,
		unnest('{false,true}'::boolean[]) r, LATERAL pg_temp.pf_outcome(format('SELECT payflow._check_transition(%L, %L, %L)', f, t, r)) x
	UNION ALL SELECT s, '', false, x FROM unnest('{PENDING,COMPLETED,FAILED,CANCELLED,INVOICE_PENDING,BOGUS}'::text[]) s,
		LATERAL pg_temp.pf_outcome(format('SELECT payflow._is_terminal(%L)', s)) x
	UNION ALL SELECT a::text, b || '/' || c, false, x
	  FROM unnest('{0,1,2,5,20,61,62,1000}'::int[]) a, unnest('{0,250ms,1s,1 day,1 mon}'::text[]) b,
		   unnest('{0,1 min,15 min,2 days}'::text[]) c,
		   LATERAL pg_temp.pf_outcome(format('SELECT payflow.backoff_delay(%s, %L, %L, 0)', a, b, c)) x
	UNION ALL SELECT e, '', false, x FROM unnest(ARRAY[
			'SELECT payflow.backoff_delay(-1, ''1s'', ''1 min'')', 'SELECT payflow.backoff_delay(1, ''-1s'', ''1 min'')',
			'SELECT payflow.backoff_delay(1, ''1s'', ''-1 min'')', 'SELECT payflow.backoff_delay(1, ''1s'', ''1 min'', 1.5)',
			'SELECT payflow.backoff_delay(1, ''1s'', ''1 min'', ''NaN'')', 'SELECT payflow._random_token(15)',
			'SELECT payflow._random_token(65)', 'SELECT length(payflow._random_token(64))',
			'SELECT payflow._setting(''no_such_setting'')', 'SELECT payflow._setting(''max_attempts'')',
			'SELECT payflow._setting(''retry_jitter'')::float8', 'SELECT payflow._setting(''payload_max_bytes'')',
			'SELECT payflow._set_tenant(repeat(''t'', 801))']) e, LATERAL pg_temp.pf_outcome(e) x
	ORDER BY 1, 2, 3"
outcome_fn="CREATE FUNCTION pg_temp.pf_outcome(stmt text) RETURNS text LANGUAGE plpgsql AS \$f\$
	DECLARE v text;
	BEGIN
		EXECUTE stmt INTO v;
		RETURN 'ok ' || coalesce(v, 'null');
	EXCEPTION WHEN OTHERS THEN
		RETURN SQLSTATE || ' ' || SQLERRM;
	END \$f\$"
c_psql -Atq -c "$outcome_fn" -c "BEGIN" -c "$matrix" -c "ROLLBACK" >"$WORK/matrix-c.txt"
sql -c "$outcome_fn" -c "BEGIN" -c "$matrix" -c "ROLLBACK" >"$WORK/matrix-sql.txt"
pf_ok "the matrix has every case ($(wc -l <"$WORK/matrix-c.txt") lines)" test "$(wc -l <"$WORK/matrix-c.txt")" -gt 250
if diff -u "$WORK/matrix-c.txt" "$WORK/matrix-sql.txt" >"$WORK/matrix.diff"; then
	echo "ok - transitions, _is_terminal, backoff_delay, tokens, settings and tenant errors: the twins answer as the C functions do"
else
	echo "not ok - the twins answer differently from the C functions"
	head -40 "$WORK/matrix.diff"
	PF_FAILURES=$((PF_FAILURES + 1))
fi

# The trigger that records an attempt ended without success: its WHEN
# clause is one C function in the C flavour (_attempt_ended), written out
# in SQL here; the C-free flavour's clause, evaluated in the C cluster
# beside the function over every combination of the six columns it reads.
when=$(sql -c "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'operations_attempt_ended'" |
	sed -n 's/.* WHEN (\(.*\)) EXECUTE FUNCTION .*/\1/p' |
	sed 's/old\.current_step/os/g; s/new\.current_step/ns/g; s/old\.step_status/ost/g; s/new\.step_status/nst/g;
		 s/old\.step_attempt/oa/g; s/new\.step_attempt/na/g')
pf_ok "the C-free flavour's WHEN clause of operations_attempt_ended reads the six columns only" \
	test -n "$when" -a "$(grep -Eci 'old\.|new\.' <<<"$when")" = 0
pf_eq "_attempt_ended answers as the C-free flavour's WHEN clause, in all 1296 cases" "1296|0" \
	"$(c_psql -Atq -c "SELECT count(*) || '|' || count(*) FILTER (WHERE
			payflow._attempt_ended(os, ns, ost, nst, oa, na) IS DISTINCT FROM coalesce(($when), false))
		  FROM unnest('{PROCESS_PAYMENT,CREATE_INVOICE}'::text[]) os, unnest('{PROCESS_PAYMENT,CREATE_INVOICE}'::text[]) ns,
			   unnest('{PENDING,RUNNING,RETRY_WAIT,SUCCEEDED,FAILED,CANCELLED}'::text[]) ost,
			   unnest('{PENDING,RUNNING,RETRY_WAIT,SUCCEEDED,FAILED,CANCELLED}'::text[]) nst,
			   unnest('{0,1,2}'::int[]) oa, unnest('{0,1,2}'::int[]) na")"

# (the background worker's own: database_name, and notify_interval, which
# spaces its NOTIFYs; the C-free flavour notifies from run_scheduler)
c_psql -Atq -c "SELECT substr(name, 9), boot_val, min_val, max_val, coalesce(unit, '-') FROM pg_settings
				 WHERE name LIKE 'payflow.%' AND name NOT IN ('payflow.database_name', 'payflow.notify_interval')
				 ORDER BY 1" >"$WORK/gucs-c.txt"
sql -c "SELECT name, default_value, min_value::float8, max_value::float8, coalesce(unit, '-') FROM payflow.settings ORDER BY 1" \
	>"$WORK/gucs-sql.txt"
# pg_settings prints reals as %g; compare numerically
normalise() { awk -F'|' '{ printf "%s|%s|%g|%g|%s\n", $1, $2, $3, $4, $5 }' "$1"; }
pf_eq "the settings table has the GUCs of payflow.c: names, defaults, ranges, units" \
	"$(normalise "$WORK/gucs-c.txt")" "$(normalise "$WORK/gucs-sql.txt")"

# ---- settings
pf_eq "set_setting takes units and returns the base unit" "60|65536|3|0.5" \
	"$(sql -c "SELECT payflow.set_setting('retry_base_delay', '1min') || '|' || payflow.set_setting('payload_max_bytes', '64kB')
				 || '|' || payflow.set_setting('max_attempts', '3') || '|' || payflow.set_setting('retry_jitter', '0.5')")"
pf_eq "... and _setting reads them in every session" "60|65536|3|0.5" \
	"$(sql -c "SELECT payflow._setting('retry_base_delay') || '|' || payflow._setting('payload_max_bytes') || '|'
				 || payflow._setting('max_attempts') || '|' || payflow._setting('retry_jitter')")"
# the message of the error psql printed (-c or -f)
errmsg() { sed -n 's/^\(psql:.*: \)\{0,1\}ERROR:  //p'; }
bad_setting() { sql -c "SELECT payflow.set_setting($1)" 2>&1 | errmsg; }
pf_eq "an unknown setting: 42704" 'unrecognized payflow setting "nope"' "$(bad_setting "'nope', '1'")"
pf_eq "a value that is no number" 'invalid value for parameter "payflow.max_attempts": "many"' "$(bad_setting "'max_attempts', 'many'")"
pf_eq "a unit the setting does not take" 'invalid value for parameter "payflow.stuck_after": "10kB"' "$(bad_setting "'stuck_after', '10kB'")"
pf_eq "out of range" '0 is outside the valid range for parameter "payflow.max_attempts" (1 .. 1000)' "$(bad_setting "'max_attempts', '0'")"
pf_eq "NULL" 'value must not be null' "$(bad_setting "'max_attempts', NULL")"
pf_eq "a rejected value changed nothing" "3" "$(sql -c "SELECT payflow._setting('max_attempts')")"
# the business rules follow the table: with max_attempts 1 a retryable
# failure fails the operation at once
sql -c "SELECT payflow.set_setting('max_attempts', '1')" >/dev/null
op=$(sql -c "SELECT payflow.submit('flavour-max-1', '{\"amount\": 1}')")
sql -c "SELECT payflow.claim_step('$op', 'PROCESS_PAYMENT', 'w1')" >/dev/null
pf_eq "max_attempts 1 from payflow.settings: a retryable failure fails the operation" "failed|FAILED" \
	"$(sql -c "SELECT payflow.fail_step('$op', 'PROCESS_PAYMENT', 'w1', '{\"code\": \"T\"}', true) ->> 'action'" -c "SELECT payflow.status('$op') ->> 'status'" | tr '\n' '|' | sed 's/|$//')"
pf_eq "reset_setting: back to the default, then false" "t|f|5" \
	"$(sql -c "SELECT payflow.reset_setting('max_attempts')" -c "SELECT payflow.reset_setting('max_attempts')" \
		-c "SELECT payflow._setting('max_attempts')" | tr '\n' '|' | sed 's/|$//')"
sql -c "SELECT payflow.reset_setting(name) FROM payflow.settings" >/dev/null
pf_eq "who changed a setting is recorded" "payflow_owner" \
	"$(owner_sql -c "SELECT payflow.set_setting('stuck_after', '10min')" -c "SELECT updated_by FROM payflow.settings WHERE name = 'stuck_after'" | tail -1)"
sql -c "SELECT payflow.reset_setting('stuck_after')" >/dev/null

# ---- pg_cron runs the scheduler; listeners are woken
pf_eq "payflow-scheduler is a pg_cron job of the installer" "payflow_owner" \
	"$(sql -c "SELECT username FROM cron.job WHERE jobname = 'payflow-scheduler'")"
sql -c "SELECT payflow.set_setting('retry_base_delay', '0'), payflow.set_setting('retry_jitter', '0')" >/dev/null
op=$(sql -c "SELECT payflow.submit('flavour-retry-1', '{\"amount\": 1}')")
sql -c "SELECT payflow.claim_step('$op', 'PROCESS_PAYMENT', 'w1')" \
	-c "SELECT payflow.fail_step('$op', 'PROCESS_PAYMENT', 'w1', '{\"code\": \"T\"}', true)" >/dev/null
due_again() { [ "$(sql -c "SELECT status FROM payflow.steps WHERE operation_id = '$op'")" = PENDING ]; }
pf_ok "a due retry is re-emitted with nobody calling run_scheduler (pg_cron does, within 70 s)" pf_wait_for 70 due_again
# woken CHANNEL STATEMENT: LISTEN, run STATEMENT in another session, and
# see the notification within 4 s
woken() {
	with_cluster "$BASE" sql dist pf_psql -At -c "LISTEN $1" -c "SELECT pg_sleep(4)" >"$WORK/listen.out" 2>&1 &
	local listener=$!
	sleep 1
	sql -c "$2" >/dev/null
	wait $listener
	grep -q "notification \"$1\"" "$WORK/listen.out"
}
pf_ok "NOTIFY payflow_outbox while events wait for a relay (from the scheduler, not the submit)" \
	woken payflow_outbox "SELECT payflow.submit('flavour-wake-1', '{\"amount\": 1}')"
pf_ok "NOTIFY payflow_status after a status change" \
	woken payflow_status "SELECT payflow.cancel(payflow.submit('flavour-wake-2', '{\"amount\": 1}'))"
sql -c "SELECT payflow.reset_setting(name) FROM payflow.settings" >/dev/null

# ---- run again: nothing changes
with_cluster "$BASE" sql dist pf_psql -Atqf test/sql/schema_fingerprint.sql >"$WORK/before.txt"
ops_before=$(sql -c "SELECT count(*) FROM payflow.operations")
rerun=$(with_cluster "$BASE" sql dist pf_psql -U payflow_owner -q -f "$REPO/$dist" 2>&1) && rc=0 || rc=$?
pf_eq "the same file again: exit 0" "0" "$rc"
pf_ok "... says there is nothing to do" grep -q "payflow $version is installed; nothing to do" <<<"$rerun"
with_cluster "$BASE" sql dist pf_psql -Atqf test/sql/schema_fingerprint.sql >"$WORK/after.txt"
pf_ok "... and leaves the schema as it was" diff -q "$WORK/before.txt" "$WORK/after.txt"
pf_eq "... and every operation" "$ops_before" "$(sql -c "SELECT count(*) FROM payflow.operations")"

# ---- a newer file updates along its update scripts; an older one refuses
# A next version made here from a copy of the sources with one more update
# script, the way a release adds one.
next=$(echo "$version" | awk -F. '{ printf "%d.%d.%d", $1, $2, $3 + 1 }')
cp -r extension/sql "$WORK/sql"
cat >"$WORK/sql/payflow--$version--$next.sql" <<EOF
\\echo Use "ALTER EXTENSION payflow UPDATE TO '$next'" to load this file. \\quit
COMMENT ON TABLE payflow.operations IS 'updated to $next';
EOF
"$WORK/sql/assemble.sh" dist "$next" >"$WORK/payflow--$next.sql"
"$WORK/sql/assemble.sh" tle "$next" >"$WORK/payflow-tle--$next.sql"
chmod a+r "$WORK" "$WORK"/*.sql
out=$(with_cluster "$BASE" sql dist pf_psql -U payflow_owner -q -f "$WORK/payflow--$next.sql" 2>&1) && rc=0 || rc=$?
pf_eq "a $next file over $version: exit 0" "0" "$rc"
pf_eq "... runs the update script and records $next" "$next|updated to $next|$ops_before" \
	"$(sql -c "SELECT payflow._dist_version() || '|' || obj_description('payflow.operations'::regclass) || '|' || (SELECT count(*) FROM payflow.operations)")"
out=$(with_cluster "$BASE" sql dist pf_psql -U payflow_owner -q -f "$REPO/$dist" 2>&1) && rc=0 || rc=$?
pf_ok "the $version file over $next: refused" test "$rc" -ne 0
pf_ok "... saying it never downgrades" grep -q "payflow $next is installed, newer than this file ($version)" <<<"$out"
pf_eq "... and changing nothing" "$next" "$(sql -c "SELECT payflow._dist_version()")"

with_cluster "$((BASE + 1))" sql tle true
tle_sql() { with_cluster "$((BASE + 1))" sql tle pf_psql -Atq "$@"; }
op=$(tle_sql -c "SELECT payflow.submit('flavour-tle-1', '{\"amount\": 1}')")
out=$(with_cluster "$((BASE + 1))" sql tle pf_psql -U payflow_owner -q -f "$WORK/payflow-tle--$next.sql" 2>&1) && rc=0 || rc=$?
pf_eq "pg_tle: the $next file registers the update path" "0" "$rc"
pf_eq "... and ALTER EXTENSION payflow UPDATE (as the installer) reaches $next, keeping operations" "$next|updated to $next|PENDING" \
	"$(with_cluster "$((BASE + 1))" sql tle pf_psql -U payflow_owner -Atq -c "ALTER EXTENSION payflow UPDATE" \
		-c "SELECT extversion || '|' || obj_description('payflow.operations'::regclass) FROM pg_extension WHERE extname = 'payflow'" \
		| tr '\n' '|')$(tle_sql -c "SELECT payflow.status('$op') ->> 'status'")"
out=$(with_cluster "$((BASE + 1))" sql tle pf_psql -U payflow_owner -q -f "$REPO/$tle" 2>&1) && rc=0 || rc=$?
pf_eq "pg_tle: the $version file again registers nothing twice" "0" "$rc"

# ---- a missing extension stops the install, leaving nothing behind
# (a fresh cluster: no payflow role exists yet)
no_payflow_job_running() {
	[ "$(pf_psql -Atqc "SELECT count(*) FROM pg_stat_activity
						 WHERE pid <> pg_backend_pid() AND state = 'active' AND query ~ 'payflow\.'")" = 0 ]
}
strip() {
	# pg_cron's jobs first: a scheduler run going on while the schema is
	# dropped deadlocks with the DROP (it happened in CI), and
	# run_scheduler_for naps for up to a minute: it is ended, not waited for
	pf_psql -qc "SELECT cron.unschedule(jobid) FROM cron.job" \
		-c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE pid <> pg_backend_pid() AND state = 'active' AND query ~ 'payflow\.'" >/dev/null
	pf_wait_for 30 no_payflow_job_running || true
	pf_psql -qc "SET client_min_messages = warning" -c "DROP SCHEMA IF EXISTS payflow CASCADE" >/dev/null
	pf_psql -qc "DO \$\$
		DECLARE r name;
		BEGIN
			FOR r IN SELECT rolname FROM pg_roles WHERE rolname LIKE 'payflow\\_%' AND rolname <> '$PF_OWNER' LOOP
				EXECUTE format('DROP OWNED BY %I', r);
				EXECUTE format('DROP ROLE %I', r);
			END LOOP;
		END \$\$" >/dev/null
}
with_cluster "$((BASE + 2))" sql dist strip
fresh_sql() { with_cluster "$((BASE + 2))" sql dist pf_psql -Atq "$@"; }
try_install() { with_cluster "$((BASE + 2))" sql dist pf_psql -U payflow_owner -q -f "$REPO/$dist" 2>&1; }
leftovers() { fresh_sql -c "SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = 'payflow') + (SELECT count(*) FROM pg_roles WHERE rolname LIKE 'payflow\_%' AND rolname <> 'payflow_owner')"; }
fresh_sql -c "DROP EXTENSION pgcrypto" >/dev/null
out=$(try_install) && rc=0 || rc=$?
pf_ok "without pgcrypto: refused" test "$rc" -ne 0
pf_eq "... with one message naming it" 'payflow needs the extension pgcrypto in database "payflow"' \
	"$(errmsg <<<"$out")"
pf_ok "... and how to add it" grep -q 'HINT:  Run CREATE EXTENSION pgcrypto;' <<<"$out"
pf_eq "... leaving no schema and no role" "0" "$(leftovers)"
fresh_sql -c "DROP EXTENSION pg_cron" >/dev/null
out=$(try_install) && rc=0 || rc=$?
pf_eq "without pgcrypto and pg_cron: one message naming both" 'payflow needs the extensions pgcrypto and pg_cron in database "payflow"' \
	"$(errmsg <<<"$out")"
fresh_sql -c "CREATE EXTENSION pgcrypto" >/dev/null
out=$(try_install) && rc=0 || rc=$?
pf_eq "without pg_cron: one message naming it" 'payflow needs the extension pg_cron in database "payflow"' \
	"$(errmsg <<<"$out")"
pf_ok "... and how to add it (parameter group, cron.database_name)" grep -q "set cron.database_name = 'payflow'" <<<"$out"
pf_eq "... leaving no schema and no role" "0" "$(leftovers)"
fresh_sql -c "CREATE EXTENSION pg_cron" -c "GRANT USAGE ON SCHEMA cron TO payflow_owner" >/dev/null
out=$(try_install) && rc=0 || rc=$?
pf_eq "with both: installed" "0|sql" "$rc|$(fresh_sql -c "SELECT payflow._flavour()")"

# ---- one flavour per database, both ways
out=$(/usr/lib/postgresql/15/bin/psql -X -h "$C_HOST" -p "$C_PORT" -U postgres -d payflow -q -f "$dist" 2>&1) && rc=0 || rc=$?
pf_ok "the plain SQL file into a database with the C extension: refused" test "$rc" -ne 0
pf_eq "... with a message that says so" "payflow is installed in this database as an extension (version $version)" \
	"$(errmsg <<<"$out")"
pf_eq "... changing nothing" "c" "$(c_psql -Atqc "SELECT payflow._flavour()")"
# the reverse needs the C library: a C cluster of its own, where the C
# extension is dropped and the plain file installed
mix() {
	pf_psql -qc "DROP EXTENSION payflow" -c "CREATE EXTENSION pgcrypto" >/dev/null
	pf_psql -q -f "$REPO/$dist" >/dev/null
	pf_psql -Atqc "CREATE EXTENSION payflow" 2>&1 | errmsg
	pf_psql -Atqc "SELECT payflow._flavour()"
}
pf_eq "CREATE EXTENSION payflow where the C-free flavour is installed: refused, which changes nothing" \
	'payflow is already installed in this database (flavour "sql")|sql' \
	"$(with_cluster "$((BASE + 3))" c dist mix | tr '\n' '|' | sed 's/|$//')"

pf_done
