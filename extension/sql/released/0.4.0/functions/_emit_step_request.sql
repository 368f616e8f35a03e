CREATE OR REPLACE FUNCTION payflow._emit_step_request(o payflow.operations, s payflow.steps)
	RETURNS uuid
	LANGUAGE plpgsql
	AS $$
DECLARE
	d payflow.step_definitions := payflow._step_of(o.pipeline_version, s.step_name);
BEGIN
	RETURN payflow._emit(o.id, o.payment_id, o.correlation_id, d.request_event, d.destination,
						 s.attempt + 1, jsonb_build_object(d.input_field, s.input_ref));
END
$$;
