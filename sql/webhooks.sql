-- Webhooks: registration, the worker's target, failures and their replay.
SELECT payflow.create_api_key('hook-a') AS key_a \gset
SELECT payflow.submit('wh-pay-1', '{}') AS op_a FROM payflow.authenticate(:'key_a') \gset
SELECT payflow.submit('wh-pay-2', '{}') AS op_sql \gset
-- both end FAILED, so payflow publishes an OperationFailed event for each
SELECT bool_and(payflow.claim_step(o, 'PROCESS_PAYMENT', 'wh-w') ->> 'action' = 'run'
				AND payflow.fail_step(o, 'PROCESS_PAYMENT', 'wh-w', '{"code": "DECLINED"}', false) ->> 'action' = 'failed') AS failed
  FROM unnest(ARRAY[:'op_a', :'op_sql']) o;
SELECT event_id AS ev_a, body AS body_a FROM payflow.outbox
 WHERE operation_id = :'op_a' AND destination = 'operation-events' \gset
SELECT event_id AS ev_sql, body AS body_sql FROM payflow.outbox
 WHERE operation_id = :'op_sql' AND destination = 'operation-events' \gset

SELECT payflow.set_webhook('hook-a', 'https://example.test/hooks/payflow') AS secret1 \gset
SELECT left(:'secret1', 6) AS prefix, length(:'secret1') AS length;
SELECT t ->> 'tenant' AS tenant, t ->> 'url' AS url, t ->> 'secret' = :'secret1' AS same_secret
  FROM payflow.webhook_target(:'op_a', :'ev_a', :'body_a') t;
SELECT payflow.webhook_target(:'op_sql', :'ev_sql', :'body_sql') IS NULL AS no_webhook_for_sql_tenant;
SELECT * FROM pf_try($$SELECT payflow.webhook_target('pay_00000000000000000000000000', gen_random_uuid(), '{}')$$);
-- Only events payflow published are signed: not an unknown event id, not
-- a published one with another body ("completed" for a failed operation),
-- not another operation's event; the same JSON formatted otherwise is fine.
SELECT * FROM pf_try(format($$SELECT payflow.webhook_target(%L, gen_random_uuid(), %L)$$, :'op_a', :'body_a'));
SELECT * FROM pf_try(format($$SELECT payflow.webhook_target(%L, %L, %L)$$, :'op_a', :'ev_a',
						 jsonb_set(:'body_a'::jsonb, '{status}', '"COMPLETED"')::text));
SELECT * FROM pf_try(format($$SELECT payflow.webhook_target(%L, %L, %L)$$, :'op_a', :'ev_sql', :'body_sql'));
SELECT * FROM pf_try(format($$SELECT payflow.webhook_target(%L, %L, 'not json')$$, :'op_a', :'ev_a'));
SELECT * FROM pf_try(format($$SELECT payflow.webhook_target(%L, NULL, %L)$$, :'op_a', :'body_a'));
SELECT payflow.webhook_target(:'op_a', :'ev_a', jsonb_pretty(:'body_a'::jsonb)) ->> 'tenant' AS reformatted_body_ok;
-- 0.5.0 keeps a terminal event once, in the outbox's log; an event
-- published before the update is known by its operation_events row.
SELECT count(*) AS operation_events_written FROM payflow.operation_events WHERE operation_id = :'op_a';
SELECT gen_random_uuid() AS ev_old \gset
SELECT jsonb_set(:'body_a'::jsonb, '{eventId}', to_jsonb(:'ev_old'::text))::text AS body_old \gset
INSERT INTO payflow.operation_events (event_id, operation_id, body_sha256)
VALUES (:'ev_old', :'op_a', sha256(convert_to(:'body_old'::jsonb::text, 'UTF8')));
SELECT payflow.webhook_target(:'op_a', :'ev_old', :'body_old') ->> 'tenant' AS pre_0_5_event_ok;

-- Replacing rotates the secret.  The previous one still signs for
-- payflow.webhook_secret_overlap (24 h by default), so the worker signs
-- with both meanwhile; an overlap of 0 ends it with the rotation.
SELECT payflow.set_webhook('hook-a', 'http://127.0.0.1:9/hook?x=1') AS secret2 \gset
SELECT :'secret2' <> :'secret1' AS rotated, t ->> 'url' AS url, t ->> 'secret' = :'secret2' AS new_secret,
	   t ->> 'previousSecret' = :'secret1' AS previous_still_signs
  FROM payflow.webhook_target(:'op_a', :'ev_a', :'body_a') t;
SET payflow.webhook_secret_overlap = 0;
SELECT payflow.set_webhook('hook-a', 'http://127.0.0.1:9/hook?x=1') AS secret3 \gset
SELECT t ->> 'secret' = :'secret3' AS new_secret, t ? 'previousSecret' AS previous_signs
  FROM payflow.webhook_target(:'op_a', :'ev_a', :'body_a') t;
RESET payflow.webhook_secret_overlap;
SELECT payflow.set_webhook('hook-a', 'http://127.0.0.1:9/hook?x=1') AS secret2 \gset
-- At rest the secrets are sealed under a key of their own table: neither
-- the current nor the previous one is in the row, and the bytes changed
-- or opened with another key fail (XX001) instead of giving garbage.
SELECT position(convert_to(:'secret2', 'UTF8') IN w.secret_sealed) = 0
	   AND position(convert_to(:'secret3', 'UTF8') IN w.previous_secret_sealed) = 0 AS sealed_at_rest
  FROM payflow.webhooks w WHERE w.tenant = 'hook-a';
