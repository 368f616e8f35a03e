/*
 * protection.c
 *		ECS task scale-in protection from a thread of its own (protection.h).
 *
 * The main loop says, every turn, whether the worker holds a message. This
 * thread turns that into PUT $ECS_AGENT_URI/task-protection/v1/state:
 *
 *	- {"ProtectionEnabled":true,"ExpiresInMinutes":N} when a message is
 *	  held and the task is not protected yet, and again whenever the
 *	  protection's remaining time falls under PAYFLOW_PROTECTION_RENEW_SECONDS
 *	  while messages are held or the idle time has not run out (the expiry is
 *	  the agent's ExpirationDate when it reports one, else N minutes after the
 *	  request was sent; never sooner than PROTECTION_MIN_RENEW_MS apart);
 *	- {"ProtectionEnabled":false} once nothing has been held for
 *	  PAYFLOW_PROTECTION_IDLE_SECONDS, and after the drain.
 *
 * A failed call (no answer within PROTECTION_TIMEOUT_MS, a refused
 * connection, a status other than 2xx, an answer with a "failure") is
 * retried with back-off; the first of a run of failures is logged, then at
 * most one line per PROTECTION_LOG_EVERY_MS. Nothing here takes the worker
 * lock or touches a job: payment work never waits for the agent.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "payflow/backoff.h"
#include "payflow/buf.h"
#include "payflow/http.h"
#include "payflow/log.h"
#include "protection.h"

#define PROTECTION_PATH "/task-protection/v1/state"
#define PROTECTION_CONNECT_TIMEOUT_MS 1000
#define PROTECTION_TIMEOUT_MS 2000
#define PROTECTION_MIN_RENEW_MS 5000
#define PROTECTION_BACKOFF_BASE_MS 1000
#define PROTECTION_BACKOFF_CAP_MS 30000
#define PROTECTION_LOG_EVERY_MS 60000
#define PROTECTION_TICK_MS 1000

struct protection
{
	char	   *url;
	int			minutes;
	int64_t		idle_ms;
	int64_t		renew_ms;
	pthread_t	thread;
	pthread_mutex_t lock;
	pthread_cond_t changed;

	/* guarded by lock */
	bool		holding;
	int64_t		last_held_ms;	/* when a message was last held */
	bool		stopping;

	/* the thread's own */
	pf_http    *http;
	bool		enabled;		/* the last answer said protected */
	bool		uncertain;		/* a call failed: the agent's state is unknown */
	int64_t		sent_ms;		/* when the last enable was sent */
	int64_t		expires_ms;		/* monotonic; valid while enabled */
	int			failures;		/* in a row */
	int64_t		next_attempt_ms;
	int64_t		last_failure_log_ms;
};

/*
 * The agent's ExpirationDate ("2026-12-01T11:40:00Z", fraction optional) as
 * monotonic milliseconds; false when absent or not UTC ISO 8601.
 */
static bool
parse_expiration(json_t *answer, int64_t now_ms, int64_t *expires_ms)
{
	json_t	   *prot = json_object_get(answer, "protection");
	const char *text = json_string_value(json_object_get(prot ? prot : answer, "ExpirationDate"));
	struct tm	tm;
	const char *rest;
	struct timespec wall;
	double		frac = 0;

	if (text == NULL)
		return false;
	memset(&tm, 0, sizeof(tm));
	rest = strptime(text, "%Y-%m-%dT%H:%M:%S", &tm);
	if (rest == NULL)
		return false;
	if (*rest == '.')
	{
		char	   *end;

		frac = strtod(rest, &end);
		rest = end;
	}
	if (strcmp(rest, "Z") != 0 && strcmp(rest, "+00:00") != 0)
		return false;
	clock_gettime(CLOCK_REALTIME, &wall);
	*expires_ms = now_ms + (int64_t) (((double) timegm(&tm) + frac -
									   ((double) wall.tv_sec + wall.tv_nsec / 1e9)) * 1000.0);
	return true;
}

