/*
 * pipeline_check.c
 *		At start-up: does the pipeline the database defines
 *		(payflow.pipeline()) match what this worker's role parses (event.c)?
 *
 * A step role needs its step to exist, asked for by the request event it
 * parses, with its input reference in the member it reads; the webhook role
 * needs the terminal events it delivers. A worker that would misread its
 * queue refuses to start (exit 2, one line) instead of sending every message
 * to the dead-letter queue. The result payload name is not checked: the
 * worker takes it from each claim answer (resultName).
 *
 * A generic role (--role http|sql --step NAME) learns its step's request
 * event, input member and queue here instead, and cannot start without
 * them: a database not reachable yet is retried for a while (a SIGTERM
 * meanwhile ends the wait: the worker exits without starting), and a step
 * the newest version lacks is exit 2, naming it and the steps there are.
 *
 * Only the newest version is checked. Operations still in flight on an
 * older version are finished by workers that started while it was the
 * newest; finding those versions (SELECT DISTINCT pipeline_version FROM
 * payflow.operations WHERE terminal_at IS NULL) is a scan of the operations
 * at every start, and the version a message belongs to is checked again by
 * the claim (skip "not_in_pipeline").
 */
#include "worker.h"

#include <stdio.h>
#include <string.h>

#include "payflow/stop_signals.h"

/* how long a generic role waits for the database at start-up */
#define GENERIC_TRIES 30
#define GENERIC_RETRY_SECONDS 2

/* "A, B and C": the steps of a pipeline version, for messages */
static void
step_names(json_t *steps, pf_buf *names)
{
	json_t	   *step;
	size_t		i;

	json_array_foreach(steps, i, step)
	{
		const char *name = json_string_value(json_object_get(step, "step"));

		pf_buf_appendf(names, "%s%s", i > 0 ? ", " : "", name ? name : "?");
	}
}

/* A generic role's: its step's request event, input member and queue; else why. */
static bool
learn_step(const role_ops *role, json_t *pipeline, pf_event_type *event_type, char *why, size_t why_len)
{
	json_t	   *steps = json_object_get(pipeline, "steps");
	json_t	   *step;
	size_t		i;
	pf_buf		names = PF_BUF_INIT;

	json_array_foreach(steps, i, step)
	{
		const char *name = json_string_value(json_object_get(step, "step"));
		const char *event = json_string_value(json_object_get(step, "requestEvent"));
		const char *field = json_string_value(json_object_get(step, "inputField"));
		const char *destination = json_string_value(json_object_get(step, "destination"));
		pf_event_type known;

		if (name == NULL || strcmp(name, role->step) != 0)
			continue;
		if (event == NULL)
		{
			snprintf(why, why_len, "step %s has no request event in the database", role->step);
			return false;
		}
		/* a shipped step run by a generic role (e.g. --role http --step CREATE_INVOICE) */
		if (pf_event_type_parse(event, &known) && known != PF_EVENT_STEP_REQUESTED)
		{
			const char *member = pf_event_ref_member(known);

			if (field && member && strcmp(field, member) != 0)
			{
				snprintf(why, why_len, "step %s: the database says request event %s with input field %s, "
						 "this worker knows %s with %s", role->step, event, field, event, member);
				return false;
			}
			*event_type = known;
		}
		else
		{
			pf_event_define_step_request(event, field, destination);
			*event_type = PF_EVENT_STEP_REQUESTED;
		}
		pf_log_write(PF_LOG_INFO, NULL,
					 json_pack("{s:s,s:s,s:s?,s:s?}", "step", role->step, "requestEvent", event,
							   "inputField", field, "destination", destination),
					 "step %s: %s events from the database's pipeline", role->step, event);
		return true;
	}
	step_names(steps, &names);
	snprintf(why, why_len, "step %s does not exist in pipeline version %lld (its steps: %s); "
			 "add it with payflow.add_step", role->step,
			 (long long) json_integer_value(json_object_get(pipeline, "version")),
			 names.data ? names.data : "none");
	pf_buf_free(&names);
	return false;
}

