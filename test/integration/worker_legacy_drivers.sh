#!/bin/bash
# shellcheck disable=SC2154  # PID_<name>, WK_PID_<name>: set by name (printf -v) when a program starts
# payflow-worker --role payment against legacy DBMSs payflow does not ship
# with, through their own ODBC drivers: MariaDB (a private mariadbd,
# test/fixtures/legacy-mariadb, MariaDB Connector/ODBC) and SQLite
# (test/fixtures/legacy-sqlite, libsqliteodbc). Visibility 4 s (lease 6 s),
# PAYFLOW_LEGACY_TIMEOUT 2 s. One worker at a time on the queue:
#
#   MariaDB, blocking, with a look-up ("ma")
#     happy path     exact amounts, one charge each
#     declined       SIGNAL 45000: permanent without any setting, one attempt
#     card in error  "Incorrect decimal value: 'card 4111…'": the step's error
#                    is code 22007, class data and payflow's own message; the
#                    card number is in no log line, nowhere stored
#     own time-out   the driver refuses SQL_ATTR_QUERY_TIMEOUT (01S02, logged
#                    once at start-up): payflow cancels the call itself, within
#                    a second of the time-out; retried, charged once
#     failed cancel  the call waits inside a definer-owned procedure, so the
#                    cancel's KILL QUERY is refused: logged, the call runs on
#                    in the same attempt (no second call beside it), its
#                    connection closed after it
#     no row         the procedure charges but returns no result set: the
#                    look-up finds the charge, the step completes
#   MariaDB without a look-up, raw error texts on ("mb"), submit-poll ("mc")
#     no row         outcome_unknown: FAILED, a dead letter, charged once
#     cut off        every attempt times out: retried, the last one ends as
#                    outcome_unknown (not as a plain HYT00 failure)
#     raw text       the DBMS's text as rawMessage, the card number masked
#     drain          SIGTERM while a call whose cancel is refused runs: the
#                    step keeps its lease until the call returns (mc, on the
#                    same queue, never runs it), recorded, exit 0
#     submit-poll    the job submitted once, polled until CHARGED
#   MariaDB through a proxy that stalls new connections ("md")
#     hung cancel    SQLCancel opens a connection that hangs: the main loop
#                    goes on renewing the leases of both calls meanwhile
#   SQLite
#     INSERT … RETURNING without a look-up is refused at start-up (the
#     driver says it returns no result set); with a look-up each charge
#     completes through it (today it ended FAILED although charged)
#
# and workers/tests/test_worker_odbc.c against both drivers.
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

wk_init worker-legacy-drivers 4741 4742 3
MARIA=test/fixtures/legacy-mariadb/server.sh
export PAYFLOW_MARIADB_PORT=4743
export PAYFLOW_MARIADB_DIR=/tmp/payflow-mariadb-$PAYFLOW_MARIADB_PORT-$WK_RUN
PROXY_PORT=4744
PROXY_PID=

drivers_cleanup() {
	[ -n "$PROXY_PID" ] && pf_kill_ours 9 "$PROXY_PID"
	"$MARIA" destroy >/dev/null 2>&1 || true
}
trap 'drivers_cleanup; wk_cleanup' EXIT

MA_ODBC=$("$MARIA" start 2>"$WK_DIR/mariadb-start.log") || {
	cat "$WK_DIR/mariadb-start.log"
	echo "not ok - the MariaDB fixture did not start"
	exit 1
}
maria() { "$MARIA" sql -e "$1"; }
# maria_fault PAYMENT KIND [SECONDS]: the next charge call for PAYMENT takes it
maria_fault() { maria "INSERT INTO faults (payment_id, fn, kind, seconds) VALUES ('$1', 'charge', '$2', ${3:-0})"; }
maria_charges() { maria "SELECT count(*) FROM charges WHERE payment_id = '$1'"; }
maria_calls() { maria "SELECT count(*) FROM call_log WHERE payment_id = '$1' AND fn = '${2:-charge}'"; }
maria "UPDATE settings SET job_delay = 1"

