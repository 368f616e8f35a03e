/*
 * hub.c
 *		The one thread that feeds every event stream of the process.
 *
 * It holds ONE PostgreSQL connection that LISTENs on payflow_status (the
 * extension's scheduler worker NOTIFYs there after commits that changed a
 * status) and, when woken, or every PAYFLOW_POLL_INTERVAL_MS as a fallback
 * (no NOTIFY without shared_preload_libraries), runs one payflow.changes()
 * query per API key in use, for all the operations watched with that key
 * (in batches of CHANGES_BATCH ids: changes() takes at most 10,000), and
 * hands each new row to the streams of its operation. A stream keeps its
 * own last history id: ids grow in commit order within an operation, not
 * across operations.
 *
 * MHD does not poll a suspended connection, so it would notice a client
 * that hung up only when the next keep-alive comment is written. The hub
 * polls the sockets of suspended streams for a hang-up (POLLRDHUP) beside
 * its own, and ends such a stream at once: its slot comes free.
 *
 * The key is checked in the same statement as the query, as everywhere:
 * a key revoked while its streams are open ends them with an error event.
 */
#include "stream.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "payflow/backoff.h"

#define LISTEN_CHANNEL "payflow_status"
#define KEEPALIVE_MAX_MS 15000
#define RECONNECT_MS 1000
/* operation ids per changes() call; the function refuses more than 10,000 */
#define CHANGES_BATCH 1000

/*
 * changes() must run after authenticate() set the tenant: the lateral
 * argument that depends on authenticate's result makes that order the
 * only one the planner can choose.
 */
static const char CHANGES_SQL[] =
"SELECT c.operation_id, c.id, to_char(c.at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'),"
"       c.from_status, c.to_status, c.reason, c.terminal"
"  FROM payflow.authenticate($1) AS a(tenant)"
" CROSS JOIN LATERAL payflow.changes(CASE WHEN a.tenant IS NOT NULL THEN $2::text[] END, $3::bigint) AS c"
" ORDER BY c.operation_id COLLATE \"C\", c.id"; /* strcmp's order: see dispatch_rows */

void
hub_resume_later(resume_list *list, api_stream *s)
{
	if (!s->suspended || s->released)
		return;
	s->suspended = false;
	if (list->n == list->cap)
	{
		list->cap = list->cap ? 2 * list->cap : 16;
		list->conns = pf_realloc(list->conns, sizeof(*list->conns) * (size_t) list->cap);
	}
	list->conns[list->n++] = s->conn;
}

/*
 * A suspended connection is out of MHD's hands until resumed, so it cannot
 * complete (and free its stream) in between: resuming after the lock is
 * released is safe, and keeps MHD's own locks out of ours.
 */
void
hub_resume_all(resume_list *list)
{
	for (int i = 0; i < list->n; i++)
		MHD_resume_connection(list->conns[i]);
	free(list->conns);
	memset(list, 0, sizeof(*list));
}

void
hub_wake(api_hub *hub)
{
	uint64_t	one = 1;
	ssize_t		w = write(hub->wake_fd, &one, sizeof(one));

	(void) w;					/* the counter saturating still wakes */
}

void
hub_stream_free(api_stream *s)
{
	free(s->operation_id);
	free(s->api_key);
	pf_buf_free(&s->out);
	free(s);
}

/* The slots of a key, found or made; under the lock. Keys in use are few. */
static key_slots *
slots_of(api_hub *hub, const char *api_key)
{
	key_slots  *k;

	for (k = hub->keys; k; k = k->next)
		if (strcmp(k->api_key, api_key) == 0)
			return k;
	k = pf_calloc(1, sizeof(*k));
	k->api_key = pf_strdup(api_key);
	k->next = hub->keys;
	hub->keys = k;
	return k;
}

hub_admission
hub_add_stream(api_hub *hub, api_stream *s)
{
	hub_admission admission = HUB_ADDED;
	key_slots  *k;

	pthread_mutex_lock(&hub->lock);
	k = slots_of(hub, s->api_key);
	/* a released stream's connection is gone: it holds no slot, reaped or not */
	if (hub->stopping || hub->n_streams >= hub->ctx->cfg.api_max_streams)
		admission = HUB_FULL;
	else if (k->held >= hub->ctx->cfg.api_max_streams_per_key)
		admission = HUB_KEY_FULL;
	if (admission == HUB_ADDED)
	{
		s->key = k;
		k->held++;
		k->refs++;
		s->next = hub->streams;
		hub->streams = s;
		hub->n_streams++;
	}
	pthread_mutex_unlock(&hub->lock);
	if (admission == HUB_ADDED)
		hub_wake(hub);
	return admission;
}

