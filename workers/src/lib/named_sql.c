/*
 * named_sql.c
 *		Named placeholders to positional ones, outside quotes and comments.
 */
#include "payflow/named_sql.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "payflow/buf.h"

static bool
ident_start(char c)
{
	return isalpha((unsigned char) c) || c == '_';
}

static bool
ident_char(char c)
{
	return isalnum((unsigned char) c) || c == '_';
}

/*
 * Length of a dollar-quote tag at p ("$$" or "$tag$"), 0 if p starts none.
 * A tag is an identifier without '$'; "$1" is a positional parameter.
 */
static size_t
dollar_tag_len(const char *p)
{
	size_t		n = 1;

	if (p[0] != '$')
		return 0;
	if (p[1] == '$')
		return 2;
	if (!ident_start(p[1]))
		return 0;
	while (ident_char(p[n]))
		n++;
	return p[n] == '$' ? n + 1 : 0;
}

static void
add_name(pf_named_sql *out, const char *name, size_t len)
{
	out->names = pf_realloc(out->names, sizeof(char *) * (size_t) (out->n_params + 1));
	out->names[out->n_params++] = pf_strndup(name, len);
}

pf_result
pf_named_sql_parse(const char *text, pf_named_sql *out, pf_error *err)
{
	pf_buf		sql = PF_BUF_INIT;
	const char *p = text;
	const char *problem = NULL;
	size_t		problem_at = 0;

	memset(out, 0, sizeof(*out));
	if (text == NULL || text[0] == '\0')
		return pf_error_set(err, PF_ERR_INVALID, "named_sql", "empty statement");

	while (*p && problem == NULL)
	{
		const char *start = p;

		if (*p == '\'' || *p == '"')
		{
			/* '…' and "…", doubled quote inside; E'…' also knows backslashes */
			char		q = *p;
			bool		backslashes = q == '\'' && p > text && (p[-1] == 'E' || p[-1] == 'e') &&
			(p - 1 == text || !ident_char(p[-2]));

			p++;
			for (;;)
			{
				if (*p == '\0')
				{
					problem = q == '\'' ? "unterminated string literal" : "unterminated quoted identifier";
					problem_at = (size_t) (start - text);
					break;
				}
				if (backslashes && *p == '\\' && p[1] != '\0')
				{
					p += 2;
					continue;
				}
				if (*p == q)
				{
					if (p[1] == q)
					{
						p += 2;
						continue;
					}
					p++;
					break;
				}
				p++;
			}
			pf_buf_append(&sql, start, (size_t) (p - start));
		}
		else if (p[0] == '-' && p[1] == '-')
		{
			while (*p && *p != '\n')
				p++;
			pf_buf_append(&sql, start, (size_t) (p - start));
		}
		else if (p[0] == '/' && p[1] == '*')
		{
			int			depth = 0;

			do
			{
				if (p[0] == '/' && p[1] == '*')
				{
					depth++;
					p += 2;
				}
				else if (p[0] == '*' && p[1] == '/')
				{
					depth--;
					p += 2;
				}
				else if (*p == '\0')
				{
					problem = "unterminated block comment";
					problem_at = (size_t) (start - text);
					break;
				}
				else
					p++;
			} while (depth > 0);
			pf_buf_append(&sql, start, (size_t) (p - start));
		}
		else if (*p == '$' && dollar_tag_len(p) > 0 && (p == text || !ident_char(p[-1])))
		{
			size_t		tag = dollar_tag_len(p);
			const char *end;

			p += tag;
			end = p;
			for (;;)
			{
				end = strchr(end, '$');
				if (end == NULL || strncmp(end, start, tag) == 0)
					break;
				end++;
			}
			if (end == NULL)
			{
				problem = "unterminated dollar-quoted string";
				problem_at = (size_t) (start - text);
				break;
			}
			p = end + tag;
			pf_buf_append(&sql, start, (size_t) (p - start));
		}
		else if (p[0] == ':' && p[1] == ':')
		{
			/* a cast, "::numeric" */
			pf_buf_append(&sql, p, 2);
			p += 2;
		}
		else if (p[0] == ':' && ident_start(p[1]) && (p == text || p[-1] != ':'))
		{
			const char *name = p + 1;
			size_t		len;

			p = name;
			while (ident_char(*p))
				p++;
			if (*p == '.' && ident_char(p[1]))
			{
				p++;
				while (ident_char(*p))
					p++;
			}
			len = (size_t) (p - name);
			if (len > PF_NAMED_SQL_MAX_NAME)
			{
				problem = "placeholder name too long";
				problem_at = (size_t) (start - text);
				break;
			}
			add_name(out, name, len);
			pf_buf_append_char(&sql, '?');
		}
		else if (*p == '?')
		{
			problem = "a bare '?' (use named placeholders such as :payment_id)";
			problem_at = (size_t) (p - text);
		}
		else
		{
			pf_buf_append_char(&sql, *p);
			p++;
		}
	}

	if (problem != NULL)
	{
		pf_buf_free(&sql);
		pf_named_sql_free(out);
		return pf_error_set(err, PF_ERR_INVALID, "named_sql", "%s at character %zu", problem, problem_at + 1);
	}
	out->sql = pf_buf_steal(&sql);
	return PF_OK;
}

void
pf_named_sql_free(pf_named_sql *stmt)
{
	for (int i = 0; i < stmt->n_params; i++)
		free(stmt->names[i]);
	free(stmt->names);
	free(stmt->sql);
	memset(stmt, 0, sizeof(*stmt));
}

bool
pf_named_sql_uses(const pf_named_sql *stmt, const char *name)
{
	for (int i = 0; i < stmt->n_params; i++)
		if (strcmp(stmt->names[i], name) == 0)
			return true;
	return false;
}
