-- Installing payflow in a database (run as a superuser, in the database
-- named by payflow.database_name and cron.database_name).
--
-- postgresql.conf:
--   shared_preload_libraries = 'payflow,pg_cron'
--   payflow.database_name = '<this database>'
--   cron.database_name = '<this database>'
--
-- Safe to run again (after ALTER EXTENSION payflow UPDATE, too): every
-- statement checks first or replaces.

CREATE EXTENSION IF NOT EXISTS pg_cron;
CREATE EXTENSION IF NOT EXISTS payflow;

-- Login roles of the clients; passwords are set out of band (ALTER ROLE ...
-- PASSWORD, the value then stored in AWS Secrets Manager), never in this file.
--
--   payflow_api      payflow-api (payflow_app: submit, status, the change feed)
--   payflow_edge     payflow-relay and every payflow-worker role (payflow_worker).
--                    The webhook worker needs nothing more: webhook_target and
--                    record_webhook_failure are payflow_worker's. webhook_target
--                    returns each tenant's signing secret, so every holder of
--                    payflow_edge's password can read those secrets: keep it in
--                    the secret the edge tasks use and nowhere else.
--   payflow_monitor  the metrics publisher (deploy/ecs/payflow-metrics.json):
--                    payflow.metrics() and nothing else, not payflow_admin.
DO $$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'payflow_api') THEN
		CREATE ROLE payflow_api LOGIN IN ROLE payflow_app;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'payflow_edge') THEN
		CREATE ROLE payflow_edge LOGIN IN ROLE payflow_worker;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'payflow_monitor') THEN
		CREATE ROLE payflow_monitor LOGIN;
	END IF;
END
$$;
-- PostgreSQL writes the bind parameters of statements it logs (slow-query
-- logging, errors): for these roles those are API keys, payment details and
-- webhook secrets.  Never log them, whatever the server's log settings.
ALTER ROLE payflow_api SET log_parameter_max_length = 0;
ALTER ROLE payflow_api SET log_parameter_max_length_on_error = 0;
ALTER ROLE payflow_edge SET log_parameter_max_length = 0;
ALTER ROLE payflow_edge SET log_parameter_max_length_on_error = 0;

GRANT USAGE ON SCHEMA payflow TO payflow_monitor;
GRANT EXECUTE ON FUNCTION payflow.metrics() TO payflow_monitor;

-- TTL purge every 5 minutes, bounded batches; runs as the current role.
SELECT payflow.schedule_purge('*/5 * * * *');
