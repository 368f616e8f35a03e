/*
 * listen.h
 *		A host:port setting ("127.0.0.1:8080", "[::1]:9100") as a socket
 *		address to listen on.
 */
#ifndef PAYFLOW_LISTEN_H
#define PAYFLOW_LISTEN_H

#include <netdb.h>
#include <stddef.h>

/* NULL with why set when it does not resolve; freeaddrinfo() the result. */
struct addrinfo *pf_listen_resolve(const char *listen, char *why, size_t why_len);

#endif							/* PAYFLOW_LISTEN_H */
