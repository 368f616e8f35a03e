/*
 * role_payment.c
 *		--role payment: charge through the legacy DBMS over ODBC.
 *
 * The statements come from the settings, with named placeholders bound as
 * ODBC parameters (never built into the SQL text):
 *
 *		:idempotency_key :operation_id :payment_id :attempt
 *		:details			the request JSON as text
 *		:details.<field>	a top-level field of it, as written ("12.50" stays)
 *		:legacy_ref			(status statement only) the job to poll
 *
 * blocking (PAYFLOW_LEGACY_CALL): one call with SQL_ATTR_QUERY_TIMEOUT =
 * PAYFLOW_LEGACY_TIMEOUT, or payflow's own time-out where the driver does
 * not enforce that (odbc.h); the main thread also cancels it (SQLCancel)
 * when it overruns that or when the drain time is over.
 *
 * submit-poll (PAYFLOW_LEGACY_SUBMIT, PAYFLOW_LEGACY_STATUS): the submit's
 * legacy_ref is saved with the step (payflow.save_step_ref) before the
 * first poll, so a worker that takes the step over resumes polling that
 * job instead of submitting again. The status row's "status" column says
 * when it is done (PAYFLOW_LEGACY_DONE_STATUSES) or failed
 * (PAYFLOW_LEGACY_FAILED_STATUSES); anything else means "still running".
 *
 * Before a retry (attempt > 1, or a takeover) the optional look-up
 * (PAYFLOW_LEGACY_LOOKUP) asks whether an attempt whose outcome is unknown
 * (timed out, connection lost, worker killed) did charge: a row completes
 * the step with it. The first row of a statement becomes the step result.
 * Failures are classified by SQLSTATE (sqlstate_rules.h) and their texts
 * redacted (downstream_error.h) before anything logs or stores them.
 *
 * A call whose answer does not say whether it charged (no row, a failure
 * after the DBMS answered, a submit without legacy_ref) is never a plain
 * failure: the look-up decides when there is one (a charge found completes
 * the step; none found is retried with the same key), else the step ends
 * with the code outcome_unknown (fail_step with retryable = false: FAILED,
 * and a dead letter for reconciliation; the client must not resubmit). A
 * call cut off on its way (time-out, cancel, lost connection) is looked up
 * at once too, when there is a look-up; else it is retried, marked
 * "outcomeUnknown" so that its last attempt ends as outcome_unknown too.
 *
 * At start-up (or at the first connection, if the DBMS cannot be reached
 * then) the worker asks the driver whether it enforces the query time-out,
 * logging a refusal once, and what the statements return: one that the
 * driver says returns no result set is refused unless it is a procedure
 * call (whose result no driver knows before running it), or the call with a
 * look-up configured to read its outcome.
 */
#include "worker.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payflow/backoff.h"
#include "payflow/buf.h"
#include "payflow/downstream_error.h"
#include "payflow/json_text.h"
#include "payflow/named_sql.h"
#include "payflow/odbc.h"
#include "payflow/sqlstate_rules.h"

#include "connect_gate.h"

#define DETAILS_PREFIX "details."
#define OUTCOME_UNKNOWN "outcome_unknown"
/* logins per call before it fails (connect_gate.h: nothing sent yet) */
#define CONNECT_TRIES 4

typedef struct statement
{
	const char *setting;		/* its variable, for messages */
	const char *what;			/* "call", "submit", "status", "lookup" */
	bool		present;
	pf_named_sql sql;
} statement;

typedef struct word_list
{
	int			n;
	char	  **words;
} word_list;

typedef struct payment_role_state
{
	const pf_config *cfg;
	statement	call;
	statement	submit;
	statement	status;
	statement	lookup;
	pf_sqlstate_rules rules;
	word_list	done;
	word_list	failed;
	bool		raw_errors;		/* PAYFLOW_RAW_ERROR_TEXT */

	/* at most PAYFLOW_LEGACY_CONNECTS_AT_ONCE logins at a time */
	connect_gate connects;

	/* the start-up check, done by the first connection that can */
	pthread_mutex_t check_lock;
	bool		checked;
	char	   *bad_statement;	/* why every call is refused, or NULL */
} payment_role_state;

typedef struct payment_thread
{
	payment_role_state *role;
	pf_odbc    *odbc;
} payment_thread;

/* ---- settings ---- */

static void
words_parse(word_list *list, const char *text)
{
	char	   *copy = pf_strdup(text ? text : "");
	char	   *save = NULL;

	for (char *w = strtok_r(copy, ",", &save); w; w = strtok_r(NULL, ",", &save))
	{
		char	   *end;

		while (isspace((unsigned char) *w))
			w++;
		end = w + strlen(w);
		while (end > w && isspace((unsigned char) end[-1]))
			*--end = '\0';
		if (*w == '\0')
			continue;
		list->words = pf_realloc(list->words, sizeof(char *) * (size_t) (list->n + 1));
		list->words[list->n++] = pf_strdup(w);
	}
	free(copy);
}

