/*
 * admin.c
 *		The admin API under /admin/, for admin keys (pfa_…) only: the
 *		operator console's reads and actions.
 *
 *		GET  /admin/whoami
 *		GET  /admin/operations?status=&tenant=&paymentId=&createdFrom=&createdTo=&step=&errorCode=&after=&limit=
 *		GET  /admin/operations/{id}
 *		POST /admin/operations/{id}/replay
 *		POST /admin/operations/{id}/cancel        {"reason": "…"} (optional)
 *		GET  /admin/dead-letters?open=&after=&limit=
 *		POST /admin/dead-letters/{id}/replay
 *		POST /admin/dead-letters/replay           {"ids": [1, 2]}
 *		GET  /admin/webhook-failures?open=&after=&limit=
 *		POST /admin/webhook-failures/{id}/replay
 *		POST /admin/webhook-failures/replay       {"ids": [1, 2]}
 *		GET  /admin/stuck?limit=
 *		GET  /admin/metrics?window=hour|day
 *
 * Each is one statement calling payflow.admin_*(key, …) (extension/sql/
 * admin.sql), which checks the key and the filters itself: the query
 * string goes to the database as a JSON object of strings, so the rules
 * for each parameter live in one place.  Answers: 401 without a valid
 * admin key, 403 for a tenant's key (nothing runs), 400 naming the
 * parameter at fault, 404, 409 with the SQLSTATE and its meaning (replay
 * of an operation that is not FAILED, cancel after a worker started it).
 */
#include "api.h"

#include <stdlib.h>
#include <string.h>

#include "payflow/digest.h"

#define ADMIN_PREFIX "/admin/"

typedef enum admin_endpoint
{
	ADMIN_NONE = 0,
	ADMIN_WHOAMI,
	ADMIN_OPERATIONS,
	ADMIN_OPERATION,
	ADMIN_REPLAY,
	ADMIN_CANCEL,
	ADMIN_DEAD_LETTERS,
	ADMIN_DEAD_LETTER_REPLAY,
	ADMIN_DEAD_LETTERS_REPLAY,
	ADMIN_WEBHOOK_FAILURES,
	ADMIN_WEBHOOK_FAILURE_REPLAY,
	ADMIN_WEBHOOK_FAILURES_REPLAY,
	ADMIN_STUCK,
	ADMIN_METRICS
} admin_endpoint;

/* What each endpoint runs: its SQL, method, and the form of its argument. */
typedef enum admin_arg
{
	ARG_NONE,					/* (key) */
	ARG_FILTERS,				/* (key, query as jsonb) */
	ARG_ID,						/* (key, id from the path) */
	ARG_ID_REASON,				/* (key, id, reason from the body) */
	ARG_ID_LIST,				/* (key, '[id]' from the path) */
	ARG_IDS						/* (key, ids from the body) */
} admin_arg;

typedef struct admin_spec
{
	const char *method;
	admin_arg	arg;
	const char *sql;
} admin_spec;

static const admin_spec specs[] = {
	[ADMIN_WHOAMI] = {"GET", ARG_NONE, "SELECT payflow.admin_whoami($1)::text"},
	[ADMIN_OPERATIONS] = {"GET", ARG_FILTERS, "SELECT payflow.admin_operations($1, $2::jsonb)::text"},
	[ADMIN_OPERATION] = {"GET", ARG_ID, "SELECT payflow.admin_operation($1, $2)::text"},
	[ADMIN_REPLAY] = {"POST", ARG_ID, "SELECT payflow.admin_replay($1, $2)::text"},
	[ADMIN_CANCEL] = {"POST", ARG_ID_REASON, "SELECT payflow.admin_cancel($1, $2, $3)::text"},
	[ADMIN_DEAD_LETTERS] = {"GET", ARG_FILTERS, "SELECT payflow.admin_dead_letters($1, $2::jsonb)::text"},
	[ADMIN_DEAD_LETTER_REPLAY] = {"POST", ARG_ID_LIST, "SELECT payflow.admin_replay_dead_letters($1, $2::jsonb)::text"},
	[ADMIN_DEAD_LETTERS_REPLAY] = {"POST", ARG_IDS, "SELECT payflow.admin_replay_dead_letters($1, $2::jsonb)::text"},
	[ADMIN_WEBHOOK_FAILURES] = {"GET", ARG_FILTERS, "SELECT payflow.admin_webhook_failures($1, $2::jsonb)::text"},
	[ADMIN_WEBHOOK_FAILURE_REPLAY] = {"POST", ARG_ID_LIST, "SELECT payflow.admin_replay_webhook_failures($1, $2::jsonb)::text"},
	[ADMIN_WEBHOOK_FAILURES_REPLAY] = {"POST", ARG_IDS, "SELECT payflow.admin_replay_webhook_failures($1, $2::jsonb)::text"},
	[ADMIN_STUCK] = {"GET", ARG_FILTERS, "SELECT payflow.admin_stuck($1, $2::jsonb)::text"},
	[ADMIN_METRICS] = {"GET", ARG_FILTERS, "SELECT payflow.admin_metrics($1, $2::jsonb)::text"},
};

