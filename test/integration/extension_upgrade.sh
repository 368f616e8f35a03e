#!/bin/bash
# ALTER EXTENSION payflow UPDATE from every released version gives exactly
# the schema of a fresh install of the current one (functions, tables,
# columns, indexes, constraints, policies, privileges, extension
# membership, comments), and data written before the update stays usable.
#
# Released versions are named by commit in extension/released-versions:
# each one's full install script is built from that commit's tree
# (test/lib/released.sh). A clone without history (a shallow one) cannot do
# that: those versions are SKIPped, by name.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib/cluster.sh
source test/lib/assert.sh
source test/lib/released.sh

current=$(sed -n "s/^default_version = '\(.*\)'/\1/p" extension/payflow.control)
work=$(mktemp -d)
extdir="$("${PG_CONFIG:-pg_config}" --sharedir)/extension"
cleanup() {
	pf_released_cleanup
	rm -rf "$work"
	pf_psql -d postgres -qc "DROP DATABASE IF EXISTS pf_upgrade_old" -c "DROP DATABASE IF EXISTS pf_upgrade_new" >/dev/null 2>&1 || true
}
trap cleanup EXIT

export PGOPTIONS="-c client_min_messages=warning"
fresh_db() {
	pf_psql -d postgres -qc "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1" >/dev/null
}

fresh_db pf_upgrade_new
pf_psql -d pf_upgrade_new -qc "CREATE EXTENSION payflow" >/dev/null
pf_psql -d pf_upgrade_new -Atqf test/sql/schema_fingerprint.sql >"$work/new.txt"
pf_ok "the fingerprint of a fresh install is not empty" test "$(wc -l <"$work/new.txt")" -gt 100

