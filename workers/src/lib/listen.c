/*
 * listen.c
 *		host:port settings as listening addresses (listen.h).
 */
#include "payflow/listen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "payflow/buf.h"

struct addrinfo *
pf_listen_resolve(const char *listen, char *why, size_t why_len)
{
	char	   *copy = pf_strdup(listen);
	char	   *colon = strrchr(copy, ':');
	char	   *host = copy;
	struct addrinfo hints;
	struct addrinfo *ai = NULL;
	int			rc;

	if (colon == NULL)
	{
		snprintf(why, why_len, "expected host:port");
		free(copy);
		return NULL;
	}
	*colon = '\0';
	if (host[0] == '[' && colon > host && colon[-1] == ']')
	{
		host++;
		colon[-1] = '\0';
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	rc = getaddrinfo(host, colon + 1, &hints, &ai);
	free(copy);
	if (rc != 0 || ai == NULL)
	{
		snprintf(why, why_len, "cannot resolve %s: %s", listen, gai_strerror(rc));
		return NULL;
	}
	return ai;
}
