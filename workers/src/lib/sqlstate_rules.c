/*
 * sqlstate_rules.c
 *		Retryable or permanent, by SQLSTATE.
 */
#include "payflow/sqlstate_rules.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payflow/buf.h"

static const pf_sqlstate_rule default_rules[] = {
	{"08", true}, {"40", true}, {"53", true}, {"HYT00", true}, {"HYT01", true},
	{"HY008", true}, {"57014", true}, {"57P01", true}, {"57P02", true}, {"57P03", true},
	{"55P03", true}, {"HY000", true}, {"70100", true}, {"HY018", true},
	{"22", false}, {"23", false}, {"42", false}, {"28", false}, {"0A", false},
	{"21", false}, {"2F", false}, {"3F", false}, {"44", false}, {"P0", false},
	{"45", false}, {"01", false},
};

#define N_DEFAULT_RULES (sizeof(default_rules) / sizeof(default_rules[0]))

static bool
add_list(pf_sqlstate_rules *rules, const char *list, bool retryable, const char *setting,
		 char *why, size_t why_len)
{
	const char *p = list;

	while (p && *p)
	{
		const char *end = strchr(p, ',');
		size_t		len = end ? (size_t) (end - p) : strlen(p);
		char		code[6];
		size_t		n = 0;

		/* trim */
		while (len > 0 && isspace((unsigned char) *p))
		{
			p++;
			len--;
		}
		while (len > 0 && isspace((unsigned char) p[len - 1]))
			len--;
		if (len != 0)
		{
			if (len != 2 && len != 5)
			{
				snprintf(why, why_len, "%s: \"%.*s\" is neither a SQLSTATE (5 characters) nor a class (2)",
						 setting, (int) (len > 16 ? 16 : len), p);
				return false;
			}
			for (; n < len; n++)
			{
				if (!isalnum((unsigned char) p[n]))
				{
					snprintf(why, why_len, "%s: \"%.*s\" holds a character that is not a letter or digit",
							 setting, (int) len, p);
					return false;
				}
				code[n] = (char) toupper((unsigned char) p[n]);
			}
			code[n] = '\0';
			for (int i = 0; i < rules->n; i++)
			{
				if (strcmp(rules->rules[i].code, code) == 0)
				{
					snprintf(why, why_len, "%s: %s is named twice, or also in the other list", setting, code);
					return false;
				}
			}
			rules->rules = pf_realloc(rules->rules, sizeof(pf_sqlstate_rule) * (size_t) (rules->n + 1));
			memcpy(rules->rules[rules->n].code, code, sizeof(code));
			rules->rules[rules->n].retryable = retryable;
			rules->n++;
		}
		p = end ? end + 1 : NULL;
	}
	return true;
}

bool
pf_sqlstate_rules_init(pf_sqlstate_rules *rules, const char *retryable, const char *permanent,
					   char *why, size_t why_len)
{
	rules->n = 0;
	rules->rules = NULL;
	if (!add_list(rules, retryable, true, "retryable SQLSTATEs", why, why_len) ||
		!add_list(rules, permanent, false, "permanent SQLSTATEs", why, why_len))
	{
		pf_sqlstate_rules_free(rules);
		return false;
	}
	return true;
}

void
pf_sqlstate_rules_free(pf_sqlstate_rules *rules)
{
	free(rules->rules);
	rules->rules = NULL;
	rules->n = 0;
}

/* The rule of a list for sqlstate: a full match, else its class; NULL if none. */
static const pf_sqlstate_rule *
find(const pf_sqlstate_rule *list, int n, const char *sqlstate)
{
	const pf_sqlstate_rule *by_class = NULL;

	for (int i = 0; i < n; i++)
	{
		if (strcasecmp(list[i].code, sqlstate) == 0)
			return &list[i];
		if (strlen(list[i].code) == 2 && strncasecmp(list[i].code, sqlstate, 2) == 0)
			by_class = &list[i];
	}
	return by_class;
}

bool
pf_sqlstate_is_retryable(const pf_sqlstate_rules *rules, const char *sqlstate)
{
	const pf_sqlstate_rule *r;

	if (sqlstate == NULL || sqlstate[0] == '\0')
		return true;
	if (rules != NULL)
	{
		r = find(rules->rules, rules->n, sqlstate);
		if (r)
			return r->retryable;
	}
	r = find(default_rules, (int) N_DEFAULT_RULES, sqlstate);
	return r ? r->retryable : true;
}

bool
pf_sqlstate_is_connection_error(const char *sqlstate)
{
	return sqlstate != NULL && strncmp(sqlstate, "08", 2) == 0;
}
