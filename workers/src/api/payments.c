/*
 * payments.c
 *		POST /payments: a payment request becomes an operation.
 *
 *		POST /payments
 *		Authorization: Bearer pfk_…
 *		Idempotency-Key: order-77          (optional; defaults to paymentId)
 *		X-Correlation-Id: req-789          (optional)
 *		traceparent: 00-4bf9…-00f0…-01     (optional, W3C; tracestate too)
 *		{"paymentId": "payment-12345", "details": {"amount": 1250, "currency": "EUR"},
 *		 "priority": 5}                    (optional, -100 to 100; default 0)
 *
 *		202 Accepted
 *		Location: /operations/pay_…
 *		Retry-After: 1
 *		{"operationId": "pay_…", "status": "PENDING"}
 *
 * The body is an object with these members: paymentId (a string),
 * details (an object, handed to the workers exactly as written: "12.50"
 * stays "12.50") and, optionally, priority (a whole number from -100 to
 * 100: the order of a limited step's slots, step_dispatch.sql). Anything
 * else is 422; text that is not
 * JSON (or repeats a member) is 400, and so is a number beyond a double's
 * range such as 1e400 (valid JSON, but no worker could read it). The same Idempotency-Key (or
 * paymentId) with the same paymentId and details answers 202 with the
 * same operation, whose current status is then reported; with other
 * details 409 PF002.
 *
 * Trace context: the operation's trace continues the request's W3C
 * traceparent header (a new trace when there is none, or when it does not
 * parse: the recommendation says to restart then, not to refuse), under
 * this request's span (router.c); submit stores it and the workers'
 * spans follow it.
 *
 * Claim check: when PAYFLOW_STORE=s3 and the body is larger than
 * PAYFLOW_API_S3_THRESHOLD bytes, the details bytes (as written) are put
 * to S3 under requests/hmac-<hex>.json with their checksum, an HMAC-SHA256
 * under the installation's key (payflow.payload_mac_key(), read once
 * with the first such request; hashed while the body arrived once the key
 * is known, details_scan.c), and payflow.submit_ref records the reference;
 * the database never holds them. A plain SHA-256 would name the card
 * number in the request to anyone who sees the key or a message (issue
 * 26, M4). The key is the content's keyed hash, so a replay of the same
 * request names the same object and the same reference (same operation),
 * and an upload is retried safely. The API key is checked first (one
 * statement), so an unauthenticated client cannot make the API write to S3. Other bodies go to payflow.submit and
 * live in PostgreSQL (above payflow.payload_max_bytes that is PF007: 413).
 */
#include "api.h"
#include "submit_batch.h"

#include <stdio.h>
#include <string.h>

#include "payflow/digest.h"
#include "payflow/json_text.h"
#include "payflow/payload_ref.h"
#include "payflow/store.h"

/*
 * authenticate() sets the tenant for this statement's transaction before
 * the select list runs (the FROM item comes first). The outer query reads
 * the operation with the statement's snapshot, taken before submit ran: a
 * new operation is not visible there (status NULL: it is PENDING), one
 * found through the idempotency key is, with its current status.
 */
static const char SUBMIT_REF_SQL[] =
"SELECT s.id, o.status FROM ("
"  SELECT payflow.submit_ref($2, 's3', $3, $4, $5::bigint, $6, $7, $8::integer, $9) AS id"
"  FROM payflow.authenticate($1) OFFSET 0) s"
"  LEFT JOIN payflow.operations o ON o.id = s.id";

static const char AUTHENTICATE_SQL[] = "SELECT payflow.authenticate($1)";

typedef struct payment_body
{
	const char *payment_id;		/* inside doc */
	char		priority[8];	/* "" when the body has none (then NULL: 0) */
	const char *details;		/* the details' source text, details_len bytes */
	size_t		details_len;
	char	   *details_copy;	/* when not a slice of the body */
	bool		scanned;		/* scan_mac holds the details' keyed hash */
	unsigned char scan_mac[PF_SHA256_LEN];
	char		checksum[PF_CHECKSUM_LEN + 1];	/* to_s3 only: details_checksum */
	json_t	   *doc;
} payment_body;

static void
payment_body_free(payment_body *pb)
{
	free(pb->details_copy);
	json_decref(pb->doc);
}

/*
 * The optional priority member as submit's argument text ("" when absent
 * or null); false when it is not a whole number from -100 to 100.  The
 * document is parsed with JSON_DECODE_INT_AS_REAL: every number is a real.
 */