MA_CALL='CALL charge(:idempotency_key, :payment_id, :details.amount, :details.currency)'
MA_LOOKUP='CALL lookup_charge(:idempotency_key)'
maria_worker() {
	local name=$1
	shift
	wk_start_worker "$name" PAYFLOW_LEGACY_ODBC="$MA_ODBC" PAYFLOW_LEGACY_CALL="$MA_CALL" \
		PAYFLOW_LEGACY_LOOKUP="$MA_LOOKUP" PAYFLOW_LEGACY_TIMEOUT=2 PAYFLOW_LEGACY_CONNECT_TIMEOUT=2 "$@"
}
# stop_worker PID: SIGTERM, and its exit status in $rc
stop_worker() {
	rc=0
	kill -TERM "$1" 2>/dev/null || true
	wait "$1" || rc=$?
}
step_error() { q -c "SELECT last_error->>'$2' FROM payflow.steps WHERE operation_id = '$1' AND step_name = 'PROCESS_PAYMENT'"; }
dead_letter() { q -c "SELECT error->>'code' FROM payflow.dead_letters WHERE operation_id = '$1' AND source = 'step'"; }
# everything payflow stored or published about an operation, as text
stored_text() {
	q -c "SELECT concat_ws(' ', payflow.status('$1')::text,
			(SELECT string_agg(coalesce(reason, ''), ' ') FROM payflow.history('$1')),
			(SELECT string_agg(error::text, ' ') FROM payflow.dead_letters WHERE operation_id = '$1'),
			(SELECT string_agg(body::text, ' ') FROM payflow.outbox WHERE operation_id = '$1'))"
}
# lacks TEXT STRING...: none of the strings is in TEXT
lacks() {
	local text=$1 s
	shift
	for s in "$@"; do
		[[ $text != *"$s"* ]] || return 1
	done
}
# both_reach OP1 OP2 STATUS SECONDS
both_reach() { wk_wait_status "$1" "$3" "$4" && wk_wait_status "$2" "$3" "$4"; }
call_seconds() {
	maria "SELECT ROUND(TIMESTAMPDIFF(MICROSECOND, started_at, ended_at) / 1e6, 1) FROM call_log
		   WHERE payment_id = '$1' AND fn = 'charge' ORDER BY id LIMIT 1"
}

p=wl-$WK_RUN
wk_start_relay

# ---- MariaDB, blocking, with a look-up
maria_fault "$p-a-declined" permanent
maria_fault "$p-a-slow" slow 10
maria_fault "$p-a-owner" slow_owner 6
maria_fault "$p-a-norow" no_row
maria_worker ma PAYFLOW_CONCURRENCY=8
ok1=$(wk_submit "$p-a-ok1" '{"amount": 12.50, "currency": "EUR"}')
ok2=$(wk_submit "$p-a-ok2" '{"amount": 7.25, "currency": "USD"}')
declined=$(wk_submit "$p-a-declined")
card=$(wk_submit "$p-a-card" '{"amount": "card 4111111111111111", "currency": "EUR"}')
slow=$(wk_submit "$p-a-slow")
owner=$(wk_submit "$p-a-owner")
norow=$(wk_submit "$p-a-norow")

pf_eq "MariaDB: the refused query time-out is logged once at start-up" 1 \
	"$(grep -c 'does not enforce SQL_ATTR_QUERY_TIMEOUT' "$WK_DIR/ma.log")"
pf_ok "MariaDB: ... with the driver's 01S02" grep -q '"driverSays":"01S02' "$WK_DIR/ma.log"
for op in "$ok1" "$ok2"; do
	wk_wait_status "$op" PAYMENT_COMPLETED 20 || true
done
pf_eq "MariaDB happy path: both PAYMENT_COMPLETED, amounts exact" "PAYMENT_COMPLETED 12.50 PAYMENT_COMPLETED 7.25" \
	"$(for op in "$ok1" "$ok2"; do
		printf '%s %s ' "$(wk_status "$op")" "$(q -c "SELECT result->>'amount' FROM payflow.steps
												   WHERE operation_id = '$op' AND step_name = 'PROCESS_PAYMENT'")"
	done | sed 's/ $//')"
