/*
 * http_outcome.c
 *		Classifying an external API's answer for a step.
 */
#include "payflow/http_outcome.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "payflow/buf.h"
#include "payflow/log.h"

/* A Retry-After further out than this is taken as this (fail_step caps it lower anyway). */
#define RETRY_AFTER_MAX_SECONDS 86400.0
/* How much of an error answer goes into the step's error. */
#define BODY_EXCERPT 300

pf_http_verdict
pf_http_status_verdict(long status)
{
	if (status >= 200 && status <= 299)
		return PF_HTTP_DONE;
	switch (status)
	{
		case 408:				/* request time-out */
		case 409:				/* a concurrent request with the same key */
		case 425:				/* too early */
		case 429:				/* throttled */
			return PF_HTTP_RETRYABLE;
		case 501:				/* not implemented */
		case 505:				/* HTTP version not supported */
			return PF_HTTP_PERMANENT;
		default:
			break;
	}
	if (status >= 500 && status <= 599)
		return PF_HTTP_RETRYABLE;
	return PF_HTTP_PERMANENT;
}

const char *
pf_http_verdict_name(pf_http_verdict verdict)
{
	switch (verdict)
	{
		case PF_HTTP_DONE:
			return "done";
		case PF_HTTP_RETRYABLE:
			return "retryable";
		case PF_HTTP_PERMANENT:
			return "permanent";
	}
	return "unknown";
}

bool
pf_http_retry_after_seconds(const char *value, time_t now, double *seconds)
{
	const char *p;
	time_t		at;

	if (value == NULL)
		return false;
	while (isspace((unsigned char) *value))
		value++;
	if (*value == '\0')
		return false;
	if (isdigit((unsigned char) *value))
	{
		double		n = 0;

		for (p = value; isdigit((unsigned char) *p); p++)
			n = n * 10 + (*p - '0');
		while (isspace((unsigned char) *p))
			p++;
		if (*p != '\0')
			return false;
		*seconds = n > RETRY_AFTER_MAX_SECONDS ? RETRY_AFTER_MAX_SECONDS : n;
		return true;
	}
	/* IMF-fixdate, RFC 850 and asctime forms (RFC 9110 §5.6.7) */
	at = curl_getdate(value, NULL);
	if (at == (time_t) -1)
		return false;
	*seconds = at <= now ? 0 : (double) (at - now);
	if (*seconds > RETRY_AFTER_MAX_SECONDS)
		*seconds = RETRY_AFTER_MAX_SECONDS;
	return true;
}

/* What an error answer says: error.message of {"error":{…}}, "message", or the body's start. */
static char *
answer_says(const pf_http_response *resp)
{
	json_t	   *doc = json_loadb(resp->body.data ? resp->body.data : "", resp->body.len, 0, NULL);
	const char *said = NULL;
	char	   *text;

	if (json_is_object(doc))
	{
		json_t	   *e = json_object_get(doc, "error");

		said = json_string_value(json_object_get(e, "message"));
		if (said == NULL)
			said = json_string_value(e);
		if (said == NULL)
			said = json_string_value(json_object_get(doc, "message"));
	}
	text = said ? pf_strdup(said) : pf_strndup(pf_buf_str(&resp->body), resp->body.len < 120 ? resp->body.len : 120);
	json_decref(doc);
	pf_utf8_sanitize(text, strlen(text));
	for (char *c = text; *c; c++)
		if (*c == '\n' || *c == '\r' || *c == '\t')
			*c = ' ';
	return text;
}

static json_t *
error_of_status(const pf_http_response *resp, const char *source, pf_http_verdict verdict, time_t now)
{
	char		code[16];
	char	   *said = answer_says(resp);
	char	   *excerpt = pf_strndup(pf_buf_str(&resp->body),
									 resp->body.len < BODY_EXCERPT ? resp->body.len : BODY_EXCERPT);
	pf_buf		message = PF_BUF_INIT;
	json_t	   *error;
	double		after;

	snprintf(code, sizeof(code), "http_%ld", resp->status);
	pf_buf_appendf(&message, "%s answered HTTP %ld", source, resp->status);
	if (said[0] != '\0')
		pf_buf_appendf(&message, ": %s", said);
	pf_utf8_sanitize(excerpt, strlen(excerpt));
	error = json_pack("{s:s,s:s,s:s,s:i}", "code", code, "message", pf_buf_str(&message), "source", source,
					  "httpStatus", (int) resp->status);
	if (excerpt[0] != '\0')
		json_object_set_new(error, "body", json_string(excerpt));
	if (verdict == PF_HTTP_RETRYABLE && pf_http_retry_after_seconds(resp->retry_after, now, &after))
		json_object_set_new(error, "retryAfterSeconds", after == (double) (json_int_t) after ?
							json_integer((json_int_t) after) : json_real(after));
	free(said);
	free(excerpt);
	pf_buf_free(&message);
	return error;
}

pf_http_verdict
pf_http_outcome(const pf_http_response *resp, pf_result call_result, const pf_error *call_err, const char *source,
				time_t now, json_t **answer, json_t **error)
{
	pf_http_verdict verdict;
	json_error_t jerr;
	json_t	   *doc;

	*answer = NULL;
	*error = NULL;
	if (call_result != PF_OK)
	{
		*error = json_pack("{s:s,s:s,s:s}", "code", call_err->code[0] ? call_err->code : "transport",
						   "message", call_err->message, "source", source);
		return PF_HTTP_RETRYABLE;
	}
	verdict = pf_http_status_verdict(resp->status);
	if (verdict != PF_HTTP_DONE)
	{
		*error = error_of_status(resp, source, verdict, now);
		return verdict;
	}
	doc = json_loadb(resp->body.data ? resp->body.data : "", resp->body.len, 0, &jerr);
	if (!json_is_object(doc) || resp->truncated)
	{
		char	   *excerpt = pf_strndup(pf_buf_str(&resp->body),
										 resp->body.len < BODY_EXCERPT ? resp->body.len : BODY_EXCERPT);

		pf_utf8_sanitize(excerpt, strlen(excerpt));
		*error = json_pack("{s:s,s:s,s:s,s:i,s:s}", "code", "invalid_answer",
						   "message", resp->truncated ? "the answer is larger than 1 MiB" :
						   doc == NULL ? "the answer is not JSON" : "the answer is not a JSON object",
						   "source", source, "httpStatus", (int) resp->status, "body", excerpt);
		free(excerpt);
		json_decref(doc);
		return PF_HTTP_PERMANENT;
	}
	*answer = doc;
	return PF_HTTP_DONE;
}

char *
pf_json_id_member(const json_t *object, const char *const *names)
{
	for (int i = 0; names[i]; i++)
	{
		json_t	   *v = json_object_get(object, names[i]);

		if (json_is_string(v) && json_string_length(v) > 0)
			return pf_strdup(json_string_value(v));
		if (json_is_integer(v))
		{
			char		n[32];

			snprintf(n, sizeof(n), "%lld", (long long) json_integer_value(v));
			return pf_strdup(n);
		}
	}
	return NULL;
}
