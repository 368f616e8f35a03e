/*
 * named_sql.h
 *		SQL text with named placeholders (":payment_id", ":details.amount"),
 *		turned into the positional form ODBC binds ("?") plus the list of
 *		names in the order of the question marks.
 *
 * Operators configure the legacy DBMS's statements with names, never with
 * values: every value is bound as a parameter, so no request field can
 * change a statement's text. The scanner knows SQL's lexical corners well
 * enough not to find placeholders where there are none: inside '…' and
 * E'…' strings, "…" identifiers, $tag$…$tag$ bodies, -- and (nested)
 * block comments, and in PostgreSQL's "::" casts. A bare "?" outside those
 * is rejected, since the driver would take it for a placeholder of its own.
 */
#ifndef PAYFLOW_NAMED_SQL_H
#define PAYFLOW_NAMED_SQL_H

#include <stdbool.h>

#include "payflow/error.h"

/* A placeholder name: identifier, optionally ".field" (letters, digits, _). */
#define PF_NAMED_SQL_MAX_NAME 128

typedef struct pf_named_sql
{
	char	   *sql;			/* positional form, '?' per placeholder */
	int			n_params;
	char	  **names;			/* n_params names, without the ':' */
} pf_named_sql;

/*
 * Parse text. On failure out is left empty and err (PF_ERR_INVALID) names
 * the problem and its character offset.
 */
pf_result	pf_named_sql_parse(const char *text, pf_named_sql *out, pf_error *err);
void		pf_named_sql_free(pf_named_sql *stmt);

/* Does the statement use this placeholder name? */
bool		pf_named_sql_uses(const pf_named_sql *stmt, const char *name);

#endif							/* PAYFLOW_NAMED_SQL_H */
