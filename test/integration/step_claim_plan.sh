#!/bin/bash
# A worker's claim_steps keeps an index-probe plan whatever the statistics
# of payflow.operations say.  A worker's session caches the claim's plan
# (a generic one, made at its first call).  After a quiet hour ANALYZE has
# seen every operation ended, so operations_open_idx looks empty; when a
# backlog builds, a plan made then once read that index whole at every
# claim, matching each operation in flight against the batch's ten ids:
# every claim cost grew with the backlog (25.8 ms a batch of ten with
# 20,000 open, against 0.9; test/bench/claim_backlog.sql).
#
# Reproduced in one session, as a worker has it: ANALYZE with every
# operation ended, three claims (the plan is made), a backlog of 3,000
# submitted from another session, then 20 claims of ten at random, their
# plans printed by auto_explain.  Checked: every read of operations is a
# probe of the batch's ids (an Index Cond on id), no scan returns more
# rows than a batch holds, no plan has a sequential scan, the step_results
# and payloads partitions of three past days are pruned as the plan
# starts, and each claim claimed its ten.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib/cluster.sh
source test/lib/assert.sh

db=pf_step_claim_plan
work=$(mktemp -d)
cleanup() {
	rm -rf "$work"
	pf_scratch_db_drop "$db"
}
trap cleanup EXIT
pf_scratch_db "$db"
pf_psql -d "$db" -qc "SELECT payflow.purge()" >/dev/null
# Days kept: the partitions of three past days (two to four days back, so
# that a midnight during the test changes nothing), which a claim of
# today's operations must prune as its plan starts.
pf_psql -d "$db" -Atq >/dev/null <<-'SQL'
	SELECT count(payflow._make_day_partition(p.parent, p.key_prefix, current_date - d))
	  FROM payflow._day_partitioned() p, generate_series(2, 4) d;
