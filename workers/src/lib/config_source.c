/*
 * config_source.c
 *		Where a setting's value comes from: the environment, else the file
 *		named by PAYFLOW_CONFIG_FILE (lines NAME=value, as a shell or a
 *		systemd EnvironmentFile would have them).
 */
#include "config_table.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payflow/buf.h"

struct pf_config_file_value
{
	char	   *name;
	char	   *value;
};

/* Lines "NAME=value"; blank lines and lines starting with '#' are skipped. */
static bool
read_config_file(pf_config_source *src, const char *path, char *error, size_t error_len)
{
	FILE	   *f = fopen(path, "r");
	char	   *line = NULL;
	size_t		cap = 0;
	int			lineno = 0;
	bool		ok = true;

	if (f == NULL)
		return pf_config_failf(error, error_len, "invalid %s: cannot read %s: %s", PF_CONFIG_FILE_VAR, path, strerror(errno));
	while (ok && getline(&line, &cap, f) >= 0)
	{
		char	   *p = pf_config_trim(line);
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
			ok = pf_config_failf(error, error_len, "invalid %s: line %d of %s: expected NAME=value", PF_CONFIG_FILE_VAR, lineno, path);
			break;
		}
		*eq = '\0';
		name = pf_config_trim(p);
		if (strncmp(name, "export ", 7) == 0)	/* files shared with a shell */
			name = pf_config_trim(name + 7);
		value = pf_config_trim(eq + 1);
		vlen = strlen(value);
		if (vlen >= 2 && (value[0] == '"' || value[0] == '\'') && value[vlen - 1] == value[0])
		{
			value[vlen - 1] = '\0';
			value++;
		}
		if (pf_setting_find(name) == NULL)
		{
			ok = pf_config_failf(error, error_len, "invalid %s: line %d of %s: unknown setting %s", PF_CONFIG_FILE_VAR, lineno, path, name);
			break;
		}
		src->file = pf_realloc(src->file, sizeof(*src->file) * (size_t) (src->n_file + 1));
		src->file[src->n_file].name = pf_strdup(name);
		src->file[src->n_file].value = pf_strdup(value);
		src->n_file++;
	}
	free(line);
	fclose(f);
	return ok;
}

bool
pf_config_source_open(pf_config_source *src, char *error, size_t error_len)
{
	const char *file = getenv(PF_CONFIG_FILE_VAR);

	src->file = NULL;
	src->n_file = 0;
	if (file != NULL && file[0] != '\0')
		return read_config_file(src, file, error, error_len);
	return true;
}

static const char *
file_lookup(const pf_config_source *src, const char *name)
{
	/* the last line for a name wins, as in a shell */
	for (int i = src->n_file - 1; i >= 0; i--)
		if (strcmp(src->file[i].name, name) == 0)
			return src->file[i].value;
	return NULL;
}

const char *
pf_config_source_lookup(const pf_config_source *src, const char *name)
{
	const char *v = getenv(name);

	if (v != NULL && v[0] != '\0')
		return v;
	v = file_lookup(src, name);
	if (v != NULL && v[0] != '\0')
		return v;
	return NULL;
}

void
pf_config_source_close(pf_config_source *src)
{
	for (int i = 0; i < src->n_file; i++)
	{
		free(src->file[i].name);
		free(src->file[i].value);
	}
	free(src->file);
	src->file = NULL;
	src->n_file = 0;
}
