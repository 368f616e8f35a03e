/*
 * sqs.c
 *		SQS actions over the AWS JSON 1.0 protocol.
 */
#include "payflow/sqs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payflow/buf.h"
#include "payflow/digest.h"
#include "payflow/log.h"

#define TARGET_PREFIX "AmazonSQS."
#define CONTENT_TYPE "application/x-amz-json-1.0"
/* beyond the long poll itself, the time SQS may take to answer */
#define RECEIVE_SLACK_MS 15000

struct pf_sqs
{
	pf_aws_client *aws;
	char	   *endpoint;
	int			n_counts;
	pf_sqs_action_count counts[PF_SQS_MAX_COUNTED_ACTIONS];
};

/* A call and the action it runs; pf_aws_call comes first so the two convert. */
typedef struct sqs_call
{
	pf_aws_call call;
	char		action[48];
	bool		fifo;
	pf_sqs_action_count *count; /* its action's counter */
} sqs_call;

/* The counter of an action; the last one takes whatever does not fit. */
static pf_sqs_action_count *
action_count(pf_sqs *sqs, const char *action)
{
	pf_sqs_action_count *c;

	for (int i = 0; i < sqs->n_counts; i++)
		if (strcmp(sqs->counts[i].action, action) == 0)
			return &sqs->counts[i];
	if (sqs->n_counts == PF_SQS_MAX_COUNTED_ACTIONS)
		return &sqs->counts[PF_SQS_MAX_COUNTED_ACTIONS - 1];
	c = &sqs->counts[sqs->n_counts++];
	snprintf(c->action, sizeof(c->action), "%s", sqs->n_counts == PF_SQS_MAX_COUNTED_ACTIONS ? "other" : action);
	return c;
}

json_t *
pf_sqs_counts_json(const pf_sqs *sqs)
{
	json_t	   *out = json_object();

	for (int i = 0; i < sqs->n_counts; i++)
		json_object_set_new(out, sqs->counts[i].action,
							json_pack("{s:I,s:I}", "calls", (json_int_t) sqs->counts[i].calls,
									  "entries", (json_int_t) sqs->counts[i].entries));
	return out;
}

pf_sqs_action_count
pf_sqs_count(const pf_sqs *sqs, const char *action)
{
	pf_sqs_action_count none = {{0}, 0, 0};

	for (int i = 0; i < sqs->n_counts; i++)
		if (strcmp(sqs->counts[i].action, action) == 0)
			return sqs->counts[i];
	snprintf(none.action, sizeof(none.action), "%s", action);
	return none;
}

pf_sqs *
pf_sqs_create(pf_aws_client *aws, const pf_config *cfg)
{
	pf_sqs	   *sqs = pf_calloc(1, sizeof(*sqs));
	pf_buf		url = PF_BUF_INIT;

	if (cfg->aws_endpoint_url_sqs)
		pf_buf_append_str(&url, cfg->aws_endpoint_url_sqs);
	else if (cfg->aws_endpoint_url)
		pf_buf_append_str(&url, cfg->aws_endpoint_url);
	else
		pf_buf_appendf(&url, "https://sqs.%s.amazonaws.com", pf_aws_client_region(aws));
	/* the JSON protocol posts to the root path */
	while (url.len > 0 && url.data[url.len - 1] == '/')
		url.data[--url.len] = '\0';
	pf_buf_append_char(&url, '/');
	sqs->aws = aws;
	sqs->endpoint = pf_buf_steal(&url);
	return sqs;
}

void
pf_sqs_destroy(pf_sqs *sqs)
{
	if (sqs == NULL)
		return;
	free(sqs->endpoint);
	free(sqs);
}

const char *
pf_sqs_endpoint(const pf_sqs *sqs)
{
	return sqs->endpoint;
}

bool
pf_sqs_queue_is_fifo(const char *queue_url)
{
	size_t		len = strlen(queue_url);

	return len >= 5 && strcmp(queue_url + len - 5, ".fifo") == 0;
}