SQL
past=$(pf_psql -d "$db" -Atqc "SELECT string_agg(t || '_d' || to_char(current_date - d, 'YYYYMMDD'), '|')
								 FROM generate_series(2, 4) d, unnest(ARRAY['step_results', 'payloads']) t")
# The quiet hour: 500 operations, all ended, ANALYZEd; no autovacuum, so no
# ANALYZE comes to the rescue later.
pf_psql -d "$db" -Atq >/dev/null <<-'SQL'
	ALTER TABLE payflow.operations SET (autovacuum_enabled = false);
	SELECT count(payflow.submit('old-' || i, '{"amount": 1}')) FROM generate_series(1, 500) i;
	UPDATE payflow.operations SET status = 'CANCELLED', terminal_at = now();
	ANALYZE payflow.operations;
	SELECT count(payflow.submit('early-' || i, '{"amount": 1}')) FROM generate_series(1, 30) i;
SQL
pf_eq "ANALYZE saw no operation open" 0 \
	"$(pf_psql -d "$db" -Atqc "SELECT round(s.null_frac * c.reltuples)::int FROM pg_stats s JOIN pg_class c ON c.oid = 'payflow.operations'::regclass
								WHERE s.schemaname = 'payflow' AND s.tablename = 'operations' AND s.attname = 'terminal_at'")"

backlog="SELECT count(payflow.submit('pay-' || i, jsonb_build_object('amount', i))) FROM generate_series(1, 3000) i"
pf_psql -d "$db" -Atq >"$work/claims.txt" 2>"$work/plans.txt" <<-SQL
	LOAD 'auto_explain';
	SET auto_explain.log_min_duration = 0;
	SET auto_explain.log_nested_statements = on;
	SET auto_explain.log_level = notice;
	SET client_min_messages = notice;
	SET auto_explain.log_analyze = off;
	SELECT count(*) FROM payflow.claim_steps('PROCESS_PAYMENT', 'plan-worker',
		ARRAY(SELECT id FROM payflow.operations WHERE payment_id = 'early-1'), 300) \g /dev/null
	SELECT count(*) FROM payflow.claim_steps('PROCESS_PAYMENT', 'plan-worker',
		ARRAY(SELECT id FROM payflow.operations WHERE payment_id LIKE 'early-1_'), 300) \g /dev/null
	SELECT count(*) FROM payflow.claim_steps('PROCESS_PAYMENT', 'plan-worker',
		ARRAY(SELECT id FROM payflow.operations WHERE payment_id LIKE 'early-2_'), 300) \g /dev/null
	\! psql -d $db -Atqc "$backlog" >/dev/null
	SET auto_explain.log_analyze = on;
	CREATE TEMP TABLE batches AS
		SELECT n / 10 AS batch, array_agg(id) AS ids
		  FROM (SELECT id, row_number() OVER (ORDER BY random()) - 1 AS n
				  FROM payflow.operations WHERE payment_id LIKE 'pay-%') x
		 WHERE n < 200 GROUP BY n / 10;
	CREATE TEMP TABLE claimed (batch integer, n integer);
	DO \$\$
	DECLARE
		b record;
	BEGIN
		FOR b IN SELECT * FROM batches ORDER BY batch LOOP
			INSERT INTO claimed
			SELECT b.batch, count(*) FROM payflow.claim_steps('PROCESS_PAYMENT', 'plan-worker', b.ids, 300) c
			 WHERE c.error IS NULL AND c.answer ->> 'action' = 'run';
		END LOOP;
	END
	\$\$;
	SELECT count(*) || '|' || sum(n) || '|' || min(n) FROM claimed;
	SELECT count(*) FROM payflow.operations WHERE payment_id LIKE 'pay-%' AND step_status = 'RUNNING';
SQL

# The plans of the claim statement inside claim_steps (_claim_fast), made
# in this session before the backlog, used on it.
# (each NOTICE is one statement's plan; keep the claim statement's)
awk '/NOTICE:/ { keep = 0; check = 0 }
	/Query Text: WITH i AS MATERIALIZED/ { query = $0; check = 1; next }
	check { check = 0; if ($0 ~ /x\.id, min\(x\.n\)/) { keep = 1; print query } }
	keep' \
	"$work/plans.txt" >"$work/claim_plans.txt"
plans=$(grep -c 'Query Text: WITH i AS MATERIALIZED' "$work/claim_plans.txt" || true)
pf_ok "auto_explain printed the claim's plans ($plans)" test "$plans" -ge 20
reads=$(grep -cE 'Scan using operations_[a-z_]+ on operations o ' "$work/claim_plans.txt" || true)
pf_ok "the claim reads operations in its plans ($reads)" test "$reads" -ge 20
pf_eq "each read of operations is a probe of the batch's ids" "$reads" \
	"$(grep -A1 -E 'Scan using operations_[a-z_]+ on operations o ' "$work/claim_plans.txt" | grep -c 'Index Cond: (id = ' || true)"
pf_eq "no read of operations returns more rows than a batch holds" "" \
	"$(grep -E 'Scan using operations_[a-z_]+ on operations o ' "$work/claim_plans.txt" |
		grep -oE 'actual time=[0-9.]+\.\.[0-9.]+ rows=[0-9]+' | awk -F'rows=' '$2 > 10')"
pf_eq "no claim plan has a sequential scan" 0 "$(grep -c 'Seq Scan' "$work/claim_plans.txt" || true)"
pf_eq "no claim plan sets up a scan of a past day's step_results or payloads" 0 \
	"$(grep -cE "on ($past) " "$work/claim_plans.txt" || true)"
pf_ok "the claim plans prune the other days' partitions as they start" \
	grep -q 'Subplans Removed' "$work/claim_plans.txt"

mapfile -t answers <"$work/claims.txt"
pf_eq "20 claims of ten claimed their 200 operations, ten each" "20|200|10" "${answers[0]:-}"
pf_eq "the 200 are running" 200 "${answers[1]:-}"
if [ "$PF_FAILURES" -gt 0 ]; then
	echo "--- the claim plans"
	head -n 80 "$work/claim_plans.txt"
fi
pf_done