/* "/admin/<collection>/<id>/<verb>" split; the id is copied out. */
static admin_endpoint
endpoint_of(const char *path, char **id)
{
	const char *rest = path + strlen(ADMIN_PREFIX);
	char	   *parts[4] = {0};
	int			n = 0;
	char	   *copy = pf_strdup(rest);
	char	   *save = NULL;
	size_t		len = strlen(rest);
	admin_endpoint e = ADMIN_NONE;

	*id = NULL;
	for (char *p = strtok_r(copy, "/", &save); p && n < 4; p = strtok_r(NULL, "/", &save))
		parts[n++] = p;
	if (n == 0 || n == 4 || (len > 0 && rest[len - 1] == '/'))
		goto done;
	if (n == 1)
	{
		static const struct
		{
			const char *name;
			admin_endpoint e;
		}			lists[] = {
			{"whoami", ADMIN_WHOAMI}, {"operations", ADMIN_OPERATIONS}, {"dead-letters", ADMIN_DEAD_LETTERS},
			{"webhook-failures", ADMIN_WEBHOOK_FAILURES}, {"stuck", ADMIN_STUCK}, {"metrics", ADMIN_METRICS},
		};

		for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++)
			if (strcmp(parts[0], lists[i].name) == 0)
				e = lists[i].e;
	}
	else if (n == 2 && strcmp(parts[0], "operations") == 0)
		e = ADMIN_OPERATION;
	else if (n == 2 && strcmp(parts[1], "replay") == 0)
		e = strcmp(parts[0], "dead-letters") == 0 ? ADMIN_DEAD_LETTERS_REPLAY
			: strcmp(parts[0], "webhook-failures") == 0 ? ADMIN_WEBHOOK_FAILURES_REPLAY : ADMIN_NONE;
	else if (n == 3 && strcmp(parts[0], "operations") == 0)
		e = strcmp(parts[2], "replay") == 0 ? ADMIN_REPLAY : strcmp(parts[2], "cancel") == 0 ? ADMIN_CANCEL : ADMIN_NONE;
	else if (n == 3 && strcmp(parts[2], "replay") == 0)
		e = strcmp(parts[0], "dead-letters") == 0 ? ADMIN_DEAD_LETTER_REPLAY
			: strcmp(parts[0], "webhook-failures") == 0 ? ADMIN_WEBHOOK_FAILURE_REPLAY : ADMIN_NONE;
	if (e == ADMIN_OPERATION || e == ADMIN_REPLAY || e == ADMIN_CANCEL ||
		e == ADMIN_DEAD_LETTER_REPLAY || e == ADMIN_WEBHOOK_FAILURE_REPLAY)
		*id = pf_strndup(parts[1], 100);
done:
	free(copy);
	return e;
}

bool
api_admin_route(const char *path)
{
	return strncmp(path, ADMIN_PREFIX, strlen(ADMIN_PREFIX)) == 0 || strcmp(path, "/admin") == 0;
}

bool
api_admin_takes_body(api_request *req)
{
	return req->route == ROUTE_ADMIN && strcmp(req->method, "POST") == 0;
}

/* A query value percent-decoded ('+' is a space), or NULL when broken. */
static char *
query_decode(const char *raw)
{
	char	   *out = pf_malloc(strlen(raw) + 1);
	char	   *o = out;

	for (const char *p = raw; *p; p++)
	{
		if (*p == '%')
		{
			char		digits[3] = {p[1], p[1] ? p[2] : '\0', '\0'};
			unsigned char c;

			if (!pf_hex_decode(digits, &c, 1) || c == '\0')
			{
				free(out);
				return NULL;
			}
			*o++ = (char) c;
			p += 2;
		}
		else
			*o++ = *p == '+' ? ' ' : *p;
	}
	*o = '\0';
	return out;
}

typedef struct query_scan
{
	json_t	   *filters;
	const char *bad;			/* the parameter at fault, or NULL */
	const char *why;
	char	   *bad_copy;
} query_scan;

