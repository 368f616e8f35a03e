/*
 * step_hook.c
 *		The hook roles' shared state, threads and dispatch (step_hook.h).
 */
#include "step_hook.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payflow/buf.h"

typedef struct hook_thread
{
	step_hook  *hook;
	pf_http_call *http;			/* STEP_HOOK_HTTP only */
} hook_thread;

static step_hook *
hook_new(step_hook_kind kind, const pf_config *cfg, const char *source, const char *input_name)
{
	step_hook  *hook = pf_calloc(1, sizeof(*hook));

	hook->kind = kind;
	hook->cfg = cfg;
	hook->source = pf_strdup(source);
	hook->input_name = pf_strdup(input_name);
	hook->raw_error_text = cfg->raw_error_text != 0;
	return hook;
}

step_hook *
step_hook_http(const pf_config *cfg, const char *source, const char *input_name, const char *url,
			   const char *url_setting, const char *authorization, int timeout_ms, bool tls_verify)
{
	step_hook  *hook = hook_new(STEP_HOOK_HTTP, cfg, source, input_name);

	hook->url = url;
	hook->timeout_ms = timeout_ms;
	hook->tls_verify = tls_verify;
	if (!tls_verify)
		pf_log_warn(NULL, "TLS verification is off for %s %s (loopback)", url_setting, url);
	else if (strncmp(url, "http://", 7) == 0 && !pf_url_is_loopback(url))
		pf_log_warn(NULL, "%s %s is plain http: the step's data travels unencrypted", url_setting, url);
	if (authorization)
	{
		pf_buf		line = PF_BUF_INIT;

		pf_buf_appendf(&line, "Authorization: %s", authorization);
		hook->authorization = line.data;
	}
	return hook;
}

/* "schema.name(type, type)": a regprocedure needs the argument types. */
static bool
looks_like_regprocedure(const char *text)
{
	const char *open = strchr(text, '(');
	const char *end = text + strlen(text);

	while (end > text && isspace((unsigned char) end[-1]))
		end--;
	return open != NULL && open > text && end > open && end[-1] == ')';
}

step_hook *
step_hook_sql(const pf_config *cfg, const char *source, const char *input_name, const char *function,
			  const char *function_setting, char *why, size_t why_len)
{
	step_hook  *hook;

	if (!looks_like_regprocedure(function))
	{
		snprintf(why, why_len, "invalid %s: expected a function with its argument types, "
				 "e.g. payflow.default_postprocess(text,jsonb)", function_setting);
		return NULL;
	}
	hook = hook_new(STEP_HOOK_SQL, cfg, source, input_name);
	hook->function = function;
	return hook;
}

void
step_hook_cleanup(void *role)
{
	step_hook  *hook = role;

	free(hook->source);
	free(hook->input_name);
	free(hook->authorization);
	free(hook);
}

void *
step_hook_thread_init(void *role)
{
	step_hook  *hook = role;
	hook_thread *ht = pf_calloc(1, sizeof(*ht));

	ht->hook = hook;
	if (hook->kind == STEP_HOOK_HTTP)
	{
		pf_http_call_options opt = {0};

		opt.connect_timeout_ms = hook->cfg->http_connect_timeout_ms;
		opt.timeout_ms = hook->timeout_ms;
		opt.verify_tls = hook->tls_verify;
		opt.user_agent = "payflow-worker";
		ht->http = pf_http_call_create(&opt);
	}
	return ht;
}

void
step_hook_thread_cleanup(void *thread)
{
	hook_thread *ht = thread;

	if (ht == NULL)
		return;
	pf_http_call_destroy(ht->http);
	free(ht);
}

void
step_hook_interrupt(void *thread)
{
	hook_thread *ht = thread;

	/* a SQL hook is bounded by the pool's statement_timeout instead */
	if (ht->http)
		pf_http_call_interrupt(ht->http);
}

step_status
step_hook_run(void *thread, step_run *run)
{
	hook_thread *ht = thread;
	json_t	   *input = json_loadb(run->input, run->input_len, 0, NULL);
	bool		is_object = json_is_object(input);

	json_decref(input);
	/* an interrupt aimed at the previous message must not hit this one */
	if (ht->http)
		pf_http_call_clear_interrupt(ht->http);
	if (!is_object)
	{
		char		message[200];

		snprintf(message, sizeof(message), "%s is not a JSON object", ht->hook->input_name);
		step_set_error(run, "invalid_input", message, json_pack("{s:s}", "source", ht->hook->source));
		return STEP_PERMANENT;
	}
	return ht->hook->kind == STEP_HOOK_SQL ? step_hook_run_sql(ht->hook, run)
		: step_hook_run_http(ht->hook, ht->http, run);
}

/*
 * With a SQL hook and a "pg" input (the usual case) steps are claimed,
 * their hook run and completed by one statement, in one transaction for
 * a batch (payflow.run_hook_steps); the hook runs as the worker, as in
 * step_hook_sql.c's COMPLETE_WITH_HOOK.
 */
const char *
step_hook_one_transaction_hook(void *role)
{
	step_hook  *hook = role;

	/* an HTTP call runs outside the database */
	return hook->kind == STEP_HOOK_SQL ? hook->function : NULL;
}