static bool
words_has(const word_list *list, const char *word)
{
	for (int i = 0; word && i < list->n; i++)
		if (strcasecmp(list->words[i], word) == 0)
			return true;
	return false;
}

static void
words_free(word_list *list)
{
	for (int i = 0; i < list->n; i++)
		free(list->words[i]);
	free(list->words);
	list->words = NULL;
	list->n = 0;
}

static bool
placeholder_known(const char *name, bool status_statement)
{
	static const char *const known[] = {"idempotency_key", "operation_id", "payment_id", "attempt", "details", NULL};

	for (int i = 0; known[i]; i++)
		if (strcmp(name, known[i]) == 0)
			return true;
	if (strncmp(name, DETAILS_PREFIX, strlen(DETAILS_PREFIX)) == 0 && name[strlen(DETAILS_PREFIX)] != '\0')
		return true;
	return status_statement && strcmp(name, "legacy_ref") == 0;
}

static bool
statement_init(statement *st, const char *setting, const char *what, const char *text, char *why, size_t why_len)
{
	pf_error	err;

	st->setting = setting;
	st->what = what;
	if (text == NULL)
		return true;
	if (pf_named_sql_parse(text, &st->sql, &err) != PF_OK)
	{
		snprintf(why, why_len, "invalid %s: %s", setting, err.message);
		return false;
	}
	for (int i = 0; i < st->sql.n_params; i++)
	{
		if (!placeholder_known(st->sql.names[i], strcmp(what, "status") == 0))
		{
			snprintf(why, why_len, "invalid %s: unknown placeholder :%s (known: :idempotency_key, :operation_id, "
					 ":payment_id, :attempt, :details, :details.<field>%s)", setting, st->sql.names[i],
					 strcmp(what, "status") == 0 ? ", :legacy_ref" : "");
			pf_named_sql_free(&st->sql);
			return false;
		}
	}
	st->present = true;
	return true;
}

static void
payment_cleanup(void *role)
{
	payment_role_state *ps = role;

	if (ps == NULL)
		return;
	pf_named_sql_free(&ps->call.sql);
	pf_named_sql_free(&ps->submit.sql);
	pf_named_sql_free(&ps->status.sql);
	pf_named_sql_free(&ps->lookup.sql);
	pf_sqlstate_rules_free(&ps->rules);
	words_free(&ps->done);
	words_free(&ps->failed);
	pthread_mutex_destroy(&ps->check_lock);
	connect_gate_destroy(&ps->connects);
	free(ps->bad_statement);
	free(ps);
}

/* ---- the start-up check ---- */

/* A procedure call: no driver can tell its result before running it. */
static bool
is_procedure_call(const char *sql)
{
	while (isspace((unsigned char) *sql))
		sql++;
	return sql[0] == '{' ||
		((strncasecmp(sql, "call", 4) == 0 || strncasecmp(sql, "exec", 4) == 0) &&
		 !isalnum((unsigned char) sql[4]) && sql[4] != '_');
}

/* False with why set when the driver says st cannot give what the worker reads. */
static bool
check_result_shape(payment_role_state *ps, pf_odbc *odbc, const statement *st, const char *column, char *why,
				   size_t why_len)
{
	char	  **names = NULL;
	int			n = 0;
	bool		ok = true;
	pf_error	err;

	if (!st->present)
		return true;
	if (pf_odbc_describe(odbc, st->sql.sql, &n, &names, &err) != PF_OK)
	{
		pf_log_write(PF_LOG_WARN, NULL, json_pack("{s:s,s:s}", "setting", st->setting, "sqlstate", err.code),
					 "cannot prepare %s to check its result (%s); its first call will tell", st->setting,
					 pf_sqlstate_class(err.code));
		return true;
	}
	if (n == 0 && is_procedure_call(st->sql.sql))
		pf_log_debug(NULL, "%s calls a procedure: its result is known only when it runs", st->setting);
	else if (n == 0 && st == &ps->call && ps->lookup.present)
		pf_log_warn(NULL, "%s returns no result set, the ODBC driver says: the outcome of each call is read "
					"with PAYFLOW_LEGACY_LOOKUP", st->setting);
	else if (n == 0)
	{
		snprintf(why, why_len, "invalid %s: it returns no result set, the ODBC driver says, so no call would "
				 "tell whether it charged (its first row is the step's result)%s", st->setting,
				 st == &ps->call ? "; make it return the charge's row, or set PAYFLOW_LEGACY_LOOKUP" : "");
		ok = false;
	}
	else if (column != NULL)
	{
		pf_buf		list = PF_BUF_INIT;

		ok = false;
		for (int i = 0; i < n; i++)
		{
			ok = ok || strcmp(names[i], column) == 0;
			pf_buf_appendf(&list, "%s%s", i ? ", " : "", names[i]);
		}
		if (!ok)
			snprintf(why, why_len, "invalid %s: it returns no column %s (it returns %.200s)", st->setting, column,
					 pf_buf_str(&list));
		pf_buf_free(&list);
	}
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return ok;
}

