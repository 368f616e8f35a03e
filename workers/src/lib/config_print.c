/*
 * config_print.c
 *		--print-settings: the settings table as one program (one worker role)
 *		reads it, for operators and for the offline deploy checks
 *		(deploy/check/check.mjs), which take these facts from the programs
 *		instead of from their source.
 *
 * JSON lines. The first line describes the program:
 *
 *		{"format":"payflow-settings/1","program":"payflow-worker","role":"invoice",
 *		 "callsAws":true}
 *
 * then one line per setting it reads, in the table's order:
 *
 *		{"name":"PAYFLOW_INVOICE_URL","type":"url","default":null,"required":true,
 *		 "secret":false,"readBy":["worker:invoice"],"requiredBy":["worker:invoice"]}
 *
 * with "alias" (an older name also read), "min"/"max" (integers) and
 * "choices" (enums) where they apply. "required" is for this program;
 * requirements that depend on other values (config_rules.c) are not in it.
 * Only the table is printed, never a value from the environment or the
 * file: secrets cannot appear, and nothing needs to be set to run it.
 */
#include "config_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The readers as --print-settings names them; PF_PROGRAM_WORKER is every role. */
static const struct
{
	unsigned	bit;
	const char *name;
}			readers[] = {
	{PF_PROGRAM_RELAY, "relay"},
	{PF_PROGRAM_API, "api"},
	{PF_PROGRAM_PAYMENT, "worker:payment"},
	{PF_PROGRAM_POSTPROCESS, "worker:postprocess"},
	{PF_PROGRAM_INVOICE, "worker:invoice"},
	{PF_PROGRAM_WEBHOOK, "worker:webhook"},
	{PF_PROGRAM_HTTP_STEP, "worker:http"},
	{PF_PROGRAM_SQL_STEP, "worker:sql"},
	{PF_PROGRAM_S3_SWEEP, "s3-sweep"},
};

#define ROLE_BITS (PF_PROGRAM_PAYMENT | PF_PROGRAM_POSTPROCESS | PF_PROGRAM_INVOICE | PF_PROGRAM_WEBHOOK | \
				   PF_PROGRAM_HTTP_STEP | PF_PROGRAM_SQL_STEP)

static json_t *
reader_names(unsigned bits)
{
	json_t	   *names = json_array();

	if (bits & PF_PROGRAM_WORKER)
		bits |= ROLE_BITS;
	for (size_t i = 0; i < sizeof(readers) / sizeof(readers[0]); i++)
		if (bits & readers[i].bit)
			json_array_append_new(names, json_string(readers[i].name));
	return names;
}

/* Does a program made of these bits read s? A worker reads the rows of every role's and its own role's. */
static bool
reads(unsigned read_by, unsigned programs)
{
	return (read_by & programs) != 0;
}

static json_t *
choices_array(const char *choices)
{
	json_t	   *list = json_array();
	const char *p = choices;

	while (p && *p)
	{
		size_t		len = strcspn(p, "|");

		json_array_append_new(list, json_stringn(p, len));
		p = p[len] ? p + len + 1 : NULL;
	}
	return list;
}

static void
print_line(FILE *out, json_t *obj)
{
	char	   *text = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);

	fprintf(out, "%s\n", text);
	free(text);
	json_decref(obj);
}

void
pf_config_print_settings(FILE *out, const char *program, const char *role, unsigned programs)
{
	pf_config_print_settings_with(out, program, role, programs, NULL);
}

void
pf_config_print_settings_with(FILE *out, const char *program, const char *role, unsigned programs,
							  json_t *head_extra)
{
	json_t	   *head = json_pack("{s:s,s:s}", "format", "payflow-settings/1", "program", program);

	if (role != NULL)
		json_object_set_new(head, "role", json_string(role));
	json_object_set_new(head, "callsAws", json_boolean((programs & PF_PROGRAM_USES_AWS) != 0));
	if (head_extra)
	{
		json_object_update(head, head_extra);
		json_decref(head_extra);
	}
	print_line(out, head);

	/* read before the table, by every program: it names the file the rest may come from */
	print_line(out, json_pack("{s:s,s:s,s:n,s:b,s:b,s:o,s:o}", "name", PF_CONFIG_FILE_VAR, "type", "path",
							  "default", "required", 0, "secret", 0, "readBy", reader_names(PF_PROGRAM_ANY),
							  "requiredBy", json_array()));
	for (size_t i = 0; i < pf_n_settings; i++)
	{
		const pf_setting *s = &pf_settings[i];
		json_t	   *row;

		if (!reads(s->read_by, programs))
			continue;
		row = json_pack("{s:s,s:s}", "name", s->name, "type", pf_setting_type_name(s->type));
		/* secrets have no default; should one get one, it is not shown either */
		json_object_set_new(row, "default", s->default_value && !s->secret ? json_string(s->default_value) : json_null());
		json_object_set_new(row, "required", json_boolean((s->required_by & programs) != 0));
		json_object_set_new(row, "secret", json_boolean(s->secret));
		json_object_set_new(row, "readBy", reader_names(s->read_by));
		json_object_set_new(row, "requiredBy", reader_names(s->required_by));
		if (s->alias)
			json_object_set_new(row, "alias", json_string(s->alias));
		if (s->type == T_INT)
		{
			json_object_set_new(row, "min", json_integer(s->min));
			json_object_set_new(row, "max", json_integer(s->max));
		}
		if (s->type == T_ENUM)
			json_object_set_new(row, "choices", choices_array(s->choices));
		print_line(out, row);
	}
	fflush(out);
}
