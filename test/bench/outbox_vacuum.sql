-- test/bench/outbox_vacuum.sh's driver, in one session (the relay's: its
-- outbox_claim plan is cached for the session).  With :after_vacuum the
-- outbox is emptied and VACUUMed (truncated: its statistics say 0 pages)
-- and claimed from several times, so that the plan is made for an empty
-- table, as a relay's is after a quiet night; else the table is ANALYZEd
-- full first.
-- Then :n operations are submitted (one PaymentRequested each) and the
-- outbox drained 100 events a claim.  Prints the drain's milliseconds
-- (wall clock: finer than the CPU's 10 ms ticks; this backend is the only
-- one working).
\ir submit_loop.sql
\ir relay_drain.sql

CALL pg_temp.bench_relay_drain();
VACUUM payflow.outbox;
\if :after_vacuum
-- an idle relay polls the empty outbox: after five claims PL/pgSQL keeps a
-- generic plan, made for that empty table
CALL pg_temp.bench_relay_drain(); CALL pg_temp.bench_relay_drain(); CALL pg_temp.bench_relay_drain(); CALL pg_temp.bench_relay_drain();
CALL pg_temp.bench_relay_drain(); CALL pg_temp.bench_relay_drain(); CALL pg_temp.bench_relay_drain(); CALL pg_temp.bench_relay_drain();
CALL pg_temp.bench_submit(:'run', :n);
\else
CALL pg_temp.bench_submit(:'run', :n);
ANALYZE payflow.outbox;
\endif
SELECT clock_timestamp() AS t0 \gset
CALL pg_temp.bench_relay_drain();
SELECT round(extract(epoch FROM clock_timestamp() - :'t0'::timestamptz) * 1000, 1);
