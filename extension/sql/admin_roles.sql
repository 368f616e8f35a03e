-- payflow: the roles payflow_admin holds (0.5.0: a file of its own, so
-- that the update script takes the same grants).  Every worker role but
-- the webhook worker's, whose webhook_target returns the tenants' signing
-- secrets in clear: an admin reads no secret.  0.4 granted payflow_worker,
-- which holds them all; roles outlive a database's extension, so that
-- grant is taken back here whichever version made it.
DO $admin_roles$
BEGIN
	IF EXISTS (SELECT FROM pg_catalog.pg_auth_members m
				WHERE m.roleid = 'payflow_worker'::regrole AND m.member = 'payflow_admin'::regrole) THEN
		REVOKE payflow_worker FROM payflow_admin;
	END IF;
END
$admin_roles$;
GRANT payflow_app, payflow_relay, payflow_step_worker, payflow_postprocess_worker TO payflow_admin;