void
pf_sqs_parse_error(long status, const char *body, const char *query_error_header, pf_error *err)
{
	json_t	   *j = body && body[0] ? json_loads(body, 0, NULL) : NULL;
	const char *type = NULL;
	const char *message = NULL;
	char		code[64] = "";

	if (json_is_object(j))
	{
		type = json_string_value(json_object_get(j, "__type"));
		if (type == NULL)
			type = json_string_value(json_object_get(j, "code"));
		message = json_string_value(json_object_get(j, "message"));
		if (message == NULL)
			message = json_string_value(json_object_get(j, "Message"));
	}
	if (type)
	{
		/* "com.amazonaws.sqs#QueueDoesNotExist" -> "QueueDoesNotExist" */
		const char *hash = strrchr(type, '#');

		snprintf(code, sizeof(code), "%s", hash ? hash + 1 : type);
		/* some protocols append ":http://internal..." */
		code[strcspn(code, ":")] = '\0';
	}
	else if (query_error_header && query_error_header[0])
		snprintf(code, sizeof(code), "%.*s", (int) strcspn(query_error_header, ";"), query_error_header);
	else
		snprintf(code, sizeof(code), "HTTP%ld", status);

	pf_error_set(err, PF_ERR_FINAL, code, "%s", message ? message : "");
	err->http_status = status;
	if (strcmp(code, "QueueDoesNotExist") == 0 || strcmp(code, "AWS.SimpleQueueService.NonExistentQueue") == 0)
		err->result = PF_ERR_NOT_FOUND;
	json_decref(j);
}

static void
parse_call_error(pf_aws_call *call)
{
	char		query_error[256] = "";

	pf_http_response_header(&call->http, "x-amzn-query-error", query_error, sizeof(query_error));
	pf_sqs_parse_error(call->http.status, pf_buf_str(&call->http.response), query_error, &call->error);
}

static pf_aws_call *
start_call(pf_sqs *sqs, const char *action, json_t *request, void *user, long timeout_ms)
{
	sqs_call   *sc = pf_calloc(1, sizeof(*sc));
	char	   *body = json_dumps(request, JSON_COMPACT);
	char		target[80];
	json_t	   *entries = json_object_get(request, "Entries");

	if (body == NULL)
		abort();				/* only an allocation failure can get here */
	sc->count = action_count(sqs, action);
	sc->count->calls++;
	if (json_is_array(entries))
		sc->count->entries += (long) json_array_size(entries);
	json_decref(request);
	pf_aws_call_init(&sc->call, "sqs", "POST", sqs->endpoint, body, strlen(body));
	free(body);
	snprintf(sc->action, sizeof(sc->action), "%s", action);
	snprintf(target, sizeof(target), TARGET_PREFIX "%s", action);
	pf_aws_call_add_header(&sc->call, "Content-Type", CONTENT_TYPE);
	pf_aws_call_add_header(&sc->call, "X-Amz-Target", target);
	sc->call.parse_error = parse_call_error;
	sc->call.user = user;
	sc->call.timeout_ms = timeout_ms;
	pf_aws_start(sqs->aws, &sc->call);
	return &sc->call;
}

pf_aws_call *
pf_sqs_start(pf_sqs *sqs, const char *action, json_t *request, void *user)
{
	return start_call(sqs, action, request, user, 0);
}

static void
free_call(pf_aws_call *call)
{
	pf_aws_call_free(call);
	free(call);
}

pf_result
pf_sqs_finish(pf_aws_call *call, json_t **response, pf_error *err)
{
	pf_result	r = call->error.result;

	if (response)
		*response = NULL;
	if (r != PF_OK)
	{
		if (err)
			*err = call->error;
		pf_log_debug(NULL, "sqs %s failed after %d attempt(s): %s %s", pf_sqs_call_action(call),
					 call->attempts, call->error.code, call->error.message);
	}
	else if (response)
	{
		const char *text = pf_buf_str(&call->http.response);
		json_error_t jerr;

		/*
		 * U+0000 is allowed: SQS refuses it at SendMessage, but a body can
		 * still carry one (SNS raw delivery does not check), and one such
		 * message must not make the whole answer unreadable.
		 */
		*response = text[0] ? json_loadb(text, call->http.response.len, JSON_ALLOW_NUL, &jerr) : json_object();
		if (!json_is_object(*response))
		{
			json_decref(*response);
			*response = NULL;
			r = pf_error_set(err, PF_ERR_TRANSIENT, "BadResponse", "SQS %s answered unparsable JSON",
							 pf_sqs_call_action(call));
		}
	}
	free_call(call);
	return r;
}

pf_aws_call *
pf_sqs_wait(pf_sqs *sqs, int timeout_ms, int extra_fd)
{
	return pf_aws_wait(sqs->aws, timeout_ms, extra_fd);
}

void *
pf_sqs_call_user(const pf_aws_call *call)
{
	return call->user;
}

const char *
pf_sqs_call_action(const pf_aws_call *call)
{
	return ((const sqs_call *) call)->action;
}

