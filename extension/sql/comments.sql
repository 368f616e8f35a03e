-- payflow: what each public function does, in one line (\df+ payflow.*).
--
-- In one file, so that the full script and the update script of the
-- version that brings them (payflow--0.3.0--0.4.0.sql) both include it;
-- COMMENT ON replaces.  The README's SQL API tables say more, with the
-- error codes.  pipeline.sql comments its own four functions.

-- the application (payflow_app)
COMMENT ON FUNCTION payflow.submit(text, jsonb, text, text, integer, text) IS
	'Creates an operation for a payment request (the details stored by the claim check) and returns its id at once; the same idempotency key returns the same operation, other details under it are PF002. priority (-100..100, higher first) orders the slots of a step with a limit; traceparent (W3C) is the trace its spans continue, a new one when NULL.';
COMMENT ON FUNCTION payflow.submit_ref(text, text, text, text, bigint, text, text, integer, text) IS
	'submit for details already stored (s3, or a pg payload of the caller''s tenant): a reference with its sha256 checksum and size.';
COMMENT ON FUNCTION payflow.status(text) IS
	'The status document of an operation of the current tenant: status, current step, attempts, next attempt, result or error, trace id.';
COMMENT ON FUNCTION payflow.history(text) IS
	'Every status change of an operation of the current tenant, oldest first.';
COMMENT ON FUNCTION payflow.cancel(text, text) IS
	'Cancels a PENDING operation of the current tenant; false if cancelled already, PF006 once it ended otherwise, PF001 once a worker started it.';
COMMENT ON FUNCTION payflow.changes(text[], bigint) IS
	'The status changes of those operations of the current tenant after a history id: what the HTTP edge streams.';
COMMENT ON FUNCTION payflow.authenticate(text) IS
	'Checks an API key and binds its tenant to the current transaction; returns the tenant, or 28000 for any key it refuses.';

-- workers (payflow_worker and its parts)
COMMENT ON FUNCTION payflow.claim_step(text, text, text, integer) IS
	'Leases a step of an operation to a worker: run (with its input, attempt and idempotency key), skip, busy or done.';
COMMENT ON FUNCTION payflow.claim_steps(text, text, text[], integer) IS
	'claim_step for up to 100 operations in one call, one answer or error per item, a pg input inline.';
COMMENT ON FUNCTION payflow.heartbeat(text, text, text, integer, text) IS
	'Renews a step''s lease; false once another worker took the step over.';
COMMENT ON FUNCTION payflow.heartbeat_steps(text, text, text[], integer, text[]) IS
	'heartbeat for up to 100 steps in one update, one answer or error per item.';
COMMENT ON FUNCTION payflow.save_step_ref(text, text, text, text, text) IS
	'Keeps a running step''s external job reference (submit-then-poll), handed to a worker that takes over.';
COMMENT ON FUNCTION payflow.complete_step(text, text, text, jsonb, jsonb, text) IS
	'Completes a leased step: result stored, operation advanced, the next step''s request or the terminal event in the outbox, in one transaction; idempotent.';
COMMENT ON FUNCTION payflow.complete_steps(text, text, jsonb) IS
	'complete_step for up to 100 steps, one answer or error per item.';
COMMENT ON FUNCTION payflow.fail_step(text, text, text, jsonb, boolean, text) IS
	'Records a failed attempt: a retry after exponential back-off with jitter while attempts remain, else the operation FAILED with a dead letter.';
COMMENT ON FUNCTION payflow.fail_steps(text, text, jsonb) IS
	'fail_step for up to 100 steps, one answer or error per item.';
COMMENT ON FUNCTION payflow.payload_get(jsonb) IS
	'Reads a payload of the pg store by its reference, checking its sha256 (PF005).';
COMMENT ON FUNCTION payflow.payload_put(text, text, bytea, text, text, text) IS
	'Writes a step''s result payload in the pg store, only by the step''s lease holder and under its result name; returns the reference.';
COMMENT ON FUNCTION payflow.default_postprocess(text, jsonb) IS
	'The shipped post-processing hook: the invoice input from the payment request and the payment result.';