/* One PUT; true when the agent applied it. */
static bool
put_state(protection *p, bool enable, int64_t now_ms, char *why, size_t why_len)
{
	pf_http_request req;
	pf_error	err;
	char		body[96];
	bool		ok = false;
	json_t	   *answer = NULL;

	if (enable)
		snprintf(body, sizeof(body), "{\"ProtectionEnabled\":true,\"ExpiresInMinutes\":%d}", p->minutes);
	else
		snprintf(body, sizeof(body), "{\"ProtectionEnabled\":false}");
	pf_http_request_init(&req, "PUT", p->url);
	pf_http_request_add_header(&req, "Content-Type", "application/json");
	pf_http_request_set_body(&req, body, strlen(body));
	req.connect_timeout_ms = PROTECTION_CONNECT_TIMEOUT_MS;
	req.timeout_ms = PROTECTION_TIMEOUT_MS;

	if (pf_http_perform(p->http, &req, &err) != PF_OK)
		snprintf(why, why_len, "%.200s", err.message);
	else if (pf_http_transport_failed(&req) || req.status == 0)
		snprintf(why, why_len, "%.200s", req.curl_error[0] ? req.curl_error : curl_easy_strerror(req.curl_code));
	else if (req.status < 200 || req.status > 299)
		snprintf(why, why_len, "HTTP %ld", req.status);
	else
	{
		answer = json_loadb(req.response.data ? req.response.data : "", req.response.len, 0, NULL);
		if (answer && (json_object_get(answer, "failure") || json_object_get(answer, "error")))
			snprintf(why, why_len, "the agent answered with a failure");
		else
			ok = true;
	}
	if (ok && enable)
	{
		int64_t		granted = now_ms + (int64_t) p->minutes * 60000;

		p->sent_ms = now_ms;
		if (!parse_expiration(answer, now_ms, &p->expires_ms) || p->expires_ms > granted)
			p->expires_ms = granted;
	}
	json_decref(answer);
	pf_http_request_free(&req);
	return ok;
}

/* Call the agent, keep its state and the failure streak, log sparingly. */
static void
attempt(protection *p, bool enable, int64_t now)
{
	char		why[CURL_ERROR_SIZE + 64] = "";
	bool		ok = put_state(p, enable, now, why, sizeof(why));
	int64_t		after = pf_now_ms();

	if (ok)
	{
		pf_log_write(p->failures > 0 ? PF_LOG_INFO : PF_LOG_DEBUG, NULL,
					 json_pack("{s:b,s:i,s:i}", "protectionEnabled", enable, "expiresInMinutes",
							   enable ? p->minutes : 0, "failedAttempts", p->failures),
					 enable ? "task scale-in protection set" : "task scale-in protection released");
		p->enabled = enable;
		p->uncertain = false;
		p->failures = 0;
		p->next_attempt_ms = 0;
		return;
	}
	p->uncertain = true;
	p->failures++;
	p->next_attempt_ms = after + pf_backoff_ms(p->failures - 1, PROTECTION_BACKOFF_BASE_MS,
											   PROTECTION_BACKOFF_CAP_MS);
	if (pf_log_throttled(p->failures == 1, &p->last_failure_log_ms, after, PROTECTION_LOG_EVERY_MS))
	{
		pf_log_write(PF_LOG_WARN, NULL,
					 json_pack("{s:b,s:i,s:s}", "protectionEnabled", enable, "failedAttempts", p->failures,
							   "reason", why),
					 "task scale-in protection: the ECS agent call failed (%s); retried with back-off, "
					 "payment work goes on", why);
	}
}