static pf_result
perform(pf_sqs *sqs, const char *action, json_t *request, json_t **response, pf_error *err)
{
	pf_aws_call *call = pf_sqs_start(sqs, action, request, NULL);

	pf_aws_perform(sqs->aws, call);
	return pf_sqs_finish(call, response, err);
}

/* ---- sending ---- */

static bool
valid_entry_id(const char *id)
{
	size_t		len = id ? strlen(id) : 0;

	if (len == 0 || len > 80)
		return false;
	for (const char *p = id; *p; p++)
		if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
			  *p == '-' || *p == '_'))
			return false;
	return true;
}

static pf_result
build_send_entry(json_t *obj, const pf_sqs_send_entry *e, bool fifo, pf_error *err)
{
	if (e->body == NULL)
		return pf_error_set(err, PF_ERR_INVALID, "InvalidInput", "message body is missing");
	json_object_set_new(obj, "MessageBody", json_string(e->body));
	if (json_object_get(obj, "MessageBody") == NULL)
		return pf_error_set(err, PF_ERR_INVALID, "InvalidInput", "message body is not valid UTF-8");
	if (fifo)
	{
		if (e->group_id == NULL || e->group_id[0] == '\0')
			return pf_error_set(err, PF_ERR_INVALID, "MissingParameter", "a FIFO queue needs a MessageGroupId");
		json_object_set_new(obj, "MessageGroupId", json_string(e->group_id));
		if (e->dedup_id)
			json_object_set_new(obj, "MessageDeduplicationId", json_string(e->dedup_id));
	}
	else if (e->delay_seconds > 0)
		json_object_set_new(obj, "DelaySeconds", json_integer(e->delay_seconds));
	if (e->n_attributes > 0)
	{
		json_t	   *attrs = json_object();

		for (int i = 0; i < e->n_attributes; i++)
			json_object_set_new(attrs, e->attributes[i].name,
								json_pack("{s:s,s:s}", "DataType", "String",
										  "StringValue", e->attributes[i].value));
		json_object_set_new(obj, "MessageAttributes", attrs);
	}
	return PF_OK;
}

pf_result
pf_sqs_send_message(pf_sqs *sqs, const char *queue_url, const pf_sqs_send_entry *entry,
					char **message_id, pf_error *err)
{
	json_t	   *req = json_pack("{s:s}", "QueueUrl", queue_url);
	json_t	   *resp;
	pf_result	r;

	if (message_id)
		*message_id = NULL;
	if ((r = build_send_entry(req, entry, pf_sqs_queue_is_fifo(queue_url), err)) != PF_OK)
	{
		json_decref(req);
		return r;
	}
	r = perform(sqs, "SendMessage", req, &resp, err);
	if (r == PF_OK)
	{
		const char *id = json_string_value(json_object_get(resp, "MessageId"));

		if (message_id && id)
			*message_id = pf_strdup(id);
		json_decref(resp);
	}
	return r;
}

pf_aws_call *
pf_sqs_send_message_batch_start(pf_sqs *sqs, const char *queue_url, const pf_sqs_send_entry *entries,
								int n, void *user, pf_error *err)
{
	bool		fifo = pf_sqs_queue_is_fifo(queue_url);
	json_t	   *req;
	json_t	   *list;

	if (n < 1 || n > PF_SQS_MAX_BATCH)
	{
		pf_error_set(err, PF_ERR_INVALID, "InvalidInput", "a batch holds 1 to %d entries, not %d", PF_SQS_MAX_BATCH, n);
		return NULL;
	}
	req = json_pack("{s:s}", "QueueUrl", queue_url);
	list = json_array();
	for (int i = 0; i < n; i++)
	{
		json_t	   *e = json_object();

		if (!valid_entry_id(entries[i].id))
		{
			pf_error_set(err, PF_ERR_INVALID, "InvalidBatchEntryId", "batch entry %d has no valid Id", i);
			json_decref(e);
			json_decref(list);
			json_decref(req);
			return NULL;
		}
		json_object_set_new(e, "Id", json_string(entries[i].id));
		if (build_send_entry(e, &entries[i], fifo, err) != PF_OK)
		{
			json_decref(e);
			json_decref(list);
			json_decref(req);
			return NULL;
		}
		json_array_append_new(list, e);
	}
	json_object_set_new(req, "Entries", list);
	return pf_sqs_start(sqs, "SendMessageBatch", req, user);
}