COMMENT ON FUNCTION payflow.invoke_postprocess(regprocedure, text, jsonb) IS
	'Runs a hook (operation_id text, input jsonb) -> jsonb with the caller''s rights and checks its answer is a JSON object (22023).';
COMMENT ON FUNCTION payflow.run_hook_steps(text, text, regprocedure, text[], integer) IS
	'A hook step for up to 100 operations in one transaction: claim_steps, the hook per item with the caller''s rights, complete_steps; one answer, completion or error per item.';
COMMENT ON FUNCTION payflow.mark_consumed(text, uuid) IS
	'Consumer-side de-duplication by event id: true the first time.';
COMMENT ON FUNCTION payflow.record_dead_letter(text, text, jsonb, text) IS
	'Keeps a message no worker could handle (on its last receive), for an operator.';
COMMENT ON FUNCTION payflow.outbox_claim(integer, text, integer) IS
	'Leases the oldest outbox events to a relay, at most one per message group in flight.';
COMMENT ON FUNCTION payflow.outbox_ack(uuid[], text[], text) IS
	'Deletes events SQS accepted from the outbox and logs their message ids; only from the relay holding the claim.';
COMMENT ON FUNCTION payflow.outbox_nack(uuid, text, text) IS
	'Puts an event SQS refused back, with back-off; only from the relay holding the claim; events are never dropped.';
COMMENT ON FUNCTION payflow.webhook_target(text, uuid, text) IS
	'Where and how to deliver a terminal event to its tenant''s webhook, for events payflow published only (PF008).';
COMMENT ON FUNCTION payflow.record_webhook_failure(uuid, text, text, integer, jsonb) IS
	'Keeps a webhook delivery that failed its last attempt, for replay_webhook.';
COMMENT ON FUNCTION payflow.backoff_delay(integer, interval, interval, double precision) IS
	'min(base * 2^attempt, cap) plus a uniform random share of up to jitter * delay: the retry delay of every step.';

-- operators (payflow_admin)
COMMENT ON FUNCTION payflow.replay(text) IS
	'Runs a FAILED operation again from its failed step, with a fresh attempt budget and the same idempotency key.';
COMMENT ON FUNCTION payflow.run_scheduler(integer) IS
	'One scheduler pass: expired leases, due retries, steps whose messages were lost; what the background worker or pg_cron runs.';
COMMENT ON PROCEDURE payflow.run_scheduler_for(integer) IS
	'run_scheduler every scheduler_naptime for about the given seconds, committing after each pass (pg_cron 1.4).';
COMMENT ON FUNCTION payflow.schedule_scheduler() IS
	'Registers run_scheduler with pg_cron as job payflow-scheduler.';
COMMENT ON FUNCTION payflow.purge(integer) IS
	'Bounded TTL clean-up of ended operations, their payloads and logs, by the retention settings.';
COMMENT ON FUNCTION payflow.schedule_purge(text) IS
	'Registers purge with pg_cron as job payflow-purge.';
COMMENT ON FUNCTION payflow.metrics() IS
	'Health figures for dashboards and alarms; its cost follows the work in flight, never the retention.';
COMMENT ON FUNCTION payflow.create_api_key(text, text) IS
	'A tenant''s API key for the HTTP edge, returned once (pfk_...); only its hash is stored.';
COMMENT ON FUNCTION payflow.revoke_api_key(bigint) IS
	'Revokes an API key or admin key; false if revoked already.';
COMMENT ON FUNCTION payflow.grant_step(text, regrole) IS
	'Binds a step to a role: only members of its roles may claim, renew, complete or fail it (42501), with the claim''s lease token (PF004).';
COMMENT ON FUNCTION payflow.set_step_limit(text, integer, integer, numeric) IS
	'Caps a step across every worker: attempts running at once, per tenant, claims per second; a claim beyond it answers limited with retryAfterSeconds.';
COMMENT ON FUNCTION payflow.clear_step_limit(text) IS
	'Removes a step''s limits; false if it had none.';