static void
append_event(api_stream *s, long long id, const char *at, const char *from, const char *to,
			 const char *reason, bool terminal)
{
	json_t	   *data = json_pack("{s:s,s:s,s:s?,s:s,s:s?,s:b}", "operationId", s->operation_id,
								 "status", to, "previousStatus", from, "at", at, "reason", reason,
								 "terminal", terminal);
	char	   *text = json_dumps(data, JSON_COMPACT | JSON_PRESERVE_ORDER);

	json_decref(data);
	if (text == NULL)
		return;
	pf_buf_appendf(&s->out, "id: %lld\nevent: status\ndata: %s\n\n", id, text);
	free(text);
	s->last_id = id;
	if (terminal)
		s->done = true;
}

static void
append_error_and_end(api_stream *s, const char *code, const char *message)
{
	json_t	   *data = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", message);
	char	   *text = json_dumps(data, JSON_COMPACT | JSON_PRESERVE_ORDER);

	json_decref(data);
	pf_buf_appendf(&s->out, "event: error\ndata: %s\n\n", text ? text : "{}");
	free(text);
	s->done = true;
}

/* Up to CHANGES_BATCH operations watched with one key, and the lowest last id among them. */
typedef struct key_group
{
	char	   *api_key;
	pf_buf		ids;			/* text[] literal */
	int			n_ids;
	long long	after_id;
	struct key_group *next;
} key_group;

/* One open stream's interest, for grouping. */
typedef struct watch
{
	const char *api_key;
	const char *operation_id;
	long long	last_id;
} watch;

static int
compare_watches(const void *a, const void *b)
{
	const watch *x = a;
	const watch *y = b;
	int			c = strcmp(x->api_key, y->api_key);

	return c != 0 ? c : strcmp(x->operation_id, y->operation_id);
}

static void
append_array_element(pf_buf *array, const char *text)
{
	pf_buf_append_char(array, array->len == 0 ? '{' : ',');
	pf_buf_append_char(array, '"');
	for (const char *p = text; *p; p++)
	{
		if (*p == '"' || *p == '\\')
			pf_buf_append_char(array, '\\');
		pf_buf_append_char(array, *p);
	}
	pf_buf_append_char(array, '"');
}

/*
 * The open streams grouped by key, each operation once, CHANGES_BATCH
 * operations per group at most: sorted, so a thousand streams on a
 * thousand operations cost a sort, not a thousand look-ups. Called under
 * the lock; the groups own copies.
 */
static key_group *
collect_groups(api_hub *hub)
{
	key_group  *groups = NULL;
	key_group  *g = NULL;
	watch	   *w = pf_malloc(sizeof(watch) * (size_t) (hub->n_streams + 1));
	int			n = 0;

	for (api_stream *s = hub->streams; s; s = s->next)
		if (!s->done && !s->released)
		{
			w[n].api_key = s->api_key;
			w[n].operation_id = s->operation_id;
			w[n++].last_id = s->last_id;
		}
	qsort(w, (size_t) n, sizeof(watch), compare_watches);
	for (int i = 0; i < n; i++)
	{
		bool		new_operation = i == 0 || strcmp(w[i - 1].api_key, w[i].api_key) != 0 ||
		strcmp(w[i - 1].operation_id, w[i].operation_id) != 0;

		/* a new key, or a full group and an operation it does not have yet */
		if (g == NULL || strcmp(g->api_key, w[i].api_key) != 0 || (new_operation && g->n_ids == CHANGES_BATCH))
		{
			g = pf_calloc(1, sizeof(*g));
			g->api_key = pf_strdup(w[i].api_key);
			g->after_id = w[i].last_id;
			g->next = groups;
			groups = g;
		}
		if (w[i].last_id < g->after_id)
			g->after_id = w[i].last_id;
		if (new_operation)
		{
			append_array_element(&g->ids, w[i].operation_id);
			g->n_ids++;
		}
	}
	for (g = groups; g; g = g->next)
		pf_buf_append_char(&g->ids, '}');
	free(w);
	return groups;
}

static void
free_groups(key_group *groups)
{
	while (groups)
	{
		key_group  *next = groups->next;

		free(groups->api_key);
		pf_buf_free(&groups->ids);
		free(groups);
		groups = next;
	}
}

