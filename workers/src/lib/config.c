/*
 * config.c
 *		The loader: every row of the settings table (config_table.c) looked
 *		up (config_source.c), checked and stored (config_values.c), then the
 *		rules across settings (config_rules.c); secrets registered with the
 *		logger; the effective settings as JSON for the start-up line.
 */
#include "config_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "payflow/buf.h"

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
				char	   *k = pf_config_trim(key);

				if (strcasecmp(k, "PWD") == 0 || strcasecmp(k, "Password") == 0)
				{
					char	   *val = pf_strndup(eq + 1, len - (size_t) (eq + 1 - p));
					char	   *vv = pf_config_trim(val);
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
	for (size_t i = 0; i < pf_n_settings; i++)
	{
		const pf_setting *s = &pf_settings[i];

		if (s->secret && (s->type == T_STRING || s->type == T_CONNINFO))
			pf_log_add_secret(*(char *const *) ((const char *) cfg + s->target));
	}
	register_embedded_passwords(cfg->database_url, false);
	register_embedded_passwords(cfg->legacy_odbc, true);
}

bool
pf_config_load(pf_config *cfg, unsigned programs, char *error, size_t error_len)
{
	pf_config_source src;
	bool		ok;

	memset(cfg, 0, sizeof(*cfg));
	if (error_len > 0)
		error[0] = '\0';
	ok = pf_config_source_open(&src, error, error_len);

	for (size_t i = 0; ok && i < pf_n_settings; i++)
	{
		const pf_setting *s = &pf_settings[i];
		const char *v = pf_config_source_lookup(&src, s->name);

		if (v == NULL && s->alias)
			v = pf_config_source_lookup(&src, s->alias);
		if (v == NULL)
			v = s->default_value;
		if (v == NULL)
		{
			if (s->required_by & programs)
			{
				snprintf(error, error_len, "missing %s", s->name);
				ok = false;
			}
			continue;
		}
		ok = pf_setting_apply(s, cfg, v, error, error_len);
	}
	if (ok)
		ok = pf_config_check_rules(cfg, programs, error, error_len);
	if (ok)
	{
		default_worker_id(cfg);
		register_secrets(cfg);
	}

	pf_config_source_close(&src);
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
		if (strcmp(name, PF_CONFIG_FILE_VAR) != 0 && pf_setting_find(name) == NULL)
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
	for (size_t i = 0; i < pf_n_settings; i++)
	{
		const pf_setting *s = &pf_settings[i];
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

	for (size_t i = 0; i < pf_n_settings; i++)
	{
		const pf_setting *s = &pf_settings[i];
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