/*
 * What the driver and the DBMS say about the settings, on a connection that
 * works: a refused query time-out (logged once), and the statements'
 * result shapes. False with why set for a statement that cannot work.
 */
static bool
check_with_driver(payment_role_state *ps, pf_odbc *odbc, char *why, size_t why_len)
{
	char		said[256];
	bool		poll = ps->cfg->legacy_mode == PF_LEGACY_SUBMIT_POLL;

	if (pf_odbc_timeout_refused(odbc, said, sizeof(said)))
		pf_log_write(PF_LOG_WARN, NULL, json_pack("{s:s,s:i}", "driverSays", said, "timeoutSeconds",
												  ps->cfg->legacy_timeout),
					 "the ODBC driver does not enforce SQL_ATTR_QUERY_TIMEOUT: payflow enforces "
					 "PAYFLOW_LEGACY_TIMEOUT itself, cancelling a call once it is due");
	return check_result_shape(ps, odbc, poll ? &ps->submit : &ps->call, poll ? "legacy_ref" : NULL, why, why_len) &&
		check_result_shape(ps, odbc, &ps->status, "status", why, why_len) &&
		check_result_shape(ps, odbc, &ps->lookup, NULL, why, why_len);
}

/* At the first connection that works, if start-up could not check. */
static void
check_once(payment_role_state *ps, pf_odbc *odbc)
{
	char		why[512];

	pthread_mutex_lock(&ps->check_lock);
	if (!ps->checked && pf_odbc_connected(odbc))
	{
		ps->checked = true;
		if (!check_with_driver(ps, odbc, why, sizeof(why)))
		{
			ps->bad_statement = pf_strdup(why);
			pf_log_error(NULL, "%s: every payment fails without a call until the setting is fixed", why);
		}
	}
	pthread_mutex_unlock(&ps->check_lock);
}

static void *
payment_init(const role_ops *role, const pf_config *cfg, char *why, size_t why_len)
{
	payment_role_state *ps = pf_calloc(1, sizeof(*ps));
	bool		poll = cfg->legacy_mode == PF_LEGACY_SUBMIT_POLL;

	ps->cfg = cfg;
	connect_gate_init(&ps->connects, cfg->legacy_connects_at_once);
	/* only the statements of the chosen mode are parsed and used */
	if (!statement_init(&ps->call, "PAYFLOW_LEGACY_CALL", "call", poll ? NULL : cfg->legacy_call, why, why_len) ||
		!statement_init(&ps->submit, "PAYFLOW_LEGACY_SUBMIT", "submit", poll ? cfg->legacy_submit : NULL, why,
						why_len) ||
		!statement_init(&ps->status, "PAYFLOW_LEGACY_STATUS", "status", poll ? cfg->legacy_status : NULL, why,
						why_len) ||
		!statement_init(&ps->lookup, "PAYFLOW_LEGACY_LOOKUP", "lookup", cfg->legacy_lookup, why, why_len) ||
		!pf_sqlstate_rules_init(&ps->rules, cfg->legacy_retryable_sqlstates, cfg->legacy_permanent_sqlstates,
								why, why_len))
	{
		payment_cleanup(ps);
		return NULL;
	}
	words_parse(&ps->done, cfg->legacy_done_statuses);
	words_parse(&ps->failed, cfg->legacy_failed_statuses);
	if (poll && (ps->done.n == 0 || ps->failed.n == 0))
	{
		snprintf(why, why_len, "invalid PAYFLOW_LEGACY_%s_STATUSES: no status names", ps->done.n == 0 ? "DONE" : "FAILED");
		payment_cleanup(ps);
		return NULL;
	}
	ps->raw_errors = cfg->raw_error_text != 0;
	pthread_mutex_init(&ps->check_lock, NULL);

	/* one connection to check with; a DBMS that is down delays start-up by one connect attempt at most */
	{
		pf_odbc    *odbc = pf_odbc_create(cfg->legacy_odbc, cfg->legacy_connect_timeout);
		pf_error	err;
		bool		ok = true;

		if (pf_odbc_connect(odbc, &err) != PF_OK)
			pf_log_write(PF_LOG_WARN, NULL, json_pack("{s:s}", "sqlstate", err.code),
						 "the legacy DBMS cannot be reached at start-up (%s): the driver and the statements are "
						 "checked at the first connection", pf_sqlstate_class(err.code));
		else
		{
			ps->checked = true;
			ok = check_with_driver(ps, odbc, why, why_len);
		}
		pf_odbc_destroy(odbc);
		if (!ok)
		{
			payment_cleanup(ps);
			return NULL;
		}
	}
	return ps;
}

