/*
 * downstream_error.h
 *		The error of a failed call to a system payflow calls (the legacy DBMS,
 *		a post-processing hook) as payflow stores, logs and shows it.
 *
 * Such texts echo their input: `invalid input syntax for type numeric:
 * "4111111111111111x"`, `Incorrect decimal value: '…' for column …`, a
 * hook's 4xx body. They would reach the step's last error, the status
 * document, the history, dead letters, webhooks and the worker's log. So an
 * error is reduced to what is safe for clients before anything sees it:
 *
 *		code		the SQLSTATE (or the role's own code)
 *		class		what kind of failure (declined, data, constraint, ...)
 *		message		a message payflow writes from the class, never the
 *					downstream text; except for a decline that a legacy
 *					procedure raised on purpose (SQLSTATE P0001 or 45000:
 *					RAISE, SIGNAL), whose text is its answer to the client
 *					("card declined"), kept with card numbers masked
 *
 * The downstream text itself travels only when the operator sets
 * PAYFLOW_RAW_ERROR_TEXT=true, as "rawMessage", and even then with every
 * digit run that looks like a card number (13 to 19 digits, spaces or dashes
 * between them allowed, passing the Luhn check) masked but for its last
 * four digits.
 */
#ifndef PAYFLOW_DOWNSTREAM_ERROR_H
#define PAYFLOW_DOWNSTREAM_ERROR_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

/* The Luhn check over n ASCII digits. */
bool		pf_luhn_valid(const char *digits, size_t n);

/*
 * Mask, in place, every card-number-like digit run of text: its digits but
 * the last four become '*', separators stay. Returns how many were masked.
 */
int			pf_mask_card_numbers(char *text);

/*
 * The class payflow reports for a SQLSTATE: "declined", "data",
 * "constraint", "connection", "authorization", "conflict", "statement",
 * "resources", "timeout", "unavailable" or "dbms".
 */
const char *pf_sqlstate_class(const char *sqlstate);

/*
 * The error object for a downstream SQL error: {"code": sqlstate, "class",
 * "message", "sqlstate"} plus "rawMessage" (masked) when raw is true.
 * source names the system in the message: "legacy" or "postprocess".
 */
json_t	   *pf_downstream_sql_error(const char *source, const char *sqlstate, const char *raw_text, bool raw);

/*
 * Make an error object a role built from a downstream answer safe, in
 * place: "message" becomes safe_message (NULL: it stays, masked), "body"
 * goes; with raw, the old message and body stay, masked, as "rawMessage"
 * and "body". class is set when given.
 */
void		pf_downstream_error_redact(json_t *error, const char *class_name, const char *safe_message, bool raw);

/* A downstream text for a log line: safe unless raw, masked always (into buf). */
const char *pf_downstream_log_text(const char *sqlstate, const char *raw_text, bool raw, char *buf, size_t len);

#endif							/* PAYFLOW_DOWNSTREAM_ERROR_H */
