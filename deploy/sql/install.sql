-- Installing payflow in a database (run as a superuser, in the database
-- named by payflow.database_name and cron.database_name).
--
-- postgresql.conf:
--   shared_preload_libraries = 'payflow,pg_cron'
--   payflow.database_name = '<this database>'
--   cron.database_name = '<this database>'

CREATE EXTENSION IF NOT EXISTS pg_cron;
CREATE EXTENSION IF NOT EXISTS payflow;

-- Login roles of the three kinds of clients; passwords are set out of band
-- (e.g. from AWS Secrets Manager), never in this file.
DO $$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'payflow_api') THEN
		CREATE ROLE payflow_api LOGIN IN ROLE payflow_app;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'payflow_edge') THEN
		CREATE ROLE payflow_edge LOGIN IN ROLE payflow_worker;
	END IF;
END
$$;

-- TTL purge every 5 minutes, bounded batches; runs as the current role.
SELECT payflow.schedule_purge('*/5 * * * *');