static void *
payment_thread_init(void *role)
{
	payment_role_state *ps = role;
	payment_thread *pt = pf_calloc(1, sizeof(*pt));

	pt->role = ps;
	/* connects on its first call, so a legacy DBMS that is down delays no start-up */
	pt->odbc = pf_odbc_create(ps->cfg->legacy_odbc, ps->cfg->legacy_connect_timeout);
	return pt;
}

static void
payment_thread_cleanup(void *thread)
{
	payment_thread *pt = thread;

	if (pt == NULL)
		return;
	pf_odbc_destroy(pt->odbc);
	free(pt);
}

static void
payment_interrupt(void *thread)
{
	pf_error	err;

	/* a failure is logged by the connection, which is closed after the call */
	(void) pf_odbc_cancel(((payment_thread *) thread)->odbc, &err);
}

/* ---- calls ---- */

/* The values of a statement's placeholders; PF_ERR_INVALID for a request that is not an object. */
static pf_result
bind_values(const statement *st, const step_run *run, const char *legacy_ref, char **values, pf_error *err)
{
	for (int i = 0; i < st->sql.n_params; i++)
	{
		const char *name = st->sql.names[i];

		values[i] = NULL;
		if (strcmp(name, "idempotency_key") == 0)
			values[i] = pf_strdup(run->idempotency_key);
		else if (strcmp(name, "operation_id") == 0)
			values[i] = pf_strdup(run->operation_id);
		else if (strcmp(name, "payment_id") == 0)
			values[i] = run->payment_id ? pf_strdup(run->payment_id) : NULL;
		else if (strcmp(name, "attempt") == 0)
		{
			char		n[16];

			snprintf(n, sizeof(n), "%d", run->attempt);
			values[i] = pf_strdup(n);
		}
		else if (strcmp(name, "details") == 0)
			values[i] = pf_strndup(run->input, run->input_len);
		else if (strcmp(name, "legacy_ref") == 0)
			values[i] = legacy_ref ? pf_strdup(legacy_ref) : NULL;
		else
		{
			pf_json_member_kind kind;

			/* :details.<field>; absent and null both bind SQL NULL */
			if (pf_json_member_text(run->input, run->input_len, name + strlen(DETAILS_PREFIX), &kind, &values[i],
									err) != PF_OK)
			{
				for (int k = 0; k < i; k++)
				{
					free(values[k]);
					values[k] = NULL;
				}
				return pf_error_set(err, PF_ERR_INVALID, "invalid_request",
									"the request is not a JSON object, so :%s has no value", name);
			}
		}
	}
	return PF_OK;
}

static bool
step_must_stop(void *run)
{
	return step_stop_requested(run) != STOP_NONE;
}

/*
 * Log in before the call, through the process's gate (connect_gate.h), and
 * again after a refused login: nothing was sent, so nothing can have been
 * charged, and a login refused in a crowd mostly works a moment later.
 * Only when every try failed does the step spend an attempt on it.
 */
static pf_result
legacy_connect(payment_thread *pt, step_run *run, pf_error *err)
{
	payment_role_state *ps = pt->role;
	pf_result	r = PF_OK;

	for (int attempt = 0; attempt < CONNECT_TRIES && !pf_odbc_connected(pt->odbc); attempt++)
	{
		if (attempt > 0)
		{
			char		text[256];

			pf_log_info(&run->ids, "legacy login failed (%s: %s); trying again", err->code,
						pf_downstream_log_text(err->code, err->message, ps->raw_errors, text, sizeof(text)));
			if (!step_sleep(run, pf_backoff_ms(attempt - 1, 250, 4000)))
				break;
		}
		if (!connect_gate_enter(&ps->connects, step_must_stop, run))
			break;
		step_call_started(run, ps->cfg->legacy_connect_timeout);
		r = pf_odbc_connect(pt->odbc, err);
		step_call_finished(run);
		connect_gate_leave(&ps->connects);
		if (r != PF_OK && !pf_sqlstate_is_connection_error(err->code))
			return r;
	}
	if (pf_odbc_connected(pt->odbc))
		return PF_OK;
	if (r == PF_OK)				/* stopped before a login failed */
		r = pf_error_set(err, PF_ERR_FINAL, "HY008", "the step was stopped before its legacy login");
	return r;
}

