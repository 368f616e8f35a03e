-- payflow: what pg_dump keeps.
--
-- pg_dump leaves out the rows of an extension's tables unless the
-- extension marks them (pg_extension_config_dump): without these marks a
-- dump of a database running payflow held CREATE EXTENSION payflow and no
-- operation, key, webhook or payload, and a restore from it lost them all.
-- Every table whose rows are data is marked whole; a table the install
-- script seeds is marked with a filter that leaves the seeded rows out
-- (the restore's CREATE EXTENSION writes them again, and a dumped copy
-- would collide with them), and so are the identity sequences, so that a
-- restored database goes on numbering after the restored rows.
--
-- A table partitioned by day (partitions.sql) is marked with its default
-- partition: pg_dump dumps a partitioned table's rows from its partitions,
-- and the day partitions, not members of the extension, are dumped whole.
--
-- Not in a dump, by design: the seeded pipeline (version 1, its steps and
-- the four queues: tunings of version 1's retry columns are re-applied
-- after a restore, or made as a new version with add_step), the scheduler's
-- sweep position and the outbox cursor (both start over), and settings
-- (the C extension's GUCs live in postgresql.conf or ALTER DATABASE, which
-- pg_dump --create and pg_dumpall keep; the C-free flavour's
-- payflow.settings are seeded rows), nor that flavour's _tenant_key (a new
-- key signs new tenant bindings) and _wakeup_marks (unlogged already).
--
-- payflow._content_key, the checksum key, is marked where it is made
-- (content_mac.sql: a restore's row replaces the one CREATE EXTENSION made).
--
-- The marks are made only inside CREATE EXTENSION (the C extension and
-- pg_tle): the plain SQL install's tables are not an extension's, and
-- pg_dump dumps them like any other.
DO $backup$
DECLARE
	t record;
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'payflow') THEN
		RETURN;
	END IF;
	FOR t IN
		SELECT x.name, x.filter
		  FROM (VALUES
			('payflow.destinations', $$WHERE name NOT IN ('payment-requests', 'payment-completed',
											  'invoice-requests', 'operation-events')$$),
			('payflow.pipelines', 'WHERE version > 1'),
			('payflow.step_definitions', 'WHERE pipeline_version > 1'),
			('payflow.operations', ''),
			('payflow.history_events', ''),
			('payflow.history_events_default', ''),
			('payflow.step_results', ''),
			('payflow.step_results_default', ''),
			('payflow.step_grants', ''),
			('payflow.step_limits', ''),
			('payflow.step_breakers', ''),
			('payflow.step_breaker_events', ''),
			('payflow.tenant_quotas', ''),
			('payflow.outbox_events', ''),
			('payflow.outbox_events_default', ''),
			('payflow.outbox', ''),
			('payflow.outbox_batches', ''),
			('payflow.outbox_batches_default', ''),
			('payflow.outbox_position', ''),
			('payflow.outbox_seq_seq', ''),
			('payflow.payloads', ''),
			('payflow.payloads_default', ''),
			('payflow.consumed_events', ''),
			('payflow.dead_letters', ''),
			('payflow.api_keys', ''),
			('payflow.webhooks', ''),
			('payflow._webhook_key', ''),
			('payflow.webhook_failures', ''),
			('payflow.operation_events', ''),
			('payflow.admin_actions', ''),
			('payflow.step_attempts', ''),
			('payflow.step_attempts_default', '')
		  ) AS x(name, filter)
	LOOP
		PERFORM pg_catalog.pg_extension_config_dump(t.name::regclass, t.filter);
	END LOOP;
	-- the identity sequences of those tables
	FOR t IN
		SELECT s.objid::regclass AS seq
		  FROM pg_catalog.pg_depend s
		  JOIN pg_catalog.pg_class c ON c.oid = s.objid AND c.relkind = 'S'
		  JOIN pg_catalog.pg_class r ON r.oid = s.refobjid
		 WHERE s.classid = 'pg_catalog.pg_class'::regclass AND s.refclassid = 'pg_catalog.pg_class'::regclass
		   AND s.deptype = 'i' AND r.relnamespace = 'payflow'::regnamespace
	LOOP
		PERFORM pg_catalog.pg_extension_config_dump(t.seq, '');
	END LOOP;
END
$backup$;
