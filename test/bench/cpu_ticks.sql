-- pg_temp.bench_cpu_ticks(): this backend's CPU (user + system) in clock
-- ticks, from /proc/self/stat.  Included by step_engine.sql and
-- step_limit_claims.sql, whose backend does all the work they measure.
CREATE OR REPLACE FUNCTION pg_temp.bench_cpu_ticks() RETURNS bigint
	LANGUAGE sql
	AS $$
	-- fields 14 and 15 of /proc/self/stat (after the command name in parentheses)
	SELECT f[12]::bigint + f[13]::bigint
	  FROM (SELECT regexp_split_to_array(split_part(pg_read_file('/proc/self/stat'), ') ', 2), ' ') f) s
$$;