SELECT payflow._unseal(w.secret_sealed, k.key) = :'secret2' AS opens_with_its_key
  FROM payflow.webhooks w, payflow._webhook_key k WHERE w.tenant = 'hook-a';
SELECT * FROM pf_try($$SELECT payflow._unseal(w.secret_sealed, sha256('another key'))
						 FROM payflow.webhooks w WHERE w.tenant = 'hook-a'$$);
SELECT * FROM pf_try($$SELECT payflow._unseal(set_byte(w.secret_sealed, 20, get_byte(w.secret_sealed, 20) # 1), k.key)
						 FROM payflow.webhooks w, payflow._webhook_key k WHERE w.tenant = 'hook-a'$$);
SELECT * FROM pf_try($$SELECT payflow.set_webhook('hook-a', 'ftp://example.test/x')$$);
SELECT * FROM pf_try($$SELECT payflow.set_webhook('hook-a', 'https://')$$);
SELECT * FROM pf_try($$SELECT payflow.set_webhook('hook-a', 'https://exa mple.test/')$$);
SELECT * FROM pf_try($$SELECT payflow.set_webhook('', 'https://example.test/')$$);
SELECT * FROM pf_try($$SELECT payflow.set_webhook('hook-a', NULL)$$);

-- A failed delivery: one row per event, open until replayed; only of an
-- event payflow published (what a replay sends must be payflow's own).
SELECT :'ev_a' AS ev, :'body_a' AS body \gset
SELECT * FROM pf_try(format($$SELECT payflow.record_webhook_failure(gen_random_uuid(), %L, %L, 3, NULL)$$, :'op_a', :'body_a'));
SELECT payflow.record_webhook_failure(:'ev', :'op_a', :'body', 3, '{"status": 503}') AS f1 \gset
SELECT payflow.record_webhook_failure(:'ev', :'op_a', :'body', 4, '{"status": 500}') = :f1 AS same_row;
SELECT tenant, url, attempts, error, replayed_at IS NULL AS open FROM payflow.webhook_failures WHERE id = :f1;
SELECT * FROM pf_try(format($$SELECT payflow.record_webhook_failure(gen_random_uuid(), %L, 'not json', 1, NULL)$$, :'op_a'));
SELECT * FROM pf_try(format($$SELECT payflow.record_webhook_failure(gen_random_uuid(), %L, '[1, 2]', 1, NULL)$$, :'op_a'));
SELECT * FROM pf_try(format($$SELECT payflow.record_webhook_failure(%L, %L, %L, 0, NULL)$$, :'ev_a', :'op_a', :'body_a'));
SELECT * FROM pf_try(format($$SELECT payflow.record_webhook_failure(NULL, %L, '{}', 1, NULL)$$, :'op_a'));
SELECT * FROM pf_try($$SELECT payflow.record_webhook_failure(gen_random_uuid(), 'pay_00000000000000000000000000', '{"eventType": "OperationCompleted"}', 1, NULL)$$);
SELECT (payflow.metrics() -> 'webhookFailures' ->> 'open')::int AS open_failures;

-- Replay: the same body back to operation-events, once.
TRUNCATE payflow.outbox;
SELECT payflow.replay_webhook(:f1) AS replayed, payflow.replay_webhook(:f1) AS again;
SELECT destination, event_type, message_group_id, body ->> 'eventId' = :'ev' AS same_event_id,
       event_id::text <> :'ev' AS new_outbox_id
  FROM payflow.outbox;
SELECT * FROM pf_try($$SELECT payflow.replay_webhook(-1)$$);
-- failing again re-opens it
SELECT payflow.record_webhook_failure(:'ev', :'op_a', :'body', 2, NULL) = :f1 AS same_row;
SELECT replayed_at IS NULL AS open_again FROM payflow.webhook_failures WHERE id = :f1;

-- Secrets: the admin reads webhooks but not their secrets; workers read no table.
CREATE ROLE regress_hook_admin IN ROLE payflow_admin;
SET ROLE regress_hook_admin;
SELECT tenant, url FROM payflow.webhooks;
SELECT * FROM pf_try($$SELECT secret_sealed FROM payflow.webhooks$$);
SELECT * FROM pf_try($$SELECT key FROM payflow._webhook_key$$);
SELECT * FROM pf_try(format($$SELECT payflow.webhook_target(%L, %L, %L)$$, :'op_a', :'ev_a', :'body_a'));
SELECT * FROM pf_try($$SELECT key_hash FROM payflow.api_keys$$);
RESET ROLE;
DROP ROLE regress_hook_admin;

-- delete_webhook, and purge of old failures
SELECT payflow.delete_webhook('hook-a') AS deleted, payflow.delete_webhook('hook-a') AS again;
SELECT payflow.webhook_target(:'op_a', :'ev_a', :'body_a') IS NULL AS no_webhook_any_more;
SET payflow.retention_failed = 0;
SELECT (payflow.purge() ->> 'webhookFailures')::int >= 1 AS purged;
SELECT count(*) AS failures_left FROM payflow.webhook_failures;
RESET payflow.retention_failed;
