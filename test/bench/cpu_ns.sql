-- pg_temp.bench_cpu_ns(): this backend's CPU time in nanoseconds, the
-- scheduler's own count (/proc/self/schedstat, its first field).  For
-- drivers that time short loops (step_call_cost.sql): /proc/self/stat
-- counts in clock ticks of 10 ms, a call's cost in a loop of a thousand
-- only to 10 us.
CREATE OR REPLACE FUNCTION pg_temp.bench_cpu_ns() RETURNS bigint
	LANGUAGE sql
	AS $$
	SELECT split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint
$$;
