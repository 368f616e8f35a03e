-- payflow, C-free flavour: grants on the flavour's own objects.
-- extension/sql/assemble.sh puts this file where payflow.sql says
-- "--@@ flavour grants @@", after the shared grants (which gave
-- payflow_admin SELECT on every table of the schema).

-- The key that signs tenant bindings is for the owner's functions only.
REVOKE ALL ON payflow._tenant_key FROM payflow_admin;
REVOKE ALL ON payflow._wakeup_marks FROM payflow_admin;

-- Settings change through set_setting only (validated, recorded).
GRANT EXECUTE ON FUNCTION
	payflow.set_setting(text, text),
	payflow.reset_setting(text)
	TO payflow_admin;
