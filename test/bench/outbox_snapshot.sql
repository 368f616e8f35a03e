-- test/bench/step_engine.sh's driver for the relay's claim while another
-- session holds a snapshot open (a report, pg_dump): :n operations are
-- submitted and drained twice, 10 events a claim as a relay with a trickle
-- claims, and the second drain is timed.  With :held the bench holds a
-- REPEATABLE READ snapshot in another session meanwhile, so the acked rows
-- can be neither pruned nor marked dead in the index: a claim that starts
-- at the front of the outbox fetches every one of them again.  Prints the
-- second drain's milliseconds (wall clock; this backend is the only one
-- working).
\ir submit_loop.sql
\ir relay_drain.sql

CALL pg_temp.bench_submit(:'run' || '-a', :n);
CALL pg_temp.bench_relay_drain(10);
CALL pg_temp.bench_submit(:'run' || '-b', :n);
SELECT clock_timestamp() AS t0 \gset
CALL pg_temp.bench_relay_drain(10);
SELECT round(extract(epoch FROM clock_timestamp() - :'t0'::timestamptz) * 1000, 1);
