/*
 * aws_credentials.c
 *		Environment and ECS container credentials, cached and refreshed ahead
 *		of their expiry by a thread of their own.
 *
 * The endpoint answers in milliseconds on ECS, but it can be slow or down
 * (the agent restarting, a throttled endpoint): a fetch then takes up to
 * ENDPOINT_ATTEMPTS time-outs. It runs in the provider's refresher thread,
 * so the loops that sign with the credentials (the relay's sends, a
 * worker's receives and heartbeats) keep signing with the cached ones
 * meanwhile. Only a caller that has none valid may wait, and only when it
 * asks to (pf_aws_perform's blocking calls).
 *
 * Locking: "current" belongs to the owner thread (the one calling get and
 * invalidate); everything under "shared" is guarded by lock. The refresher
 * publishes a fetch as "latest", and the owner takes it over in get.
 */
#include "payflow/aws_credentials.h"

#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "payflow/backoff.h"
#include "payflow/buf.h"
#include "payflow/http.h"
#include "payflow/log.h"

#define ENDPOINT_CONNECT_TIMEOUT_MS 2000
#define ENDPOINT_TIMEOUT_MS 5000
#define ENDPOINT_ATTEMPTS 3
/* after a failed refresh with valid credentials in hand, wait before trying again */
#define REFRESH_RETRY_SECONDS 15
/* never two fetches closer than this, whatever the expiration says */
#define REFRESH_MIN_INTERVAL_SECONDS 1
/* a caller that waits for credentials waits for one fetch at most: its attempts and back-off */
#define WAIT_SECONDS (ENDPOINT_ATTEMPTS * (ENDPOINT_TIMEOUT_MS / 1000 + 2) + 2)
#define NEVER ((time_t) -1)

struct pf_aws_credentials_provider
{
	pf_aws_credentials current; /* owner thread: handed out by get */
	unsigned long current_version;	/* the fetch current came from */
	bool		from_endpoint;
	char	   *endpoint_url;
	char	   *auth_token;
	char	   *auth_token_file;
	pf_http    *http;			/* the refresher's */
	int			stop_fd;		/* eventfd: cuts a fetch short at destroy */
	pthread_t	thread;
	bool		thread_started;

	pthread_mutex_t lock;
	pthread_cond_t changed;		/* a fetch ended, credentials are wanted, or stop */
	struct
	{
		pf_aws_credentials latest;	/* the newest fetch, until the owner takes it */
		unsigned long version;	/* fetches that succeeded */
		unsigned long rounds;	/* fetches that ended, either way */
		time_t		expiration; /* of the newest fetch; 0: never */
		time_t		fetched_at;
		bool		have;		/* a fetch ever succeeded */
		bool		wanted;		/* a caller has none valid: fetch now */
		bool		stopping;
		time_t		retry_at;	/* after a failure: not before */
		int			failures;	/* consecutive */
		pf_error	last_error; /* of the last failed fetch */
	}			shared;
};

void
pf_aws_credentials_free(pf_aws_credentials *c)
{
	free(c->access_key_id);
	free(c->secret_access_key);
	free(c->session_token);
	memset(c, 0, sizeof(*c));
}

/* The SDKs' rule: http only to loopback or the container agents' addresses. */
static bool
full_uri_allowed(const char *url, pf_error *err)
{
	CURLU	   *u = curl_url();
	char	   *scheme = NULL;
	char	   *host = NULL;
	bool		ok = false;

	if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
		curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
		curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK)
	{
		if (strcmp(scheme, "https") == 0)
			ok = true;
		else if (strcmp(scheme, "http") == 0)
			ok = strncmp(host, "127.", 4) == 0 || strcmp(host, "localhost") == 0 ||
				strcmp(host, "[::1]") == 0 || strcmp(host, "169.254.170.2") == 0 ||
				strcmp(host, "169.254.170.23") == 0 || strcmp(host, "[fd00:ec2::23]") == 0;
	}
	if (!ok)
		pf_error_set(err, PF_ERR_INVALID, "config",
					 "AWS_CONTAINER_CREDENTIALS_FULL_URI must be https, or http to loopback or the ECS/EKS agent");
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(u);
	return ok;
}

static void *refresher_main(void *arg);