/* The first row of an operation in rows ordered by operation id (bytewise). */
static int
first_row_of(PGresult *res, int n, const char *operation_id)
{
	int			lo = 0;
	int			hi = n;

	while (lo < hi)
	{
		int			mid = lo + (hi - lo) / 2;

		if (strcmp(PQgetvalue(res, mid, 0), operation_id) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * Hand a group's rows to its streams; a stream takes rows past its own
 * last id. A stream of the key whose operation is in another group of it
 * finds no rows here.
 */
static void
dispatch_rows(api_hub *hub, const key_group *g, PGresult *res, resume_list *resumes)
{
	int			n = PQntuples(res);

	for (api_stream *s = hub->streams; s; s = s->next)
	{
		bool		added = false;

		if (s->done || s->released || strcmp(s->api_key, g->api_key) != 0)
			continue;
		for (int i = first_row_of(res, n, s->operation_id);
			 i < n && !s->done && strcmp(PQgetvalue(res, i, 0), s->operation_id) == 0; i++)
		{
			long long	id = strtoll(PQgetvalue(res, i, 1), NULL, 10);

			if (id <= s->last_id)
				continue;
			append_event(s, id, PQgetvalue(res, i, 2), PQgetisnull(res, i, 3) ? NULL : PQgetvalue(res, i, 3),
						 PQgetvalue(res, i, 4), PQgetisnull(res, i, 5) ? NULL : PQgetvalue(res, i, 5),
						 PQgetvalue(res, i, 6)[0] == 't');
			added = true;
		}
		if (added || s->done)
			hub_resume_later(resumes, s);
	}
}

static void
end_streams_of_key(api_hub *hub, const char *api_key, const char *code, const char *message,
				   resume_list *resumes)
{
	for (api_stream *s = hub->streams; s; s = s->next)
		if (!s->done && !s->released && strcmp(s->api_key, api_key) == 0)
		{
			append_error_and_end(s, code, message);
			hub_resume_later(resumes, s);
		}
}

/*
 * One payflow.changes() per key for every stream still open. False when
 * the database could not be asked (the streams wait; the caller retries
 * soon rather than at the next poll).
 */
static bool
refresh(api_hub *hub)
{
	key_group  *groups;
	resume_list resumes = {0, 0, NULL};
	bool		reached = true;

	pthread_mutex_lock(&hub->lock);
	groups = collect_groups(hub);
	pthread_mutex_unlock(&hub->lock);

	for (key_group *g = groups; g; g = g->next)
	{
		char		after[32];
		const char *values[3] = {g->api_key, g->ids.data, after};
		PGresult   *res = NULL;
		pf_error	err;
		pf_result	r;

		snprintf(after, sizeof(after), "%lld", g->after_id);
		r = pf_pg_exec(hub->pg, CHANGES_SQL, 3, values, &res, &err);
		pf_pg_adopt_connection(hub->pg, &hub->backend_pid);
		pthread_mutex_lock(&hub->lock);
		if (r == PF_OK)
			dispatch_rows(hub, g, res, &resumes);
		else if (strncmp(err.code, "28", 2) == 0)
			end_streams_of_key(hub, g->api_key, "unauthorized", "invalid API key", &resumes);
		else if (r != PF_ERR_TRANSIENT)
		{
			pf_log_error(NULL, "events: payflow.changes failed: %s %s", err.code, err.message);
			end_streams_of_key(hub, g->api_key, "internal", "internal error", &resumes);
		}
		else
		{
			pf_log_warn(NULL, "events: database unavailable, streams wait: %s %s", err.code, err.message);
			reached = false;
		}
		pthread_mutex_unlock(&hub->lock);
		PQclear(res);
		if (!reached)
			break;				/* the next keys would wait as long */
	}
	free_groups(groups);
	hub_resume_all(&resumes);
	return reached;
}

/* A comment line now and then: proxies keep the connection, dead clients show. */
static void
keepalive(api_hub *hub)
{
	resume_list resumes = {0, 0, NULL};

	pthread_mutex_lock(&hub->lock);
	for (api_stream *s = hub->streams; s; s = s->next)
		if (!s->released && !s->done)
		{
			pf_buf_append_str(&s->out, ": keepalive\n\n");
			hub_resume_later(&resumes, s);
		}
	pthread_mutex_unlock(&hub->lock);
	hub_resume_all(&resumes);
}

/* Free the streams MHD is done with, and the slots of keys no stream has. */
static void
reap(api_hub *hub)
{
	pthread_mutex_lock(&hub->lock);
	for (api_stream **p = &hub->streams; *p;)
	{
		api_stream *s = *p;

		if (s->released)
		{
			*p = s->next;
			hub->n_streams--;
			s->key->refs--;
			hub_stream_free(s);
		}
		else
			p = &s->next;
	}
	for (key_slots **p = &hub->keys; *p;)
	{
		key_slots  *k = *p;

		if (k->refs == 0)
		{
			*p = k->next;
			free(k->api_key);
			free(k);
		}
		else
			p = &k->next;
	}
	pthread_mutex_unlock(&hub->lock);
}

/* The poll set: the hub's two descriptors, then one per suspended stream. */
typedef struct hangup_watch
{
	int			cap;
	struct pollfd *fds;
	api_stream **streams;		/* streams[i] is fds[HUB_FDS + i]'s */
} hangup_watch;

#define HUB_FDS 2

/*
 * Note the sockets of suspended streams; returns how many. Only the hub
 * resumes a stream (and frees one), so each stays suspended, its socket
 * open and its memory valid, until end_hung_up looks at it again (at
 * shutdown api_hub_close_streams resumes them too: then a stale event only
 * ends a stream that is ending anyway).
 */
static int
watch_hangups(api_hub *hub, hangup_watch *w)
{
	int			n = 0;

	pthread_mutex_lock(&hub->lock);
	if (w->cap < hub->n_streams + HUB_FDS)
	{
		w->cap = hub->n_streams + HUB_FDS + 64;
		w->fds = pf_realloc(w->fds, sizeof(*w->fds) * (size_t) w->cap);
		w->streams = pf_realloc(w->streams, sizeof(*w->streams) * (size_t) w->cap);
	}
	for (api_stream *s = hub->streams; s; s = s->next)
		if (s->suspended && !s->released && !s->done && s->fd != MHD_INVALID_SOCKET)
		{
			w->fds[HUB_FDS + n].fd = s->fd;
			w->fds[HUB_FDS + n].events = POLLRDHUP;
			w->fds[HUB_FDS + n].revents = 0;
			w->streams[n++] = s;
		}
	pthread_mutex_unlock(&hub->lock);
	return n;
}

/* Streams whose client hung up while they waited: end them, freeing their slots. */
static void
end_hung_up(api_hub *hub, hangup_watch *w, int n)
{
	resume_list resumes = {0, 0, NULL};

	pthread_mutex_lock(&hub->lock);
	for (int i = 0; i < n; i++)
	{
		api_stream *s = w->streams[i];

		if ((w->fds[HUB_FDS + i].revents & (POLLRDHUP | POLLHUP | POLLERR)) && s->suspended && !s->released)
		{
			s->done = true;
			hub_resume_later(&resumes, s);
		}
	}
	pthread_mutex_unlock(&hub->lock);
	hub_resume_all(&resumes);
}

/*
 * The hub's loop: wait for a wake-up (new or finished stream), a
 * notification, or the next poll; then ask the database for what changed.
 * A lost connection is reopened (and LISTEN re-issued, pg.c) by the next
 * query, tried every RECONNECT_MS while streams are open, so no NOTIFY is
 * missed for long and nothing at all is missed: changes() starts from each
 * stream's last id.
 */
static void *
hub_main(void *arg)
{
	api_hub    *hub = arg;
	api_context *ctx = hub->ctx;
	int64_t		next_poll = 0;
	int64_t		next_keepalive = pf_now_ms() + hub->keepalive_ms;
	bool		again = false;	/* a notification came in during a query */
	pf_error	err;
	hangup_watch watched = {0, NULL, NULL};
	struct pollfd *fds;

	if (pf_pg_listen(hub->pg, LISTEN_CHANNEL, &err) != PF_OK && !*ctx->stop)
		pf_log_warn(NULL, "events: LISTEN %s failed, polling until it works: %s", LISTEN_CHANNEL, err.message);
	pf_pg_adopt_connection(hub->pg, &hub->backend_pid);
	for (;;)
	{
		int			nfds = 0;
		int			n_watched;
		int64_t		now = pf_now_ms();
		int64_t		wake_at = next_poll < next_keepalive ? next_poll : next_keepalive;
		bool		due = again;
		bool		stopping;
		int			count = 0;

		pthread_mutex_lock(&hub->lock);
		stopping = hub->stopping;
		pthread_mutex_unlock(&hub->lock);
		if (stopping)
			break;

		n_watched = watch_hangups(hub, &watched);
		fds = watched.fds;
		fds[nfds].fd = hub->wake_fd;
		fds[nfds++].events = POLLIN;
		fds[nfds].fd = pf_pg_socket(hub->pg);
		fds[nfds++].events = POLLIN;
		if (fds[1].fd < 0 && now + RECONNECT_MS < wake_at)
			wake_at = now + RECONNECT_MS;	/* disconnected: retry soon */
		if (again)
			wake_at = now;
		again = false;
		/* a negative fd (no database connection) is skipped by poll() */
		if (poll(fds, (nfds_t) (nfds + n_watched), wake_at > now ? (int) (wake_at - now) : 0) < 0 && errno != EINTR)
			pf_log_warn(NULL, "events: poll failed: %s", strerror(errno));
		end_hung_up(hub, &watched, n_watched);
		if (fds[0].revents & POLLIN)
		{
			uint64_t	counter;
			ssize_t		r = read(hub->wake_fd, &counter, sizeof(counter));

			(void) r;
			due = true;			/* a new stream, or one released */
		}
		if (fds[1].fd >= 0 && (fds[1].revents & (POLLIN | POLLERR | POLLHUP)))
		{
			if (pf_pg_take_notifications(hub->pg, &count, &err) != PF_OK)
				pf_log_warn(NULL, "events: %s", err.message);
			if (count > 0)
				due = true;
		}
		now = pf_now_ms();
		if (now >= next_poll)
		{
			due = true;
			next_poll = now + ctx->cfg.poll_interval_ms;
		}
		if (pf_pg_socket(hub->pg) < 0)
			due = true;
		reap(hub);
		if (due && hub->n_streams > 0)
		{
			if (!refresh(hub) && next_poll > now + RECONNECT_MS)
				next_poll = now + RECONNECT_MS;

			/*
			 * libpq read any NOTIFY that arrived while the queries ran into
			 * its queue, off the socket: poll() would not see it. Look now,
			 * and query again at once if there was one.
			 */
			if (pf_pg_socket(hub->pg) >= 0 &&
				pf_pg_take_notifications(hub->pg, &count, &err) == PF_OK && count > 0)
				again = true;
		}
		if (now >= next_keepalive)
		{
			keepalive(hub);
			next_keepalive = now + hub->keepalive_ms;
		}
	}
	free(watched.fds);
	free(watched.streams);
	return NULL;
}

api_hub *
api_hub_start(api_context *ctx)
{
	api_hub    *hub = pf_calloc(1, sizeof(*hub));
	pf_pg_options opt = api_pg_options(&ctx->cfg, API_PROGNAME " events", ctx->stop);

	hub->ctx = ctx;
	pthread_mutex_init(&hub->lock, NULL);
	hub->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (hub->wake_fd < 0)
	{
		pf_log_error(NULL, "events: eventfd failed: %s", strerror(errno));
		exit(1);
	}
	hub->pg = pf_pg_create(ctx->cfg.database_url, &opt);
	hub->keepalive_ms = ctx->cfg.api_idle_timeout * 1000 / 2;
	if (hub->keepalive_ms > KEEPALIVE_MAX_MS)
		hub->keepalive_ms = KEEPALIVE_MAX_MS;
	if (pthread_create(&hub->thread, NULL, hub_main, hub) != 0)
	{
		pf_log_error(NULL, "events: cannot start the hub thread");
		exit(1);
	}
	return hub;
}

void
api_hub_close_streams(api_hub *hub)
{
	resume_list resumes = {0, 0, NULL};

	pthread_mutex_lock(&hub->lock);
	hub->stopping = true;
	for (api_stream *s = hub->streams; s; s = s->next)
		if (!s->released)
		{
			s->done = true;
			hub_resume_later(&resumes, s);
		}
	pthread_mutex_unlock(&hub->lock);
	hub_resume_all(&resumes);
	hub_wake(hub);
}

void
api_hub_stop(api_hub *hub)
{
	api_hub_close_streams(hub);
	pthread_join(hub->thread, NULL);
	reap(hub);
	pf_pg_destroy(hub->pg);
	close(hub->wake_fd);
	/* streams MHD still holds are freed with the daemon's responses */
}

int
api_hub_stream_count(api_hub *hub)
{
	int			n;

	pthread_mutex_lock(&hub->lock);
	n = hub->n_streams;
	pthread_mutex_unlock(&hub->lock);
	return n;
}