static const char *
string_or(json_t *obj, const char *key, const char *dflt)
{
	const char *s = json_string_value(json_object_get(obj, key));

	return s ? s : dflt;
}

/* {"Successful":[{"Id","MessageId"}],"Failed":[{"Id","SenderFault","Code","Message"}]} */
static void
parse_batch_result(json_t *resp, pf_sqs_batch_result *result)
{
	json_t	   *ok = json_object_get(resp, "Successful");
	json_t	   *failed = json_object_get(resp, "Failed");
	size_t		n_ok = json_is_array(ok) ? json_array_size(ok) : 0;
	size_t		n_failed = json_is_array(failed) ? json_array_size(failed) : 0;
	int			k = 0;

	result->n = (int) (n_ok + n_failed);
	result->n_failed = (int) n_failed;
	result->entries = pf_calloc(n_ok + n_failed + 1, sizeof(pf_sqs_entry_result));
	for (size_t i = 0; i < n_ok; i++, k++)
	{
		json_t	   *e = json_array_get(ok, i);
		const char *mid = json_string_value(json_object_get(e, "MessageId"));

		result->entries[k].id = pf_strdup(string_or(e, "Id", ""));
		result->entries[k].ok = true;
		result->entries[k].message_id = mid ? pf_strdup(mid) : NULL;
	}
	for (size_t i = 0; i < n_failed; i++, k++)
	{
		json_t	   *e = json_array_get(failed, i);

		result->entries[k].id = pf_strdup(string_or(e, "Id", ""));
		result->entries[k].ok = false;
		result->entries[k].code = pf_strdup(string_or(e, "Code", "Unknown"));
		result->entries[k].message = pf_strdup(string_or(e, "Message", ""));
		result->entries[k].sender_fault = json_is_true(json_object_get(e, "SenderFault"));
	}
}

pf_result
pf_sqs_send_message_batch_finish(pf_aws_call *call, pf_sqs_batch_result *result, pf_error *err)
{
	json_t	   *resp;
	pf_result	r = pf_sqs_finish(call, &resp, err);

	memset(result, 0, sizeof(*result));
	if (r == PF_OK)
	{
		parse_batch_result(resp, result);
		json_decref(resp);
	}
	return r;
}

pf_result
pf_sqs_send_message_batch(pf_sqs *sqs, const char *queue_url, const pf_sqs_send_entry *entries, int n,
						  pf_sqs_batch_result *result, pf_error *err)
{
	pf_aws_call *call = pf_sqs_send_message_batch_start(sqs, queue_url, entries, n, NULL, err);

	memset(result, 0, sizeof(*result));
	if (call == NULL)
		return err ? err->result : PF_ERR_INVALID;
	pf_aws_perform(sqs->aws, call);
	return pf_sqs_send_message_batch_finish(call, result, err);
}

/* ---- receiving ---- */

pf_aws_call *
pf_sqs_receive_message_start(pf_sqs *sqs, const char *queue_url, const pf_sqs_receive_options *opts,
							 void *user)
{
	json_t	   *req;
	int			max = opts && opts->max_messages > 0 ? opts->max_messages : 1;
	int			wait = opts && opts->wait_seconds > 0 ? opts->wait_seconds : 0;

	if (max > PF_SQS_MAX_BATCH)
		max = PF_SQS_MAX_BATCH;
	if (wait > 20)
		wait = 20;
	req = json_pack("{s:s,s:i,s:i,s:[s,s,s,s],s:[s,s,s,s],s:[s]}",
					"QueueUrl", queue_url,
					"MaxNumberOfMessages", max,
					"WaitTimeSeconds", wait,
					"MessageSystemAttributeNames", "ApproximateReceiveCount", "SentTimestamp",
					"MessageGroupId", "ApproximateFirstReceiveTimestamp",
	/* the older spelling, for endpoints that predate the new one */
					"AttributeNames", "ApproximateReceiveCount", "SentTimestamp",
					"MessageGroupId", "ApproximateFirstReceiveTimestamp",
					"MessageAttributeNames", "All");
	if (opts && opts->visibility_timeout >= 0)
		json_object_set_new(req, "VisibilityTimeout", json_integer(opts->visibility_timeout));
	/* the long poll must not outlast the request's own time-out */
	return start_call(sqs, "ReceiveMessage", req, user, wait * 1000L + RECEIVE_SLACK_MS);
}

static void
free_message(pf_sqs_message *m)
{
	free(m->message_id);
	free(m->receipt_handle);
	free(m->body);
	free(m->group_id);
	json_decref(m->system_attributes);
	json_decref(m->message_attributes);
}

