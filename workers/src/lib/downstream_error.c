/*
 * downstream_error.c
 *		Classify and redact the errors of systems payflow calls.
 */
#include "payflow/downstream_error.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payflow/buf.h"

#define CARD_MIN_DIGITS 13
#define CARD_MAX_DIGITS 19
#define KEEP_DIGITS 4
/* a decline's own text is a short answer, not a document */
#define DECLINE_TEXT_MAX 200
#define RUN_MAX 256

bool
pf_luhn_valid(const char *digits, size_t n)
{
	int			sum = 0;

	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++)
	{
		int			d = digits[n - 1 - i] - '0';

		if (d < 0 || d > 9)
			return false;
		if (i % 2 == 1)
		{
			d *= 2;
			if (d > 9)
				d -= 9;
		}
		sum += d;
	}
	return sum % 10 == 0;
}

/*
 * One run of digits with single spaces or dashes between groups, as cards
 * are written ("4111 1111 1111 1111"). A card may start at any group's
 * first digit and end at any group's last: the longest such window of 13 to
 * 19 digits that passes the Luhn check is masked, then the search goes on
 * after it.
 */
static int
mask_run(char *text, const size_t *at, const bool *group_start, const bool *group_end, size_t n)
{
	char		digits[RUN_MAX];
	int			masked = 0;

	for (size_t k = 0; k < n; k++)
		digits[k] = text[at[k]];
	for (size_t i = 0; i < n; i++)
	{
		if (!group_start[i])
			continue;
		for (size_t len = CARD_MAX_DIGITS; len >= CARD_MIN_DIGITS; len--)
		{
			size_t		j = i + len - 1;

			if (j >= n || !group_end[j] || !pf_luhn_valid(digits + i, len))
				continue;
			for (size_t k = i; k + KEEP_DIGITS <= j; k++)
				text[at[k]] = '*';
			masked++;
			i = j;
			break;
		}
	}
	return masked;
}

/*
 * Length of the UUID (8-4-4-4-12 hex digits) that starts at s, else 0. A
 * UUID's digit groups are no card number: "17678424-4288-4eea-..." holds
 * the Luhn-valid run 1767842442884, and event or operation ids in what is
 * logged or kept must stay as they were.
 */
static size_t
uuid_at(const char *s)
{
	static const int groups[] = {8, 4, 4, 4, 12};
	size_t		p = 0;

	for (int g = 0; g < 5; g++)
	{
		for (int k = 0; k < groups[g]; k++, p++)
			if (!isxdigit((unsigned char) s[p]))
				return 0;
		if (g < 4 && s[p++] != '-')
			return 0;
	}
	return p;
}

int
pf_mask_card_numbers(char *text)
{
	size_t		at[RUN_MAX];
	bool		group_start[RUN_MAX];
	bool		group_end[RUN_MAX];
	int			masked = 0;
	size_t		p = 0;

	if (text == NULL)
		return 0;
	while (text[p])
	{
		size_t		n = 0;
		size_t		skip = uuid_at(text + p);

		if (skip > 0)
		{
			p += skip;
			continue;
		}
		if (!isdigit((unsigned char) text[p]))
		{
			p++;
			continue;
		}
		/* collect the run */
		for (;;)
		{
			if (n < RUN_MAX)
			{
				at[n] = p;
				group_start[n] = n == 0 || !isdigit((unsigned char) text[p - 1]);
				group_end[n] = !isdigit((unsigned char) text[p + 1]);
				n++;
			}
			p++;
			if (uuid_at(text + p) > 0)
				break;
			if (isdigit((unsigned char) text[p]))
				continue;
			if ((text[p] == ' ' || text[p] == '-') && isdigit((unsigned char) text[p + 1]) &&
				uuid_at(text + p + 1) == 0)
			{
				p++;
				continue;
			}
			break;
		}
		masked += mask_run(text, at, group_start, group_end, n);
	}
	return masked;
}

typedef struct sqlstate_class
{
	const char *prefix;			/* a SQLSTATE or its class */
	const char *name;
	const char *what;			/* "<system> <what>" */
} sqlstate_class;

