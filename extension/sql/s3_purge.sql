-- payflow: which S3 objects the database no longer keeps (0.5.0, issue 26
-- L3), for payflow-s3-sweep.
--
-- purge() deletes payloads and operations in the database; objects in the
-- bucket outlive them unless something deletes them too, and so do the
-- uploads of the HTTP edge whose submit never committed.  payflow-s3-sweep
-- lists the two prefixes payflow writes (payments/<operation id>/… and
-- requests/…) page by page, asks s3_unretained_keys which keys of a page
-- no operation keeps, and deletes those (DeleteObjects).  The database
-- stays the one judge of what is kept: no queue to fill in purge() (no
-- write for the many operations that never touch S3), nothing to lose
-- when the sweeper dies, and orphans found the same way as purged
-- operations' objects.
--
-- The reasons returned:
--   payloads_purged    payments/<id>/… of an operation whose payloads were
--                      purged (retention_payloads): deleted at once
--   unknown_operation  payments/<id>/… of no operation (purged entirely,
--                      or never committed)
--   unreferenced       requests/… that no operation with its payloads still
--                      kept names as its request (the HTTP edge's uploads
--                      are content-addressed: one object may serve several
--                      operations)
-- The last two are deleted only once older than the sweeper's grace
-- (PAYFLOW_S3_ORPHAN_GRACE): an upload is made before its submit commits.
-- Keys of any other shape are never returned.

-- The sweeper's database role: this function, nothing else (its login is
-- granted it; deploy/sql/install.sql).  payflow_worker holds every edge
-- role, this one too.
DO $s3_sweeper_role$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_s3_sweeper') THEN
		CREATE ROLE payflow_s3_sweeper NOLOGIN;
	END IF;
END
$s3_sweeper_role$;
GRANT payflow_s3_sweeper TO payflow_worker;
GRANT USAGE ON SCHEMA payflow TO payflow_s3_sweeper;

-- The operations whose request lives in S3, by key, while their payloads
-- are kept: the few that use S3, and none once purged.  (request_ref never
-- changes and payloads_purged_at once: updates of an operation stay HOT.)
CREATE INDEX operations_s3_request_idx ON payflow.operations ((request_ref ->> 'key'))
	WHERE request_ref ->> 'store' = 's3' AND payloads_purged_at IS NULL;

-- The keys among keys (one listing page: at most 1000) that no operation
-- keeps, each with its reason (above).
CREATE FUNCTION payflow.s3_unretained_keys(keys text[])
	RETURNS TABLE (object_key text, reason text)
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	IF keys IS NULL THEN
		RAISE EXCEPTION 'keys must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF cardinality(keys) > 1000 THEN
		RAISE EXCEPTION 'keys holds % keys: at most 1000 (one listing page)', cardinality(keys)
			USING ERRCODE = 'program_limit_exceeded';
	ELSIF array_position(keys, NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'keys must not hold null' USING ERRCODE = 'null_value_not_allowed';
	END IF;

	RETURN QUERY
	WITH page AS (
		SELECT DISTINCT k.key,
			   substring(k.key FROM '^payments/(pay_[0-9A-HJKMNP-TV-Z]{26})/[^/]') AS operation_id,
			   k.key ~ '^requests/.' AS request
		  FROM unnest(keys) AS k(key)
	)
	SELECT p.key, CASE WHEN o.id IS NULL THEN 'unknown_operation' ELSE 'payloads_purged' END
	  FROM page p LEFT JOIN payflow.operations o ON o.id = p.operation_id
	 WHERE p.operation_id IS NOT NULL
	   AND (o.id IS NULL OR o.payloads_purged_at IS NOT NULL
			-- past the payload retention: purge marks only the S3 requests'
			-- operations (partitions.sql), the rule says it for every one
			OR payflow._payloads_past_retention(o.status, o.terminal_at))
	UNION ALL
	SELECT p.key, 'unreferenced'
	  FROM page p
	 WHERE p.request
	   AND NOT EXISTS (SELECT FROM payflow.operations o
					    WHERE o.request_ref ->> 'store' = 's3' AND o.payloads_purged_at IS NULL
						  AND o.request_ref ->> 'key' = p.key);
END
$$;
COMMENT ON FUNCTION payflow.s3_unretained_keys(text[]) IS
	'The keys of one S3 listing page (at most 1000) that no operation keeps: payloads_purged, unknown_operation or unreferenced (payflow-s3-sweep deletes them, the last two after a grace).';
REVOKE ALL ON FUNCTION payflow.s3_unretained_keys(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION payflow.s3_unretained_keys(text[]) TO payflow_s3_sweeper;