/* A step role's: its step, asked for by the event and input field it parses; else why. */
static bool
check_step(const role_ops *role, json_t *pipeline, char *why, size_t why_len)
{
	json_t	   *steps = json_object_get(pipeline, "steps");
	json_t	   *step;
	size_t		i;
	const char *want_event = pf_event_type_name(role->event_type);
	const char *want_field = pf_event_ref_member(role->event_type);
	pf_buf		names = PF_BUF_INIT;

	json_array_foreach(steps, i, step)
	{
		const char *name = json_string_value(json_object_get(step, "step"));
		const char *event = json_string_value(json_object_get(step, "requestEvent"));
		const char *field = json_string_value(json_object_get(step, "inputField"));

		if (name == NULL || strcmp(name, role->step) != 0)
			continue;
		if (event && field && want_field && strcmp(event, want_event) == 0 && strcmp(field, want_field) == 0)
			return true;
		snprintf(why, why_len,
				 "step %s: the database says request event %s with input field %s, this worker knows %s with %s",
				 role->step, event ? event : "(none)", field ? field : "(none)", want_event,
				 want_field ? want_field : "(none)");
		return false;
	}
	step_names(steps, &names);
	snprintf(why, why_len, "step %s does not exist in pipeline version %lld (its steps: %s); --role %s runs it",
			 role->step, (long long) json_integer_value(json_object_get(pipeline, "version")),
			 names.data ? names.data : "none", role->name);
	pf_buf_free(&names);
	return false;
}

/* The webhook role's: the terminal events it delivers; else why. */
static bool
check_terminal(json_t *pipeline, char *why, size_t why_len)
{
	const char *completed = json_string_value(json_object_get(pipeline, "completedEvent"));
	const char *failed = json_string_value(json_object_get(pipeline, "failedEvent"));
	const char *want_completed = pf_event_type_name(PF_EVENT_OPERATION_COMPLETED);
	const char *want_failed = pf_event_type_name(PF_EVENT_OPERATION_FAILED);

	if (completed && failed && strcmp(completed, want_completed) == 0 && strcmp(failed, want_failed) == 0)
		return true;
	snprintf(why, why_len, "terminal events: the database says %s and %s, this worker knows %s and %s",
			 completed ? completed : "(none)", failed ? failed : "(none)", want_completed, want_failed);
	return false;
}

/*
 * Check the newest pipeline version over pg. 0: it matches, or the check
 * could not be made and the worker goes on (logged: a database not
 * reachable yet is retried as before; a webhook worker's database role
 * may lack EXECUTE on payflow.pipeline). 2: a mismatch, why says what
 * differs. 1: payflow.pipeline() failed otherwise (why says how).
 */
int
pipeline_check(const role_ops *role, pf_pg *pg, int signal_fd, pf_event_type *event_type, char *why,
			   size_t why_len)
{
	json_t	   *pipeline = NULL;
	pf_error	err;
	bool		ok;
	int			tries = 0;

	while (db_exec_json(pg, "SELECT payflow.pipeline()", 0, NULL, &pipeline, &err) != PF_OK)
	{
		if (err.result == PF_ERR_TRANSIENT && role->step_from_argv && ++tries < GENERIC_TRIES)
		{
			pf_log_error(NULL, "PostgreSQL is not reachable yet (%s: %s); step %s is defined there: "
						 "trying again in %d s", err.code, err.message, role->step, GENERIC_RETRY_SECONDS);
			if (pf_stop_signals_wait(signal_fd, GENERIC_RETRY_SECONDS * 1000) != 0)
			{
				snprintf(why, why_len, "stopped by a signal while waiting for PostgreSQL; not started");
				return 1;
			}
			continue;
		}
		if (err.result == PF_ERR_TRANSIENT && role->step_from_argv)
		{
			snprintf(why, why_len, "cannot read step %s from payflow.pipeline(): %s %s", role->step, err.code,
					 err.message);
			return 1;
		}
		if (err.result == PF_ERR_TRANSIENT)
		{
			pf_log_error(NULL, "PostgreSQL is not reachable yet (%s: %s); going on, it is retried "
						 "(the pipeline is not checked)", err.code, err.message);
			return 0;
		}
		if (role->handle_event != NULL && strcmp(err.code, "42501") == 0)
		{
			pf_log_warn(NULL, "cannot read payflow.pipeline() (%s); the terminal events are not checked",
						err.message);
			return 0;
		}
		snprintf(why, why_len, "cannot read payflow.pipeline(): %s %s", err.code, err.message);
		return 1;
	}
	ok = role->handle_event != NULL ? check_terminal(pipeline, why, why_len)
		: role->step_from_argv ? learn_step(role, pipeline, event_type, why, why_len)
		: check_step(role, pipeline, why, why_len);
	json_decref(pipeline);
	return ok ? 0 : 2;
}