# Every released version: both ends of each update script but the current one.
released=$(for script in extension/sql/payflow--*--*.sql; do
	v=$(basename "$script" .sql)
	v=${v#payflow--}
	echo "${v%%--*}"
	echo "${v##*--}"
done | sort -uV | grep -vx "$current")
pf_ok "there are released versions to update from" test -n "$released"
# the statuses of an operation from submit to COMPLETED, as history() shows them
chain=PENDING,PAYMENT_PROCESSING,PAYMENT_COMPLETED,POST_PROCESSING,INVOICE_PENDING,COMPLETED
for from in $released; do
	if ! pf_released_install "$from" "$work" 2>"$work/why"; then
		pf_skip "$from -> $current" "$(head -c 300 "$work/why" | tr '\n' ' ')"
		continue
	fi
	pf_ok "$from: its full install script was built from its released commit" test -s "$extdir/payflow--$from.sql"
	fresh_db pf_upgrade_old
	pf_psql -d pf_upgrade_old -qc "CREATE EXTENSION payflow VERSION '$from'" >/dev/null
	op=$(pf_psql -d pf_upgrade_old -Atqc "SELECT payflow.submit('upgrade-1', '{\"amount\": 1}')")
	# The outbox in the old version's tables: four more events, two
	# claimed by a relay, one of them acked (published).
	pf_psql -d pf_upgrade_old -q >/dev/null <<-'SQL'
		DO $$
		DECLARE
			v_ids uuid[];
		BEGIN
			PERFORM payflow.submit('upgrade-e' || i, '{"amount": 1}') FROM generate_series(1, 4) i;
			SELECT array_agg(c.event_id) INTO v_ids FROM payflow.outbox_claim(2, 'relay-up') c;
			IF to_regprocedure('payflow.outbox_ack(uuid[],text[],text)') IS NOT NULL THEN
				EXECUTE 'SELECT payflow.outbox_ack($1, $2, $3)' USING v_ids[1:1], ARRAY['msg-up-1'], 'relay-up';
			ELSE
				EXECUTE 'SELECT payflow.outbox_ack($1, $2)' USING v_ids[1:1], ARRAY['msg-up-1'];
			END IF;
		END
		$$;
	SQL
	# Operations in flight at each kind of step state, on the old engine:
	# a step running, one done with the next one waiting, a retry waiting.
	pf_psql -d pf_upgrade_old -Atq >/dev/null <<-'SQL'
		SELECT payflow.claim_step(payflow.submit('upgrade-run', '{"amount": 2}'), 'PROCESS_PAYMENT', 'w-old');
		SELECT payflow.claim_step(payflow.submit('upgrade-mid', '{"amount": 3}'), 'PROCESS_PAYMENT', 'w-old');
		SELECT payflow.complete_step(id, 'PROCESS_PAYMENT', 'w-old', '{"charge_id": "ch-mid"}')
		  FROM payflow.operations WHERE payment_id = 'upgrade-mid';
		SELECT payflow.claim_step(payflow.submit('upgrade-retry', '{"amount": 4}'), 'PROCESS_PAYMENT', 'w-old');
		SELECT payflow.fail_step(id, 'PROCESS_PAYMENT', 'w-old', '{"code": "busy", "message": "try later"}', true)
		  FROM payflow.operations WHERE payment_id = 'upgrade-retry';
	SQL
	in_flight() {
		pf_psql -d pf_upgrade_old -Atqc "SELECT o.payment_id, o.status, s.step_name, s.status, s.attempt, s.lease_owner,
													s.input_ref::text, s.result_ref::text, s.last_error::text,
													s.next_attempt_at IS NOT NULL,
													(SELECT count(*) FROM payflow.operation_history h WHERE h.operation_id = o.id)
											   FROM payflow.operations o JOIN payflow.steps s ON s.operation_id = o.id
											  WHERE o.payment_id LIKE 'upgrade-%' AND o.payment_id <> 'upgrade-1'
											  ORDER BY 1, 3"
	}
	in_flight >"$work/in-flight-before"
	mid_event=$(pf_psql -d pf_upgrade_old -Atqc "SELECT payflow.complete_step(id, 'PROCESS_PAYMENT', 'w-old', '{\"charge_id\": \"ch-mid\"}') ->> 'eventId'
												  FROM payflow.operations WHERE payment_id = 'upgrade-mid'")
	# (the outbox checks below are of the events of upgrade-1 and upgrade-e*)
	mine="o.operation_id NOT IN (SELECT id FROM payflow.operations WHERE payment_id IN ('upgrade-run', 'upgrade-mid', 'upgrade-retry'))"
	pf_psql -d pf_upgrade_old -Atqc "SELECT event_id FROM payflow.outbox o WHERE $mine ORDER BY 1" >"$work/waiting-before"
	published_id=$(pf_psql -d pf_upgrade_old -Atqc "SELECT event_id FROM payflow.outbox_published WHERE message_id = 'msg-up-1'")
	last_id_before=$(pf_psql -d pf_upgrade_old -Atqc "SELECT max(id) FROM payflow.operation_history")
	pf_psql -d pf_upgrade_old -qc "ALTER EXTENSION payflow UPDATE" >/dev/null
	pf_eq "$from: updated to $current" "$current" \
		"$(pf_psql -d pf_upgrade_old -Atqc "SELECT extversion FROM pg_extension WHERE extname = 'payflow'")"
	pf_psql -d pf_upgrade_old -Atqf test/sql/schema_fingerprint.sql >"$work/old.txt"
	if diff -u "$work/new.txt" "$work/old.txt" >"$work/diff.txt"; then
		echo "ok - $from -> $current: same schema as a fresh install"
	else
		echo "not ok - $from -> $current: the schema differs from a fresh install"
		head -n 60 "$work/diff.txt"
		PF_FAILURES=$((PF_FAILURES + 1))
	fi
	pf_eq "$from: before the update, one event published and four waiting" "1 4" \
		"$([ -n "$published_id" ] && echo 1 || echo 0) $(wc -l <"$work/waiting-before")"
	pf_eq "$from: the event published before the update is in the published log, with its message id" \
		"$published_id" \
		"$(pf_psql -d pf_upgrade_old -Atqc "SELECT event_id FROM payflow.outbox_published WHERE message_id = 'msg-up-1'")"
	# the claim made before the update expires (its relay is gone)
	pf_psql -d pf_upgrade_old -Atq -c "UPDATE payflow.outbox SET claim_expires_at = now() - interval '1 second'" \
		-c "SELECT c.event_id FROM payflow.outbox_claim(100, 'relay-after') c
			 WHERE c.event_id IN (SELECT o.event_id FROM payflow.outbox o WHERE $mine) ORDER BY 1" >"$work/claimed-after"
	pf_ok "$from: the events waiting before the update are claimed after it, each once" \
		cmp -s "$work/waiting-before" "$work/claimed-after"
	pf_eq "$from: ... and they are in the log, with their bodies" "$(wc -l <"$work/waiting-before")" \
		"$(pf_psql -d pf_upgrade_old -Atqc "SELECT count(*) FROM payflow.outbox o JOIN payflow.outbox_events e USING (seq)
											  WHERE payflow._outbox_event_body(e) = o.body AND $mine")"
	# (0.5.0 keeps the last error of a step that succeeded only in its attempts)
	in_flight >"$work/in-flight-after"
	pf_ok "$from: its steps in flight read as they did (a running one, one done and one waiting, a retry)" \
		cmp -s "$work/in-flight-before" "$work/in-flight-after"
	pf_eq "$from: ... a repeated completion of the step done answers its first event" "$mid_event" \
		"$(pf_psql -d pf_upgrade_old -Atqc "SELECT payflow.complete_step(id, 'PROCESS_PAYMENT', 'w-old', '{\"charge_id\": \"ch-mid\"}') ->> 'eventId'
										  FROM payflow.operations WHERE payment_id = 'upgrade-mid'")"
	pf_eq "$from: ... and every one of them finishes on the new engine, its history intact" \
		"upgrade-mid|COMPLETED|6 upgrade-retry|COMPLETED|6 upgrade-run|COMPLETED|6" \
		"$(pf_psql -d pf_upgrade_old -Atq >/dev/null <<-'SQL'
			UPDATE payflow.operations SET step_next_attempt_at = now() WHERE payment_id = 'upgrade-retry';
			SELECT payflow.run_scheduler();
			SELECT payflow.claim_step(id, 'PROCESS_PAYMENT', 'w-new') FROM payflow.operations WHERE payment_id = 'upgrade-retry';
			SELECT payflow.complete_step(id, 'PROCESS_PAYMENT', w, '{"charge_id": "ch"}')
			  FROM payflow.operations, LATERAL (SELECT CASE payment_id WHEN 'upgrade-run' THEN 'w-old' ELSE 'w-new' END) x(w)
			 WHERE payment_id IN ('upgrade-run', 'upgrade-retry');
			SELECT payflow.claim_step(id, s, 'w-new'), payflow.complete_step(id, s, 'w-new', '{"ok": true}')
			  FROM payflow.operations, unnest(ARRAY['POST_PROCESS', 'CREATE_INVOICE']) s
			 WHERE payment_id IN ('upgrade-run', 'upgrade-mid', 'upgrade-retry');
		SQL
		pf_psql -d pf_upgrade_old -Atqc "SELECT string_agg(o.payment_id || '|' || o.status || '|' ||
													   (SELECT count(*) FROM payflow.history(o.id)), ' ' ORDER BY o.payment_id)
											  FROM payflow.operations o
											 WHERE o.payment_id IN ('upgrade-run', 'upgrade-mid', 'upgrade-retry')")"
	# 0.5.0 renders most changes (history.sql): each one after the update is
	# numbered above every id before it, so an event stream that resumes
	# with the last id it saw (Last-Event-ID) misses none and repeats none
	pf_eq "$from: ... in order, the changes after the update numbered above every id before it" \
		"7 11 upgrade-mid:$chain upgrade-retry:$chain upgrade-run:$chain" \
		"$(pf_psql -d pf_upgrade_old -Atqc "
			SELECT count(*) FILTER (WHERE h.id <= $last_id_before) || ' ' || count(*) FILTER (WHERE h.id > $last_id_before) || ' ' ||
				   (SELECT string_agg(o.payment_id || ':' || (SELECT string_agg(x.to_status, ',' ORDER BY x.id)
																FROM payflow.operation_history x WHERE x.operation_id = o.id),
									  ' ' ORDER BY o.payment_id)
					  FROM payflow.operations o WHERE o.payment_id IN ('upgrade-run', 'upgrade-mid', 'upgrade-retry'))
			  FROM payflow.operation_history h JOIN payflow.operations o ON o.id = h.operation_id
			 WHERE o.payment_id IN ('upgrade-run', 'upgrade-mid', 'upgrade-retry')")"
	pf_eq "$from: an operation from before the update keeps its status" "PENDING" \
		"$(pf_psql -d pf_upgrade_old -Atqc "SELECT payflow.status('$op') ->> 'status'")"
	pf_eq "$from: ... and is found again by its idempotency key" "$op" \
		"$(pf_psql -d pf_upgrade_old -Atqc "SELECT payflow.submit('upgrade-1', '{\"amount\": 1}')")"
	# (0.5.0 keeps no hash of the request: its reference from before tells it)
	pf_eq "$from: ... and other details under its key are refused (PF002)" "ERROR:  PF002" \
		"$(pf_psql -d pf_upgrade_old -Atq -v VERBOSITY=sqlstate \
			-c "SELECT payflow.submit('upgrade-1', '{\"amount\": 2}')" 2>&1)"
	pf_eq "$from: ... runs on pipeline version 1" "1" \
		"$(pf_psql -d pf_upgrade_old -Atqc "SELECT pipeline_version FROM payflow.operations WHERE id = '$op'")"
	pf_eq "$from: ... and its step runs on the 0.4.0 step functions" "run|PAYMENT_PROCESSING" \
		"$(pf_psql -d pf_upgrade_old -Atq -c "SELECT payflow.claim_step('$op', 'PROCESS_PAYMENT', 'w-up') ->> 'action'" \
			-c "SELECT payflow.status('$op') ->> 'status'" | paste -sd'|')"
done

# The check can fail: a schema change missing from an update is caught.
[ "$(pf_psql -d postgres -Atqc "SELECT count(*) FROM pg_database WHERE datname = 'pf_upgrade_old'")" = 1 ] || {
	fresh_db pf_upgrade_old
	pf_psql -d pf_upgrade_old -qc "CREATE EXTENSION payflow" >/dev/null
}
pf_psql -d pf_upgrade_old -qc "DROP POLICY operations_for_admin ON payflow.operations" >/dev/null
pf_psql -d pf_upgrade_old -Atqf test/sql/schema_fingerprint.sql >"$work/old.txt"
pf_ok "a missing policy makes the fingerprints differ" \
	bash -c "! diff -q '$work/new.txt' '$work/old.txt' >/dev/null"

pf_done