static pf_result
legacy_exec(payment_thread *pt, const statement *st, step_run *run, const char *legacy_ref, json_t **row,
			pf_odbc_call_info *info, pf_error *err)
{
	payment_role_state *ps = pt->role;
	int			n = st->sql.n_params;
	char	  **values = pf_calloc((size_t) (n > 0 ? n : 1), sizeof(char *));
	int			timeout_s = ps->cfg->legacy_timeout;
	int64_t		started = pf_now_ms();
	bool		reused = false;
	pf_result	r;
	pf_span		call;
	char		name[64];

	*row = NULL;
	memset(info, 0, sizeof(*info));
	/* the statement's name, its time and its outcome: never its text or values (card data) */
	snprintf(name, sizeof(name), "legacy %s", st->what);
	pf_span_begin(&call, name, PF_SPAN_CLIENT, run->trace);
	pf_span_set_str(&call, "db.system", "other_sql");
	pf_span_set_str(&call, "payflow.legacy.statement", st->what);
	if (step_stop_requested(run) != STOP_NONE)
		r = pf_error_set(err, PF_ERR_FINAL, "HY008", "the step was stopped before its %s call", st->what);
	else
		r = bind_values(st, run, legacy_ref, values, err);
	if (r == PF_OK)
	{
		reused = pf_odbc_connected(pt->odbc);
		r = legacy_connect(pt, run, err);
	}
	if (r == PF_OK && !ps->checked)
		check_once(ps, pt->odbc);
	if (r == PF_OK && ps->bad_statement != NULL)
		r = pf_error_set(err, PF_ERR_INVALID, "invalid_statement", "%s", ps->bad_statement);
	if (r == PF_OK)
	{

		/* the watchdog allows the connect too */
		step_call_started(run, timeout_s + ps->cfg->legacy_connect_timeout);
		r = pf_odbc_first_row(pt->odbc, st->sql.sql, n, (const char *const *) values, timeout_s, row, info, err);
		if (r != PF_OK && reused && pf_sqlstate_is_connection_error(err->code) && !info->answered &&
			step_stop_requested(run) == STOP_NONE)
		{
			char		text[256];

			/*
			 * A connection that sat idle may have been dropped by the DBMS
			 * (a restart, an idle time-out). Once more on a new one rather
			 * than spend an attempt: the call carries the step's idempotency
			 * key, so even one that did reach the DBMS is not repeated.
			 */
			pf_log_warn(&run->ids, "legacy connection lost (%s: %s); %s again on a new connection", err->code,
						pf_downstream_log_text(err->code, err->message, ps->raw_errors, text, sizeof(text)),
						st->what);
			step_call_started(run, timeout_s + ps->cfg->legacy_connect_timeout);
			r = pf_odbc_first_row(pt->odbc, st->sql.sql, n, (const char *const *) values, timeout_s, row, info,
								  err);
		}
		step_call_finished(run);
	}
	for (int i = 0; i < n; i++)
		free(values[i]);
	free(values);
	if (info->timed_out)
		pf_log_write(PF_LOG_INFO, &run->ids, json_pack("{s:s,s:I}", "statement", st->what, "ms", (json_int_t) info->ms),
					 "the legacy %s reached PAYFLOW_LEGACY_TIMEOUT (%d s): payflow cancelled it itself, the driver "
					 "having no time-out", st->what, timeout_s);
	if (info->cancel_failed)
		pf_log_write(PF_LOG_WARN, &run->ids, json_pack("{s:s,s:I}", "statement", st->what, "ms", (json_int_t) info->ms),
					 "the legacy %s whose cancel failed has returned; the step was kept leased meanwhile", st->what);
	pf_log_write(PF_LOG_DEBUG, &run->ids,
				 json_pack("{s:s,s:I,s:s,s:s*,s:b}", "statement", st->what, "ms", (json_int_t) (pf_now_ms() - started),
						   "sqlstate", r == PF_OK ? "00000" : err->code, "legacyRef", legacy_ref,
						   "ownTimeout", info->timed_out),
				 "legacy %s %s", st->what, r == PF_OK ? "returned" : "failed");
	pf_span_set_str(&call, "db.response.status_code", r == PF_OK ? "00000" : err->code);
	pf_span_set_str(&call, "payflow.outcome", r == PF_OK ? "ok" : r == PF_ERR_TRANSIENT ? "retryable" : "permanent");
	pf_span_set_bool(&call, "payflow.legacy.own_timeout", info->timed_out);
	if (r != PF_OK)
		pf_span_set_error(&call, err->code);
	pf_span_end(&call);
	return r;
}

/* run->error for a failed legacy call: code, class and a safe message (downstream_error.h). */
static void
set_legacy_error(payment_thread *pt, step_run *run, const statement *st, const pf_error *err, const char *legacy_ref)
{
	json_t	   *e = pf_downstream_sql_error("legacy", err->code, err->message, pt->role->raw_errors);
	const char *message = json_string_value(json_object_get(e, "message"));
	json_t	   *extra = json_pack("{s:s,s:s,s:s*}", "source", "legacy", "statement", st->what, "legacyRef", legacy_ref);

	json_object_update(extra, e);
	json_object_del(extra, "code");
	json_object_del(extra, "message");
	step_set_error(run, json_string_value(json_object_get(e, "code")), message, extra);
	json_decref(e);
}

