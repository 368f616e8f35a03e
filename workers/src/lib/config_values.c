/*
 * config_values.c
 *		One setting's value checked against its type and stored: URLs,
 *		connection strings, integers in range, choices, host:port and the
 *		relay's destination=url pairs.
 */
#include "config_table.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <libpq-fe.h>

#include "payflow/buf.h"

bool
pf_config_failf(char *error, size_t error_len, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(error, error_len, fmt, ap);
	va_end(ap);
	return false;
}

char *
pf_config_trim(char *s)
{
	char	   *end;

	while (isspace((unsigned char) *s))
		s++;
	end = s + strlen(s);
	while (end > s && isspace((unsigned char) end[-1]))
		*--end = '\0';
	return s;
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
		char	   *pair = pf_config_trim(item);
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
		dest = pf_config_trim(pair);
		url = pf_config_trim(eq + 1);
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

bool
pf_setting_apply(const pf_setting *s, pf_config *cfg, const char *v, char *error, size_t error_len)
{
	char	   *target = (char *) cfg + s->target;
	char		why[256];

	switch (s->type)
	{
		case T_STRING:
			break;
		case T_URL:
			if (!is_http_url(v))
				return pf_config_failf(error, error_len, "invalid %s: expected an http:// or https:// URL", s->name);
			break;
		case T_CONNINFO:
			{
				char	   *errmsg = NULL;
				PQconninfoOption *opts = PQconninfoParse(v, &errmsg);

				/* libpq's message may quote the string, so it is not shown */
				PQfreemem(errmsg);
				if (opts == NULL)
					return pf_config_failf(error, error_len, "invalid %s: not a libpq connection string or URI", s->name);
				PQconninfoFree(opts);
				break;
			}
		case T_INT:
			if (!parse_int(v, s->min, s->max, (int *) target))
				return pf_config_failf(error, error_len, "invalid %s: \"%.64s\" is not an integer from %d to %d", s->name, v, s->min, s->max);
			return true;
		case T_ENUM:
			if (!parse_enum(v, s->choices, (int *) target))
			{
				char		list[128];

				snprintf(list, sizeof(list), "%s", s->choices);
				for (char *c = list; *c; c++)
					if (*c == '|')
						*c = '/';
				return pf_config_failf(error, error_len, "invalid %s: \"%.64s\" is not one of %s", s->name, v, list);
			}
			return true;
		case T_HOST_PORT:
			if (!parse_host_port(v))
				return pf_config_failf(error, error_len, "invalid %s: expected host:port", s->name);
			break;
		case T_QUEUE_MAP:
			if (!pf_queue_map_parse(v, (pf_queue_map *) target, why, sizeof(why)))
				return pf_config_failf(error, error_len, "invalid %s: %s", s->name, why);
			return true;
	}
	*(char **) target = pf_strdup(v);
	return true;
}
