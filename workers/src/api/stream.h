/*
 * stream.h
 *		What events.c (the endpoint, MHD's side of a stream) and hub.c (the
 *		thread that feeds every stream) share. Private to payflow-api.
 *
 * Every member of a stream and the hub's list are guarded by hub->lock.
 */
#ifndef PAYFLOW_API_STREAM_H
#define PAYFLOW_API_STREAM_H

#include "api.h"

/* The streams of one API key, for PAYFLOW_API_MAX_STREAMS_PER_KEY. */
typedef struct key_slots
{
	char	   *api_key;
	int			held;			/* streams not yet released */
	int			refs;			/* streams pointing here, released or not */
	struct key_slots *next;
} key_slots;

typedef struct api_stream
{
	api_hub    *hub;
	struct MHD_Connection *conn;
	MHD_socket	fd;				/* the connection's socket, watched while suspended */
	char	   *operation_id;
	char	   *api_key;
	key_slots  *key;			/* set once the hub holds the stream */
	long long	last_id;		/* the last history id sent */
	pf_buf		out;			/* text not yet handed to MHD, from sent on */
	size_t		sent;
	bool		suspended;
	bool		done;			/* nothing more will be added */
	bool		released;		/* MHD freed the response: the stream is over */
	struct api_stream *next;
} api_stream;

struct api_hub
{
	api_context *ctx;
	pthread_t	thread;
	pthread_mutex_t lock;		/* the list and every stream's members */
	api_stream *streams;
	int			n_streams;
	key_slots  *keys;
	int			wake_fd;
	bool		stopping;
	pf_pg	   *pg;
	int			backend_pid;
	int			keepalive_ms;
};

/* Connections to resume once the hub's lock is released. */
typedef struct resume_list
{
	int			n;
	int			cap;
	struct MHD_Connection **conns;
} resume_list;

/* Note a suspended stream for resuming (clears suspended); under the lock. */
void		hub_resume_later(resume_list *list, api_stream *s);

/* Resume them; outside the lock. */
void		hub_resume_all(resume_list *list);

/* Make the hub look at its streams now (a new one, or one released). */
void		hub_wake(api_hub *hub);
typedef enum hub_admission
{
	HUB_ADDED = 0,
	HUB_FULL,					/* PAYFLOW_API_MAX_STREAMS held, or stopping */
	HUB_KEY_FULL				/* PAYFLOW_API_MAX_STREAMS_PER_KEY held with this key */
} hub_admission;

/* Add a stream, unless the process or its key holds as many as allowed. */
hub_admission hub_add_stream(api_hub *hub, api_stream *s);
void		hub_stream_free(api_stream *s);

#endif							/* PAYFLOW_API_STREAM_H */