static bool
parse_priority(const json_t *value, char out[8])
{
	double		v;

	out[0] = '\0';
	if (value == NULL || json_is_null(value))
		return true;
	if (!json_is_number(value))
		return false;
	v = json_number_value(value);
	if (v < -100 || v > 100 || v != (double) (int) v)
		return false;
	snprintf(out, 8, "%d", (int) v);
	return true;
}

/* Parse and check the body; on failure the answer is queued and false returned. */
static bool
parse_body(api_request *req, payment_body *pb, enum MHD_Result *answer)
{
	json_error_t jerr;
	json_t	   *payment_id;
	json_t	   *details;
	const char *name;
	json_t	   *value;

	memset(pb, 0, sizeof(*pb));
	if (req->body.len == 0)
	{
		*answer = api_reply_error(req, MHD_HTTP_BAD_REQUEST, "malformed_json", "the request body is empty");
		return false;
	}
	/*
	 * Parsed to validate only: the details travel as their source text, so
	 * integers beyond 64 bits (valid JSON) must not fail as jansson ints.
	 */
	pb->doc = json_loadb(req->body.data, req->body.len, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &jerr);
	if (pb->doc == NULL && json_error_code(&jerr) == json_error_numeric_overflow)
	{
		/* valid JSON, but a double cannot hold it and neither could the workers */
		*answer = api_reply_error(req, MHD_HTTP_BAD_REQUEST, "number_out_of_range",
								  "a number in the body is too large (line %d, column %d): numbers must fit "
								  "a 64-bit floating point value; send larger ones as strings",
								  jerr.line, jerr.column);
		return false;
	}
	if (pb->doc == NULL)
	{
		/* jerr.text may quote the body: only the position is shown */
		*answer = api_reply_error(req, MHD_HTTP_BAD_REQUEST, "malformed_json",
								  "the body is not valid JSON (line %d, column %d)", jerr.line, jerr.column);
		return false;
	}
	if (!json_is_object(pb->doc))
	{
		*answer = api_reply_error(req, MHD_HTTP_UNPROCESSABLE_CONTENT, "invalid_request",
								  "the body must be a JSON object with paymentId and details");
		return false;
	}
	json_object_foreach(pb->doc, name, value)
	{
		if (strcmp(name, "paymentId") != 0 && strcmp(name, "details") != 0 && strcmp(name, "priority") != 0)
		{
			*answer = api_reply_error(req, MHD_HTTP_UNPROCESSABLE_CONTENT, "invalid_request",
									  "unknown member \"%.64s\" (expected paymentId, details and priority)", name);
			return false;
		}
	}
	if (!parse_priority(json_object_get(pb->doc, "priority"), pb->priority))
	{
		*answer = api_reply_error(req, MHD_HTTP_UNPROCESSABLE_CONTENT, "invalid_request",
								  "priority must be a whole number from -100 to 100");
		return false;
	}
	payment_id = json_object_get(pb->doc, "paymentId");
	details = json_object_get(pb->doc, "details");
	if (payment_id == NULL || details == NULL)
	{
		*answer = api_reply_error(req, MHD_HTTP_UNPROCESSABLE_CONTENT, "invalid_request", "missing member %s",
								  payment_id == NULL ? "paymentId" : "details");
		return false;
	}
	if (!json_is_string(payment_id))
	{
		*answer = api_reply_error(req, MHD_HTTP_UNPROCESSABLE_CONTENT, "invalid_request",
								  "paymentId must be a string");
		return false;
	}
	if (!json_is_object(details))
	{
		*answer = api_reply_error(req, MHD_HTTP_UNPROCESSABLE_CONTENT, "invalid_request",
								  "details must be an object");
		return false;
	}
	pb->payment_id = json_string_value(payment_id);

	if (req->scanning && details_scan_finish(&req->scan) && req->scan.end <= req->body.len)
	{
		/* found while the body arrived (hashed too, when the key was known) */
		pb->details = req->body.data + req->scan.start;
		pb->details_len = req->scan.end - req->scan.start;
		pb->scanned = req->scan.keyed;
		memcpy(pb->scan_mac, req->scan.digest, PF_SHA256_LEN);
	}
	else
	{
		/* the scanner gave up (escaped member name): take the parser's word */
		pf_json_member_kind kind;
		pf_error	err;

		if (pf_json_member_text(req->body.data, req->body.len, "details", &kind, &pb->details_copy, &err) != PF_OK ||
			kind != PF_JSON_MEMBER_OTHER)
		{
			*answer = api_reply_error(req, MHD_HTTP_UNPROCESSABLE_CONTENT, "invalid_request",
									  "details must be an object");
			return false;
		}
		pb->details = pb->details_copy;
		pb->details_len = strlen(pb->details_copy);
	}
	return true;
}

