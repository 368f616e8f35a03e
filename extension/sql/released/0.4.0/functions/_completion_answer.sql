CREATE FUNCTION payflow._completion_answer(o payflow.operations, d payflow.step_definitions, p_event_id uuid)
	RETURNS jsonb
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	n payflow.step_definitions := payflow._next_step(o.pipeline_version, d.position);
BEGIN
	RETURN jsonb_build_object('action', 'completed', 'status', d.done_status,
							  'eventType', coalesce(n.request_event,
													(SELECT p.completed_event FROM payflow.pipelines p
													  WHERE p.version = o.pipeline_version)),
							  'eventId', p_event_id);
END
$$;