void
pf_sqs_messages_free(pf_sqs_messages *messages)
{
	for (int i = 0; i < messages->n; i++)
		free_message(&messages->items[i]);
	free(messages->items);
	messages->items = NULL;
	messages->n = 0;
}

pf_result
pf_sqs_receive_message_finish(pf_aws_call *call, pf_sqs_messages *messages, pf_error *err)
{
	json_t	   *resp;
	json_t	   *list;
	pf_sqs_action_count *counter = ((sqs_call *) call)->count;
	pf_result	r = pf_sqs_finish(call, &resp, err);

	messages->n = 0;
	messages->items = NULL;
	if (r != PF_OK)
		return r;
	list = json_object_get(resp, "Messages");
	if (json_is_array(list))
		counter->entries += (long) json_array_size(list);
	if (json_is_array(list) && json_array_size(list) > 0)
	{
		messages->items = pf_calloc(json_array_size(list), sizeof(pf_sqs_message));
		for (size_t i = 0; i < json_array_size(list); i++)
		{
			json_t	   *m = json_array_get(list, i);
			pf_sqs_message *out = &messages->items[messages->n];
			json_t	   *body_json = json_object_get(m, "Body");
			const char *body = json_is_string(body_json) ? json_string_value(body_json) : "";

			/* the body's real length: it may hold U+0000 */
			size_t		body_len = json_is_string(body_json) ? json_string_length(body_json) : 0;
			const char *md5 = json_string_value(json_object_get(m, "MD5OfBody"));
			json_t	   *attrs = json_object_get(m, "Attributes");
			const char *count = string_or(attrs, "ApproximateReceiveCount", "0");

			if (md5)
			{
				unsigned char digest[PF_MD5_LEN];
				char		hex[2 * PF_MD5_LEN + 1];

				pf_md5(body, body_len, digest);
				pf_hex_encode(digest, sizeof(digest), hex);
				if (strcasecmp(hex, md5) != 0)
				{
					/* left invisible until its time-out, then redelivered */
					pf_log_error(NULL, "SQS message %s: body does not match its MD5OfBody, skipped",
								 string_or(m, "MessageId", "?"));
					continue;
				}
			}
			out->message_id = pf_strdup(string_or(m, "MessageId", ""));
			out->receipt_handle = pf_strdup(string_or(m, "ReceiptHandle", ""));
			out->body = pf_strndup(body, body_len);
			out->body_len = body_len;
			out->receive_count = atoi(count);
			if (json_string_value(json_object_get(attrs, "MessageGroupId")))
				out->group_id = pf_strdup(json_string_value(json_object_get(attrs, "MessageGroupId")));
			out->system_attributes = json_is_object(attrs) ? json_incref(attrs) : json_object();
			out->message_attributes = json_is_object(json_object_get(m, "MessageAttributes"))
				? json_incref(json_object_get(m, "MessageAttributes")) : json_object();
			messages->n++;
		}
	}
	json_decref(resp);
	return PF_OK;
}

pf_result
pf_sqs_receive_message(pf_sqs *sqs, const char *queue_url, const pf_sqs_receive_options *opts,
					   pf_sqs_messages *messages, pf_error *err)
{
	pf_aws_call *call = pf_sqs_receive_message_start(sqs, queue_url, opts, NULL);

	pf_aws_perform(sqs->aws, call);
	return pf_sqs_receive_message_finish(call, messages, err);
}

const char *
pf_sqs_message_attribute(const pf_sqs_message *message, const char *name)
{
	json_t	   *a = json_object_get(message->message_attributes, name);

	return json_string_value(json_object_get(a, "StringValue"));
}

/* ---- deleting and visibility ---- */

pf_result
pf_sqs_delete_message(pf_sqs *sqs, const char *queue_url, const char *receipt_handle, pf_error *err)
{
	return perform(sqs, "DeleteMessage",
				   json_pack("{s:s,s:s}", "QueueUrl", queue_url, "ReceiptHandle", receipt_handle), NULL, err);
}

pf_result
pf_sqs_change_message_visibility(pf_sqs *sqs, const char *queue_url, const char *receipt_handle,
								 int visibility_timeout, pf_error *err)
{
	return perform(sqs, "ChangeMessageVisibility",
				   json_pack("{s:s,s:s,s:i}", "QueueUrl", queue_url, "ReceiptHandle", receipt_handle,
							 "VisibilityTimeout", visibility_timeout), NULL, err);
}

