CREATE OR REPLACE PROCEDURE payflow.run_scheduler_for(seconds integer DEFAULT 58)
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_until timestamptz;
	v_naptime float8;
	v_wake timestamptz;
BEGIN
	IF seconds IS NULL OR seconds < 1 OR seconds > 3600 THEN
		RAISE EXCEPTION 'seconds must be between 1 and 3600' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	v_until := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => seconds);
	LOOP
		PERFORM payflow.run_scheduler();
		COMMIT;
		v_naptime := payflow._setting('scheduler_naptime')::float8 OPERATOR(pg_catalog./) 1000;
		v_wake := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => v_naptime);
		EXIT WHEN v_wake OPERATOR(pg_catalog.>) v_until;
		LOOP
			PERFORM pg_catalog.pg_sleep(LEAST(0.05, pg_catalog.date_part('epoch',
								v_wake OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())));
			COMMIT;
			EXIT WHEN pg_catalog.clock_timestamp() OPERATOR(pg_catalog.>=) v_wake;
		END LOOP;
	END LOOP;
END
$$;
