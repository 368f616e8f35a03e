-- test/bench/step_engine.sh's driver for a worker's batch claim with a
-- backlog in flight, in a database of its own: the statistics are what
-- ANALYZE saw before the backlog (every operation of the step-engine rounds
-- ended, none open), as in production after a quiet hour, and autovacuum
-- stays off, so no ANALYZE comes to the rescue.  Then :n operations are
-- submitted and this session (whose claim plan is made now) claims 100
-- batches of ten of them, in random order.  Prints one line: milliseconds
-- per batch claim.
ALTER TABLE payflow.operations SET (autovacuum_enabled = false);
SELECT count(payflow.submit('ended-' || i, '{"amount": 1, "currency": "EUR"}')) FROM generate_series(1, 2000) i \gset
UPDATE payflow.operations SET status = 'CANCELLED', terminal_at = now();
ANALYZE payflow.operations;
SELECT count(payflow.submit('open-' || i, '{"amount": 1, "currency": "EUR"}')) FROM generate_series(1, :n) i \gset
CREATE TEMP TABLE bench_ids AS
	SELECT array_agg(id ORDER BY random()) AS ids FROM payflow.operations WHERE payment_id LIKE 'open-%';
CREATE TEMP TABLE bench_ms (ms numeric);
DO $$
DECLARE
	v_ids text[] := (SELECT ids FROM bench_ids);
	v_start timestamptz := clock_timestamp();
	v_claimed integer := 0;
	v_n integer;
BEGIN
	FOR k IN 0 .. 99 LOOP
		SELECT count(*) INTO v_n
		  FROM payflow.claim_steps('PROCESS_PAYMENT', 'bench-worker', v_ids[k * 10 + 1 : k * 10 + 10], 300) c
		 WHERE c.error IS NULL;
		v_claimed := v_claimed + v_n;
	END LOOP;
	IF v_claimed <> 1000 THEN
		RAISE EXCEPTION 'claimed % of 1000', v_claimed;
	END IF;
	INSERT INTO bench_ms VALUES (extract(epoch FROM clock_timestamp() - v_start) * 1000 / 100);
END
$$;
SELECT round(ms, 3) FROM bench_ms;
