#!/bin/bash
# The outbox's work list is UNLOGGED (storage v2): a crash of PostgreSQL
# empties it, and the first claim after the restart builds it again from
# the durable log (payflow._outbox_rebuild).  Checked here with a real
# crash: a backend killed with SIGKILL makes the postmaster reset every
# unlogged table.  Before the crash: events published (acked), one
# dead-lettered, some claimed and never acked, some nacked, some never
# touched, and the durable position moved past the published ones.  After
# it: the outbox is empty until a claim; the claims then hand out exactly
# the events that were neither published nor dead-lettered, each once; the
# published log is intact; and new events take seqs after the old ones
# (the sequence is logged, not reset with the table).
#
# A throwaway cluster of its own (port PF_PGPORT + 1500): the crash would
# otherwise reset the shared cluster under the tests running beside it.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib/cluster.sh
source test/lib/assert.sh

port=$((PF_PGPORT + 1500))
dir=/tmp/payflow-rebuild-$port
work=$(mktemp -d)
sleeper=

in_cluster() {
	(
		export PF_PGPORT=$port PF_CLUSTER_DIR=$dir
		# shellcheck source=../lib/cluster.sh
		source test/lib/cluster.sh
		"$@"
	)
}
q() { in_cluster pf_psql -Atq "$@"; }
cleanup() {
	if [ -n "$sleeper" ]; then kill "$sleeper" 2>/dev/null || true; fi
	in_cluster pf_cluster_destroy >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
in_cluster pf_cluster_destroy >/dev/null 2>&1 || true
in_cluster pf_cluster_start

# 40 payments: 40 PaymentRequested events, one message group each
q -c "SELECT count(payflow.submit('rb-' || i, '{\"amount\": 1}')) FROM generate_series(1, 40) i" >/dev/null
# the 15 oldest published
pf_eq "15 events published" 15 \
	"$(q -c "SELECT payflow.outbox_ack(array_agg(event_id), array_agg('msg-' || event_id), 'r-acked')
			 FROM payflow.outbox_claim(15, 'r-acked')")"
# the next one refused for good: a dead letter (its operation fails, which
# writes an OperationFailed event, waiting like the others)
pf_eq "one event dead-lettered" t \
	"$(q -c "SELECT payflow.outbox_dead_letter(event_id, 'InvalidMessageContents: test', 'r-dead')
			 FROM payflow.outbox_claim(1, 'r-dead')")"
# ten claimed by a relay that never acks, five nacked
q -c "SELECT count(*) FROM payflow.outbox_claim(10, 'r-lost')" >/dev/null
q -c "SELECT count(payflow.outbox_nack(event_id, 'ServiceUnavailable: later', 'r-nack'))
	  FROM payflow.outbox_claim(5, 'r-nack')" >/dev/null
# The durable position moves at most once a second, with the cursor.
q -c "SELECT payflow._outbox_cursor_move()" >/dev/null
sleep 1.2
q -c "SELECT payflow._outbox_cursor_move()" >/dev/null
sleep 0.2
q -c "SELECT payflow._outbox_cursor_move()" >/dev/null
pf_eq "the durable position is past the published and dead-lettered events" t \
	"$(q -c "SELECT done_below > (SELECT min(seq) FROM payflow.outbox_events)
				AND done_below <= (SELECT min(seq) FROM payflow.outbox)
			   FROM payflow.outbox_position")"
q -c "SELECT event_id || ' ' || md5(body::text) FROM payflow.outbox ORDER BY 1" >"$work/pending-before"
max_seq_before=$(q -c "SELECT max(seq) FROM payflow.outbox_events")
published_before=$(q -c "SELECT count(*) FROM payflow.outbox_published")
# (the requests' bodies rendered from the operations' rows, the failure's
# kept without its envelope: the rebuild below must give both back whole)
pf_eq "the log keeps no body of the requests, the failure's without its envelope" t \
	"$(q -c "SELECT bool_and(CASE WHEN rendered IS NOT NULL THEN body IS NULL
								  ELSE enveloped AND NOT body ? 'eventId' END)
				AND bool_or(rendered IS NOT NULL) AND bool_or(rendered IS NULL)
			   FROM payflow.outbox_events")"
pf_eq "before the crash: 25 events waiting (24 requests and the failure)" 25 "$(wc -l <"$work/pending-before")"

# The crash: SIGKILL to a backend; the postmaster ends every session and
# recovers, resetting the unlogged tables.
q -c "SELECT pg_sleep(60)" >/dev/null 2>&1 &
sleeper=$!
sleeper_pid() {
	q -c "SELECT pid FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(60)%' AND pid <> pg_backend_pid()"
}
sleeper_running() { [ -n "$(sleeper_pid)" ]; }
pf_ok "a session to kill is running" pf_wait_for 30 sleeper_running
kill -9 "$(sleeper_pid)"
# the postmaster saw it die and reset the cluster; then it accepts
# connections again (refused while it recovers)
crashed() { grep -q "terminated by signal 9" "$dir/postgres.log"; }
pf_ok "PostgreSQL noticed the crash" pf_wait_for 30 crashed
accepting() { q -o /dev/null -c "SELECT 1" 2>/dev/null; }
pf_ok "PostgreSQL recovered from the crash" pf_wait_for 60 accepting
pf_eq "the crash emptied the unlogged outbox" 0 "$(q -c "SELECT count(*) FROM payflow.outbox")"
pf_eq "the log and the published batches are intact" "$published_before" \
	"$(q -c "SELECT count(*) FROM payflow.outbox_published")"

# Claims after the restart: each waiting event once, nothing else.
q -c "DO \$\$
	DECLARE
		v_ids uuid[];
	BEGIN
		CREATE TABLE public.claimed (event_id uuid, body text);
		LOOP
			WITH c AS (SELECT c.event_id, c.body FROM payflow.outbox_claim(7, 'r-after') c),
				 kept AS (INSERT INTO public.claimed SELECT c.event_id, c.body FROM c)
			SELECT array_agg(c.event_id) INTO v_ids FROM c;
			EXIT WHEN v_ids IS NULL;
			PERFORM payflow.outbox_ack(v_ids, NULL, 'r-after');
		END LOOP;
	END
	\$\$" >/dev/null
q -c "SELECT event_id || ' ' || md5(body) FROM public.claimed ORDER BY 1" >"$work/claimed-after"
pf_ok "the claims after the crash handed out exactly the events that were waiting, bodies unchanged" \
	cmp -s "$work/pending-before" "$work/claimed-after"
pf_eq "... each once" 0 "$(q -c "SELECT count(*) FROM (SELECT event_id FROM public.claimed GROUP BY 1 HAVING count(*) > 1) x")"
# (acks before the crash carried message ids, those after it none)
pf_eq "... and none published before it" 0 \
	"$(q -c "SELECT count(*) FROM public.claimed c JOIN payflow.outbox_published p USING (event_id)
			  WHERE p.message_id IS NOT NULL")"
pf_ok "the rebuild was logged" grep -q "outbox rebuilt from its log after a restart: 25 events" "$dir/postgres.log"

# New events go on after the old seqs.
q -c "SELECT payflow.submit('rb-after', '{\"amount\": 1}')" >/dev/null
pf_eq "a new event's seq follows the log's" t \
	"$(q -c "SELECT min(seq) > $max_seq_before FROM payflow.outbox_events e
			  JOIN payflow.operations o ON o.id = e.operation_id WHERE o.payment_id = 'rb-after'")"
pf_eq "... and it is in the work list" 1 \
	"$(q -c "SELECT count(*) FROM payflow.outbox o JOIN payflow.operations p ON p.id = o.operation_id
			  WHERE p.payment_id = 'rb-after'")"
pf_done
