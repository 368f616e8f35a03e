SELECT set_config('payflow.dist_installed', :'payflow_installed', true);
DO $payflow_dist$
DECLARE
	v_installed text := current_setting('payflow.dist_installed');
	v_file constant text := '@VERSION@';
BEGIN
	IF v_installed = v_file THEN
		RAISE WARNING 'payflow % is installed; nothing to do', v_installed;
	ELSIF string_to_array(v_installed, '.')::integer[] > string_to_array(v_file, '.')::integer[] THEN
		RAISE EXCEPTION 'payflow % is installed, newer than this file (%)', v_installed, v_file
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  HINT = 'Versions are never downgraded: use the file of the installed version or a newer one.';
	ELSE
		RAISE EXCEPTION 'this file cannot update payflow % to %', v_installed, v_file
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  HINT = 'It carries the update scripts from the first C-free version on; '
						 'update with the file of each version in between.';
	END IF;
END
$payflow_dist$;
\endif
COMMIT;
