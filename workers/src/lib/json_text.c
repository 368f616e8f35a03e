/*
 * json_text.c
 *		Source text of a top-level JSON member.
 *
 * jansson validates the document (integers read as reals, so that none is
 * too big for it) and decodes strings; a small scanner finds where each
 * top-level value starts and ends, which jansson does not tell.
 */
#include "payflow/json_text.h"

#include <string.h>

#include <jansson.h>

#include "payflow/buf.h"

typedef struct scanner
{
	const char *p;
	const char *end;
} scanner;

static void
skip_ws(scanner *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
		s->p++;
}

/* Past a string starting at the opening quote; false if unterminated. */
static bool
skip_string(scanner *s)
{
	s->p++;
	while (s->p < s->end)
	{
		if (*s->p == '\\')
			s->p += 2;
		else if (*s->p == '"')
		{
			s->p++;
			return true;
		}
		else
			s->p++;
	}
	return false;
}

/* Past one value of a document jansson has already accepted. */
static bool
skip_value(scanner *s)
{
	int			depth = 0;

	do
	{
		if (s->p >= s->end)
			return false;
		switch (*s->p)
		{
			case '"':
				if (!skip_string(s))
					return false;
				break;
			case '{':
			case '[':
				depth++;
				s->p++;
				break;
			case '}':
			case ']':
				depth--;
				s->p++;
				break;
			default:
				if (depth == 0)
				{
					/* a scalar token: up to a delimiter */
					while (s->p < s->end && strchr(",}] \t\r\n", *s->p) == NULL)
						s->p++;
					return true;
				}
				s->p++;
				break;
		}
	} while (depth > 0);
	return true;
}

pf_result
pf_json_member_text(const char *json, size_t len, const char *name, pf_json_member_kind *kind,
					char **text, pf_error *err)
{
	json_error_t jerr;
	json_t	   *doc = json_loadb(json, len, JSON_DECODE_INT_AS_REAL, &jerr);
	json_t	   *member;
	scanner		s = {json, json + len};
	const char *found = NULL;
	size_t		found_len = 0;

	*kind = PF_JSON_MEMBER_ABSENT;
	*text = NULL;
	if (!json_is_object(doc))
	{
		json_decref(doc);
		return pf_error_set(err, PF_ERR_INVALID, "json", "not a JSON object%s%s",
							doc ? "" : ": ", doc ? "" : jerr.text);
	}
	member = json_object_get(doc, name);
	if (member == NULL)
	{
		json_decref(doc);
		return PF_OK;
	}
	if (json_is_null(member))
		*kind = PF_JSON_MEMBER_NULL;
	else if (json_is_string(member))
	{
		*kind = PF_JSON_MEMBER_STRING;
		*text = pf_strndup(json_string_value(member), json_string_length(member));
	}
	json_decref(doc);
	if (*kind != PF_JSON_MEMBER_ABSENT)
		return PF_OK;

	/* { "key" : value , ... } — keys decoded by jansson to compare them */
	skip_ws(&s);
	s.p++;						/* '{' */
	for (;;)
	{
		const char *key_start;
		json_t	   *key;
		const char *value_start;
		bool		match;

		skip_ws(&s);
		if (s.p >= s.end || *s.p == '}')
			break;
		key_start = s.p;
		if (!skip_string(&s))
			break;
		key = json_loadb(key_start, (size_t) (s.p - key_start), JSON_DECODE_ANY, &jerr);
		match = json_is_string(key) && strcmp(json_string_value(key), name) == 0 &&
			json_string_length(key) == strlen(name);
		json_decref(key);
		skip_ws(&s);
		s.p++;					/* ':' */
		skip_ws(&s);
		value_start = s.p;
		if (!skip_value(&s))
			break;
		if (match)
		{
			found = value_start;
			found_len = (size_t) (s.p - value_start);
		}
		skip_ws(&s);
		if (s.p < s.end && *s.p == ',')
			s.p++;
	}
	if (found == NULL)
		return pf_error_set(err, PF_ERR_INVALID, "json", "member %s not found in the source text", name);
	*kind = PF_JSON_MEMBER_OTHER;
	*text = pf_strndup(found, found_len);
	return PF_OK;
}