/* Full SQLSTATEs first, then classes; the first match wins. */
static const sqlstate_class classes[] = {
	{"P0001", "declined", "declined the request"},
	{"45000", "declined", "declined the request"},
	{"57014", "timeout", "did not answer in time (the call was cancelled)"},
	{"70100", "timeout", "did not answer in time (the call was interrupted)"},
	{"HYT00", "timeout", "did not answer in time"},
	{"HYT01", "timeout", "did not answer in time (connection time-out)"},
	{"HY008", "timeout", "did not answer in time (the call was cancelled)"},
	{"HY018", "timeout", "did not answer in time (the call was interrupted)"},
	{"57P", "unavailable", "is shutting down or restarting"},
	{"08", "connection", "could not be reached, or the connection was lost"},
	{"28", "authorization", "refused the login"},
	{"22", "data", "refused a value of the request"},
	{"23", "constraint", "refused the request: a constraint was violated"},
	{"40", "conflict", "reported a transaction conflict (serialization failure or deadlock)"},
	{"42", "statement", "refused the statement (syntax, or a missing object or privilege)"},
	{"53", "resources", "is out of resources"},
	{"54", "resources", "reached a limit"},
	{"55", "conflict", "found an object in use (lock not available)"},
	{"0A", "statement", "does not support the statement"},
};

#define N_CLASSES (sizeof(classes) / sizeof(classes[0]))

static const sqlstate_class *
find_class(const char *sqlstate)
{
	if (sqlstate == NULL)
		return NULL;
	for (size_t i = 0; i < N_CLASSES; i++)
		if (strncasecmp(sqlstate, classes[i].prefix, strlen(classes[i].prefix)) == 0)
			return &classes[i];
	return NULL;
}

const char *
pf_sqlstate_class(const char *sqlstate)
{
	const sqlstate_class *c = find_class(sqlstate);

	return c ? c->name : "dbms";
}

static const char *
system_name(const char *source)
{
	if (source && strcmp(source, "postprocess") == 0)
		return "the post-processing hook";
	return "the legacy DBMS";
}

/* A masked copy of text, cut to max bytes (at a UTF-8 boundary). */
static char *
masked_copy(const char *text, size_t max)
{
	size_t		n = text ? strlen(text) : 0;
	char	   *copy;

	if (max > 0 && n > max)
	{
		n = max;
		while (n > 0 && ((unsigned char) text[n] & 0xC0) == 0x80)
			n--;
	}
	copy = pf_strndup(text ? text : "", n);
	pf_mask_card_numbers(copy);
	return copy;
}

/* The safe message of a SQL error (malloc'd). */
static char *
safe_sql_message(const char *source, const char *sqlstate, const char *raw_text)
{
	const sqlstate_class *c = find_class(sqlstate);
	pf_buf		msg = PF_BUF_INIT;

	if (c && strcmp(c->name, "declined") == 0 && raw_text && raw_text[0])
		return masked_copy(raw_text, DECLINE_TEXT_MAX);
	pf_buf_appendf(&msg, "%s %s (SQLSTATE %s)", system_name(source),
				   c ? c->what : "reported an error", sqlstate && sqlstate[0] ? sqlstate : "none");
	return pf_buf_steal(&msg);
}

json_t *
pf_downstream_sql_error(const char *source, const char *sqlstate, const char *raw_text, bool raw)
{
	char	   *message = safe_sql_message(source, sqlstate, raw_text);
	json_t	   *e = json_pack("{s:s,s:s,s:s,s:s}", "code", sqlstate && sqlstate[0] ? sqlstate : "error",
							  "class", pf_sqlstate_class(sqlstate), "message", message,
							  "sqlstate", sqlstate ? sqlstate : "");

	if (raw && raw_text)
	{
		char	   *masked = masked_copy(raw_text, 0);

		json_object_set_new(e, "rawMessage", json_string(masked));
		free(masked);
	}
	free(message);
	return e;
}

void
pf_downstream_error_redact(json_t *error, const char *class_name, const char *safe_message, bool raw)
{
	const char *message = json_string_value(json_object_get(error, "message"));
	const char *body = json_string_value(json_object_get(error, "body"));

	if (!json_is_object(error))
		return;
	if (raw)
	{
		if (message)
		{
			char	   *masked = masked_copy(message, 0);

			json_object_set_new(error, "rawMessage", json_string(masked));
			free(masked);
		}
		if (body)
		{
			char	   *masked = masked_copy(body, 0);

			json_object_set_new(error, "body", json_string(masked));
			free(masked);
		}
	}
	else
		json_object_del(error, "body");
	if (class_name)
		json_object_set_new(error, "class", json_string(class_name));
	if (safe_message)
		json_object_set_new(error, "message", json_string(safe_message));
	else if (message)
	{
		char	   *masked = masked_copy(message, 0);

		json_object_set_new(error, "message", json_string(masked));
		free(masked);
	}
}

const char *
pf_downstream_log_text(const char *sqlstate, const char *raw_text, bool raw, char *buf, size_t len)
{
	char	   *text = raw ? masked_copy(raw_text, 0) : safe_sql_message("legacy", sqlstate, raw_text);

	snprintf(buf, len, "%s", text);
	free(text);
	return buf;
}