COMMENT ON FUNCTION payflow.set_step_breaker(text, numeric, integer, integer, integer, integer) IS
	'A circuit breaker for a step: opens when failure_ratio of at least min_calls claims in window_seconds failed for the back end''s health (retryable errors, expired leases); claims then answer "limited" for cooldown_seconds, then probes go through until they succeed.';
COMMENT ON FUNCTION payflow.clear_step_breaker(text) IS
	'Removes a step''s circuit breaker; true if it had one.';
COMMENT ON FUNCTION payflow.set_tenant_quota(text, integer) IS
	'At most max_open operations in flight for a tenant: past it, submits of new operations are refused (PF011; HTTP 429 with Retry-After), counted at each scheduler pass.';
COMMENT ON FUNCTION payflow.clear_tenant_quota(text) IS
	'Removes a tenant''s quota; true if it had one.';
COMMENT ON FUNCTION payflow.revoke_step(text, regrole) IS
	'Unbinds a step from a role; a step left without grants is open to every worker again.';
COMMENT ON FUNCTION payflow.set_webhook(text, text) IS
	'Registers or replaces a tenant''s webhook URL and returns a new signing secret once (whsec_...).';
COMMENT ON FUNCTION payflow.delete_webhook(text) IS
	'Removes a tenant''s webhook; false if it had none.';
COMMENT ON FUNCTION payflow.replay_webhook(bigint) IS
	'Sends a failed webhook event again (same body and event id); false if replayed already.';

-- the operator console (payflow_console, through payflow-api's /admin/ API)
COMMENT ON FUNCTION payflow.create_admin_key(text) IS
	'An admin key for the console and the admin API, returned once (pfa_...); its name is the actor in history.';
COMMENT ON FUNCTION payflow.admin_whoami(text) IS
	'Who an admin key is: its id, name and the actor its actions are recorded as (the console''s sign-in).';
COMMENT ON FUNCTION payflow.admin_operations(text, jsonb) IS
	'Operations by status, tenant, payment id, created range, step and error code, with index-backed cursor paging.';
COMMENT ON FUNCTION payflow.admin_operation(text, text) IS
	'One operation with its transitions, step attempts, payload references, events and dead letters.';
COMMENT ON FUNCTION payflow.admin_cancel(text, text, text) IS
	'cancel by an admin key, recorded with the key''s name as the actor.';
COMMENT ON FUNCTION payflow.admin_replay(text, text) IS
	'replay by an admin key, recorded with the key''s name as the actor.';
COMMENT ON FUNCTION payflow.admin_dead_letters(text, jsonb) IS
	'Dead letters, newest first, without message bodies.';
COMMENT ON FUNCTION payflow.admin_replay_dead_letters(text, jsonb) IS
	'Replays the operations of chosen dead letters, each with its own answer.';
COMMENT ON FUNCTION payflow.admin_webhook_failures(text, jsonb) IS
	'Webhook deliveries that failed their last attempt, filtered and paged.';
COMMENT ON FUNCTION payflow.admin_replay_webhook_failures(text, jsonb) IS
	'Replays chosen webhook failures, each with its own answer.';
COMMENT ON FUNCTION payflow.admin_stuck(text, jsonb) IS
	'Steps that should be moving and are not: RUNNING past their lease, PENDING past stuck_after, RETRY_WAIT long past their time.';
COMMENT ON FUNCTION payflow.admin_metrics(text, jsonb) IS
	'Figures for the console''s charts: metrics() now and the operations that ended over the last hour or day, by status.';

-- the C-free flavour's settings (the C flavour has GUCs instead)
DO $comments$
BEGIN
	IF to_regprocedure('payflow.set_setting(text,text)') IS NOT NULL THEN
		COMMENT ON FUNCTION payflow.set_setting(text, text) IS
			'C-free flavour: changes a setting for the whole database (units as in postgresql.conf) and returns it.';
		COMMENT ON FUNCTION payflow.reset_setting(text) IS
			'C-free flavour: a setting back to its default; false if it had it already.';
	END IF;
END
$comments$;
