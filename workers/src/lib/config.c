/*
 * config.c
 *		The settings table and its loader.
 */
#include "payflow/config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "payflow/buf.h"
#include "payflow/http_call.h"
#include "payflow/sqlstate_rules.h"

typedef enum setting_type
{
	T_STRING,					/* any non-empty text */
	T_URL,						/* http:// or https:// */
	T_CONNINFO,					/* libpq connection string or URI */
	T_INT,						/* integer within [min, max] */
	T_ENUM,						/* one of choices, stored as its index */
	T_HOST_PORT,				/* host:port */
	T_QUEUE_MAP					/* destination=url pairs */
} setting_type;

typedef struct setting
{
	const char *name;
	setting_type type;
	size_t		target;			/* offsetof(pf_config, member) */
	unsigned	required_by;	/* PF_PROGRAM_* bits */
	const char *default_value;
	bool		secret;
	const char *choices;		/* T_ENUM: "a|b|c" */
	int			min;			/* T_INT */
	int			max;
	const char *alias;			/* an older name read when name is unset */
} setting;

#define AT(member) offsetof(pf_config, member)
#define RELAY PF_PROGRAM_RELAY
#define WORKER PF_PROGRAM_WORKER
#define NONE 0

/*
 * Every setting of every edge program. Requirements that depend on other
 * settings (a bucket for the s3 store, one of the two post-processing hooks,
 * AWS credentials) are checked after the table, in check_combinations().
 */
