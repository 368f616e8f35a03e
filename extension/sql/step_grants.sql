-- payflow: steps bound to roles (issue 26, H1).
--
-- Every worker login holds payflow_step_worker, so without more any of
-- them could claim, renew, complete or fail any step: a compromised risk
-- check worker could complete PROCESS_PAYMENT with a made-up result, and
-- the invoice and a correctly signed "completed" webhook would follow.
-- grant_step binds a step to roles: once a step has a grant, only members
-- of a granted role may act on it (42501 otherwise), and every call after
-- the claim must present the claim's lease token (PF004 without it; a
-- wrong one is PF004 whether or not the step is bound).  A step without
-- grants behaves as before, so that workers written against the 0.4
-- contract, which knows no token, keep working until their steps are
-- bound; deploy/sql/install.sql binds each shipped step to its program's
-- login.  Membership is the login's (session_user): the functions run as
-- their owner, and the login is who the worker is.  Superusers are members
-- of every role.

CREATE TABLE IF NOT EXISTS payflow.step_grants (
	step_name text COLLATE "C" NOT NULL CHECK (step_name ~ '^[A-Z][A-Z0-9_]{0,63}$'),
	role_name name NOT NULL,		-- by name: a restore into another cluster keeps it
	granted_by text NOT NULL DEFAULT session_user,
	granted_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (step_name, role_name)
);

-- Whether the login may act on a step (role_ok: the step is bound to no
-- role, or the login is a member of one of its roles) and whether the step
-- is bound (it has a grant).  A granted role since dropped (to_regrole:
-- NULL) admits no one.  One row; SQL over the grants alone, so that the
-- planner inlines it into the statement that reads it from its FROM: the
-- batch step functions read it in a statement they run anyway (the
-- statement of its own each call cost a completion 10 us and more).
CREATE OR REPLACE FUNCTION payflow._step_access(p_step text)
	RETURNS TABLE (role_ok boolean, bound boolean)
	LANGUAGE sql STABLE
	AS $$
	SELECT count(*) = 0
		   OR coalesce(bool_or(pg_catalog.pg_has_role(session_user, pg_catalog.to_regrole(g.role_name), 'MEMBER')),
					   false),
		   count(*) > 0
	  FROM payflow.step_grants g WHERE g.step_name = p_step
$$;

-- Whether a step is bound to roles (it has a grant).  PL/pgSQL, whose plan
-- is kept: it runs at every single-item step call.  A generic plan: with
-- a custom one per call (what the plan cache chose for a parameter over a
-- tiny table), planning was 0.064 ms of each call, 425 ms of a
-- 2,000-operation burst (pg_stat_statements in the pipeline bench).
CREATE OR REPLACE FUNCTION payflow._step_bound(p_step text) RETURNS boolean
	LANGUAGE plpgsql STABLE
	SET plan_cache_mode = force_generic_plan
	AS $$
BEGIN
	RETURN (SELECT a.bound FROM payflow._step_access(p_step) a);
END
$$;

-- 42501 unless the login may act on the step (_step_access).  One
-- statement: three (the bound check, then a join with pg_roles) took 78 us
-- a call in the pipeline bench.
CREATE OR REPLACE FUNCTION payflow._require_step_role(p_step text) RETURNS void
	LANGUAGE plpgsql STABLE
	SET plan_cache_mode = force_generic_plan	-- as _step_bound
	AS $$
BEGIN
	IF NOT (SELECT a.role_ok FROM payflow._step_access(p_step) a) THEN
		RAISE EXCEPTION 'role "%" may not act on step %', session_user, p_step
			USING ERRCODE = 'insufficient_privilege',
				  DETAIL = format('Step %s is bound to %s.', p_step,
								  (SELECT string_agg(g.role_name, ', ' ORDER BY g.role_name)
									 FROM payflow.step_grants g WHERE g.step_name = p_step)),
				  HINT = 'An admin binds a step to roles with payflow.grant_step().';
	END IF;
END
$$;

-- PF004 unless p_token is the lease token of the claim that holds the
-- operation's open step, or, for a step bound to no role, is NULL.
CREATE OR REPLACE FUNCTION payflow._require_lease_token(o payflow.operations, p_token text) RETURNS void
	LANGUAGE plpgsql STABLE
	AS $$
BEGIN
	IF p_token IS NULL THEN
		IF payflow._step_bound(o.current_step) THEN
			RAISE EXCEPTION 'a lease token is required for step %', o.current_step
				USING ERRCODE = 'PF004',
					  DETAIL = format('Step %s is bound to roles: heartbeats, completions and failures present the leaseToken of the claim.',
									  o.current_step);
		END IF;
	ELSIF p_token IS DISTINCT FROM o.step_lease_token::text THEN
		RAISE EXCEPTION 'the lease token does not match the claim of step %', o.current_step
			USING ERRCODE = 'PF004',
				  DETAIL = format('Operation %s, attempt %s.', o.id, o.step_attempt);
	END IF;
END
$$;

-- Binds a step to a role: from then on only the role's members (and those
-- of the step's other roles) may act on it.  True if the grant is new.
CREATE OR REPLACE FUNCTION payflow.grant_step(step_name text, role regrole) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	d payflow.step_definitions := payflow._step_definition(step_name);	-- 22023 for an unknown step
BEGIN
	IF role IS NULL THEN
		RAISE EXCEPTION 'role must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	INSERT INTO payflow.step_grants (step_name, role_name)
	VALUES (d.step_name, (SELECT r.rolname FROM pg_roles r WHERE r.oid = role))
	ON CONFLICT DO NOTHING;
	RETURN FOUND;
END
$$;

-- Unbinds a step from a role; a step left without grants is open to every
-- worker again.  True if there was such a grant.
CREATE OR REPLACE FUNCTION payflow.revoke_step(step_name text, role regrole) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._require_text('step_name', step_name, 64);
	IF role IS NULL THEN
		RAISE EXCEPTION 'role must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	DELETE FROM payflow.step_grants g
	 WHERE g.step_name = revoke_step.step_name AND g.role_name = (SELECT r.rolname FROM pg_roles r WHERE r.oid = role);
	RETURN FOUND;
END
$$;

REVOKE ALL ON FUNCTION payflow._step_access(text), payflow._step_bound(text), payflow._require_step_role(text),
	payflow._require_lease_token(payflow.operations, text),
	payflow.grant_step(text, regrole), payflow.revoke_step(text, regrole) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION payflow.grant_step(text, regrole), payflow.revoke_step(text, regrole) TO payflow_admin;
