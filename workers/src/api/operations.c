/*
 * operations.c
 *		GET /operations/{id}: the status document of payflow.status().
 *
 * 200 with the document, and Retry-After while the operation is not
 * terminal (when to look again); 404 for an id that is unknown or belongs
 * to another tenant; the two are indistinguishable by design (PF003 from
 * the database in both cases), so ids cannot be probed across tenants. A
 * malformed id is 404 too, after the key was checked: a bad key is always
 * 401 first.
 */
#include "api.h"

#include <stdio.h>
#include <string.h>

static const char STATUS_SQL[] = "SELECT payflow.status($2)::text FROM payflow.authenticate($1)";

enum MHD_Result
api_get_operation(api_request *req)
{
	const char *api_key = api_bearer_key(req);
	const char *values[2] = {api_key, req->operation_id};
	api_slot   *slot;
	PGresult   *res = NULL;
	pf_error	err;
	pf_result	r;
	json_t	   *doc;
	enum MHD_Result answer;

	if (api_key == NULL)
		return api_reply_unauthorized(req);
	slot = api_pool_acquire(&req->ctx->pool);
	if (slot == NULL)
		return api_reply_pool_exhausted(req);
	r = pf_pg_exec(slot->pg, STATUS_SQL, 2, values, &res, &err);
	api_pool_release(&req->ctx->pool, slot);
	if (r != PF_OK && strncmp(err.code, "22", 2) == 0)
		pf_error_set(&err, PF_ERR_NOT_FOUND, "PF003", "not an operation id");	/* a malformed id names nothing */
	if (r != PF_OK)
		return api_reply_db_error(req, &err);
	doc = PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) ? json_loads(PQgetvalue(res, 0, 0), 0, NULL) : NULL;
	PQclear(res);
	if (doc == NULL)
	{
		pf_error_set(&err, PF_ERR_FINAL, "XX000", "payflow.status returned no document");
		return api_reply_db_error(req, &err);
	}
	if (json_is_true(json_object_get(doc, "terminal")))
		answer = api_reply_json(req, MHD_HTTP_OK, doc);
	else
	{
		char		retry_after[16];
		const char *headers[] = {MHD_HTTP_HEADER_RETRY_AFTER, retry_after, NULL};

		snprintf(retry_after, sizeof(retry_after), "%d", req->ctx->cfg.api_retry_after);
		answer = api_reply_json_headers(req, MHD_HTTP_OK, doc, headers);
	}
	return answer;
}
