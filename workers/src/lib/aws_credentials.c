/*
 * aws_credentials.c
 *		Environment and ECS container credentials, cached.
 */
#include "payflow/aws_credentials.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

struct pf_aws_credentials_provider
{
	pf_aws_credentials current;
	bool		from_endpoint;
	char	   *endpoint_url;
	char	   *auth_token;
	char	   *auth_token_file;
	time_t		next_refresh_try;
	pf_http    *http;
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

pf_aws_credentials_provider *
pf_aws_credentials_provider_create(const pf_config *cfg, pf_error *err)
{
	pf_aws_credentials_provider *p = pf_calloc(1, sizeof(*p));

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
	return p;
}

void
pf_aws_credentials_provider_destroy(pf_aws_credentials_provider *p)
{
	if (p == NULL)
		return;
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

static pf_result
fetch(pf_aws_credentials_provider *p, pf_error *err)
{
	pf_result	r = PF_ERR_TRANSIENT;

	for (int attempt = 0; attempt < ENDPOINT_ATTEMPTS; attempt++)
	{
		pf_http_request req;
		pf_aws_credentials fresh;
		char	   *token = NULL;

		if (attempt > 0)
			pf_sleep_ms(pf_backoff_ms(attempt - 1, 200, 2000));
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
		r = pf_http_perform(p->http, &req, err);
		if (r == PF_OK && (req.status < 200 || req.status > 299))
			r = pf_error_set(err, req.status >= 500 ? PF_ERR_TRANSIENT : PF_ERR_FINAL, "credentials",
							 "credentials endpoint answered HTTP %ld", req.status);
		if (r == PF_OK)
			r = pf_aws_credentials_parse(pf_buf_str(&req.response), &fresh, err);
		pf_http_request_free(&req);
		if (r == PF_OK)
		{
			pf_log_add_secret(fresh.secret_access_key);
			pf_log_add_secret(fresh.session_token);
			pf_aws_credentials_free(&p->current);
			p->current = fresh;
			return PF_OK;
		}
		if (r == PF_ERR_FINAL)
			break;
	}
	return r;
}

pf_result
pf_aws_credentials_get(pf_aws_credentials_provider *p, const pf_aws_credentials **out, pf_error *err)
{
	time_t		now = time(NULL);
	bool		have = p->current.access_key_id != NULL;
	bool		valid = have && (p->current.expiration == 0 || now < p->current.expiration);
	bool		due = !have || (p->current.expiration != 0 &&
								now >= p->current.expiration - PF_CREDENTIALS_REFRESH_MARGIN);

	if (p->from_endpoint && due && (!valid || now >= p->next_refresh_try))
	{
		pf_error	ferr;

		if (fetch(p, &ferr) != PF_OK)
		{
			if (!valid)
			{
				if (err)
					*err = ferr;
				return ferr.result;
			}
			p->next_refresh_try = now + REFRESH_RETRY_SECONDS;
			pf_log_warn(NULL, "credentials refresh failed, using cached ones until %ld: %s",
						(long) p->current.expiration, ferr.message);
		}
	}
	*out = &p->current;
	return PF_OK;
}

void
pf_aws_credentials_invalidate(pf_aws_credentials_provider *p)
{
	if (p->from_endpoint)
	{
		pf_aws_credentials_free(&p->current);
		p->next_refresh_try = 0;
	}
}