/* A failed call as the step's outcome. */
static step_status
call_failed(payment_thread *pt, step_run *run, const statement *st, const pf_error *err, const char *legacy_ref)
{
	if (step_stop_requested(run) != STOP_NONE)
		return STEP_ABANDONED;
	if (err->result == PF_ERR_INVALID)
	{
		/* payflow's own words: nothing of the DBMS in them */
		step_set_error(run, err->code, err->message, json_pack("{s:s}", "statement", st->what));
		return STEP_PERMANENT;
	}
	set_legacy_error(pt, run, st, err, legacy_ref);
	return pf_sqlstate_is_retryable(&pt->role->rules, err->code) ? STEP_RETRYABLE : STEP_PERMANENT;
}

/*
 * The DBMS ran st but its answer does not say whether it charged (why).
 * Never a plain failure: the look-up decides when there is one; else
 * "outcome unknown", permanent, so fail_step writes a dead letter for
 * reconciliation and the client is told not to resubmit.
 */
static step_status
outcome_unknown(payment_thread *pt, step_run *run, const statement *st, const char *why, const char *legacy_ref)
{
	const statement *lookup = &pt->role->lookup;
	pf_odbc_call_info info;
	json_t	   *row = NULL;
	pf_error	err;

	if (step_stop_requested(run) != STOP_NONE)
		return STEP_ABANDONED;
	pf_log_write(PF_LOG_WARN, &run->ids, json_pack("{s:s,s:s*,s:b}", "statement", st->what, "legacyRef", legacy_ref,
												   "lookup", lookup->present),
				 "the legacy %s ran, but %s: it may have charged", st->what, why);
	if (lookup->present)
	{
		if (legacy_exec(pt, lookup, run, NULL, &row, &info, &err) != PF_OK)
		{
			if (step_stop_requested(run) != STOP_NONE)
				return STEP_ABANDONED;
			if (pf_sqlstate_is_retryable(&pt->role->rules, err.code))
			{
				set_legacy_error(pt, run, lookup, &err, legacy_ref);
				return STEP_RETRYABLE;	/* the next attempt looks up first */
			}
		}
		else if (row != NULL)
		{
			pf_log_write(PF_LOG_INFO, &run->ids, json_pack("{s:s,s:O}", "statement", st->what, "result", row),
						 "look-up found the charge of the %s", st->what);
			run->result = row;
			return STEP_SUCCEEDED;
		}
		else
		{
			/* nothing charged under the key: a retry with the same key is safe */
			step_set_error(run, "no_row", "the legacy call returned no row and the look-up found no charge; "
						   "retried with the same idempotency key",
						   json_pack("{s:s,s:s,s:s,s:s*}", "class", "dbms", "source", "legacy", "statement", st->what,
									 "legacyRef", legacy_ref));
			return STEP_RETRYABLE;
		}
	}
	step_set_error(run, OUTCOME_UNKNOWN,
				   "outcome unknown: the legacy DBMS ran the payment but did not say whether it charged; "
				   "do not resubmit it, reconcile it with the legacy system (a dead letter holds it)",
				   json_pack("{s:s,s:s,s:s,s:s,s:s*}", "class", OUTCOME_UNKNOWN, "source", "legacy", "statement", st->what,
							 "reason", why, "legacyRef", legacy_ref));
	return STEP_PERMANENT;
}

/*
 * A retryable failure after which the charge may exist (a call cut off on
 * its way that no look-up could clear up, a job still running at the time-
 * out). Retried as any other; but if no attempt is left, fail_step ends the
 * operation with outcome_unknown instead of this error, so that the client
 * is not told "failed" (and resubmits) about a payment that may be charged.
 */
static void
mark_outcome_unknown(step_run *run)
{
	if (run->error != NULL)
		json_object_set_new(run->error, "outcomeUnknown", json_true());
}

/*
 * Did a call that failed this way perhaps charge? It reached the DBMS and
 * was cut off (timed out, cancelled, interrupted, connection lost), so its
 * work may have been done.
 */
static bool
may_have_charged(const pf_odbc_call_info *info, const pf_error *err)
{
	const char *c = pf_sqlstate_class(err->code);

	return info->executed && err->result != PF_ERR_INVALID &&
		(strcmp(c, "timeout") == 0 || strcmp(c, "connection") == 0);
}

/*
 * A call that failed: after the DBMS answered (reading its row), the work
 * may be done, so the outcome is unknown; before, as its SQLSTATE says. One
 * cut off on its way may have charged: with a look-up, that is asked at
 * once (a charge found completes the step), so that not even the last
 * attempt ends as a plain failure after a charge.
 */
