/*
 * token.c
 *		Secrets for the HTTP edge's API keys.
 */
#include "payflow.h"

#include "fmgr.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(payflow_random_token);

/*
 * payflow._random_token(nbytes) returns nbytes of cryptographically strong
 * randomness as hex: API key secrets, which must never come from random().
 */
Datum
payflow_random_token(PG_FUNCTION_ARGS)
{
	int32		nbytes = PG_GETARG_INT32(0);
	uint8		buf[64];
	char		hex[2 * 64 + 1];

	if (nbytes < 16 || nbytes > 64)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("token length must be between 16 and 64 bytes")));
	if (!pg_strong_random(buf, nbytes))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate random bytes for a token")));
	for (int i = 0; i < nbytes; i++)
		snprintf(hex + 2 * i, 3, "%02x", buf[i]);
	PG_RETURN_TEXT_P(cstring_to_text(hex));
}