pf_aws_credentials_provider *
pf_aws_credentials_provider_create(const pf_config *cfg, pf_error *err)
{
	pf_aws_credentials_provider *p = pf_calloc(1, sizeof(*p));

	p->stop_fd = -1;
	/* like the SDKs' default chain: the environment first */
	if (cfg->aws_access_key_id && cfg->aws_secret_access_key)
	{
		p->current.access_key_id = pf_strdup(cfg->aws_access_key_id);
		p->current.secret_access_key = pf_strdup(cfg->aws_secret_access_key);
		p->current.session_token = cfg->aws_session_token ? pf_strdup(cfg->aws_session_token) : NULL;
		return p;
	}
	if (cfg->aws_container_credentials_relative_uri)
	{
		pf_buf		url = PF_BUF_INIT;

		pf_buf_appendf(&url, "%s%s", PF_ECS_CREDENTIALS_HOST, cfg->aws_container_credentials_relative_uri);
		p->endpoint_url = pf_buf_steal(&url);
	}
	else if (cfg->aws_container_credentials_full_uri)
	{
		if (!full_uri_allowed(cfg->aws_container_credentials_full_uri, err))
		{
			free(p);
			return NULL;
		}
		p->endpoint_url = pf_strdup(cfg->aws_container_credentials_full_uri);
		if (cfg->aws_container_authorization_token)
			p->auth_token = pf_strdup(cfg->aws_container_authorization_token);
		else if (cfg->aws_container_authorization_token_file)
			p->auth_token_file = pf_strdup(cfg->aws_container_authorization_token_file);
	}
	else
	{
		free(p);
		pf_error_set(err, PF_ERR_INVALID, "config", "no AWS credentials configured");
		return NULL;
	}
	p->from_endpoint = true;
	p->http = pf_http_create();
	p->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->changed, NULL);
	if (p->stop_fd < 0 || pthread_create(&p->thread, NULL, refresher_main, p) != 0)
	{
		pf_error_set(err, PF_ERR_INVALID, "credentials", "cannot start the credentials refresher: %s",
					 strerror(errno));
		pf_aws_credentials_provider_destroy(p);
		return NULL;
	}
	p->thread_started = true;
	return p;
}

void
pf_aws_credentials_provider_destroy(pf_aws_credentials_provider *p)
{
	if (p == NULL)
		return;
	if (p->thread_started)
	{
		uint64_t	one = 1;

		pthread_mutex_lock(&p->lock);
		p->shared.stopping = true;
		pthread_cond_broadcast(&p->changed);
		pthread_mutex_unlock(&p->lock);
		if (write(p->stop_fd, &one, sizeof(one)) < 0)
			pf_log_debug(NULL, "waking the credentials refresher: %s", strerror(errno));
		pthread_join(p->thread, NULL);
	}
	if (p->from_endpoint)
	{
		pthread_cond_destroy(&p->changed);
		pthread_mutex_destroy(&p->lock);
		pf_aws_credentials_free(&p->shared.latest);
	}
	if (p->stop_fd >= 0)
		close(p->stop_fd);
	pf_aws_credentials_free(&p->current);
	free(p->endpoint_url);
	free(p->auth_token);
	free(p->auth_token_file);
	pf_http_destroy(p->http);
	free(p);
}

/* "2024-10-01T12:00:00Z" (fractions and offsets tolerated) as a time_t. */
static bool
parse_expiration(const char *text, time_t *out)
{
	struct tm	tm;
	const char *rest;
	long		offset = 0;

	memset(&tm, 0, sizeof(tm));
	rest = strptime(text, "%Y-%m-%dT%H:%M:%S", &tm);
	if (rest == NULL)
		return false;
	if (*rest == '.')
		while (isdigit((unsigned char) *++rest))
			;
	if (*rest == '+' || *rest == '-')
	{
		int			hh,
					mm;

		if (sscanf(rest + 1, "%2d:%2d", &hh, &mm) != 2)
			return false;
		offset = (hh * 3600L + mm * 60L) * (*rest == '+' ? 1 : -1);
	}
	else if (*rest != 'Z' && *rest != '\0')
		return false;
	*out = timegm(&tm) - offset;
	return true;
}

pf_result
pf_aws_credentials_parse(const char *json, pf_aws_credentials *out, pf_error *err)
{
	json_t	   *j = json_loads(json, 0, NULL);
	const char *akid,
			   *secret,
			   *token,
			   *expiration;

	memset(out, 0, sizeof(*out));
	if (!json_is_object(j))
	{
		json_decref(j);
		return pf_error_set(err, PF_ERR_TRANSIENT, "credentials", "credentials endpoint answered no JSON object");
	}
	akid = json_string_value(json_object_get(j, "AccessKeyId"));
	secret = json_string_value(json_object_get(j, "SecretAccessKey"));
	token = json_string_value(json_object_get(j, "Token"));
	expiration = json_string_value(json_object_get(j, "Expiration"));
	if (akid == NULL || secret == NULL)
	{
		json_decref(j);
		return pf_error_set(err, PF_ERR_TRANSIENT, "credentials",
							"credentials endpoint answer lacks AccessKeyId or SecretAccessKey");
	}
	if (expiration && !parse_expiration(expiration, &out->expiration))
	{
		json_decref(j);
		return pf_error_set(err, PF_ERR_TRANSIENT, "credentials", "credentials Expiration is not a timestamp");
	}
	out->access_key_id = pf_strdup(akid);
	out->secret_access_key = pf_strdup(secret);
	out->session_token = token ? pf_strdup(token) : NULL;
	json_decref(j);
	return PF_OK;
}