static step_status
exec_failed(payment_thread *pt, step_run *run, const statement *st, const pf_odbc_call_info *info,
			const pf_error *err, const char *legacy_ref)
{
	pf_odbc_call_info lookup_info;
	json_t	   *row = NULL;
	pf_error	lookup_err;
	bool		cut_off = st != &pt->role->lookup && may_have_charged(info, err);
	bool		none_charged = false;
	step_status s;
	char		why[128];

	if (info->answered && err->result != PF_ERR_INVALID)
	{
		snprintf(why, sizeof(why), "reading its answer failed (SQLSTATE %s)", err->code);
		return outcome_unknown(pt, run, st, why, legacy_ref);
	}

	if (cut_off && pt->role->lookup.present && step_stop_requested(run) == STOP_NONE &&
		legacy_exec(pt, &pt->role->lookup, run, NULL, &row, &lookup_info, &lookup_err) == PF_OK)
	{
		if (row != NULL)
		{
			pf_log_write(PF_LOG_INFO, &run->ids, json_pack("{s:s,s:s,s:O}", "statement", st->what, "sqlstate",
														   err->code, "result", row),
						 "look-up found the charge of the %s that was cut off", st->what);
			run->result = row;
			return STEP_SUCCEEDED;
		}
		none_charged = true;
	}
	s = call_failed(pt, run, st, err, legacy_ref);
	if (s == STEP_RETRYABLE && cut_off && !none_charged)
		mark_outcome_unknown(run);
	return s;
}

/*
 * Before a retry: did an attempt whose outcome is unknown already succeed?
 * STEP_SUCCEEDED with run->result if so; STEP_RETRYABLE with nothing set
 * when there is nothing to find (go on and call); else a failure.
 */
static step_status
look_up_earlier_attempt(payment_thread *pt, step_run *run)
{
	pf_odbc_call_info info;
	json_t	   *row;
	pf_error	err;

	if (!pt->role->lookup.present || (run->attempt <= 1 && !run->takeover))
		return STEP_RETRYABLE;
	if (legacy_exec(pt, &pt->role->lookup, run, NULL, &row, &info, &err) != PF_OK)
		return call_failed(pt, run, &pt->role->lookup, &err, NULL);
	if (row == NULL)
	{
		pf_log_info(&run->ids, "look-up found no earlier charge (attempt %d): calling", run->attempt);
		return STEP_RETRYABLE;
	}
	pf_log_write(PF_LOG_INFO, &run->ids, json_pack("{s:i,s:O}", "attempt", run->attempt, "result", row),
				 "look-up found the charge of an earlier attempt");
	run->result = row;
	return STEP_SUCCEEDED;
}

static step_status
run_blocking(payment_thread *pt, step_run *run)
{
	const statement *call = &pt->role->call;
	step_status s = look_up_earlier_attempt(pt, run);
	pf_odbc_call_info info;
	json_t	   *row;
	pf_error	err;

	if (s != STEP_RETRYABLE || run->error != NULL)
		return s;
	if (legacy_exec(pt, call, run, NULL, &row, &info, &err) != PF_OK)
		return exec_failed(pt, run, call, &info, &err, NULL);
	if (row == NULL)
		return outcome_unknown(pt, run, call, "it returned no row", NULL);
	run->result = row;
	return STEP_SUCCEEDED;
}

/* A column of a row as text (strings as they are, numbers printed); NULL if absent. */
static char *
row_text(json_t *row, const char *column)
{
	json_t	   *v = json_object_get(row, column);

	if (json_is_string(v))
		return pf_strdup(json_string_value(v));
	if (json_is_integer(v))
	{
		char		n[32];

		snprintf(n, sizeof(n), "%lld", (long long) json_integer_value(v));
		return pf_strdup(n);
	}
	return NULL;
}

/* A legacy job that ended FAILED: its own reason (masked) is its answer to the client. */
static step_status
job_failed(payment_thread *pt, step_run *run, json_t *row, const char *status, const char *ref)
{
	const char *reason = json_string_value(json_object_get(row, "failure_reason"));
	json_t	   *e = pf_downstream_sql_error("legacy", "45000", reason ? reason : "the legacy job failed",
											pt->role->raw_errors);

	step_set_error(run, "legacy_job_failed", json_string_value(json_object_get(e, "message")),
				   json_pack("{s:s,s:s,s:s,s:s}", "class", "declined", "source", "legacy", "legacyRef", ref,
							 "status", status));
	json_decref(e);
	return STEP_PERMANENT;
}

