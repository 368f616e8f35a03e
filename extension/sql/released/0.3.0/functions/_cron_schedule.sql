CREATE FUNCTION payflow._cron_schedule(job_name text, schedule text, command text) RETURNS bigint
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	v_job bigint;
BEGIN
	IF to_regprocedure('cron.schedule_in_database(text,text,text,text,text,boolean)') IS NULL THEN
		RAISE EXCEPTION 'pg_cron is not installed'
			USING ERRCODE = 'feature_not_supported',
				  HINT = 'Add pg_cron to shared_preload_libraries, set cron.database_name, '
						 'and run CREATE EXTENSION pg_cron in that database (pg_cron 1.4 or later).';
	END IF;
	EXECUTE 'SELECT cron.schedule($1, $2, $3)' INTO v_job USING job_name, schedule, command;
	RETURN v_job;
END
$$;
