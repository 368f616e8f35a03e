/*
 * error.c
 *		Filling pf_error reports.
 */
#include "payflow/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void
pf_error_clear(pf_error *err)
{
	if (err == NULL)
		return;
	err->result = PF_OK;
	err->code[0] = '\0';
	err->message[0] = '\0';
	err->http_status = 0;
}

pf_result
pf_error_set(pf_error *err, pf_result result, const char *code, const char *fmt,...)
{
	va_list		ap;

	if (err == NULL)
		return result;
	err->result = result;
	snprintf(err->code, sizeof(err->code), "%s", code ? code : "");
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	return result;
}

const char *
pf_result_name(pf_result result)
{
	switch (result)
	{
		case PF_OK:
			return "ok";
		case PF_ERR_TRANSIENT:
			return "transient";
		case PF_ERR_FINAL:
			return "final";
		case PF_ERR_NOT_FOUND:
			return "not_found";
		case PF_ERR_CHECKSUM:
			return "checksum";
		case PF_ERR_INVALID:
			return "invalid";
	}
	return "unknown";
}
