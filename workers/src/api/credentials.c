/*
 * credentials.c
 *		What a request says about who sends it: the API key of its
 *		Authorization header.  Every endpoint reads it here; the database
 *		decides what the key may do (payflow.authenticate, admin_*).
 */
#include "api.h"

#include <string.h>
#include <strings.h>

/* Printable ASCII only: what a header value of ours may hold (a key, a correlation id). */
bool
api_printable_ascii(const char *text)
{
	for (const unsigned char *p = (const unsigned char *) text; *p; p++)
		if (*p < 0x20 || *p > 0x7E)
			return false;
	return true;
}

/*
 * A key is printable ASCII; anything else cannot name one, and would only
 * reach the database to fail as text (22021, or a 404 for a lookup).
 */
const char *
api_bearer_key(api_request *req)
{
	const char *auth = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);

	if (auth == NULL || strncasecmp(auth, "Bearer ", 7) != 0)
		return NULL;
	auth += 7;
	while (*auth == ' ')
		auth++;
	return *auth && api_printable_ascii(auth) ? auth : NULL;
}