pf_eq "MariaDB happy path: one charge each" "1 1" "$(maria_charges "$p-a-ok1") $(maria_charges "$p-a-ok2")"

pf_ok "MariaDB decline (45000): FAILED" wk_wait_status "$declined" FAILED 15
pf_eq "MariaDB decline: permanent by default, one attempt, the procedure's own words" \
	"1|45000|declined|card declined|45000" \
	"$(wk_attempts "$declined")|$(step_error "$declined" code)|$(step_error "$declined" class)|$(step_error "$declined" message)|$(dead_letter "$declined")"
pf_eq "MariaDB decline: called once, nothing charged" "1 0" "$(maria_calls "$p-a-declined") $(maria_charges "$p-a-declined")"

pf_ok "card in the DBMS's error: FAILED" wk_wait_status "$card" FAILED 15
pf_eq "card in the DBMS's error: code, class and payflow's message" \
	"1|22007|data|the legacy DBMS refused a value of the request (SQLSTATE 22007)" \
	"$(wk_attempts "$card")|$(step_error "$card" code)|$(step_error "$card" class)|$(step_error "$card" message)"
pf_ok "card in the DBMS's error: the number is in no line of the worker's log" \
	lacks "$(cat "$WK_DIR/ma.log")" 4111111111111111
pf_ok "card in the DBMS's error: nor the DBMS's text in what payflow stored and published" \
	lacks "$(stored_text "$card")" 'Incorrect decimal' 4111111111111111
pf_eq "card in the DBMS's error: no raw text unless asked for" "" "$(step_error "$card" rawMessage)"

pf_ok "own time-out: PAYMENT_COMPLETED" wk_wait_status "$slow" PAYMENT_COMPLETED 25
secs=$(call_seconds "$p-a-slow")
wk_log "the 10 s call with PAYFLOW_LEGACY_TIMEOUT=2 ended after $secs s"
pf_ok "own time-out: the call ended within a second of PAYFLOW_LEGACY_TIMEOUT ($secs s, not 10)" \
	awk -v s="$secs" 'BEGIN { exit !(s >= 1.8 && s <= 3.0) }'
pf_eq "own time-out: attempt 2 charged once" "2|1" "$(wk_attempts "$slow")|$(maria_charges "$p-a-slow")"
pf_ok "own time-out: attempt 1 failed with HYT00, retryable" \
	wk_log_has ma "$slow" '"msg":"step failed, retry left to the database"'
pf_ok "own time-out: ... HYT00" bash -c "grep -F '\"operationId\":\"$slow\"' '$WK_DIR/ma.log' | grep -q '\"code\":\"HYT00\"'"
pf_ok "own time-out: the worker said it cancelled the call itself" \
	wk_log_has ma "$slow" 'reached PAYFLOW_LEGACY_TIMEOUT'

pf_ok "failed cancel: PAYMENT_COMPLETED" wk_wait_status "$owner" PAYMENT_COMPLETED 25
pf_ok "failed cancel: logged" wk_log_has ma "$owner" 'SQLCancel failed'
pf_eq "failed cancel: one attempt, one call (none beside it), one charge" "1 1 1" \
	"$(wk_attempts "$owner") $(maria_calls "$p-a-owner") $(maria_charges "$p-a-owner")"
pf_ok "failed cancel: the call ran to its end (6 s)" awk -v s="$(call_seconds "$p-a-owner")" 'BEGIN { exit !(s >= 5.9) }'
pf_ok "failed cancel: the worker waited for it and said so" wk_log_has ma "$owner" 'whose cancel failed has returned'
pf_ok "failed cancel: its connection was closed after it" wk_log_has ma "$owner" 'closing the legacy connection'

pf_ok "no row, with a look-up: PAYMENT_COMPLETED" wk_wait_status "$norow" PAYMENT_COMPLETED 15
pf_eq "no row, with a look-up: attempt 1, the look-up's charge, charged once" \
	"1|$(maria "SELECT CONCAT('ch_', LPAD(id, 6, '0')) FROM charges WHERE payment_id = '$p-a-norow'")|1" \
	"$(wk_attempts "$norow")|$(q -c "SELECT result->>'charge_id' FROM payflow.steps WHERE operation_id = '$norow' AND step_name = 'PROCESS_PAYMENT'")|$(maria_charges "$p-a-norow")"
