CREATE FUNCTION payflow.schedule_scheduler() RETURNS bigint
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_cron text := (SELECT extversion FROM pg_extension WHERE extname = 'pg_cron');
BEGIN
	IF string_to_array(split_part(v_cron, '-', 1), '.')::integer[] >= ARRAY[1, 5] THEN
		RETURN payflow._cron_schedule('payflow-scheduler', '1 second', 'SELECT payflow.run_scheduler()');
	END IF;
	RETURN payflow._cron_schedule('payflow-scheduler', '* * * * *', 'CALL payflow.run_scheduler_for(58)');
END
$$;
