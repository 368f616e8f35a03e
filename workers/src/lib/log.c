/*
 * log.c
 *		JSON-lines logger with secret redaction.
 *
 * The logger is the one piece of process-wide state in the library: every
 * module logs, and threading a logger through every call would buy nothing.
 */
#include "payflow/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "payflow/buf.h"

#define MAX_SECRETS 64
/* Secrets registered first (configuration) are kept for good; later ones
 * (rotating credentials) take turns in the remaining slots. */
#define PERMANENT_SECRETS 24
/* Shorter values would redact ordinary words; real secrets are long. */
#define MIN_SECRET_LEN 6
#define REDACTED "[redacted]"

static struct
{
	const char *component;
	pf_log_level level;
	FILE	   *stream;
	int			n_secrets;
	int			next_evict;
	char	   *secrets[MAX_SECRETS];
}			logger = {"payflow", PF_LOG_INFO, NULL, 0, PERMANENT_SECRETS, {NULL}};

/*
 * The worker's executor threads log while the main thread may register a
 * refreshed credential: the secrets list is read and changed under a lock.
 */
static pthread_mutex_t secrets_lock = PTHREAD_MUTEX_INITIALIZER;

void
pf_log_init(const char *component, pf_log_level level)
{
	logger.component = component;
	logger.level = level;
}

void
pf_log_set_level(pf_log_level level)
{
	logger.level = level;
}

bool
pf_log_enabled(pf_log_level level)
{
	return level >= logger.level;
}

void
pf_log_set_stream(FILE *stream)
{
	logger.stream = stream;
}

static const char *const level_names[] = {"debug", "info", "warn", "error"};

bool
pf_log_level_parse(const char *text, pf_log_level *level)
{
	for (int i = 0; i < 4; i++)
	{
		if (strcasecmp(text, level_names[i]) == 0)
		{
			*level = (pf_log_level) i;
			return true;
		}
	}
	if (strcasecmp(text, "warning") == 0)
	{
		*level = PF_LOG_WARN;
		return true;
	}
	return false;
}

const char *
pf_log_level_name(pf_log_level level)
{
	if (level < PF_LOG_DEBUG || level > PF_LOG_ERROR)
		return "info";
	return level_names[level];
}

static void
remember_secret(const char *secret)
{
	if (secret == NULL || strlen(secret) < MIN_SECRET_LEN)
		return;
	for (int i = 0; i < logger.n_secrets; i++)
		if (strcmp(logger.secrets[i], secret) == 0)
			return;
	if (logger.n_secrets < MAX_SECRETS)
		logger.secrets[logger.n_secrets++] = pf_strdup(secret);
	else
	{
		free(logger.secrets[logger.next_evict]);
		logger.secrets[logger.next_evict] = pf_strdup(secret);
		if (++logger.next_evict == MAX_SECRETS)
			logger.next_evict = PERMANENT_SECRETS;
	}
}

void
pf_log_add_secret(const char *secret)
{
	json_t	   *s;
	char	   *escaped;

	if (secret == NULL || strlen(secret) < MIN_SECRET_LEN)
		return;
	/* The value as it appears inside a JSON string, without the quotes. */
	s = json_string(secret);
	escaped = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
	json_decref(s);

	pthread_mutex_lock(&secrets_lock);
	remember_secret(secret);
	if (escaped && strlen(escaped) > 2)
	{
		escaped[strlen(escaped) - 1] = '\0';
		remember_secret(escaped + 1);
	}
	pthread_mutex_unlock(&secrets_lock);
	free(escaped);
}

void
pf_log_forget_secrets(void)
{
	pthread_mutex_lock(&secrets_lock);
	for (int i = 0; i < logger.n_secrets; i++)
		free(logger.secrets[i]);
	logger.n_secrets = 0;
	logger.next_evict = PERMANENT_SECRETS;
	pthread_mutex_unlock(&secrets_lock);
}

/* Replace every registered secret in text. */
static void
redact(pf_buf *line)
{
	for (int i = 0; i < logger.n_secrets; i++)
	{
		const char *secret = logger.secrets[i];
		size_t		slen = strlen(secret);
		char	   *hit;

		while ((hit = memmem(line->data, line->len, secret, slen)) != NULL)
		{
			pf_buf		out = PF_BUF_INIT;
			size_t		before = (size_t) (hit - line->data);

			pf_buf_append(&out, line->data, before);
			pf_buf_append_str(&out, REDACTED);
			pf_buf_append(&out, hit + slen, line->len - before - slen);
			pf_buf_free(line);
			*line = out;
		}
	}
}