/* name is valid UTF-8 (jansson's own test, on a value that is freed again) */
static bool
utf8_name(const char *name)
{
	json_t	   *probe = json_string(name);
	bool		valid = probe != NULL;

	json_decref(probe);
	return valid;
}

static enum MHD_Result
scan_argument(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	query_scan *q = cls;
	char	   *name;
	char	   *text;
	json_t	   *str;

	(void) kind;
	if (q->bad != NULL)
		return MHD_NO;
	name = query_decode(key);
	text = query_decode(value ? value : "");
	str = text ? json_string(text) : NULL;
	/* json_object_set_new refuses a name that is not UTF-8: that check, without a json_t to leak */
	if (name == NULL || !utf8_name(name))
		q->why = "a parameter name is not valid percent-encoded UTF-8";
	else if (str == NULL)
		q->why = "is not valid percent-encoded UTF-8";
	else if (json_object_get(q->filters, name) != NULL)
		q->why = "is given more than once";
	else
	{
		json_object_set_new(q->filters, name, str);
		free(name);
		free(text);
		return MHD_YES;
	}
	json_decref(str);
	q->bad_copy = name ? name : pf_strdup("?");
	q->bad = q->bad_copy;
	free(text);
	return MHD_NO;
}

/* 400 naming the parameter: {"error":{"code":"invalid_parameter","parameter":…,"message":…}} */
static enum MHD_Result
reply_bad_parameter(api_request *req, const char *name, const char *message)
{
	pf_buf		msg = PF_BUF_INIT;
	json_t	   *doc;

	pf_buf_append_str(&msg, message);
	pf_utf8_sanitize(msg.data ? msg.data : (char *) "", msg.len);
	doc = json_pack("{s:{s:s,s:s,s:s}}", "error", "code", "invalid_parameter", "parameter", name,
					"message", pf_buf_str(&msg));
	pf_buf_free(&msg);
	return api_reply_json(req, MHD_HTTP_BAD_REQUEST, doc);
}

/*
 * A failed admin statement: the key's errors, the named parameter, and
 * the domain errors an operator acts on, with the database's message
 * (which holds no SQL); anything else as every other endpoint answers it.
 */
static enum MHD_Result
reply_admin_error(api_request *req, const pf_error *err)
{
	const char *code = err->code;

	if (strncmp(code, "28", 2) == 0)
		return api_reply_error(req, MHD_HTTP_UNAUTHORIZED, "unauthorized", "invalid admin key");
	if (strcmp(code, "42501") == 0)
		return api_reply_error(req, MHD_HTTP_FORBIDDEN, "forbidden", "a tenant API key cannot use the admin API");
	if (strncmp(code, "22", 2) == 0)
	{
		const char *prefix = "invalid parameter \"";
		const char *m = err->message;

		if (strncmp(m, prefix, strlen(prefix)) == 0 && strchr(m + strlen(prefix), '"') != NULL)
		{
			const char *start = m + strlen(prefix);
			char	   *name = pf_strndup(start, (size_t) (strchr(start, '"') - start));
			enum MHD_Result r = reply_bad_parameter(req, name, m);

			free(name);
			return r;
		}
		return api_reply_error(req, MHD_HTTP_BAD_REQUEST, code, "%s", m);
	}
	if (strcmp(code, "PF003") == 0 || strcmp(code, "P0002") == 0)
		return api_reply_error(req, MHD_HTTP_NOT_FOUND, code, "%s", err->message);
	if (strcmp(code, "PF001") == 0 || strcmp(code, "PF006") == 0 || strcmp(code, "PF009") == 0)
		return api_reply_error(req, MHD_HTTP_CONFLICT, code, "%s", err->message);
	return api_reply_db_error(req, err);
}

/* The body of an action: a JSON object (or nothing); NULL with the answer queued. */
static json_t *
action_body(api_request *req, enum MHD_Result *answer)
{
	json_error_t jerr;
	json_t	   *doc;

	if (req->body.len == 0)
		return json_object();
	doc = json_loadb(req->body.data, req->body.len, JSON_REJECT_DUPLICATES, &jerr);
	if (doc == NULL)
		*answer = api_reply_error(req, MHD_HTTP_BAD_REQUEST, "malformed_json",
								  "the body is not valid JSON (line %d, column %d)", jerr.line, jerr.column);
	else if (!json_is_object(doc))
	{
		json_decref(doc);
		doc = NULL;
		*answer = reply_bad_parameter(req, "body", "invalid parameter \"body\": must be a JSON object");
	}
	return doc;
}

