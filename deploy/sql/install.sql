-- Installing payflow in a database: the extensions, the login roles of the
-- edge processes, purge and the scheduler.  Run it with psql in the
-- database named by cron.database_name, after either flavour:
--
--   C extension (a server you run; make && make install): as a superuser.
--     postgresql.conf:
--       shared_preload_libraries = 'payflow,pg_cron'
--       payflow.database_name = '<this database>'   (the scheduler worker)
--       cron.database_name = '<this database>'
--     This file runs CREATE EXTENSION payflow.
--
--   C-free flavour (Amazon RDS, Aurora; make dist-sql): as the role that
--     ran dist/payflow--<version>.sql (the master user: no superuser, but
--     CREATEROLE), after that file.  pg_cron runs the scheduler: this file
--     registers it (payflow.schedule_scheduler()).
--
-- Safe to run again (after ALTER EXTENSION payflow UPDATE or a newer dist
-- file, too): every statement checks first or replaces.

CREATE EXTENSION IF NOT EXISTS pg_cron;

-- payflow itself: the C extension when this server has it (its control file,
-- or registered with pg_tle), else the C-free install must have run already.
DO $$
DECLARE
	v_available boolean := EXISTS (SELECT FROM pg_available_extensions WHERE name = 'payflow');
BEGIN
	IF EXISTS (SELECT FROM pg_extension WHERE extname = 'payflow')
	   OR to_regprocedure('payflow._flavour()') IS NOT NULL THEN
		RETURN;
	END IF;
	IF NOT v_available AND to_regprocedure('pgtle.available_extensions()') IS NOT NULL THEN
		EXECUTE 'SELECT EXISTS (SELECT FROM pgtle.available_extensions() WHERE name = ''payflow'')'
			INTO v_available;
	END IF;
	IF NOT v_available THEN
		RAISE EXCEPTION 'payflow is not installed in database "%", and this server has no payflow extension',
			current_database()
			USING ERRCODE = 'undefined_object',
				  HINT = 'On Amazon RDS and Aurora (no custom C library), run the C-free flavour''s '
						 'dist/payflow--<version>.sql (make dist-sql) with psql as this role first, '
						 'then this file again.  On a server you run: make && make install.';
	END IF;
	CREATE EXTENSION payflow;
END
$$;

-- Login roles of the clients; passwords are set out of band (ALTER ROLE ...
-- PASSWORD, the value then stored in AWS Secrets Manager), never in this file.
--
--   payflow_api                payflow-api (payflow_app: submit, status, the change feed;
--                              payflow_console: the admin API's functions, each of which
--                              does nothing without a valid admin key; payflow_payload_mac:
--                              the key of the checksums of the requests it puts to S3)
--   payflow_edge_relay         payflow-relay (payflow_relay: the outbox functions only)
--   payflow_edge_payment       payflow-worker --role payment  } payflow_step_worker: the
--   payflow_edge_invoice       payflow-worker --role invoice  } step and payload functions
--   payflow_edge_postprocess   payflow-worker --role postprocess (payflow_postprocess_worker:
--                              the step functions and the post-processing hooks)
--   payflow_edge_webhook       payflow-worker --role webhook (payflow_webhook_worker:
--                              webhook_target, which returns each tenant's signing
--                              secret, and record_webhook_failure; no step function)
--   payflow_edge_s3_sweep      payflow-s3-sweep (payflow_s3_sweeper: s3_unretained_keys,
--                              which says which S3 objects no operation keeps)
--   payflow_edge               every edge program (payflow_worker, the union of the
--                              five roles above): kept for deployments made before the
--                              per-program logins; give each program its own instead,
--                              then DROP ROLE payflow_edge
--   payflow_monitor            the metrics publisher (deploy/ecs/payflow-metrics.json):
--                              payflow.metrics() and nothing else, not payflow_admin.
DO $$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'payflow_api') THEN
		CREATE ROLE payflow_api LOGIN IN ROLE payflow_app;
	END IF;
	-- also for logins made before the console (a second GRANT is a no-op)
	GRANT payflow_console TO payflow_api;
	-- the payload checksum key: large requests go to S3 under their keyed
	-- checksum (issue 26, M4); payflow 0.5.0 on
	GRANT payflow_payload_mac TO payflow_api;
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'payflow_edge') THEN
		CREATE ROLE payflow_edge LOGIN IN ROLE payflow_worker;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'payflow_edge_relay') THEN
		CREATE ROLE payflow_edge_relay LOGIN IN ROLE payflow_relay;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'payflow_edge_payment') THEN
		CREATE ROLE payflow_edge_payment LOGIN IN ROLE payflow_step_worker;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'payflow_edge_invoice') THEN
		CREATE ROLE payflow_edge_invoice LOGIN IN ROLE payflow_step_worker;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'payflow_edge_postprocess') THEN
		CREATE ROLE payflow_edge_postprocess LOGIN IN ROLE payflow_postprocess_worker;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'payflow_edge_webhook') THEN
		CREATE ROLE payflow_edge_webhook LOGIN IN ROLE payflow_webhook_worker;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'payflow_edge_s3_sweep') THEN
		CREATE ROLE payflow_edge_s3_sweep LOGIN IN ROLE payflow_s3_sweeper;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'payflow_monitor') THEN
		CREATE ROLE payflow_monitor LOGIN;
	END IF;
