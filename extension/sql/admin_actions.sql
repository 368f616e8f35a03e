-- payflow: the admin's actions on one operation, cancel and replay, each
-- recorded as the admin's in its history and in admin_actions.
--
-- The action runs as payflow.cancel() / payflow.replay() would; the rows it
-- adds to history_events (both are changes history.sql does not render)
-- then name the admin key's owner as the actor.  CREATE OR REPLACE: the
-- update to 0.5.0 takes this file whole (history_events).

-- Cancels a PENDING operation (payflow.cancel: PF001 once a worker
-- started it, PF006 after it ended).  {"operationId","cancelled","status"}
CREATE OR REPLACE FUNCTION payflow.admin_cancel(admin_key text, operation_id text, reason text DEFAULT NULL)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	k payflow.api_keys := payflow._admin_key(admin_key);
	o payflow.operations;
	v_before bigint;
	v_done boolean;
	v_doc jsonb;
	v_tenant text := payflow._current_tenant();
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	o := payflow._lock_operation(operation_id);
	-- the lock keeps every other history row of this operation out until commit
	SELECT coalesce(max(h.id), 0) INTO v_before FROM payflow.history_events h
	 WHERE h.operation_id = admin_cancel.operation_id;
	-- cancel() acts within the caller's tenant: the operation's, for this call
	PERFORM payflow._set_tenant(o.tenant);
	v_done := payflow.cancel(operation_id, coalesce(reason, 'cancelled by ' || payflow._admin_actor(k)));
	PERFORM payflow._set_tenant(v_tenant);
	UPDATE payflow.history_events h SET actor = payflow._admin_actor(k)
	 WHERE h.operation_id = admin_cancel.operation_id AND h.id > v_before;
	v_doc := jsonb_build_object('operationId', operation_id, 'cancelled', v_done,
								'status', (SELECT x.status FROM payflow.operations x WHERE x.id = admin_cancel.operation_id));
	PERFORM payflow._admin_record(k, 'cancel', operation_id, v_doc);
	RETURN v_doc;
END
$$;

-- Replays a FAILED operation (payflow.replay); PF009 when it is not
-- FAILED.  {"operationId","replayed","status"}
CREATE OR REPLACE FUNCTION payflow.admin_replay(admin_key text, operation_id text) RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	k payflow.api_keys := payflow._admin_key(admin_key);
	o payflow.operations;
	v_before bigint;
	v_doc jsonb;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	o := payflow._lock_operation(operation_id);
	IF o.status <> 'FAILED' THEN
		RAISE EXCEPTION 'operation "%" is %, not FAILED: only a failed operation can be replayed', o.id, o.status
			USING ERRCODE = 'PF009';
	END IF;
	SELECT coalesce(max(h.id), 0) INTO v_before FROM payflow.history_events h WHERE h.operation_id = o.id;
	PERFORM payflow.replay(o.id);
	UPDATE payflow.history_events h SET actor = payflow._admin_actor(k)
	 WHERE h.operation_id = o.id AND h.id > v_before;
	v_doc := jsonb_build_object('operationId', o.id, 'replayed', true,
								'status', (SELECT x.status FROM payflow.operations x WHERE x.id = o.id));
	PERFORM payflow._admin_record(k, 'replay', o.id, v_doc);
	RETURN v_doc;
END
$$;