stop_worker "$WK_PID_ma"
pf_eq "MariaDB worker ma exits 0 on SIGTERM" 0 "$rc"

# ---- MariaDB without a look-up, raw error texts on; the drain; submit-poll
maria_fault "$p-b-norow" no_row
# every call of this payment outlasts PAYFLOW_LEGACY_TIMEOUT (remaining NULL)
maria "INSERT INTO faults (payment_id, fn, kind, seconds, remaining) VALUES ('$p-b-cut', 'charge', 'slow', 10, NULL)"
q -c "UPDATE payflow.step_definitions SET max_attempts = 2 WHERE step_name = 'PROCESS_PAYMENT'" >/dev/null
maria_worker mb PAYFLOW_LEGACY_LOOKUP= PAYFLOW_RAW_ERROR_TEXT=true PAYFLOW_DRAIN_SECONDS=1
norow_b=$(wk_submit "$p-b-norow")
cut=$(wk_submit "$p-b-cut")
raw=$(wk_submit "$p-b-raw" '{"amount": "card 5500 0055 5555 5559", "currency": "EUR"}')
pf_ok "no row, no look-up: FAILED" wk_wait_status "$norow_b" FAILED 15
pf_eq "no row, no look-up: outcome_unknown after one attempt, a dead letter, charged once" \
	"1|outcome_unknown|outcome_unknown|1" \
	"$(wk_attempts "$norow_b")|$(q -c "SELECT payflow.status('$norow_b')->'error'->>'code'")|$(dead_letter "$norow_b")|$(maria_charges "$p-b-norow")"
pf_ok "no row, no look-up: the error says not to resubmit" \
	bash -c '[[ $1 == *"do not resubmit"* ]]' - "$(step_error "$norow_b" message)"
pf_ok "cut off on every attempt, no look-up: FAILED" wk_wait_status "$cut" FAILED 30
q -c "UPDATE payflow.step_definitions SET max_attempts = NULL WHERE step_name = 'PROCESS_PAYMENT'" >/dev/null
pf_eq "cut off on every attempt, no look-up: the last attempt ends as outcome_unknown (not HYT00), a dead letter" \
	"2|outcome_unknown|HYT00|outcome_unknown" \
	"$(wk_attempts "$cut")|$(q -c "SELECT payflow.status('$cut')->'error'->>'code'")|$(q -c "SELECT error->'cause'->>'code' FROM payflow.dead_letters WHERE operation_id = '$cut'")|$(dead_letter "$cut")"
pf_ok "cut off: the first attempt was retried as a plain HYT00" \
	wk_log_has mb "$cut" '"msg":"step failed, retry left to the database"'
pf_ok "raw text: FAILED" wk_wait_status "$raw" FAILED 15
pf_eq "raw text: the DBMS's words as rawMessage, the card masked but its last four" \
	"Incorrect decimal value: 'card **** **** **** 5559' for column \`legacy\`.\`charges\`.\`amount\` at row 1" \
	"$(step_error "$raw" rawMessage)"
pf_ok "raw text: the number is in no log line, nowhere stored" \
	lacks "$(cat "$WK_DIR/mb.log") $(stored_text "$raw")" '5500 0055 5555 5559' 5500005555555559

maria_fault "$p-b-drain" slow_owner 12
drain=$(wk_submit "$p-b-drain")
drain_call_running() { [ "$(maria "SELECT count(*) FROM call_log WHERE payment_id = '$p-b-drain' AND ended_at IS NULL")" = 1 ]; }
pf_ok "drain: mb is in the call" pf_wait_for 15 drain_call_running
maria_worker mc PAYFLOW_LEGACY_MODE=submit-poll PAYFLOW_LEGACY_POLL_INTERVAL_MS=300 \
	PAYFLOW_LEGACY_SUBMIT='CALL submit_charge(:idempotency_key, :payment_id, :details.amount, :details.currency)' \
	PAYFLOW_LEGACY_STATUS='CALL charge_status(:legacy_ref)'
