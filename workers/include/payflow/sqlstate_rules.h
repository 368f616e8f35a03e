/*
 * sqlstate_rules.h
 *		Is a failed call to an external DBMS worth another attempt? Decided by
 *		its SQLSTATE, from built-in defaults and operator overrides.
 *
 * Retryable by default: class 08 (connection), 40 (serialization failure,
 * deadlock), 53 (insufficient resources), HYT00/HYT01 (time-outs), HY008
 * (cancelled), 57014 (query cancelled, e.g. by statement_timeout), 70100
 * (MariaDB/MySQL: query interrupted, by KILL QUERY or max_statement_time;
 * MariaDB's ODBC driver hands it on as HY018, also retryable),
 * 57P01..03 (server shutting down), 55P03 (lock not available), HY000 (the
 * driver's "general error", usually a lost connection; SQLite's driver
 * reports most errors so). Permanent by default: class 22 (data), 23
 * (constraint), 42 (syntax, privileges), 28 (authorisation), 0A, 21, 2F, 3F,
 * 44, P0 (P0001, a PostgreSQL procedure's RAISE) and 45 (45000, a MariaDB or
 * MySQL procedure's SIGNAL): a business rejection such as a declined card;
 * and 01 (a warning raised as an error, as MariaDB's strict mode does with
 * 01000 "data truncated"). A SQLSTATE none of these name is retryable: the
 * call carried the step's idempotency key, and the database's attempt limit
 * bounds the retries.
 *
 * Overrides are comma-separated SQLSTATEs (5 characters) or classes (2):
 * "P0001,XX" (PAYFLOW_LEGACY_RETRYABLE_SQLSTATES and
 * PAYFLOW_LEGACY_PERMANENT_SQLSTATES). The overrides are looked at first,
 * then the defaults; within each, a full SQLSTATE wins over its class.
 */
#ifndef PAYFLOW_SQLSTATE_RULES_H
#define PAYFLOW_SQLSTATE_RULES_H

#include <stdbool.h>
#include <stddef.h>

typedef struct pf_sqlstate_rule
{
	char		code[6];		/* "40001" or a class "08" */
	bool		retryable;
} pf_sqlstate_rule;

typedef struct pf_sqlstate_rules
{
	int			n;
	pf_sqlstate_rule *rules;
} pf_sqlstate_rules;

/*
 * Build rules from the two override lists (either may be NULL). False with
 * why set when an item is malformed or named in both lists.
 */
bool		pf_sqlstate_rules_init(pf_sqlstate_rules *rules, const char *retryable, const char *permanent,
								   char *why, size_t why_len);
void		pf_sqlstate_rules_free(pf_sqlstate_rules *rules);

/* NULL or empty sqlstate (no diagnostics at all) counts as retryable. */
bool		pf_sqlstate_is_retryable(const pf_sqlstate_rules *rules, const char *sqlstate);

/* Class 08: the connection is gone and must be opened again. */
bool		pf_sqlstate_is_connection_error(const char *sqlstate);

#endif							/* PAYFLOW_SQLSTATE_RULES_H */
