-- payflow: retention by partition (0.5.0, storage v2 phase 4).
--
-- The rows that hang off an operation -- step_results, step_attempts,
-- history_events, the outbox's log (outbox_events), and payloads (by key:
-- payments/<id>/...) -- are partitioned by the day the operation was
-- created (the published batches by the hour: below).  An id is "pay_" and a
-- ULID whose first ten characters are its creation time in milliseconds, so
-- a UTC day's operations are a range of ids (_day_id_floor), and so are
-- their payloads' keys.  purge() makes the next days' partitions ahead and
-- drops a past day's partitions whole once its operations are gone, instead
-- of deleting its rows one by one (a WAL record, a dead tuple and vacuum
-- work each, and full-page images when the pages were last written before a
-- checkpoint, as they always are by then).
--
-- What does not fit a day:
-- - an operation the retention rules keep longer (FAILED, kept
--   retention_failed; one still open; one that ended late in its day): its
--   rows move to the default partition before the drop, where purge
--   deletes them with the operation, one by one as before;
-- - rows written while no partition held their day (before the first
--   purge, or when purge did not run for days; ids not of payflow's form):
--   they live in the default partition until their day's partition is made
--   (which moves them in) or their operation goes.
-- So between an operation's purge and its day's drop, its rows in the
-- day's partitions are orphans: every reader joins payflow.operations, so
-- they show nowhere.
--
-- Locks: making a partition ATTACHes it (SHARE UPDATE EXCLUSIVE on the
-- parent) and takes the default partition's lock to move its strays;
-- dropping one DETACHes it (ACCESS EXCLUSIVE on the parent, briefly).
-- Both wait at most lock_timeout_ms (100 ms) and are left for the next
-- call when a long report or a dump holds the table: purge never queues
-- the hot path behind a report for longer than that.  Partitions are made
-- a day ahead: a generic plan locks every partition (and opens those its
-- start does not prune: claims and completions bound their reads by the
-- batch's ids, steps.sql), so no more are kept than retention needs; a
-- purge late by more than a day loses nothing either (the rows wait in the
-- default partition).
--
-- A partition's indexes are copied from the default partition's when it
-- is made: an index added to the default partition later is added to the
-- day partitions by the update that adds it.
--
-- Partitions made here are not members of the extension: pg_dump dumps
-- them (definition and rows) like the tables of the database, attached to
-- their parent, which the restore's CREATE EXTENSION makes.

-- Where purge's payload pass stopped: the (terminal_at, id) of the last
-- operation it looked at.  One row; a restore starts it over (a pass again
-- over what is left finds nothing to delete).
CREATE TABLE IF NOT EXISTS payflow.purge_position (
	id boolean PRIMARY KEY DEFAULT true CHECK (id),
	payloads_terminal_at timestamptz NOT NULL DEFAULT '-infinity',
	payloads_operation text COLLATE "C" NOT NULL DEFAULT ''
);
INSERT INTO payflow.purge_position DEFAULT VALUES ON CONFLICT DO NOTHING;
REVOKE ALL ON payflow.purge_position FROM PUBLIC;
GRANT SELECT ON payflow.purge_position TO payflow_admin;	-- as every table (payflow.sql)

-- The smallest id of a UTC day's operations: "pay_" and the day's first
-- millisecond in the ULID's ten time digits (admin.sql's id floor, without
-- its random part).  PL/pgSQL: admin.sql comes later in the install
-- script, and a SQL function's body is checked when it is made.
CREATE OR REPLACE FUNCTION payflow._day_id_floor(p_day date) RETURNS text
	LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
	AS $$
BEGIN
	RETURN left(payflow._admin_id_floor(p_day::timestamp AT TIME ZONE 'UTC'), 14);
END
$$;

-- The tables partitioned by day, and what their partition key holds before
-- the operation id.
CREATE OR REPLACE FUNCTION payflow._day_partitioned(OUT parent text, OUT key_prefix text)
	RETURNS SETOF record
	LANGUAGE sql IMMUTABLE
	AS $$
	VALUES ('step_results', ''), ('step_attempts', ''), ('history_events', ''), ('payloads', 'payments/'),
		   ('outbox_events', '')
$$;

-- The day partitions that exist, by their names (<parent>_dYYYYMMDD).
CREATE OR REPLACE FUNCTION payflow._day_partitions(OUT parent text, OUT day date, OUT name text)
	RETURNS SETOF record
	LANGUAGE sql STABLE
	AS $$
	SELECT t.parent,
		   CASE WHEN c.relname ~ ('^' || t.parent || '_d[0-9]{8}$') THEN to_date(right(c.relname, 8), 'YYYYMMDD') END,
		   c.relname::text
	  FROM payflow._day_partitioned() t
	  JOIN pg_catalog.pg_inherits i ON i.inhparent = ('payflow.' || t.parent)::regclass
	  JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
	 WHERE c.relname ~ ('^' || t.parent || '_d[0-9]{8}$')
$$;

-- Makes a partition of a parent for the key range [p_low, p_high) (as
-- literals of the key's type), moving in the rows of that range the
-- default partition holds.  False when it exists already.
CREATE OR REPLACE FUNCTION payflow._make_partition(p_parent text, p_name text, p_key text, p_low text, p_high text)
	RETURNS boolean
	LANGUAGE plpgsql
	AS $$
BEGIN
	IF to_regclass(format('payflow.%I', p_name)) IS NOT NULL THEN
		RETURN false;
	END IF;
	-- the default partition's indexes: the parent has none (tables.sql)
	EXECUTE format('CREATE TABLE payflow.%I (LIKE payflow.%I INCLUDING DEFAULTS INCLUDING STORAGE INCLUDING INDEXES)',
				   p_name, p_parent || '_default');
	-- the parent's owner's, whoever makes it: purge (SECURITY DEFINER, as
	-- the owner) drops it later
	EXECUTE format('ALTER TABLE payflow.%I OWNER TO %I', p_name,
				   (SELECT pg_catalog.pg_get_userbyid(c.relowner) FROM pg_catalog.pg_class c
					 WHERE c.oid = ('payflow.' || p_parent)::regclass));
	-- ATTACH scans the default partition for rows of the new range and
	-- fails if it finds one: move them first, under the lock ATTACH takes.
	-- Writers of the table wait meanwhile (SHARE ROW EXCLUSIVE on the
	-- parent, a few milliseconds a partition): one that had routed a row
	-- of this range to the default partition before the ATTACH would fail
	-- its partition check after it (isolation spec partition_races).
	EXECUTE format('LOCK TABLE payflow.%I IN SHARE ROW EXCLUSIVE MODE', p_parent);
	EXECUTE format('LOCK TABLE payflow.%I IN ACCESS EXCLUSIVE MODE', p_parent || '_default');
	EXECUTE format('WITH moved AS (DELETE FROM payflow.%1$I WHERE %2$I >= %4$L AND %2$I < %5$L RETURNING *)'
				   ' INSERT INTO payflow.%3$I SELECT * FROM moved', p_parent || '_default', p_key, p_name, p_low, p_high);
	EXECUTE format('ALTER TABLE payflow.%I ATTACH PARTITION payflow.%I FOR VALUES FROM (%L) TO (%L)',
				   p_parent, p_name, p_low, p_high);
	-- A BRIN index made on an empty table summarizes its first block range
	-- at once, and every insert into those first pages then widened that
	-- summary, a WAL record each (the log's first ~2,000 events of a day:
	-- 120-170 bytes an operation in the step-engine bench).  Unsummarized,
	-- a range costs an insert nothing and matches every scan;
	-- autosummarize summarizes it once the next one starts.
	PERFORM pg_catalog.brin_desummarize_range(i.indexrelid::regclass, 0)
	   FROM pg_catalog.pg_index i
	   JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
	   JOIN pg_catalog.pg_am a ON a.oid = c.relam
	  WHERE i.indrelid = format('payflow.%I', p_name)::regclass AND a.amname = 'brin';
	RETURN true;
END
$$;

-- Makes one day's partition of a parent (<parent>_dYYYYMMDD).
CREATE OR REPLACE FUNCTION payflow._make_day_partition(p_parent text, p_key_prefix text, p_day date)
	RETURNS boolean
	LANGUAGE plpgsql
	AS $$
BEGIN
	RETURN payflow._make_partition(p_parent, format('%s_d%s', p_parent, to_char(p_day, 'YYYYMMDD')),
								   CASE WHEN p_key_prefix = '' THEN 'operation_id' ELSE 'key' END,
								   p_key_prefix || payflow._day_id_floor(p_day),
								   p_key_prefix || payflow._day_id_floor(p_day + 1));
END
$$;

-- The published batches (outbox_batches) have a partition an hour of
-- their published_at, UTC (outbox_batches_hYYYYMMDDHH): purge makes this
-- hour's and the next one's and drops an hour whole once
-- retention_published passed its end.  A batch of an hour without a
-- partition (purge not running) waits in the default partition, which
-- purge empties row by row.  An hour, not a day: the batches are kept
-- retention_published (an hour by default), not a day more.
CREATE OR REPLACE FUNCTION payflow._hour_partitions(OUT hour timestamptz, OUT name text)
	RETURNS SETOF record
	LANGUAGE sql STABLE
	AS $$
	SELECT to_timestamp(right(c.relname, 10) || ' +00', 'YYYYMMDDHH24 TZH'), c.relname::text
	  FROM pg_catalog.pg_inherits i
	  JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
	 WHERE i.inhparent = 'payflow.outbox_batches'::regclass AND c.relname ~ '^outbox_batches_h[0-9]{10}$'
$$;

-- Makes the partition of outbox_batches for the UTC hour p_hour is in;
-- not when the default partition holds batches of that hour already
-- (purge did not run for an hour): moving them in would hold the relays'
-- acks meanwhile, so they stay there and go row by row.
CREATE OR REPLACE FUNCTION payflow._make_hour_partition(p_hour timestamptz)
	RETURNS boolean
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_hour timestamp := date_trunc('hour', p_hour AT TIME ZONE 'UTC');
BEGIN
	IF EXISTS (SELECT FROM payflow.outbox_batches_default b
				WHERE b.published_at >= v_hour AT TIME ZONE 'UTC'
				  AND b.published_at < (v_hour + interval '1 hour') AT TIME ZONE 'UTC') THEN
		RETURN false;
	END IF;
	RETURN payflow._make_partition('outbox_batches', 'outbox_batches_h' || to_char(v_hour, 'YYYYMMDDHH24'),
								   'published_at', to_char(v_hour, 'YYYY-MM-DD HH24:00:00+00'),
								   to_char(v_hour + interval '1 hour', 'YYYY-MM-DD HH24:00:00+00'));
END
$$;

-- Drops a partition of a parent (a day's, or an hour's of the batches),
-- after moving the rows of the operations in p_keep to the default
-- partition.  Returns the rows moved.
CREATE OR REPLACE FUNCTION payflow._drop_partition(p_parent text, p_name text, p_keep text[])
	RETURNS bigint
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_moved bigint := 0;
BEGIN
	EXECUTE format('ALTER TABLE payflow.%I DETACH PARTITION payflow.%I', p_parent, p_name);
	IF cardinality(p_keep) > 0 THEN
		-- detached, its range is the default partition's now
		-- (the rows keep their ids: step_attempts' is an identity column)
		-- (a payload names its operation in its key only)
		EXECUTE format('INSERT INTO payflow.%I OVERRIDING SYSTEM VALUE SELECT * FROM payflow.%I'
					   ' WHERE %s = ANY ($1)', p_parent, p_name,
					   CASE WHEN p_parent = 'payloads' THEN 'payflow._payload_operation(key)' ELSE 'operation_id' END)
			USING p_keep;
		GET DIAGNOSTICS v_moved = ROW_COUNT;
	END IF;
	EXECUTE format('DROP TABLE payflow.%I', p_name);
	RETURN v_moved;
END
$$;

-- A partition purge could not make or drop for a lock held past its
-- lock_timeout (it counts it "busy" and tries again at the next call): a
-- LOG line naming the sessions that hold a lock on the relations, so that
-- an operator can tell a long report or a stuck transaction from
-- autovacuum.  Their pid, application (or kind of process), lock mode and
-- transaction start; never a query's text, which may hold a payment's
-- details.
CREATE OR REPLACE FUNCTION payflow._log_busy(p_what text, p_relations text[]) RETURNS void
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_holders text;
BEGIN
	SELECT string_agg(DISTINCT format('pid %s (%s, %s, transaction since %s)', l.pid,
									  coalesce(nullif(a.application_name, ''), a.backend_type, 'unknown'), l.mode,
									  coalesce(a.xact_start::text, 'unknown')), '; ')
	  INTO v_holders
	  FROM pg_catalog.pg_locks l
	  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
	 WHERE l.granted AND l.pid <> pg_catalog.pg_backend_pid()
	   AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
	   AND l.relation = ANY (ARRAY(SELECT pg_catalog.to_regclass(format('payflow.%I', r))::oid
									FROM unnest(p_relations) r));
	RAISE LOG 'payflow.purge: % busy, left for the next call; locks held by %', p_what,
		coalesce(v_holders, 'a session that has let go since');
END
$$;

-- purge()'s partition work: today's and tomorrow's partitions
-- made (and this hour's and the next one's of the batches); past days
-- (and hours) dropped whose operations are gone but for at most
-- max_rows kept ones.  A day's payloads go once retention_payloads (or
-- retention_completed, if shorter) passed its end, keeping those of the
-- operations that did not end COMPLETED or CANCELLED that long ago; its
-- other rows once retention_completed passed its end and purge deleted
-- every operation of it past its retention (and its outbox log once every
-- event of it was published).  Returns {"made", "dropped",
-- "rowsMoved", "busy", "publishedHours": {"made", "dropped"}}: busy counts what a lock held by someone else put
-- off to the next call.
CREATE OR REPLACE FUNCTION payflow._purge_partitions(max_rows integer) RETURNS jsonb
	LANGUAGE plpgsql
	AS $$
DECLARE
	t record;
	v_today date := (now() AT TIME ZONE 'UTC')::date;
	v_lock_timeout text := current_setting('lock_timeout');
	v_made integer := 0;
	v_dropped integer := 0;
	v_moved bigint := 0;
	v_busy integer := 0;
	v_low text;
	v_high text;
	v_end timestamptz;
	v_keep text[];
	v_hours_made integer := 0;
	v_hours_dropped integer := 0;
BEGIN
	PERFORM set_config('lock_timeout', '100ms', true);
	-- the days' partitions, then the published batches' hours
	FOR t IN SELECT * FROM (SELECT p.parent, p.key_prefix, v_today + n AS day, NULL::timestamptz AS hour, n
							  FROM payflow._day_partitioned() p, generate_series(0, 1) n
							UNION ALL
							SELECT 'outbox_batches', NULL, NULL, now() + n * interval '1 hour', n + 2
							  FROM generate_series(0, 1) n) m
			  ORDER BY m.n, m.parent
	LOOP
		BEGIN
			IF t.hour IS NULL AND payflow._make_day_partition(t.parent, t.key_prefix, t.day) THEN
				v_made := v_made + 1;
			ELSIF t.hour IS NOT NULL AND payflow._make_hour_partition(t.hour) THEN
				v_hours_made := v_hours_made + 1;
			END IF;
		EXCEPTION WHEN lock_not_available THEN
			v_busy := v_busy + 1;
			PERFORM payflow._log_busy(format('making a partition of %s', t.parent), ARRAY[t.parent]);
		END;
	END LOOP;

	FOR t IN SELECT p.parent, p.day, p.name FROM payflow._day_partitions() p WHERE p.day < v_today ORDER BY p.day, p.parent
	LOOP
		v_low := payflow._day_id_floor(t.day);
		v_high := payflow._day_id_floor(t.day + 1);
		v_end := (t.day + 1)::timestamp AT TIME ZONE 'UTC';
		IF t.parent = 'payloads' THEN
			CONTINUE WHEN v_end >= now() - least(payflow._seconds('retention_payloads'),
												 payflow._seconds('retention_completed'));
			v_keep := ARRAY(SELECT o.id FROM payflow.operations o
							 WHERE o.id >= v_low AND o.id < v_high
							   AND NOT payflow._payloads_past_retention(o.status, o.terminal_at)
							 LIMIT max_rows + 1);
		ELSE
			CONTINUE WHEN v_end >= now() - payflow._seconds('retention_completed');
			-- purge's pass over operations deletes them first
			CONTINUE WHEN EXISTS (SELECT FROM payflow.operations o
								   WHERE o.id >= v_low AND o.id < v_high
									 AND payflow._operation_past_retention(o.status, o.terminal_at));
			-- an event not yet published stays in the log, which a rebuild
			-- of the outbox reads (a relay down for days: the day waits)
			CONTINUE WHEN t.parent = 'outbox_events'
						  AND EXISTS (SELECT FROM payflow.outbox_events e
									   WHERE e.operation_id >= v_low AND e.operation_id < v_high
										 AND e.seq >= coalesce((SELECT p.done_below FROM payflow.outbox_position p), 0));
			v_keep := ARRAY(SELECT o.id FROM payflow.operations o WHERE o.id >= v_low AND o.id < v_high
							 LIMIT max_rows + 1);
		END IF;
		-- a day with more to keep than a call moves waits until they go
		CONTINUE WHEN cardinality(v_keep) > max_rows;
		BEGIN
			v_moved := v_moved + payflow._drop_partition(t.parent, t.name, v_keep);
			v_dropped := v_dropped + 1;
		EXCEPTION WHEN lock_not_available THEN
			v_busy := v_busy + 1;
			PERFORM payflow._log_busy(format('dropping %s', t.name), ARRAY[t.parent, t.name]);
		END;
	END LOOP;

	-- the published batches' hours past retention_published (not counted
	-- by their events: that would read each hour whole before its drop)
	FOR t IN SELECT h.name FROM payflow._hour_partitions() h
			  WHERE h.hour + interval '1 hour' < now() - payflow._seconds('retention_published')
			  ORDER BY h.hour
	LOOP
		BEGIN
			PERFORM payflow._drop_partition('outbox_batches', t.name, '{}');
			v_hours_dropped := v_hours_dropped + 1;
		EXCEPTION WHEN lock_not_available THEN
			v_busy := v_busy + 1;
			PERFORM payflow._log_busy(format('dropping %s', t.name), ARRAY['outbox_batches', t.name]);
		END;
	END LOOP;
	PERFORM set_config('lock_timeout', v_lock_timeout, true);
	RETURN jsonb_build_object('made', v_made, 'dropped', v_dropped, 'rowsMoved', v_moved, 'busy', v_busy,
							  'publishedHours', jsonb_build_object('made', v_hours_made, 'dropped', v_hours_dropped));
END
$$;

REVOKE ALL ON FUNCTION payflow._day_id_floor(date), payflow._day_partitioned(), payflow._day_partitions(),
	payflow._make_partition(text, text, text, text, text), payflow._hour_partitions(),
	payflow._make_hour_partition(timestamptz),
	payflow._make_day_partition(text, text, date), payflow._drop_partition(text, text, text[]),
	payflow._log_busy(text, text[]), payflow._purge_partitions(integer) FROM PUBLIC;