static const setting settings[] = {
	/* name, type, target, required by, default, secret, choices, min, max, alias */
	{"AWS_REGION", T_STRING, AT(aws_region), NONE, NULL, false, NULL, 0, 0, "AWS_DEFAULT_REGION"},
	{"AWS_ACCESS_KEY_ID", T_STRING, AT(aws_access_key_id), NONE, NULL, false, NULL, 0, 0, NULL},
	{"AWS_SECRET_ACCESS_KEY", T_STRING, AT(aws_secret_access_key), NONE, NULL, true, NULL, 0, 0, NULL},
	{"AWS_SESSION_TOKEN", T_STRING, AT(aws_session_token), NONE, NULL, true, NULL, 0, 0, NULL},
	{"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", T_STRING, AT(aws_container_credentials_relative_uri), NONE, NULL, false, NULL, 0, 0, NULL},
	{"AWS_CONTAINER_CREDENTIALS_FULL_URI", T_URL, AT(aws_container_credentials_full_uri), NONE, NULL, false, NULL, 0, 0, NULL},
	{"AWS_CONTAINER_AUTHORIZATION_TOKEN", T_STRING, AT(aws_container_authorization_token), NONE, NULL, true, NULL, 0, 0, NULL},
	{"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", T_STRING, AT(aws_container_authorization_token_file), NONE, NULL, false, NULL, 0, 0, NULL},
	{"AWS_ENDPOINT_URL", T_URL, AT(aws_endpoint_url), NONE, NULL, false, NULL, 0, 0, NULL},
	{"AWS_ENDPOINT_URL_SQS", T_URL, AT(aws_endpoint_url_sqs), NONE, NULL, false, NULL, 0, 0, NULL},
	{"AWS_ENDPOINT_URL_S3", T_URL, AT(aws_endpoint_url_s3), NONE, NULL, false, NULL, 0, 0, NULL},
	{"AWS_MAX_ATTEMPTS", T_INT, AT(aws_max_attempts), NONE, "5", false, NULL, 1, 20, NULL},

	{"PAYFLOW_DATABASE_URL", T_CONNINFO, AT(database_url), PF_PROGRAM_ANY, NULL, true, NULL, 0, 0, NULL},
	{"PAYFLOW_QUEUE_URLS", T_QUEUE_MAP, AT(queue_urls), RELAY, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_QUEUE_URL", T_URL, AT(queue_url), WORKER, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_CONCURRENCY", T_INT, AT(concurrency), NONE, "8", false, NULL, 1, 1000, NULL},
	/* as low as 2 s so tests of redelivery and takeover run in seconds */
	{"PAYFLOW_VISIBILITY_TIMEOUT", T_INT, AT(visibility_timeout), NONE, "120", false, NULL, 2, 43200, NULL},
	{"PAYFLOW_DRAIN_SECONDS", T_INT, AT(drain_seconds), NONE, "30", false, NULL, 0, 3600, NULL},
	{"PAYFLOW_WORKER_ID", T_STRING, AT(worker_id), NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_STORE", T_ENUM, AT(store), NONE, "pg", false, "pg|s3", 0, 0, NULL},
	{"PAYFLOW_S3_BUCKET", T_STRING, AT(s3_bucket), NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_S3_ADDRESSING", T_ENUM, AT(s3_addressing), NONE, "auto", false, "auto|path|virtual", 0, 0, NULL},
	{"PAYFLOW_LEGACY_ODBC", T_STRING, AT(legacy_odbc), PF_PROGRAM_PAYMENT, NULL, true, NULL, 0, 0, NULL},
	{"PAYFLOW_LEGACY_MODE", T_ENUM, AT(legacy_mode), NONE, "blocking", false, "blocking|submit-poll", 0, 0, NULL},
	{"PAYFLOW_LEGACY_CALL", T_STRING, AT(legacy_call), NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_LEGACY_SUBMIT", T_STRING, AT(legacy_submit), NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_LEGACY_STATUS", T_STRING, AT(legacy_status), NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_LEGACY_LOOKUP", T_STRING, AT(legacy_lookup), NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_LEGACY_TIMEOUT", T_INT, AT(legacy_timeout), NONE, "1800", false, NULL, 1, 86400, NULL},
	{"PAYFLOW_LEGACY_CONNECT_TIMEOUT", T_INT, AT(legacy_connect_timeout), NONE, "10", false, NULL, 1, 300, NULL},
	{"PAYFLOW_LEGACY_POLL_INTERVAL_MS", T_INT, AT(legacy_poll_interval_ms), NONE, "2000", false, NULL, 50, 3600000, NULL},
	{"PAYFLOW_LEGACY_DONE_STATUSES", T_STRING, AT(legacy_done_statuses), NONE, "done,succeeded,success,completed,charged,ok", false, NULL, 0, 0, NULL},
	{"PAYFLOW_LEGACY_FAILED_STATUSES", T_STRING, AT(legacy_failed_statuses), NONE, "failed,failure,error,rejected,declined,cancelled,canceled", false, NULL, 0, 0, NULL},
	{"PAYFLOW_LEGACY_RETRYABLE_SQLSTATES", T_STRING, AT(legacy_retryable_sqlstates), NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_LEGACY_PERMANENT_SQLSTATES", T_STRING, AT(legacy_permanent_sqlstates), NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_POSTPROCESS_FUNCTION", T_STRING, AT(postprocess_function), NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_POSTPROCESS_URL", T_URL, AT(postprocess_url), NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_INVOICE_URL", T_URL, AT(invoice_url), PF_PROGRAM_INVOICE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_LISTEN", T_HOST_PORT, AT(listen), NONE, "127.0.0.1:8080", false, NULL, 0, 0, NULL},
	/* payflow-api: pool, HTTP limits and time-outs */
	{"PAYFLOW_API_POOL_SIZE", T_INT, AT(api_pool_size), NONE, "8", false, NULL, 1, 500, NULL},
	{"PAYFLOW_API_POOL_WAIT_MS", T_INT, AT(api_pool_wait_ms), NONE, "2000", false, NULL, 1, 600000, NULL},
	{"PAYFLOW_API_THREADS", T_INT, AT(api_threads), NONE, "8", false, NULL, 1, 256, NULL},
	{"PAYFLOW_API_MAX_BODY", T_INT, AT(api_max_body), NONE, "1048576", false, NULL, 256, 268435456, NULL},
	{"PAYFLOW_API_S3_THRESHOLD", T_INT, AT(api_s3_threshold), NONE, "262144", false, NULL, 0, 268435456, NULL},
	{"PAYFLOW_API_MAX_HEADER_BYTES", T_INT, AT(api_max_header_bytes), NONE, "16384", false, NULL, 1024, 1048576, NULL},
	{"PAYFLOW_API_STATEMENT_TIMEOUT_MS", T_INT, AT(api_statement_timeout_ms), NONE, "5000", false, NULL, 10, 3600000, NULL},
	{"PAYFLOW_API_IDLE_TIMEOUT", T_INT, AT(api_idle_timeout), NONE, "30", false, NULL, 1, 3600, NULL},
	{"PAYFLOW_API_RETRY_AFTER", T_INT, AT(api_retry_after), NONE, "1", false, NULL, 1, 3600, NULL},
	{"PAYFLOW_API_MAX_STREAMS", T_INT, AT(api_max_streams), NONE, "1000", false, NULL, 1, 100000, NULL},
	{"PAYFLOW_API_MAX_STREAMS_PER_KEY", T_INT, AT(api_max_streams_per_key), NONE, "250", false, NULL, 1, 100000, NULL},
	/* abuse limits: every connection is a descriptor; one address, one slow head cannot take them all */
	{"PAYFLOW_API_MAX_CONNECTIONS", T_INT, AT(api_max_connections), NONE, "4096", false, NULL, 16, 1000000, NULL},
	{"PAYFLOW_API_MAX_CONNECTIONS_PER_ADDRESS", T_INT, AT(api_max_connections_per_address), NONE, "256", false, NULL, 0, 1000000, NULL},
	{"PAYFLOW_API_HEADER_TIMEOUT", T_INT, AT(api_header_timeout), NONE, "10", false, NULL, 1, 3600, NULL},
	{"PAYFLOW_LOG_LEVEL", T_ENUM, AT(log_level), NONE, "info", false, "debug|info|warn|error", 0, 0, NULL},
	{"PAYFLOW_RELAY_IN_FLIGHT", T_INT, AT(relay_in_flight), NONE, "4", false, NULL, 1, 64, NULL},
	{"PAYFLOW_DB_CONNECTIONS", T_INT, AT(db_connections), NONE, "0", false, NULL, 0, 1000, NULL},
	{"PAYFLOW_RELAY_LEASE_SECONDS", T_INT, AT(relay_lease_seconds), NONE, "30", false, NULL, 5, 600, NULL},
	{"PAYFLOW_POLL_INTERVAL_MS", T_INT, AT(poll_interval_ms), NONE, "1000", false, NULL, 10, 600000, NULL},
	{"PAYFLOW_HTTP_CONNECT_TIMEOUT_MS", T_INT, AT(http_connect_timeout_ms), NONE, "3000", false, NULL, 100, 60000, NULL},
	{"PAYFLOW_HTTP_TIMEOUT_MS", T_INT, AT(http_timeout_ms), NONE, "30000", false, NULL, 100, 3600000, NULL},
	/* a call to the invoice API or an HTTP hook: the whole call, connect included */
	{"PAYFLOW_INVOICE_TIMEOUT_MS", T_INT, AT(invoice_timeout_ms), NONE, "30000", false, NULL, 100, 3600000, NULL},
	{"PAYFLOW_INVOICE_TLS_VERIFY", T_ENUM, AT(invoice_tls_verify), NONE, "true", false, "false|true", 0, 0, NULL},
	{"PAYFLOW_POSTPROCESS_TIMEOUT_MS", T_INT, AT(postprocess_timeout_ms), NONE, "30000", false, NULL, 100, 3600000, NULL},
	{"PAYFLOW_POSTPROCESS_TLS_VERIFY", T_ENUM, AT(postprocess_tls_verify), NONE, "true", false, "false|true", 0, 0, NULL},
	/* webhook deliveries: attempts are the message's receive count, delays its visibility (at most 12 h) */
	{"PAYFLOW_WEBHOOK_MAX_ATTEMPTS", T_INT, AT(webhook_max_attempts), NONE, "8", false, NULL, 1, 100, NULL},
	{"PAYFLOW_WEBHOOK_TIMEOUT_MS", T_INT, AT(webhook_timeout_ms), NONE, "10000", false, NULL, 100, 600000, NULL},
	{"PAYFLOW_WEBHOOK_BACKOFF_BASE_SECONDS", T_INT, AT(webhook_backoff_base_s), NONE, "30", false, NULL, 1, 43200, NULL},
	{"PAYFLOW_WEBHOOK_BACKOFF_MAX_SECONDS", T_INT, AT(webhook_backoff_max_s), NONE, "3600", false, NULL, 1, 43200, NULL},
	/* plain http:// is refused unless this is true, and even then only to a loopback host */
	{"PAYFLOW_WEBHOOK_ALLOW_HTTP", T_ENUM, AT(webhook_allow_http), NONE, "false", false, "false|true", 0, 0, NULL},
	/* the Authorization header of the invoice API and of the HTTP hook (e.g. "Bearer <token>"), from a secret */
	{"PAYFLOW_INVOICE_AUTHORIZATION", T_STRING, AT(invoice_authorization), NONE, NULL, true, NULL, 0, 0, NULL},
	{"PAYFLOW_POSTPROCESS_AUTHORIZATION", T_STRING, AT(postprocess_authorization), NONE, NULL, true, NULL, 0, 0, NULL},
	/* downstream error texts echo input (card numbers): only on request, and masked (downstream_error.h) */
	{"PAYFLOW_RAW_ERROR_TEXT", T_ENUM, AT(raw_error_text), NONE, "false", false, "false|true", 0, 0, NULL},
	/* a call that ignores its cancel keeps the step's lease unless the operator lets it go (loop.c) */
	{"PAYFLOW_HAND_OVER_UNCANCELLED", T_ENUM, AT(hand_over_uncancelled), NONE, "false", false, "false|true", 0, 0, NULL},
	/* ECS sets it in every task: the worker then protects its task from scale-in while it holds work (protection.c) */
	{"ECS_AGENT_URI", T_URL, AT(ecs_agent_uri), NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_PROTECTION_MINUTES", T_INT, AT(protection_minutes), NONE, "40", false, NULL, 1, 2880, NULL},
	{"PAYFLOW_PROTECTION_IDLE_SECONDS", T_INT, AT(protection_idle_seconds), NONE, "60", false, NULL, 0, 86400, NULL},
	{"PAYFLOW_PROTECTION_RENEW_SECONDS", T_INT, AT(protection_renew_seconds), NONE, "300", false, NULL, 1, 172800, NULL},
};

#define N_SETTINGS (sizeof(settings) / sizeof(settings[0]))
#define CONFIG_FILE_VAR "PAYFLOW_CONFIG_FILE"

typedef struct file_value
{
	char	   *name;
	char	   *value;
} file_value;

typedef struct loader
{
	file_value *file;
	int			n_file;
	char	   *error;
	size_t		error_len;
} loader;

static bool
failf(loader *ld, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(ld->error, ld->error_len, fmt, ap);
	va_end(ap);
	return false;
}

static const setting *
find_setting(const char *name)
{
	for (size_t i = 0; i < N_SETTINGS; i++)
		if (strcmp(settings[i].name, name) == 0 ||
			(settings[i].alias && strcmp(settings[i].alias, name) == 0))
			return &settings[i];
	return NULL;
}

static char *
trim(char *s)
{
	char	   *end;

	while (isspace((unsigned char) *s))
		s++;
	end = s + strlen(s);
	while (end > s && isspace((unsigned char) end[-1]))
		*--end = '\0';
	return s;
}

/* Lines "NAME=value"; blank lines and lines starting with '#' are skipped. */
static bool
read_config_file(loader *ld, const char *path)
{
	FILE	   *f = fopen(path, "r");
	char	   *line = NULL;
	size_t		cap = 0;
	int			lineno = 0;
	bool		ok = true;

	if (f == NULL)
		return failf(ld, "invalid %s: cannot read %s: %s", CONFIG_FILE_VAR, path, strerror(errno));
	while (ok && getline(&line, &cap, f) >= 0)
	{
		char	   *p = trim(line);
		char	   *eq;
		char	   *name;
		char	   *value;
		size_t		vlen;

		lineno++;
		if (*p == '\0' || *p == '#')
			continue;
		eq = strchr(p, '=');
		if (eq == NULL)
		{
			ok = failf(ld, "invalid %s: line %d of %s: expected NAME=value", CONFIG_FILE_VAR, lineno, path);
			break;
		}
		*eq = '\0';
		name = trim(p);
		if (strncmp(name, "export ", 7) == 0)	/* files shared with a shell */
			name = trim(name + 7);
		value = trim(eq + 1);
		vlen = strlen(value);
		if (vlen >= 2 && (value[0] == '"' || value[0] == '\'') && value[vlen - 1] == value[0])
		{
			value[vlen - 1] = '\0';
			value++;
		}
		if (find_setting(name) == NULL)
		{
			ok = failf(ld, "invalid %s: line %d of %s: unknown setting %s", CONFIG_FILE_VAR, lineno, path, name);
			break;
		}
		ld->file = pf_realloc(ld->file, sizeof(file_value) * (size_t) (ld->n_file + 1));
		ld->file[ld->n_file].name = pf_strdup(name);
		ld->file[ld->n_file].value = pf_strdup(value);
		ld->n_file++;
	}
	free(line);
	fclose(f);
	return ok;
}

static const char *
file_lookup(const loader *ld, const char *name)
{
	/* the last line for a name wins, as in a shell */
	for (int i = ld->n_file - 1; i >= 0; i--)
		if (strcmp(ld->file[i].name, name) == 0)
			return ld->file[i].value;
	return NULL;
}

/* The environment wins over the file; an empty variable counts as unset. */
static const char *
lookup(const loader *ld, const char *name)
{
	const char *v = getenv(name);

	if (v != NULL && v[0] != '\0')
		return v;
	v = file_lookup(ld, name);
	if (v != NULL && v[0] != '\0')
		return v;
	return NULL;
}

static bool
is_http_url(const char *v)
{
	const char *host;

	if (strncmp(v, "http://", 7) == 0)
		host = v + 7;
	else if (strncmp(v, "https://", 8) == 0)
		host = v + 8;
	else
		return false;
	if (*host == '\0' || *host == '/' || *host == ':')
		return false;
	for (const char *p = v; *p; p++)
		if (isspace((unsigned char) *p) || (unsigned char) *p < 0x20)
			return false;
	return true;
}

static bool
parse_int(const char *v, int min, int max, int *out)
{
	char	   *end;
	long		n;

	errno = 0;
	n = strtol(v, &end, 10);
	if (errno != 0 || end == v || *end != '\0' || n < min || n > max)
		return false;
	*out = (int) n;
	return true;
}

static bool
parse_enum(const char *v, const char *choices, int *out)
{
	const char *p = choices;
	int			index = 0;
	size_t		vlen = strlen(v);

	while (*p)
	{
		const char *bar = strchr(p, '|');
		size_t		len = bar ? (size_t) (bar - p) : strlen(p);

		if (len == vlen && strncasecmp(p, v, len) == 0)
		{
			*out = index;
			return true;
		}
		index++;
		if (!bar)
			break;
		p = bar + 1;
	}
	return false;
}

static bool
parse_host_port(const char *v)
{
	const char *colon = strrchr(v, ':');
	int			port;

	if (colon == NULL || colon == v)
		return false;
	if (v[0] == '[' && colon[-1] != ']')
		return false;
	return parse_int(colon + 1, 1, 65535, &port);
}

bool
pf_queue_map_parse(const char *text, pf_queue_map *map, char *why, size_t why_len)
{
	char	   *copy = pf_strdup(text);
	char	   *save = NULL;
	char	   *item;
	bool		ok = true;

	map->count = 0;
	map->routes = NULL;
	for (item = strtok_r(copy, ",", &save); ok && item; item = strtok_r(NULL, ",", &save))
	{
		char	   *pair = trim(item);
		char	   *eq = strchr(pair, '=');
		char	   *dest;
		char	   *url;

		if (*pair == '\0')
			continue;			/* tolerate a trailing comma */
		if (eq == NULL)
		{
			snprintf(why, why_len, "expected destination=url pairs");
			ok = false;
			break;
		}
		*eq = '\0';
		dest = trim(pair);
		url = trim(eq + 1);
		if (*dest == '\0' || *url == '\0')
		{
			snprintf(why, why_len, "expected destination=url pairs");
			ok = false;
			break;
		}
		for (const char *c = dest; *c; c++)
		{
			if (!isalnum((unsigned char) *c) && *c != '-' && *c != '_' && *c != '.')
			{
				snprintf(why, why_len, "destination \"%.64s\" may hold only letters, digits, '-', '_' and '.'", dest);
				ok = false;
				break;
			}
		}
		if (!ok)
			break;
		if (!is_http_url(url))
		{
			snprintf(why, why_len, "%s: expected an http:// or https:// queue URL", dest);
			ok = false;
			break;
		}
		/* "a=u1;b=u2" would otherwise pass as one odd URL */
		if (strpbrk(url, " \t;=") != NULL)
		{
			snprintf(why, why_len, "%s: a queue URL holds no space, ';' or '=' (separate pairs with ',')", dest);
			ok = false;
			break;
		}
		if (pf_queue_map_find(map, dest) != NULL)
		{
			snprintf(why, why_len, "destination %s given twice", dest);
			ok = false;
			break;
		}
		map->routes = pf_realloc(map->routes, sizeof(pf_queue_route) * (size_t) (map->count + 1));
		map->routes[map->count].destination = pf_strdup(dest);
		map->routes[map->count].url = pf_strdup(url);
		map->count++;
	}
	free(copy);
	if (ok && map->count == 0)
	{
		snprintf(why, why_len, "expected destination=url pairs");
		ok = false;
	}
	if (!ok)
		pf_queue_map_free(map);
	return ok;
}

const char *
pf_queue_map_find(const pf_queue_map *map, const char *destination)
{
	for (int i = 0; i < map->count; i++)
		if (strcmp(map->routes[i].destination, destination) == 0)
			return map->routes[i].url;
	return NULL;
}

void
pf_queue_map_free(pf_queue_map *map)
{
	for (int i = 0; i < map->count; i++)
	{
		free(map->routes[i].destination);
		free(map->routes[i].url);
	}
	free(map->routes);
	map->routes = NULL;
	map->count = 0;
}

static bool
apply_setting(loader *ld, pf_config *cfg, const setting *s, const char *v)
{
	char	   *target = (char *) cfg + s->target;
	char		why[256];

	switch (s->type)
	{
		case T_STRING:
			break;
		case T_URL:
			if (!is_http_url(v))
				return failf(ld, "invalid %s: expected an http:// or https:// URL", s->name);
			break;
		case T_CONNINFO:
			{
				char	   *errmsg = NULL;
				PQconninfoOption *opts = PQconninfoParse(v, &errmsg);

				/* libpq's message may quote the string, so it is not shown */
				PQfreemem(errmsg);
				if (opts == NULL)
					return failf(ld, "invalid %s: not a libpq connection string or URI", s->name);
				PQconninfoFree(opts);
				break;
			}
		case T_INT:
			if (!parse_int(v, s->min, s->max, (int *) target))
				return failf(ld, "invalid %s: \"%.64s\" is not an integer from %d to %d", s->name, v, s->min, s->max);
			return true;
		case T_ENUM:
			if (!parse_enum(v, s->choices, (int *) target))
			{
				char		list[128];

				snprintf(list, sizeof(list), "%s", s->choices);
				for (char *c = list; *c; c++)
					if (*c == '|')
						*c = '/';
				return failf(ld, "invalid %s: \"%.64s\" is not one of %s", s->name, v, list);
			}
			return true;
		case T_HOST_PORT:
			if (!parse_host_port(v))
				return failf(ld, "invalid %s: expected host:port", s->name);
			break;
		case T_QUEUE_MAP:
			if (!pf_queue_map_parse(v, (pf_queue_map *) target, why, sizeof(why)))
				return failf(ld, "invalid %s: %s", s->name, why);
			return true;
	}
	*(char **) target = pf_strdup(v);
	return true;
}

/* Rules that span settings. */
static bool
check_combinations(loader *ld, pf_config *cfg, unsigned programs)
{
	bool		uses_aws = (programs & PF_PROGRAM_USES_AWS) != 0 || cfg->store == PF_STORE_S3;

	if (cfg->store == PF_STORE_S3 && cfg->s3_bucket == NULL)
		return failf(ld, "missing PAYFLOW_S3_BUCKET: PAYFLOW_STORE is s3");
	if ((cfg->aws_access_key_id == NULL) != (cfg->aws_secret_access_key == NULL))
		return failf(ld, "missing %s: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY go together",
					 cfg->aws_access_key_id ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
	if (cfg->aws_container_credentials_relative_uri &&
		cfg->aws_container_credentials_relative_uri[0] != '/')
		return failf(ld, "invalid AWS_CONTAINER_CREDENTIALS_RELATIVE_URI: expected a path starting with /");
	if (uses_aws)
	{
		if (cfg->aws_region == NULL)
			return failf(ld, "missing AWS_REGION");
		if (cfg->aws_access_key_id == NULL && cfg->aws_container_credentials_relative_uri == NULL &&
			cfg->aws_container_credentials_full_uri == NULL)
			return failf(ld, "missing AWS_ACCESS_KEY_ID: no AWS credentials (set AWS_ACCESS_KEY_ID and "
						 "AWS_SECRET_ACCESS_KEY, or run where AWS_CONTAINER_CREDENTIALS_* is set)");
	}
	if ((programs & PF_PROGRAM_POSTPROCESS) &&
		cfg->postprocess_function == NULL && cfg->postprocess_url == NULL)
		return failf(ld, "missing PAYFLOW_POSTPROCESS_FUNCTION: set it or PAYFLOW_POSTPROCESS_URL");
	if ((programs & PF_PROGRAM_POSTPROCESS) && cfg->postprocess_function && cfg->postprocess_url)
		return failf(ld, "invalid PAYFLOW_POSTPROCESS_URL: set PAYFLOW_POSTPROCESS_FUNCTION or PAYFLOW_POSTPROCESS_URL, not both");
	/* unverified TLS only where no network lies between (a local proxy or stand-in) */
	if ((programs & PF_PROGRAM_INVOICE) && !cfg->invoice_tls_verify && cfg->invoice_url &&
		!pf_url_is_loopback(cfg->invoice_url))
		return failf(ld, "invalid PAYFLOW_INVOICE_TLS_VERIFY: false is accepted only for a loopback "
					 "PAYFLOW_INVOICE_URL (localhost, 127.0.0.0/8, [::1])");
	if ((programs & PF_PROGRAM_API) && cfg->api_max_streams >= cfg->api_max_connections)
		return failf(ld, "invalid PAYFLOW_API_MAX_CONNECTIONS: %d is not above PAYFLOW_API_MAX_STREAMS (%d): "
					 "every event stream holds a connection", cfg->api_max_connections, cfg->api_max_streams);
	if (cfg->webhook_backoff_max_s < cfg->webhook_backoff_base_s)
		return failf(ld, "invalid PAYFLOW_WEBHOOK_BACKOFF_MAX_SECONDS: below PAYFLOW_WEBHOOK_BACKOFF_BASE_SECONDS");
	if ((programs & PF_PROGRAM_POSTPROCESS) && !cfg->postprocess_tls_verify && cfg->postprocess_url &&
		!pf_url_is_loopback(cfg->postprocess_url))
		return failf(ld, "invalid PAYFLOW_POSTPROCESS_TLS_VERIFY: false is accepted only for a loopback "
					 "PAYFLOW_POSTPROCESS_URL (localhost, 127.0.0.0/8, [::1])");
	if (programs & PF_PROGRAM_PAYMENT)
	{
		if (cfg->legacy_mode == PF_LEGACY_BLOCKING && cfg->legacy_call == NULL)
			return failf(ld, "missing PAYFLOW_LEGACY_CALL: PAYFLOW_LEGACY_MODE is blocking");
		if (cfg->legacy_mode == PF_LEGACY_SUBMIT_POLL && cfg->legacy_submit == NULL)
			return failf(ld, "missing PAYFLOW_LEGACY_SUBMIT: PAYFLOW_LEGACY_MODE is submit-poll");
		if (cfg->legacy_mode == PF_LEGACY_SUBMIT_POLL && cfg->legacy_status == NULL)
			return failf(ld, "missing PAYFLOW_LEGACY_STATUS: PAYFLOW_LEGACY_MODE is submit-poll");
	}
	{
		pf_sqlstate_rules rules;
		char		why[256];

		if (!pf_sqlstate_rules_init(&rules, cfg->legacy_retryable_sqlstates, cfg->legacy_permanent_sqlstates,
									why, sizeof(why)))
			return failf(ld, "invalid %s: %s",
						 strncmp(why, "retryable", 9) == 0 ? "PAYFLOW_LEGACY_RETRYABLE_SQLSTATES"
						 : "PAYFLOW_LEGACY_PERMANENT_SQLSTATES", why);
		pf_sqlstate_rules_free(&rules);
	}
	/* header values: a line break would let them add headers of their own */
	{
		const char *const names[] = {"PAYFLOW_INVOICE_AUTHORIZATION", "PAYFLOW_POSTPROCESS_AUTHORIZATION"};
		const char *const values[] = {cfg->invoice_authorization, cfg->postprocess_authorization};

		for (int i = 0; i < 2; i++)
			for (const char *c = values[i]; c && *c; c++)
				if (iscntrl((unsigned char) *c))
					return failf(ld, "invalid %s: holds a control character", names[i]);
	}
	return true;
}

static void
default_worker_id(pf_config *cfg)
{
	char		host[256];
	pf_buf		id = PF_BUF_INIT;

	if (cfg->worker_id != NULL)
		return;
	/* the lease owner must differ between tasks and between restarts */
	if (gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "unknown");
	host[sizeof(host) - 1] = '\0';
	pf_buf_appendf(&id, "%s-%ld", host, (long) getpid());
	cfg->worker_id = pf_buf_steal(&id);
}

/* Register a connection string's password (libpq or ODBC form) as a secret. */
static void
register_embedded_passwords(const char *conninfo, bool odbc)
{
	if (conninfo == NULL)
		return;
	if (!odbc)
	{
		PQconninfoOption *opts = PQconninfoParse(conninfo, NULL);

		for (PQconninfoOption *o = opts; o && o->keyword; o++)
			if (strcmp(o->keyword, "password") == 0 && o->val)
				pf_log_add_secret(o->val);
		PQconninfoFree(opts);
	}
	else
	{
		const char *p = conninfo;

		while (*p)
		{
			const char *semi = strchr(p, ';');
			size_t		len = semi ? (size_t) (semi - p) : strlen(p);
			const char *eq = memchr(p, '=', len);

			if (eq)
			{
				char	   *key = pf_strndup(p, (size_t) (eq - p));
				char	   *k = trim(key);

				if (strcasecmp(k, "PWD") == 0 || strcasecmp(k, "Password") == 0)
				{
					char	   *val = pf_strndup(eq + 1, len - (size_t) (eq + 1 - p));
					char	   *vv = trim(val);
					size_t		vl = strlen(vv);

					if (vl >= 2 && vv[0] == '{' && vv[vl - 1] == '}')
					{
						vv[vl - 1] = '\0';
						vv++;
					}
					pf_log_add_secret(vv);
					free(val);
				}
				free(key);
			}
			if (!semi)
				break;
			p = semi + 1;
		}
	}
}

static void
register_secrets(const pf_config *cfg)
{
	for (size_t i = 0; i < N_SETTINGS; i++)
	{
		const setting *s = &settings[i];

		if (s->secret && (s->type == T_STRING || s->type == T_CONNINFO))
			pf_log_add_secret(*(char *const *) ((const char *) cfg + s->target));
	}
	register_embedded_passwords(cfg->database_url, false);
	register_embedded_passwords(cfg->legacy_odbc, true);
}

bool
pf_config_load(pf_config *cfg, unsigned programs, char *error, size_t error_len)
{
	loader		ld = {NULL, 0, error, error_len};
	const char *file = getenv(CONFIG_FILE_VAR);
	bool		ok = true;

	memset(cfg, 0, sizeof(*cfg));
	if (error_len > 0)
		error[0] = '\0';
	if (file != NULL && file[0] != '\0')
		ok = read_config_file(&ld, file);

	for (size_t i = 0; ok && i < N_SETTINGS; i++)
	{
		const setting *s = &settings[i];
		const char *v = lookup(&ld, s->name);

		if (v == NULL && s->alias)
			v = lookup(&ld, s->alias);
		if (v == NULL)
			v = s->default_value;
		if (v == NULL)
		{
			if (s->required_by & programs)
				ok = failf(&ld, "missing %s", s->name);
			continue;
		}
		ok = apply_setting(&ld, cfg, s, v);
	}
	if (ok)
		ok = check_combinations(&ld, cfg, programs);
	if (ok)
	{
		default_worker_id(cfg);
		register_secrets(cfg);
	}

	for (int i = 0; i < ld.n_file; i++)
	{
		free(ld.file[i].name);
		free(ld.file[i].value);
	}
	free(ld.file);
	if (!ok)
		pf_config_free(cfg);
	return ok;
}

/*
 * A misspelt PAYFLOW_* variable would otherwise be ignored in silence and its
 * default used: name each one at start-up (names only, never values).  The
 * config file already refuses unknown names.  Programs call it once they
 * have started, so that a start-up error stays the one line it is.
 */
void
pf_config_warn_unknown_variables(void)
{
	extern char **environ;

	for (char **e = environ; e && *e; e++)
	{
		const char *eq = strchr(*e, '=');
		char		name[128];

		if (strncmp(*e, "PAYFLOW_", 8) != 0 || eq == NULL || (size_t) (eq - *e) >= sizeof(name))
			continue;
		memcpy(name, *e, (size_t) (eq - *e));
		name[eq - *e] = '\0';
		if (strcmp(name, CONFIG_FILE_VAR) != 0 && find_setting(name) == NULL)
			pf_log_write(PF_LOG_WARN, NULL, json_pack("{s:s}", "variable", name),
						 "%s is not a payflow setting and is ignored (a typo?)", name);
	}
}

void
pf_config_load_or_exit(pf_config *cfg, const char *progname, unsigned programs)
{
	char		error[512];

	if (!pf_config_load(cfg, programs, error, sizeof(error)))
	{
		fprintf(stderr, "%s: %s\n", progname, error);
		exit(2);
	}
	pf_log_init(progname, (pf_log_level) cfg->log_level);
}

void
pf_config_free(pf_config *cfg)
{
	for (size_t i = 0; i < N_SETTINGS; i++)
	{
		const setting *s = &settings[i];
		char	   *target = (char *) cfg + s->target;

		if (s->type == T_QUEUE_MAP)
			pf_queue_map_free((pf_queue_map *) target);
		else if (s->type != T_INT && s->type != T_ENUM)
		{
			free(*(char **) target);
			*(char **) target = NULL;
		}
	}
	free(cfg->worker_id);
	cfg->worker_id = NULL;
}

json_t *
pf_config_to_json(const pf_config *cfg)
{
	json_t	   *obj = json_object();

	for (size_t i = 0; i < N_SETTINGS; i++)
	{
		const setting *s = &settings[i];
		const char *target = (const char *) cfg + s->target;

		switch (s->type)
		{
			case T_INT:
				json_object_set_new(obj, s->name, json_integer(*(const int *) target));
				break;
			case T_ENUM:
				{
					int			index = *(const int *) target;
					const char *p = s->choices;

					for (int k = 0; k < index && p; k++)
						p = strchr(p, '|') ? strchr(p, '|') + 1 : NULL;
					if (p)
						json_object_set_new(obj, s->name, json_stringn(p, strcspn(p, "|")));
					break;
				}
			case T_QUEUE_MAP:
				{
					const pf_queue_map *map = (const pf_queue_map *) target;
					json_t	   *routes = json_object();

					for (int k = 0; k < map->count; k++)
						json_object_set_new(routes, map->routes[k].destination, json_string(map->routes[k].url));
					json_object_set_new(obj, s->name, routes);
					break;
				}
			default:
				{
					const char *v = *(char *const *) target;

					if (v == NULL)
						continue;
					json_object_set_new(obj, s->name, s->secret ? json_string("[redacted]") : json_string(v));
					break;
				}
		}
	}
	return obj;
}