started=$SECONDS
stop_worker "$WK_PID_mb"
pf_eq "drain: mb exits 0" 0 "$rc"
pf_ok "drain: ... once the call returned, not before ($((SECONDS - started)) s after SIGTERM)" test $((SECONDS - started)) -ge 6
pf_ok "drain: it said it waits for the call whose cancel failed" \
	grep -q 'did not return after their cancel: waiting for them' "$WK_DIR/mb.log"
pf_eq "drain: PAYMENT_COMPLETED in attempt 1, one call, no submit beside it, one charge" "PAYMENT_COMPLETED|1|1|0|1" \
	"$(wk_status "$drain")|$(wk_attempts "$drain")|$(maria_calls "$p-b-drain")|$(maria_calls "$p-b-drain" submit_charge)|$(maria_charges "$p-b-drain")"

poll=$(wk_submit "$p-c-poll")
pf_ok "MariaDB submit-poll: PAYMENT_COMPLETED" wk_wait_status "$poll" PAYMENT_COMPLETED 20
pf_eq "MariaDB submit-poll: submitted once, polled, charged once" "1|yes|1" \
	"$(maria_calls "$p-c-poll" submit_charge)|$( [ "$(maria_calls "$p-c-poll" charge_status)" -ge 1 ] && echo yes)|$(maria_charges "$p-c-poll")"
pf_ok "MariaDB submit-poll: the result is the job's charge" \
	test "$(q -c "SELECT result->>'status' FROM payflow.steps WHERE operation_id = '$poll' AND step_name = 'PROCESS_PAYMENT'")" = CHARGED
stop_worker "$WK_PID_mc"

# ---- a cancel that hangs must not stop the heartbeats
node test/fixtures/legacy-mariadb/stall-proxy.mjs "$PROXY_PORT" "$PAYFLOW_MARIADB_PORT" </dev/null >"$WK_DIR/proxy.log" 2>&1 &
PROXY_PID=$!
pf_wait_for 10 grep -q listening "$WK_DIR/proxy.log" || echo "# the proxy did not start"
maria_fault "$p-d-1" slow_owner 22
maria_fault "$p-d-2" slow_owner 22
wk_start_worker md PAYFLOW_LEGACY_ODBC="${MA_ODBC/Port=$PAYFLOW_MARIADB_PORT/Port=$PROXY_PORT}" \
	PAYFLOW_LEGACY_CALL="$MA_CALL" PAYFLOW_LEGACY_LOOKUP= PAYFLOW_LEGACY_TIMEOUT=2 PAYFLOW_LEGACY_CONNECT_TIMEOUT=2 \
	PAYFLOW_CONCURRENCY=2
hung1=$(wk_submit "$p-d-1")
hung2=$(wk_submit "$p-d-2")
both_running() {
	[ "$(maria "SELECT count(*) FROM call_log WHERE payment_id IN ('$p-d-1', '$p-d-2') AND ended_at IS NULL")" = 2 ]
}
pf_ok "hung cancel: both calls running" pf_wait_for 20 both_running
kill -USR1 "$PROXY_PID"
hung_at=$SECONDS
# the calls' own time-outs (2 s) and the watchdog (2 + 2 + 5 s) cancel them, and every cancel hangs
sleep 18
leased() {
	q -c "SELECT count(*) FROM payflow.steps WHERE operation_id IN ('$hung1', '$hung2') AND step_name = 'PROCESS_PAYMENT'
		  AND lease_owner = 'md-$WK_RUN' AND lease_expires_at > now() + interval '1 second'"
}
pf_eq "hung cancel: $((SECONDS - hung_at)) s later both steps are still leased (heartbeats went on)" 2 "$(leased)"
pf_ok "hung cancel: the proxy holds the cancels' connections" grep -q 'stalled a connection' "$WK_DIR/proxy.log"
kill -USR2 "$PROXY_PID"
pf_ok "hung cancel: both PAYMENT_COMPLETED" both_reach "$hung1" "$hung2" PAYMENT_COMPLETED 30
pf_eq "hung cancel: one attempt and one call each, never redelivered" "1 1 1 1" \
	"$(wk_attempts "$hung1") $(wk_attempts "$hung2") $(maria_calls "$p-d-1") $(maria_calls "$p-d-2")"