static char *
read_token_file(const char *path, pf_error *err)
{
	FILE	   *f = fopen(path, "r");
	pf_buf		b = PF_BUF_INIT;
	char		chunk[512];
	size_t		n;

	if (f == NULL)
	{
		pf_error_set(err, PF_ERR_TRANSIENT, "credentials", "cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE %s", path);
		return NULL;
	}
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		pf_buf_append(&b, chunk, n);
	fclose(f);
	while (b.len > 0 && isspace((unsigned char) b.data[b.len - 1]))
		b.data[--b.len] = '\0';
	return pf_buf_steal(&b);
}

static bool
stop_requested(const pf_aws_credentials_provider *p)
{
	struct pollfd pfd = {p->stop_fd, POLLIN, 0};

	return poll(&pfd, 1, 0) > 0;
}

/* Sleep up to ms; false when destroy cut it short. */
static bool
nap(const pf_aws_credentials_provider *p, int ms)
{
	struct pollfd pfd = {p->stop_fd, POLLIN, 0};

	return poll(&pfd, 1, ms) <= 0;
}

/* One GET of the endpoint, to its end or until destroy. */
static pf_result
get_once(pf_aws_credentials_provider *p, pf_http_request *req, pf_error *err)
{
	pf_result	r = pf_http_start(p->http, req, err);

	if (r != PF_OK)
		return r;
	for (;;)
	{
		if (pf_http_wait(p->http, 1000, p->stop_fd) == req)
			break;
		if (stop_requested(p))
		{
			pf_http_cancel(p->http, req);
			return pf_error_set(err, PF_ERR_TRANSIENT, "credentials", "stopping");
		}
	}
	if (pf_http_transport_failed(req))
		return pf_error_set(err, PF_ERR_TRANSIENT, "curl", "%s %s: %s", req->method, req->url, req->curl_error);
	return PF_OK;
}

/* The refresher's fetch: up to ENDPOINT_ATTEMPTS, each bounded by its time-outs. */
static pf_result
fetch(pf_aws_credentials_provider *p, pf_aws_credentials *fresh, pf_error *err)
{
	pf_result	r = PF_ERR_TRANSIENT;

	for (int attempt = 0; attempt < ENDPOINT_ATTEMPTS; attempt++)
	{
		pf_http_request req;
		char	   *token = NULL;

		if (attempt > 0 && !nap(p, pf_backoff_ms(attempt - 1, 200, 2000)))
			return pf_error_set(err, PF_ERR_TRANSIENT, "credentials", "stopping");
		pf_http_request_init(&req, "GET", p->endpoint_url);
		req.connect_timeout_ms = ENDPOINT_CONNECT_TIMEOUT_MS;
		req.timeout_ms = ENDPOINT_TIMEOUT_MS;
		if (p->auth_token)
			token = pf_strdup(p->auth_token);
		else if (p->auth_token_file && (token = read_token_file(p->auth_token_file, err)) == NULL)
		{
			pf_http_request_free(&req);
			return PF_ERR_TRANSIENT;
		}
		if (token)
		{
			pf_log_add_secret(token);
			pf_http_request_add_header(&req, "Authorization", token);
			free(token);
		}
		r = get_once(p, &req, err);
		if (r == PF_OK && (req.status < 200 || req.status > 299))
			r = pf_error_set(err, req.status >= 500 ? PF_ERR_TRANSIENT : PF_ERR_FINAL, "credentials",
							 "credentials endpoint answered HTTP %ld", req.status);
		if (r == PF_OK)
			r = pf_aws_credentials_parse(pf_buf_str(&req.response), fresh, err);
		pf_http_request_free(&req);
		if (r == PF_OK)
		{
			pf_log_add_secret(fresh->secret_access_key);
			pf_log_add_secret(fresh->session_token);
			return PF_OK;
		}
		if (r == PF_ERR_FINAL || stop_requested(p))
			break;
	}
	return r;
}

static bool
usable(const pf_aws_credentials *c, time_t now)
{
	return c->access_key_id != NULL && (c->expiration == 0 || now < c->expiration);
}

/*
 * When the next fetch is due (NEVER: credentials that do not expire):
 * PF_CREDENTIALS_REFRESH_MARGIN before the expiration, or half-way through
 * the lifetime of ones that live shorter than that, and after the back-off
 * of a failure.
 * Caller holds the lock.
 */