/* What the protection should be now, and whether a call is due. */
static bool
call_due(protection *p, bool holding, int64_t last_held_ms, bool stopping, int64_t now, bool *enable)
{
	bool		want = !stopping && (holding || (p->enabled && now - last_held_ms < p->idle_ms));

	*enable = want;
	if (!stopping && p->next_attempt_ms != 0 && now < p->next_attempt_ms)
		return false;			/* backing off */
	if (want)
	{
		int64_t		renew_at = p->expires_ms - p->renew_ms;

		if (renew_at < p->sent_ms + PROTECTION_MIN_RENEW_MS)
			renew_at = p->sent_ms + PROTECTION_MIN_RENEW_MS;
		return !p->enabled || now >= renew_at;
	}
	return p->enabled || p->uncertain;
}

static void *
protection_main(void *arg)
{
	protection *p = arg;

	pthread_mutex_lock(&p->lock);
	for (;;)
	{
		bool		stopping = p->stopping;
		bool		enable;
		int64_t		now = pf_now_ms();
		struct timespec until;

		if (call_due(p, p->holding, p->last_held_ms, stopping, now, &enable))
		{
			pthread_mutex_unlock(&p->lock);
			attempt(p, enable, now);
			pthread_mutex_lock(&p->lock);
			if (stopping)
				break;			/* the one release after the drain, whatever its answer */
			continue;
		}
		if (stopping)
			break;
		pf_deadline_in(&until, CLOCK_MONOTONIC, PROTECTION_TICK_MS);
		if (!p->stopping)
			pthread_cond_timedwait(&p->changed, &p->lock, &until);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

protection *
protection_start(const pf_config *cfg)
{
	protection *p;
	pf_buf		url;
	size_t		base_len;
	pthread_condattr_t attr;

	if (cfg->ecs_agent_uri == NULL)
		return NULL;
	p = pf_calloc(1, sizeof(*p));
	base_len = strlen(cfg->ecs_agent_uri);
	while (base_len > 0 && cfg->ecs_agent_uri[base_len - 1] == '/')
		base_len--;
	pf_buf_init(&url);
	pf_buf_append(&url, cfg->ecs_agent_uri, base_len);
	pf_buf_append_str(&url, PROTECTION_PATH);
	p->url = pf_strdup(url.data);
	pf_buf_free(&url);
	p->minutes = cfg->protection_minutes;
	p->idle_ms = (int64_t) cfg->protection_idle_seconds * 1000;
	p->renew_ms = (int64_t) cfg->protection_renew_seconds * 1000;
	p->http = pf_http_create();
	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&p->changed, &attr);
	pthread_condattr_destroy(&attr);
	if (p->http == NULL || pthread_create(&p->thread, NULL, protection_main, p) != 0)
	{
		pf_log_error(NULL, "cannot start the task protection thread: the task is not protected from scale-in");
		if (p->http)
			pf_http_destroy(p->http);
		pthread_cond_destroy(&p->changed);
		pthread_mutex_destroy(&p->lock);
		free(p->url);
		free(p);
		return NULL;
	}
	pf_log_write(PF_LOG_INFO, NULL,
				 json_pack("{s:s,s:i,s:i,s:i}", "url", p->url, "expiresInMinutes", p->minutes,
						   "idleSeconds", cfg->protection_idle_seconds, "renewSeconds",
						   cfg->protection_renew_seconds),
				 "task scale-in protection on while messages are held");
	return p;
}

void
protection_note(protection *p, bool holding)
{
	if (p == NULL)
		return;
	pthread_mutex_lock(&p->lock);
	if (holding)
		p->last_held_ms = pf_now_ms();
	if (holding != p->holding)
	{
		p->holding = holding;
		pthread_cond_signal(&p->changed);
	}
	pthread_mutex_unlock(&p->lock);
}

void
protection_stop(protection *p)
{
	if (p == NULL)
		return;
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	p->holding = false;
	pthread_cond_signal(&p->changed);
	pthread_mutex_unlock(&p->lock);
	pthread_join(p->thread, NULL);
	pf_http_destroy(p->http);
	pthread_cond_destroy(&p->changed);
	pthread_mutex_destroy(&p->lock);
	free(p->url);
	free(p);
}