pf_ok "hung cancel: no lease was lost" bash -c "! grep -q 'lease lost' '$WK_DIR/md.log'"
stop_worker "$WK_PID_md"

# ---- SQLite
SQ_ODBC=$(test/fixtures/legacy-sqlite/setup.sh "$WK_DIR/legacy.db")
sq() { sqlite3 "$WK_DIR/legacy.db" "$1"; }
SQ_INSERT='INSERT INTO charges (idempotency_key, payment_id, amount, currency)
	VALUES (:idempotency_key, :payment_id, :details.amount, :details.currency) RETURNING charge_id, amount'
rc=0
env PAYFLOW_WORKER_ID="sr-$WK_RUN" PAYFLOW_LEGACY_ODBC="$SQ_ODBC" PAYFLOW_LEGACY_CALL="$SQ_INSERT" PAYFLOW_LEGACY_LOOKUP= \
	timeout 20 workers/bin/payflow-worker --role payment >"$WK_DIR/sr.log" 2>&1 || rc=$?
pf_eq "SQLite: INSERT … RETURNING without a look-up is refused at start-up (exit 2)" 2 "$rc"
pf_ok "SQLite: ... naming the setting and why" grep -q 'invalid PAYFLOW_LEGACY_CALL: it returns no result set' "$WK_DIR/sr.log"
wk_start_worker s1 PAYFLOW_LEGACY_ODBC="$SQ_ODBC" PAYFLOW_LEGACY_CALL="$SQ_INSERT" PAYFLOW_CONCURRENCY=2 \
	PAYFLOW_LEGACY_LOOKUP='SELECT charge_id, amount, currency FROM charges WHERE idempotency_key = :idempotency_key'
sq1=$(wk_submit "$p-s-1" '{"amount": 12.50, "currency": "EUR"}')
sq2=$(wk_submit "$p-s-2" '{"amount": 3.10, "currency": "EUR"}')
pf_ok "SQLite: PAYMENT_COMPLETED (no row from the INSERT, the look-up found the charge)" \
	both_reach "$sq1" "$sq2" PAYMENT_COMPLETED 20
pf_eq "SQLite: attempt 1, the charge's id and exact amount as the result, one charge each" \
	"1|ch_000001|12.50|1 1|ch_000002|3.10|1" \
	"$(for op in "$sq1" "$sq2"; do
		printf '%s|%s|%s ' "$(wk_attempts "$op")" \
			"$(q -c "SELECT (result->>'charge_id') || '|' || (result->>'amount') FROM payflow.steps WHERE operation_id = '$op' AND step_name = 'PROCESS_PAYMENT'")" \
			"$(sq "SELECT count(*) FROM charges WHERE payment_id = '$(wk_payment_of "$op")'")"
	done | sed 's/ $//')"
stop_worker "$WK_PID_s1"

# ---- the ODBC layer through both drivers
make -s -C workers build/tests/test_worker_odbc >/dev/null
for dialect in mariadb sqlite; do
	conn=$MA_ODBC
	[ "$dialect" = sqlite ] && conn=$SQ_ODBC
	odbc_rc=0
	PAYFLOW_TEST_ODBC_DIALECT=$dialect PAYFLOW_LEGACY_ODBC=$conn workers/build/tests/test_worker_odbc \
		>"$WK_DIR/test_worker_odbc-$dialect.log" 2>&1 || odbc_rc=$?
	pf_eq "ODBC layer through the $dialect driver ($(grep 'passed' "$WK_DIR/test_worker_odbc-$dialect.log" | tail -n 1))" 0 "$odbc_rc"
done

pf_eq "MariaDB: no key charged twice" "" "$(maria "SELECT idempotency_key FROM charges GROUP BY idempotency_key HAVING count(*) > 1")"
pf_done