static time_t
refresh_due(const pf_aws_credentials_provider *p)
{
	time_t		due;

	if (p->shared.wanted || !p->shared.have)
		return p->shared.retry_at;
	if (p->shared.expiration == 0)
		return NEVER;
	due = p->shared.expiration - PF_CREDENTIALS_REFRESH_MARGIN;
	if (due <= p->shared.fetched_at)
		due = p->shared.fetched_at + (p->shared.expiration - p->shared.fetched_at) / 2;
	if (due < p->shared.fetched_at + REFRESH_MIN_INTERVAL_SECONDS)
		due = p->shared.fetched_at + REFRESH_MIN_INTERVAL_SECONDS;
	return due > p->shared.retry_at ? due : p->shared.retry_at;
}

static void *
refresher_main(void *arg)
{
	pf_aws_credentials_provider *p = arg;

	pthread_mutex_lock(&p->lock);
	while (!p->shared.stopping)
	{
		time_t		now = time(NULL);
		time_t		due = refresh_due(p);
		pf_aws_credentials fresh;
		pf_error	ferr;
		pf_result	r;

		if (due == NEVER || due > now)
		{
			if (due == NEVER)
				pthread_cond_wait(&p->changed, &p->lock);
			else
			{
				struct timespec until = {due, 0};

				pthread_cond_timedwait(&p->changed, &p->lock, &until);
			}
			continue;
		}
		p->shared.wanted = false;
		pthread_mutex_unlock(&p->lock);
		r = fetch(p, &fresh, &ferr);
		pthread_mutex_lock(&p->lock);
		now = time(NULL);
		p->shared.rounds++;
		if (r == PF_OK)
		{
			pf_aws_credentials_free(&p->shared.latest);
			p->shared.latest = fresh;
			p->shared.version++;
			p->shared.expiration = fresh.expiration;
			p->shared.fetched_at = now;
			p->shared.have = true;
			p->shared.failures = 0;
			p->shared.retry_at = 0;
			pf_error_clear(&p->shared.last_error);
		}
		else if (!p->shared.stopping)
		{
			bool		valid = p->shared.have && (p->shared.expiration == 0 || now < p->shared.expiration);
			int			backoff = pf_backoff_ms(p->shared.failures++, 1000, REFRESH_RETRY_SECONDS * 1000);

			p->shared.last_error = ferr;
			p->shared.retry_at = now + (valid ? REFRESH_RETRY_SECONDS : (backoff + 999) / 1000);
			if (valid)
				pf_log_warn(NULL, "credentials refresh failed, using cached ones until %ld: %s",
							(long) p->shared.expiration, ferr.message);
			else
				pf_log_warn(NULL, "cannot fetch credentials (trying again in %ld s): %s",
							(long) (p->shared.retry_at - now), ferr.message);
		}
		pthread_cond_broadcast(&p->changed);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* Take over the refresher's newest fetch, if there is one. Caller holds the lock. */
static void
take_latest(pf_aws_credentials_provider *p)
{
	if (p->shared.version == p->current_version || p->shared.latest.access_key_id == NULL)
		return;
	pf_aws_credentials_free(&p->current);
	p->current = p->shared.latest;
	memset(&p->shared.latest, 0, sizeof(p->shared.latest));
	p->current_version = p->shared.version;
}

pf_result
pf_aws_credentials_get(pf_aws_credentials_provider *p, bool wait, const pf_aws_credentials **out, pf_error *err)
{
	pf_result	r;

	*out = &p->current;
	if (!p->from_endpoint)
		return PF_OK;
	pthread_mutex_lock(&p->lock);
	take_latest(p);
	if (!usable(&p->current, time(NULL)))
	{
		p->shared.wanted = true;
		pthread_cond_broadcast(&p->changed);
		if (wait)
		{
			unsigned long rounds = p->shared.rounds;
			struct timespec until = {time(NULL) + WAIT_SECONDS, 0};

			while (p->shared.rounds == rounds && !p->shared.stopping)
				if (pthread_cond_timedwait(&p->changed, &p->lock, &until) == ETIMEDOUT)
					break;
			take_latest(p);
		}
	}
	if (usable(&p->current, time(NULL)))
		r = PF_OK;
	else if (p->shared.rounds > 0 && p->shared.last_error.message[0] != '\0')
	{
		r = p->shared.last_error.result;
		if (err)
			*err = p->shared.last_error;
	}
	else
		r = pf_error_set(err, PF_ERR_TRANSIENT, "CredentialsPending", "the credentials are still being fetched");
	pthread_mutex_unlock(&p->lock);
	return r;
}

void
pf_aws_credentials_invalidate(pf_aws_credentials_provider *p)
{
	if (!p->from_endpoint)
		return;
	pf_aws_credentials_free(&p->current);
	pthread_mutex_lock(&p->lock);
	p->shared.wanted = true;
	p->shared.retry_at = 0;
	pthread_cond_broadcast(&p->changed);
	pthread_mutex_unlock(&p->lock);
}
