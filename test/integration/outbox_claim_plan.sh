#!/bin/bash
# The relay's outbox_claim keeps an index-probe plan whatever the outbox's
# statistics say.  A relay's session caches the claim's plan; after a quiet
# night the outbox is empty and VACUUM has truncated it (0 pages, 0 rows),
# so the plan is made for an empty table, then used on the backlog of the
# morning.  Such a plan once answered the group-head probe by walking
# outbox_seq_idx from its start for every candidate: quadratic in the
# backlog (the step-engine bench's round after VACUUM ran at 0.65x).
#
# Reproduced here in one session, as a relay has it: VACUUM of the empty
# outbox, eight claims on it (PL/pgSQL keeps a generic plan after five),
# a backlog submitted from another session, then the claims that drain it,
# their plans printed by auto_explain.  Checked: the scan uses
# outbox_seq_idx, the group-head probe outbox_group_idx, no plan has a
# sequential scan or a sort, and the drain hands out every event once, in
# seq order, one per message group per claim.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib/cluster.sh
source test/lib/assert.sh

db=pf_claim_plan
work=$(mktemp -d)
cleanup() {
	rm -rf "$work"
	pf_scratch_db_drop "$db"
}
trap cleanup EXIT
pf_scratch_db "$db"
# Yesterday's traffic: 2,000 events through the outbox, so that its indexes
# have grown (the group index, wider, more than the seq index: that is what
# made the probe of the seq index look cheaper), then drained, ANALYZEd and
# VACUUMed empty.  No autovacuum, so no ANALYZE comes to the rescue later.
pf_psql -d "$db" -qc "ALTER TABLE payflow.outbox SET (autovacuum_enabled = false)" >/dev/null
pf_psql -d "$db" -Atq >/dev/null <<-'SQL'
	SELECT count(payflow.submit('old-' || i, '{"amount": 1}')) FROM generate_series(1, 2000) i;
	ANALYZE payflow.outbox;
	DO $$
	DECLARE
		v_ids uuid[];
	BEGIN
		LOOP
			SELECT array_agg(c.event_id) INTO v_ids FROM payflow.outbox_claim(100, 'old-relay') c;
			EXIT WHEN v_ids IS NULL;
			PERFORM payflow.outbox_ack(v_ids, NULL, 'old-relay');
		END LOOP;
	END
	$$;
SQL
# VACUUM truncates the empty outbox once no snapshot in the cluster can
# still see its dead rows: a test in another lane of make check may hold
# one for a moment (a standby's feedback, a long statement), so it is tried
# again until it has (seen in CI: 667 pages left by the first try).
outbox_truncated() {
	pf_psql -d "$db" -Atqc "VACUUM payflow.outbox" >/dev/null
	[ "$(pf_psql -d "$db" -Atqc "SELECT relpages || ' ' || greatest(reltuples, 0)::int FROM pg_class
								  WHERE oid = 'payflow.outbox'::regclass")" = "0 0" ]
}
pf_wait_for 60 outbox_truncated || true
pf_eq "the outbox is empty and truncated" "0 0" \
	"$(pf_psql -d "$db" -Atqc "SELECT relpages || ' ' || greatest(reltuples, 0)::int FROM pg_class WHERE oid = 'payflow.outbox'::regclass")"