enum MHD_Result
api_admin(api_request *req)
{
	const char *key = api_bearer_key(req);
	char	   *path_id = NULL;
	admin_endpoint e = endpoint_of(req->path, &path_id);
	const admin_spec *spec = &specs[e];
	const char *values[3] = {key, NULL, NULL};
	int			nvalues = 1;
	char	   *owned[2] = {NULL, NULL};
	json_t	   *body = NULL;
	enum MHD_Result answer;
	api_slot   *slot;
	PGresult   *res = NULL;
	pf_error	err;
	pf_result	r;

	if (e == ADMIN_NONE)
	{
		free(path_id);
		return api_reply_error(req, MHD_HTTP_NOT_FOUND, "not_found", "no such admin resource");
	}
	if (strcmp(req->method, spec->method) != 0 && !(strcmp(spec->method, "GET") == 0 && strcmp(req->method, "HEAD") == 0))
	{
		const char *headers[] = {MHD_HTTP_HEADER_ALLOW, strcmp(spec->method, "GET") == 0 ? "GET, HEAD" : "POST", NULL};

		free(path_id);
		return api_reply_json_headers(req, MHD_HTTP_METHOD_NOT_ALLOWED,
									  json_pack("{s:{s:s,s:s}}", "error", "code", "method_not_allowed",
												"message", "method not allowed"), headers);
	}
	/* the key first: without one nothing else is looked at */
	if (key == NULL)
	{
		free(path_id);
		return api_reply_unauthorized(req);
	}
	switch (spec->arg)
	{
		case ARG_NONE:
			break;
		case ARG_FILTERS:
			{
				query_scan	q = {json_object(), NULL, NULL, NULL};

				MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, scan_argument, &q);
				if (q.bad != NULL)
				{
					char	   *msg = NULL;

					if (asprintf(&msg, "invalid parameter \"%s\": %s", q.bad, q.why) < 0)
						msg = NULL;
					answer = reply_bad_parameter(req, q.bad, msg ? msg : q.why);
					free(msg);
					free(q.bad_copy);
					json_decref(q.filters);
					free(path_id);
					return answer;
				}
				owned[0] = json_dumps(q.filters, JSON_COMPACT);
				json_decref(q.filters);
				values[nvalues++] = owned[0];
			}
			break;
		case ARG_ID:
			values[nvalues++] = path_id;
			break;
		case ARG_ID_REASON:
			body = action_body(req, &answer);
			if (body == NULL)
			{
				free(path_id);
				return answer;
			}
			values[nvalues++] = path_id;
			{
				json_t	   *reason = json_object_get(body, "reason");

				if (reason != NULL && !json_is_string(reason) && !json_is_null(reason))
				{
					json_decref(body);
					free(path_id);
					return reply_bad_parameter(req, "reason", "invalid parameter \"reason\": must be a string");
				}
				values[nvalues++] = reason && json_is_string(reason) ? json_string_value(reason) : NULL;
			}
			break;
		case ARG_ID_LIST:
			{
				/* a path id that is no number is the same 400 as a bad one in a list */
				bool		digits = path_id[0] != '\0' && strspn(path_id, "0123456789") == strlen(path_id) &&
				strlen(path_id) <= 18;

				if (!digits)
				{
					free(path_id);
					return reply_bad_parameter(req, "id", "invalid parameter \"id\": must be a positive integer");
				}
				if (asprintf(&owned[0], "[%s]", path_id) < 0)
					owned[0] = NULL;
				values[nvalues++] = owned[0];
			}
			break;
		case ARG_IDS:
			body = action_body(req, &answer);
			if (body == NULL)
			{
				free(path_id);
				return answer;
			}
			owned[0] = json_dumps(json_object_get(body, "ids") ? json_object_get(body, "ids") : json_null(),
								  JSON_COMPACT | JSON_ENCODE_ANY);
			values[nvalues++] = owned[0];
			break;
	}
	slot = api_pool_acquire(&req->ctx->pool);
	if (slot == NULL)
		answer = api_reply_pool_exhausted(req);
	else
	{
		r = pf_pg_exec(slot->pg, spec->sql, nvalues, values, &res, &err);
		api_pool_release(&req->ctx->pool, slot);
		if (r != PF_OK)
			answer = reply_admin_error(req, &err);
		else
		{
			pf_buf		out = PF_BUF_INIT;

			if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
				pf_buf_append_str(&out, PQgetvalue(res, 0, 0));
			else
				pf_buf_append_str(&out, "null");
			answer = api_reply_text(req, MHD_HTTP_OK, "application/json", &out);
		}
		PQclear(res);
	}
	json_decref(body);
	free(owned[0]);
	free(owned[1]);
	free(path_id);
	return answer;
}