static pf_result
receipt_batch(pf_sqs *sqs, const char *action, const char *queue_url, const pf_sqs_receipt_entry *entries,
			  int n, bool with_timeout, pf_sqs_batch_result *result, pf_error *err)
{
	json_t	   *list;
	json_t	   *resp;
	pf_result	r;

	memset(result, 0, sizeof(*result));
	if (n < 1 || n > PF_SQS_MAX_BATCH)
		return pf_error_set(err, PF_ERR_INVALID, "InvalidInput", "a batch holds 1 to %d entries, not %d",
							PF_SQS_MAX_BATCH, n);
	list = json_array();
	for (int i = 0; i < n; i++)
	{
		json_t	   *e;

		if (!valid_entry_id(entries[i].id) || entries[i].receipt_handle == NULL)
		{
			json_decref(list);
			return pf_error_set(err, PF_ERR_INVALID, "InvalidBatchEntryId",
								"batch entry %d needs a valid Id and a receipt handle", i);
		}
		e = json_pack("{s:s,s:s}", "Id", entries[i].id, "ReceiptHandle", entries[i].receipt_handle);
		if (with_timeout)
			json_object_set_new(e, "VisibilityTimeout", json_integer(entries[i].visibility_timeout));
		json_array_append_new(list, e);
	}
	r = perform(sqs, action, json_pack("{s:s,s:o}", "QueueUrl", queue_url, "Entries", list), &resp, err);
	if (r == PF_OK)
	{
		parse_batch_result(resp, result);
		json_decref(resp);
	}
	return r;
}

pf_result
pf_sqs_delete_message_batch(pf_sqs *sqs, const char *queue_url, const pf_sqs_receipt_entry *entries, int n,
							pf_sqs_batch_result *result, pf_error *err)
{
	return receipt_batch(sqs, "DeleteMessageBatch", queue_url, entries, n, false, result, err);
}

pf_result
pf_sqs_change_message_visibility_batch(pf_sqs *sqs, const char *queue_url, const pf_sqs_receipt_entry *entries,
									   int n, pf_sqs_batch_result *result, pf_error *err)
{
	return receipt_batch(sqs, "ChangeMessageVisibilityBatch", queue_url, entries, n, true, result, err);
}

/* ---- queues ---- */

pf_result
pf_sqs_get_queue_attributes(pf_sqs *sqs, const char *queue_url, const char *const *names,
							json_t **attributes, pf_error *err)
{
	json_t	   *list = json_array();
	json_t	   *resp;
	pf_result	r;

	*attributes = NULL;
	if (names == NULL)
		json_array_append_new(list, json_string("All"));
	for (int i = 0; names && names[i]; i++)
		json_array_append_new(list, json_string(names[i]));
	r = perform(sqs, "GetQueueAttributes",
				json_pack("{s:s,s:o}", "QueueUrl", queue_url, "AttributeNames", list), &resp, err);
	if (r == PF_OK)
	{
		json_t	   *a = json_object_get(resp, "Attributes");

		*attributes = json_is_object(a) ? json_incref(a) : json_object();
		json_decref(resp);
	}
	return r;
}

pf_result
pf_sqs_get_queue_url(pf_sqs *sqs, const char *queue_name, char **queue_url, pf_error *err)
{
	json_t	   *resp;
	pf_result	r;

	*queue_url = NULL;
	r = perform(sqs, "GetQueueUrl", json_pack("{s:s}", "QueueName", queue_name), &resp, err);
	if (r == PF_OK)
	{
		const char *url = json_string_value(json_object_get(resp, "QueueUrl"));

		if (url)
			*queue_url = pf_strdup(url);
		else
			r = pf_error_set(err, PF_ERR_TRANSIENT, "BadResponse", "GetQueueUrl answered no QueueUrl");
		json_decref(resp);
	}
	return r;
}

/* ---- results ---- */

void
pf_sqs_batch_result_free(pf_sqs_batch_result *result)
{
	for (int i = 0; i < result->n; i++)
	{
		free(result->entries[i].id);
		free(result->entries[i].message_id);
		free(result->entries[i].code);
		free(result->entries[i].message);
	}
	free(result->entries);
	memset(result, 0, sizeof(*result));
}

const pf_sqs_entry_result *
pf_sqs_batch_result_find(const pf_sqs_batch_result *result, const char *id)
{
	for (int i = 0; i < result->n; i++)
		if (strcmp(result->entries[i].id, id) == 0)
			return &result->entries[i];
	return NULL;
}