# 300 operations of 100 payments: three events per message group, so that
# the group-head probe has later events of the group to skip.
backlog="SELECT count(payflow.submit('pay-' || (i % 100), jsonb_build_object('amount', i), 'key-' || i)) FROM generate_series(1, 300) i"
pf_psql -d "$db" -Atq >"$work/claims.txt" 2>"$work/plans.txt" <<-SQL
	LOAD 'auto_explain';
	SET auto_explain.log_min_duration = 0;
	SET auto_explain.log_nested_statements = on;
	SET auto_explain.log_level = notice;
	SET client_min_messages = notice;
	SET auto_explain.log_analyze = off;
	SELECT count(*) FROM payflow.outbox_claim(100, 'plan-relay') \g /dev/null
	SELECT count(*) FROM payflow.outbox_claim(100, 'plan-relay') \g /dev/null
	SELECT count(*) FROM payflow.outbox_claim(100, 'plan-relay') \g /dev/null
	SELECT count(*) FROM payflow.outbox_claim(100, 'plan-relay') \g /dev/null
	SELECT count(*) FROM payflow.outbox_claim(100, 'plan-relay') \g /dev/null
	SELECT count(*) FROM payflow.outbox_claim(100, 'plan-relay') \g /dev/null
	SELECT count(*) FROM payflow.outbox_claim(100, 'plan-relay') \g /dev/null
	SELECT count(*) FROM payflow.outbox_claim(100, 'plan-relay') \g /dev/null
	\! psql -d $db -Atqc "$backlog" >/dev/null
	SET auto_explain.log_analyze = on;
	SET auto_explain.log_buffers = on;
	CREATE TEMP TABLE claimed (round integer, seq bigint, message_group_id text);
	DO \$\$
	DECLARE
		v_round integer := 0;
		v_ids uuid[];
	BEGIN
		LOOP
			v_round := v_round + 1;
			WITH c AS (SELECT * FROM payflow.outbox_claim(100, 'plan-relay'))
			INSERT INTO claimed SELECT v_round, o.seq, c.message_group_id
			  FROM c JOIN payflow.outbox o USING (event_id);
			SELECT array_agg(o.event_id) INTO v_ids FROM payflow.outbox o WHERE o.claimed_by = 'plan-relay';
			EXIT WHEN v_ids IS NULL OR v_round > 20;
			PERFORM payflow.outbox_ack(v_ids, NULL, 'plan-relay');
		END LOOP;
	END
	\$\$;
	SELECT count(*), count(DISTINCT seq), max(round) FROM claimed;
	SELECT count(*) FROM (SELECT round, message_group_id FROM claimed GROUP BY 1, 2 HAVING count(*) > 1) x;
	SELECT count(*) FROM (SELECT seq, lag(seq) OVER (ORDER BY round, seq) AS prev, round, lag(round) OVER (ORDER BY round, seq) AS prev_round FROM claimed) x
	 WHERE x.round = x.prev_round AND x.seq < x.prev;
	SELECT count(*) FROM payflow.outbox;
SQL

# The plans of the claim statement inside outbox_claim: made in this
# session while the outbox was empty, then used on the backlog.
# (each NOTICE is one statement's plan; keep the claim statement's)
awk '/NOTICE:/ { keep = 0 } /Query Text: WITH candidates AS/ { keep = 1 } keep' "$work/plans.txt" >"$work/claim_plans.txt"
plans=$(grep -c 'Query Text: WITH candidates AS' "$work/claim_plans.txt" || true)
pf_ok "auto_explain printed the claim's plans ($plans)" test "$plans" -ge 10
pf_ok "the claim scans outbox_seq_idx" grep -q 'Index Scan using outbox_seq_idx on outbox c' "$work/claim_plans.txt"
pf_eq "the group-head probe never walks outbox_seq_idx" 0 \
	"$(grep -c 'using outbox_seq_idx on outbox e' "$work/claim_plans.txt" || true)"
pf_eq "the group-head probe is an outbox_group_idx probe in every plan" "$plans" \
	"$(grep -cE 'Index (Only )?Scan using outbox_group_idx on outbox e' "$work/claim_plans.txt" || true)"
pf_eq "no claim plan has a sequential scan or a sort" 0 \
	"$(grep -cE 'Seq Scan|Sort' "$work/claim_plans.txt" || true)"

mapfile -t answers <"$work/claims.txt"
pf_eq "the drain handed out each of the 300 events once, in 3 claims" "300|300|3" "${answers[0]:-}"
pf_eq "no claim handed out two events of one message group" 0 "${answers[1]:-}"
pf_eq "each claim handed out its events in seq order" 0 "${answers[2]:-}"
pf_eq "the outbox is empty after the drain" 0 "${answers[3]:-}"
if [ "$PF_FAILURES" -gt 0 ]; then
	echo "--- the claim plans"
	head -n 80 "$work/claim_plans.txt"
fi
pf_done
