CREATE PROCEDURE payflow.run_scheduler_for(seconds integer DEFAULT 58)
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_until timestamptz;
	v_naptime float8;
BEGIN
	IF seconds IS NULL OR seconds < 1 OR seconds > 3600 THEN
		RAISE EXCEPTION 'seconds must be between 1 and 3600' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	v_until := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => seconds);
	LOOP
		PERFORM payflow.run_scheduler();
		COMMIT;
		v_naptime := payflow._setting('scheduler_naptime')::float8 OPERATOR(pg_catalog./) 1000;
		EXIT WHEN pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => v_naptime)
				  OPERATOR(pg_catalog.>) v_until;
		PERFORM pg_catalog.pg_sleep(v_naptime);
	END LOOP;
END
$$;