/*
 * The installation's payload checksum key, read through slot on first use
 * (payflow.payload_mac_key(): the API's login needs payflow_payload_mac).
 */
static pf_result
payload_mac(api_context *ctx, api_slot *slot, pf_checksum_key *key, pf_error *err)
{
	pf_result	r = PF_OK;

	pthread_mutex_lock(&ctx->mac_lock);
	if (!ctx->payload_mac.set)
		r = pf_checksum_key_load(slot->pg, &ctx->payload_mac, err);
	*key = ctx->payload_mac;
	pthread_mutex_unlock(&ctx->mac_lock);
	return r;
}

/* pb->checksum: "hmac-sha256:<hex>" of the details, from the scan when it had the key. */
static void
details_checksum(payment_body *pb, const pf_checksum_key *key)
{
	if (pb->scanned)
	{
		memcpy(pb->checksum, "hmac-sha256:", 12);
		pf_hex_encode(pb->scan_mac, PF_SHA256_LEN, pb->checksum + 12);
	}
	else if (!pf_checksum_of(key, pb->details, pb->details_len, pb->checksum))
		abort();				/* payload_mac set the key */
}

/*
 * Put the details to S3 under their hash; fills key.  With the HTTP
 * thread's own S3 client and no database connection held: a slow S3 (the
 * call is bounded by PAYFLOW_HTTP_TIMEOUT_MS) holds this request only, not
 * the pool every endpoint needs.
 */
static pf_result
store_in_s3(api_request *req, const payment_body *pb, char *key, size_t key_len, pf_error *err)
{
	pf_s3	   *s3 = api_thread_s3(&req->ctx->cfg, err);

	if (s3 == NULL)
		return err->result == PF_OK ? PF_ERR_TRANSIENT : err->result;
	if (key_len < PF_PAYLOAD_KEY_MAX + 1 || !pf_request_key(pb->checksum, key))
		return pf_error_set(err, PF_ERR_INVALID, "invalid_input", "no key for a checksum %.16s\u2026", pb->checksum);
	return pf_s3_put_object(s3, req->ctx->cfg.s3_bucket, key, pb->details, pb->details_len,
							"application/json", err);
}

static enum MHD_Result
accepted(api_request *req, const char *operation_id, const char *status)
{
	char		location[160];
	char		retry_after[16];
	const char *headers[] = {MHD_HTTP_HEADER_LOCATION, location, MHD_HTTP_HEADER_RETRY_AFTER, retry_after, NULL};

	snprintf(location, sizeof(location), "/operations/%s", operation_id);
	snprintf(retry_after, sizeof(retry_after), "%d", req->ctx->cfg.api_retry_after);
	return api_reply_json_headers(req, MHD_HTTP_ACCEPTED,
								  json_pack("{s:s,s:s}", "operationId", operation_id, "status", status), headers);
}

/* The answer to a submit, its span ended: 202 with the operation, or the database's error. */
static enum MHD_Result
submit_answer(api_request *req, const payment_body *pb, bool to_s3, pf_result r, const pf_error *err,
			  const char *operation_id, const char *status, pf_span *submit)
{
	if (r != PF_OK)
	{
		pf_span_set_str(submit, "db.response.status_code", err->code);
		pf_span_set_error(submit, err->code);
		pf_span_end(submit);
		return api_reply_db_error(req, err);
	}
	pf_span_set_str(submit, "payflow.operation.id", operation_id);
	pf_span_end(submit);
	{
		pf_log_ids	ids = {operation_id, NULL, req->correlation_id, req->otel.ctx.trace_id, req->otel.ctx.span_id};

		pf_log_write(PF_LOG_INFO, &ids,
					 json_pack("{s:s,s:s,s:I}", "paymentId", pb->payment_id, "store", to_s3 ? "s3" : "pg",
							   "bytes", (json_int_t) pb->details_len),
					 "payment accepted");
	}
	return accepted(req, operation_id, status);
}

/* Inline details: alone, or with others waiting for a turn (submit_batch.h). */
static enum MHD_Result
submit_inline(api_request *req, const payment_body *pb, const char *api_key, const char *idempotency_key,
			  const char *traceparent, pf_span *submit)
{
	api_submit	sub = {0};
	char	   *details = pf_strndup(pb->details, pb->details_len);

	sub.api_key = api_key;
	sub.payment_id = pb->payment_id;
	sub.details = details;
	sub.idempotency_key = idempotency_key;
	sub.correlation_id = req->correlation_id;
	sub.priority = pb->priority[0] ? pb->priority : NULL;
	sub.traceparent = traceparent;
	api_submit_run(req->ctx, &sub);
	free(details);
	if (sub.pool_exhausted)
	{
		pf_span_discard(submit);
		return api_reply_pool_exhausted(req);
	}
	pf_span_set_int(submit, "payflow.submit.batch_size", sub.batch_size);
	return submit_answer(req, pb, false, sub.r, &sub.err, sub.operation_id, sub.status, submit);
}

