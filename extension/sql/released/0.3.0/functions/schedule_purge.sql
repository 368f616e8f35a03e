CREATE OR REPLACE FUNCTION payflow.schedule_purge(schedule text DEFAULT '*/5 * * * *') RETURNS bigint
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	IF schedule IS NULL OR schedule = '' THEN
		RAISE EXCEPTION 'schedule must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN payflow._cron_schedule('payflow-purge', schedule, 'SELECT payflow.purge()');
END
$$;