void
pf_utf8_sanitize(char *text, size_t len)
{
	size_t		i = 0;

	while (i < len)
	{
		unsigned char c = (unsigned char) text[i];
		size_t		need;
		unsigned int cp;

		if (c < 0x80)
		{
			i++;
			continue;
		}
		if ((c & 0xE0) == 0xC0)
			need = 1, cp = c & 0x1F;
		else if ((c & 0xF0) == 0xE0)
			need = 2, cp = c & 0x0F;
		else if ((c & 0xF8) == 0xF0)
			need = 3, cp = c & 0x07;
		else
		{
			text[i++] = '?';
			continue;
		}
		if (i + need >= len)
		{
			text[i++] = '?';
			continue;
		}
		{
			bool		ok = true;

			for (size_t k = 1; k <= need; k++)
			{
				unsigned char cc = (unsigned char) text[i + k];

				if ((cc & 0xC0) != 0x80)
				{
					ok = false;
					break;
				}
				cp = (cp << 6) | (cc & 0x3F);
			}
			/* reject overlong forms, surrogates and values past U+10FFFF */
			if (ok && ((need == 1 && cp < 0x80) || (need == 2 && cp < 0x800) ||
					   (need == 3 && cp < 0x10000) || cp > 0x10FFFF ||
					   (cp >= 0xD800 && cp <= 0xDFFF)))
				ok = false;
			if (!ok)
			{
				text[i++] = '?';
				continue;
			}
			i += need + 1;
		}
	}
}

static json_t *
json_text(const char *s)
{
	json_t	   *j = json_string(s);

	if (j == NULL)
	{
		char	   *copy = pf_strdup(s);

		pf_utf8_sanitize(copy, strlen(copy));
		j = json_string(copy);
		free(copy);
	}
	return j ? j : json_string("");
}

static void
format_timestamp(char *out, size_t outlen)
{
	struct timespec ts;
	struct tm	tm;
	char		base[32];

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out, outlen, "%.19s.%03dZ", base, (int) (ts.tv_nsec / 1000000) % 1000);
}

void
pf_log_write(pf_log_level level, const pf_log_ids *ids, json_t *fields, const char *fmt,...)
{
	pf_buf		msg = PF_BUF_INIT;
	pf_buf		line = PF_BUF_INIT;
	json_t	   *obj;
	char		ts[64];
	char	   *encoded;
	va_list		ap;
	FILE	   *stream = logger.stream ? logger.stream : stderr;

	if (!pf_log_enabled(level))
	{
		json_decref(fields);
		return;
	}

	va_start(ap, fmt);
	pf_buf_vappendf(&msg, fmt, ap);
	va_end(ap);

	format_timestamp(ts, sizeof(ts));
	obj = json_object();
	json_object_set_new(obj, "ts", json_string(ts));
	json_object_set_new(obj, "level", json_string(pf_log_level_name(level)));
	json_object_set_new(obj, "component", json_text(logger.component));
	json_object_set_new(obj, "msg", json_text(pf_buf_str(&msg)));
	if (ids && ids->operation_id)
		json_object_set_new(obj, "operationId", json_text(ids->operation_id));
	if (ids && ids->event_id)
		json_object_set_new(obj, "eventId", json_text(ids->event_id));
	if (ids && ids->correlation_id)
		json_object_set_new(obj, "correlationId", json_text(ids->correlation_id));
	if (ids && ids->trace_id)
		json_object_set_new(obj, "traceId", json_text(ids->trace_id));
	if (ids && ids->span_id)
		json_object_set_new(obj, "spanId", json_text(ids->span_id));
	if (json_is_object(fields))
	{
		const char *key;
		json_t	   *value;

		/* the fixed members keep their meaning: free fields cannot replace them */
		json_object_foreach(fields, key, value)
			if (json_object_get(obj, key) == NULL)
			json_object_set(obj, key, value);
	}
	json_decref(fields);

	encoded = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(obj);
	pf_buf_free(&msg);
	if (encoded == NULL)
		return;
	pf_buf_append_str(&line, encoded);
	free(encoded);
	pthread_mutex_lock(&secrets_lock);
	redact(&line);
	pthread_mutex_unlock(&secrets_lock);
	pf_buf_append_char(&line, '\n');

	fwrite(line.data, 1, line.len, stream);
	fflush(stream);
	pf_buf_free(&line);
}

bool
pf_log_throttled(bool first_of_run, int64_t *last_ms, int64_t now_ms, int64_t every_ms)
{
	if (!first_of_run && now_ms - *last_ms < every_ms)
		return false;
	*last_ms = now_ms;
	return true;
}