/*
 * Details above PAYFLOW_API_S3_THRESHOLD: the key checked, the details put
 * to S3 with no connection held, then submit_ref with their reference.
 */
static enum MHD_Result
submit_by_reference(api_request *req, payment_body *pb, const char *api_key, const char *idempotency_key,
					const char *traceparent, pf_span *submit)
{
	api_context *ctx = req->ctx;
	const char *auth_values[1] = {api_key};
	char		key[PF_PAYLOAD_KEY_MAX + 1];
	char		size[32];
	const char *values[9] = {api_key, pb->payment_id, key, pb->checksum, size, idempotency_key,
	req->correlation_id, pb->priority[0] ? pb->priority : NULL, traceparent};
	pf_checksum_key mac;
	api_slot   *slot;
	PGresult   *res = NULL;
	pf_error	err;
	pf_result	r;
	enum MHD_Result answer;

	snprintf(size, sizeof(size), "%zu", pb->details_len);
	if ((slot = api_pool_acquire(&ctx->pool)) == NULL)
	{
		pf_span_discard(submit);
		return api_reply_pool_exhausted(req);
	}
	/* the key is checked before anything is uploaded for it */
	r = pf_pg_exec(slot->pg, AUTHENTICATE_SQL, 1, auth_values, NULL, &err);
	if (r == PF_OK)
		r = payload_mac(ctx, slot, &mac, &err);
	api_pool_release(&ctx->pool, slot);
	if (r == PF_OK)
	{
		details_checksum(pb, &mac);
		r = store_in_s3(req, pb, key, sizeof(key), &err);
		if (r != PF_OK)
		{
			pf_log_ids	ids = {NULL, NULL, req->correlation_id, req->otel.ctx.trace_id, req->otel.ctx.span_id};

			pf_log_error(&ids, "POST /payments: S3 put of %s failed: %s %s", key, err.code, err.message);
			pf_span_set_error(submit, "payload store unavailable");
			pf_span_end(submit);
			return api_reply_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "unavailable",
								   "the payload store is unavailable, retry later");
		}
		/* a slot again for the submit (the object is stored: a retry puts the same one) */
		if ((slot = api_pool_acquire(&ctx->pool)) == NULL)
		{
			pf_span_discard(submit);
			return api_reply_pool_exhausted(req);
		}
		r = pf_pg_exec(slot->pg, SUBMIT_REF_SQL, 9, values, &res, &err);
		api_pool_release(&ctx->pool, slot);
	}
	if (r == PF_OK && (PQntuples(res) != 1 || PQgetisnull(res, 0, 0)))
		r = pf_error_set(&err, PF_ERR_FINAL, "XX000", "payflow.submit_ref returned no operation id");
	answer = submit_answer(req, pb, true, r, &err, r == PF_OK ? PQgetvalue(res, 0, 0) : NULL,
						   r == PF_OK && !PQgetisnull(res, 0, 1) ? PQgetvalue(res, 0, 1) : "PENDING", submit);
	PQclear(res);
	return answer;
}

enum MHD_Result
api_post_payment(api_request *req)
{
	api_context *ctx = req->ctx;
	const char *api_key = api_bearer_key(req);
	const char *idempotency_key = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Idempotency-Key");
	payment_body pb;
	enum MHD_Result answer;
	bool		to_s3;
	char		traceparent[PF_TRACEPARENT_LEN + 1];
	pf_span		submit;

	if (api_key == NULL)
		return api_reply_unauthorized(req);
	if (!parse_body(req, &pb, &answer))
	{
		payment_body_free(&pb);
		return answer;
	}
	to_s3 = ctx->s3_enabled && req->received > (size_t) ctx->cfg.api_s3_threshold;
	/* the operation's spans are children of its submit's (trace_context.h) */
	pf_span_begin(&submit, to_s3 ? "payflow.submit_ref" : "payflow.submit", PF_SPAN_CLIENT, &req->otel.ctx);
	pf_span_set_str(&submit, "db.system", "postgresql");
	pf_traceparent_format(&submit.ctx, traceparent);
	answer = to_s3 ? submit_by_reference(req, &pb, api_key, idempotency_key, traceparent, &submit)
		: submit_inline(req, &pb, api_key, idempotency_key, traceparent, &submit);
	payment_body_free(&pb);
	return answer;
}
