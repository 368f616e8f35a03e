/*
 * json_text.h
 *		A top-level member of a JSON object as text, exactly as written.
 *
 * Amounts must reach an external system as they were submitted: "12.50"
 * stays "12.50", and 0.1 never becomes 0.10000000000000001 on its way
 * through a double. So numbers (and true, false, nested objects and arrays)
 * are handed over as their source text; strings are unescaped; null is
 * reported as such.
 */
#ifndef PAYFLOW_JSON_TEXT_H
#define PAYFLOW_JSON_TEXT_H

#include <stdbool.h>
#include <stddef.h>

#include "payflow/error.h"

typedef enum pf_json_member_kind
{
	PF_JSON_MEMBER_ABSENT = 0,
	PF_JSON_MEMBER_NULL,
	PF_JSON_MEMBER_STRING,		/* *text is the unescaped string */
	PF_JSON_MEMBER_OTHER		/* number, true/false, object, array: source text */
} pf_json_member_kind;

/*
 * Find member name of the object in json[0..len). On PF_OK *kind says what
 * was found and *text (STRING, OTHER) is a copy the caller frees, else NULL.
 * A document that is not a JSON object is PF_ERR_INVALID. When a name
 * occurs twice the last one counts, as when the database parsed it.
 */
pf_result	pf_json_member_text(const char *json, size_t len, const char *name,
								pf_json_member_kind *kind, char **text, pf_error *err);

#endif							/* PAYFLOW_JSON_TEXT_H */