END
$$;

-- PostgreSQL writes the bind parameters of statements it logs (slow-query
-- logging, errors): for these roles those are API keys, payment details and
-- webhook secrets.  Never log them, whatever the server's log settings.
-- Both settings are superuser-only: a role that may not set them (a plain
-- CREATEROLE owner) gets a warning instead, unless they are 0 for the whole
-- server already (on RDS and Aurora: in the DB parameter group).
DO $$
DECLARE
	v_role text;
	v_name text;
BEGIN
	FOREACH v_role IN ARRAY ARRAY['payflow_api', 'payflow_edge', 'payflow_edge_relay', 'payflow_edge_payment',
								  'payflow_edge_invoice', 'payflow_edge_postprocess', 'payflow_edge_webhook',
								  'payflow_edge_s3_sweep'] LOOP
		FOREACH v_name IN ARRAY ARRAY['log_parameter_max_length', 'log_parameter_max_length_on_error'] LOOP
			BEGIN
				EXECUTE format('ALTER ROLE %I SET %I = 0', v_role, v_name);
			EXCEPTION WHEN insufficient_privilege THEN
				IF current_setting(v_name) = '0' THEN
					RAISE NOTICE '% is 0 for the whole server; % may not set it for role %',
						v_name, current_user, v_role;
				ELSE
					RAISE WARNING '% may not set % for role %: PostgreSQL may log that role''s bind parameters',
						current_user, v_name, v_role
						USING HINT = format('Set %s = 0 for the whole server (on Amazon RDS and Aurora: in the '
											'DB parameter group), or run ALTER ROLE %s SET %s = 0 as a superuser.',
											v_name, v_role, v_name);
				END IF;
			END;
		END LOOP;
	END LOOP;
END
$$;

GRANT USAGE ON SCHEMA payflow TO payflow_monitor;
GRANT EXECUTE ON FUNCTION payflow.metrics() TO payflow_monitor;

-- Each shipped step bound to its program's login (payflow.grant_step,
-- issue 26 H1): every worker login may call the step functions, so without
-- this a compromised invoice or risk-check worker could complete
-- PROCESS_PAYMENT with a made-up result.  A bound step also wants the
-- claim's lease token with every later call, which the workers send.
-- payflow_edge, the old login of every program, keeps every step until it
-- is dropped.  A step added with payflow.add_step is bound the same way by
-- whoever adds it (payflow.grant_step('RISK_CHECK', 'payflow_edge_risk')).
DO $$
BEGIN
	PERFORM payflow.grant_step(b.step, b.login::regrole)
	   FROM (VALUES ('PROCESS_PAYMENT', 'payflow_edge_payment'), ('POST_PROCESS', 'payflow_edge_postprocess'),
					('CREATE_INVOICE', 'payflow_edge_invoice'), ('PROCESS_PAYMENT', 'payflow_edge'),
					('POST_PROCESS', 'payflow_edge'), ('CREATE_INVOICE', 'payflow_edge')) AS b(step, login);
END
$$;

-- TTL purge every 5 minutes, bounded batches; runs as the current role.
SELECT payflow.schedule_purge('*/5 * * * *');

-- The scheduler (expired leases, due retries, lost messages; in the C-free
-- flavour also the relays' wake-ups): the C extension's background worker
-- where payflow is preloaded with payflow.database_name = this database,
-- else pg_cron (job payflow-scheduler, runs as the current role).
DO $$
DECLARE
	v_flavour text := 'c';
BEGIN
	IF to_regprocedure('payflow._flavour()') IS NOT NULL THEN
		EXECUTE 'SELECT payflow._flavour()' INTO v_flavour;
	END IF;
	IF v_flavour = 'c' AND EXISTS (SELECT FROM pg_settings
									WHERE name = 'payflow.database_name' AND context = 'postmaster'
									  AND setting = current_database()) THEN
		RETURN;
	END IF;
	IF v_flavour = 'c' THEN
		RAISE NOTICE 'the payflow scheduler worker does not run in database "%" (payflow not preloaded, '
					 'or payflow.database_name names another database): pg_cron runs the scheduler',
			current_database();
	END IF;
	PERFORM payflow.schedule_scheduler();
END
$$;
