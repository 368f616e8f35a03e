-- payflow: back-pressure per tenant (issue 27).
--
-- A tenant with a quota may have at most max_open operations in flight:
-- past it, submit, submit_ref and submit_many refuse a new operation with
-- PF011 (the HTTP edge answers 429 with Retry-After), and a request whose
-- operation exists already (its idempotency key) is still answered with it.
--
-- The count is the scheduler's, refreshed at each pass (every second) and
-- when the quota is set, not a counter every submit and every completion
-- would update: such a row would serialise all of a tenant's commits.  So
-- a burst may pass the quota by what the tenant submits between two
-- passes; that is the price of a check that costs a submit nothing (it is
-- a condition of the insert it makes anyway).  The wait a refusal names
-- is what Little's law gives for the excess to end: excess x the average
-- age of the tenant's open operations / their number, 1 to 60 seconds.

CREATE TABLE IF NOT EXISTS payflow.tenant_quotas (
	tenant text COLLATE "C" PRIMARY KEY,
	max_open integer NOT NULL CHECK (max_open >= 1),
	open_now integer NOT NULL DEFAULT 0,
	open_avg_age_seconds numeric,			-- of the open ones, as counted
	counted_at timestamptz,
	updated_by text NOT NULL DEFAULT session_user,
	updated_at timestamptz NOT NULL DEFAULT now()
);

-- Counts the open operations of the tenants with a quota (all of them, or
-- p_tenant's).  From the operations in flight (operations_open_idx): its
-- cost follows the work in flight, never the retention.
CREATE OR REPLACE FUNCTION payflow._count_tenant_quotas(p_tenant text DEFAULT NULL) RETURNS void
	LANGUAGE plpgsql VOLATILE
	AS $$
BEGIN
	UPDATE payflow.tenant_quotas q
	   SET open_now = coalesce(c.n, 0), open_avg_age_seconds = c.age, counted_at = now()
	  FROM payflow.tenant_quotas q2
	  LEFT JOIN (SELECT o.tenant, count(*)::integer AS n,
						round(avg(extract(epoch FROM now() - o.created_at))::numeric, 3) AS age
				   FROM payflow.operations o
				  WHERE o.terminal_at IS NULL
				    AND o.tenant IN (SELECT t.tenant FROM payflow.tenant_quotas t)
				  GROUP BY o.tenant) c ON c.tenant = q2.tenant
	 WHERE q.tenant = q2.tenant AND (p_tenant IS NULL OR q.tenant = p_tenant);
END
$$;

-- Whether the current tenant may open another operation (the insert of
-- _create_operation and submit_many has it as a condition).
-- PL/pgSQL, whose plan is kept for the session: as a SQL function (never
-- inlined: it reads a table) each submit parsed and planned it again, 55 us.
CREATE OR REPLACE FUNCTION payflow._within_quota(p_tenant text) RETURNS boolean
	LANGUAGE plpgsql STABLE
	AS $$
BEGIN
	RETURN NOT EXISTS (SELECT FROM payflow.tenant_quotas q WHERE q.tenant = p_tenant AND q.open_now >= q.max_open);
END
$$;

-- PF011 for a tenant past its quota (the caller found it so), naming the
-- wait the HTTP edge turns into Retry-After.
CREATE OR REPLACE FUNCTION payflow._quota_exceeded(p_tenant text) RETURNS void
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	q payflow.tenant_quotas;
	v_wait integer;
BEGIN
	SELECT * INTO q FROM payflow.tenant_quotas x WHERE x.tenant = p_tenant;
	v_wait := greatest(1, least(60, ceil(coalesce(
		(q.open_now - q.max_open + 1) * q.open_avg_age_seconds / nullif(q.open_now, 0), 60))))::integer;
	RAISE EXCEPTION 'tenant "%" has % open operations, its quota is %: retry after % s',
		p_tenant, q.open_now, q.max_open, v_wait
		USING ERRCODE = 'PF011',
			  DETAIL = format('Counted at %s.', payflow._iso(q.counted_at)),
			  HINT = 'Retry the same request later (its idempotency key makes it safe), or raise the quota with payflow.set_tenant_quota().';
END
$$;

-- Sets a tenant's quota (replacing any) and counts its open operations.
CREATE OR REPLACE FUNCTION payflow.set_tenant_quota(tenant text, max_open integer) RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	q payflow.tenant_quotas;
BEGIN
	IF tenant IS NULL OR max_open IS NULL THEN
		RAISE EXCEPTION 'tenant and max_open must not be null' USING ERRCODE = 'null_value_not_allowed',
			HINT = 'payflow.clear_tenant_quota() removes a quota.';
	ELSIF length(tenant) > 200 THEN
		RAISE EXCEPTION 'tenant is too long' USING ERRCODE = 'string_data_right_truncation';
	ELSIF max_open < 1 THEN
		RAISE EXCEPTION 'max_open must be at least 1' USING ERRCODE = 'invalid_parameter_value',
			DETAIL = format('Got %s.', max_open);
	END IF;
	INSERT INTO payflow.tenant_quotas AS x (tenant, max_open) VALUES (set_tenant_quota.tenant, max_open)
	ON CONFLICT ON CONSTRAINT tenant_quotas_pkey DO UPDATE
	   SET max_open = EXCLUDED.max_open, updated_by = session_user, updated_at = now();
	PERFORM payflow._count_tenant_quotas(set_tenant_quota.tenant);
	SELECT * INTO q FROM payflow.tenant_quotas x WHERE x.tenant = set_tenant_quota.tenant;
	RETURN jsonb_build_object('tenant', q.tenant, 'maxOpen', q.max_open, 'openNow', q.open_now);
END
$$;

-- Removes a tenant's quota; true if it had one.
CREATE OR REPLACE FUNCTION payflow.clear_tenant_quota(tenant text) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	DELETE FROM payflow.tenant_quotas q WHERE q.tenant = clear_tenant_quota.tenant;
	RETURN FOUND;
END
$$;

REVOKE ALL ON FUNCTION payflow._count_tenant_quotas(text), payflow._within_quota(text),
	payflow._quota_exceeded(text), payflow.set_tenant_quota(text, integer),
	payflow.clear_tenant_quota(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION payflow.set_tenant_quota(text, integer), payflow.clear_tenant_quota(text) TO payflow_admin;