static step_status
run_submit_poll(payment_thread *pt, step_run *run)
{
	payment_role_state *ps = pt->role;
	char	   *ref = run->external_ref ? pf_strdup(run->external_ref) : NULL;
	pf_odbc_call_info info;
	int64_t		deadline;
	json_t	   *row;
	pf_error	err;
	step_status s;
	int			polls = 0;

	if (ref == NULL)
	{
		s = look_up_earlier_attempt(pt, run);
		if (s != STEP_RETRYABLE || run->error != NULL)
			return s;
		if (legacy_exec(pt, &ps->submit, run, NULL, &row, &info, &err) != PF_OK)
			return exec_failed(pt, run, &ps->submit, &info, &err, NULL);
		ref = row_text(row, "legacy_ref");
		if (ref == NULL || ref[0] == '\0')
		{
			const char *why = row ? "its row has no legacy_ref" : "it returned no row";

			free(ref);
			json_decref(row);
			return outcome_unknown(pt, run, &ps->submit, why, NULL);
		}
		json_decref(row);
		/* saved before the first poll: a worker taking over resumes this job */
		if (step_save_external_ref(run, ref, &err) != PF_OK)
		{
			if (strcmp(err.code, "PF004") == 0)
			{
				pf_log_warn(&run->ids, "lease lost before legacy_ref %s could be saved", ref);
				free(ref);
				return STEP_ABANDONED;
			}
			pf_log_warn(&run->ids, "cannot save legacy_ref %s (%s: %s); polling it anyway", ref, err.code,
						err.message);
		}
		pf_log_write(PF_LOG_INFO, &run->ids, json_pack("{s:s}", "legacyRef", ref), "legacy job submitted");
	}
	else
		pf_log_write(PF_LOG_INFO, &run->ids, json_pack("{s:s,s:i}", "legacyRef", ref, "attempt", run->attempt),
					 "resuming the poll of the legacy job an earlier attempt submitted");

	deadline = pf_now_ms() + (int64_t) ps->cfg->legacy_timeout * 1000;
	for (;;)
	{
		pf_result	r = legacy_exec(pt, &ps->status, run, ref, &row, &info, &err);

		polls++;
		if (r != PF_OK)
		{
			if (step_stop_requested(run) != STOP_NONE || info.answered ||
				!pf_sqlstate_is_retryable(&ps->rules, err.code) || pf_now_ms() >= deadline)
			{
				s = exec_failed(pt, run, &ps->status, &info, &err, ref);
				free(ref);
				return s;
			}
			{
				char		text[256];

				pf_log_warn(&run->ids, "status call for %s failed (%s: %s); polling on", ref, err.code,
							pf_downstream_log_text(err.code, err.message, ps->raw_errors, text, sizeof(text)));
			}
		}
		else if (row == NULL)
		{
			/* the job was submitted: it may charge whatever the status statement says */
			s = outcome_unknown(pt, run, &ps->status, "it returned no row for the legacy job", ref);
			free(ref);
			return s;
		}
		else
		{
			const char *status = json_string_value(json_object_get(row, "status"));

			if (words_has(&ps->done, status))
			{
				pf_log_write(PF_LOG_INFO, &run->ids, json_pack("{s:s,s:i}", "legacyRef", ref, "polls", polls),
							 "legacy job done");
				run->result = row;
				free(ref);
				return STEP_SUCCEEDED;
			}
			if (words_has(&ps->failed, status))
			{
				s = job_failed(pt, run, row, status, ref);
				json_decref(row);
				free(ref);
				return s;
			}
			json_decref(row);
		}
		if (pf_now_ms() >= deadline)
		{
			step_set_error(run, "HYT00", "the legacy job did not finish within PAYFLOW_LEGACY_TIMEOUT",
						   json_pack("{s:s,s:s,s:s,s:i}", "class", "timeout", "source", "legacy", "legacyRef", ref,
									 "polls", polls));
			mark_outcome_unknown(run);	/* the job may still charge */
			free(ref);
			return STEP_RETRYABLE;
		}
		if (!step_sleep(run, ps->cfg->legacy_poll_interval_ms))
		{
			free(ref);
			return STEP_ABANDONED;
		}
	}
}

static step_status
payment_run(void *thread, step_run *run)
{
	payment_thread *pt = thread;

	step_status s;

	/* a cancel aimed at the previous message must not hit this one */
	pf_odbc_clear_cancel(pt->odbc);
	pf_odbc_set_log_ids(pt->odbc, &run->ids);
	if (pt->role->cfg->legacy_mode == PF_LEGACY_SUBMIT_POLL)
		s = run_submit_poll(pt, run);
	else
		s = run_blocking(pt, run);
	pf_odbc_set_log_ids(pt->odbc, NULL);
	return s;
}

const role_ops payment_role = {
	.name = "payment",
	.program = PF_PROGRAM_PAYMENT,
	.event_type = PF_EVENT_PAYMENT_REQUESTED,
	.step = "PROCESS_PAYMENT",
	.init = payment_init,
	.cleanup = payment_cleanup,
	.thread_init = payment_thread_init,
	.thread_cleanup = payment_thread_cleanup,
	.run = payment_run,
	.interrupt = payment_interrupt,
};
