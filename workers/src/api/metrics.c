/*
 * metrics.c
 *		The process's own request counters and latency histogram, and the
 *		Prometheus text of /metrics.
 *
 * Counters live in one table under one mutex: a request takes it once, at
 * completion, which costs far less than the statement it ran.
 */
#include "api.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define MAX_STATUSES 16

static const double bucket_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
#define N_BUCKETS (sizeof(bucket_bounds) / sizeof(bucket_bounds[0]))

typedef struct route_stats
{
	int			n_statuses;
	unsigned	statuses[MAX_STATUSES];
	unsigned long long counts[MAX_STATUSES];
	unsigned long long buckets[N_BUCKETS];	/* not cumulative; summed when shown */
	unsigned long long observations;
	double		seconds_sum;
} route_stats;

static struct
{
	pthread_mutex_t lock;
	route_stats routes[ROUTE_COUNT];
}			metrics = {PTHREAD_MUTEX_INITIALIZER, {{0}}};

static const char *const route_names[ROUTE_COUNT] = {
	"/payments", "/operations/{id}", "/operations/{id}/events", "/metrics", "/healthz", "/readyz", "/admin/\u2026",
	"/console/\u2026", "other"
};

const char *
api_route_name(api_route route)
{
	return route < ROUTE_COUNT ? route_names[route] : "other";
}

void
api_metrics_init(void)
{
	pthread_mutex_lock(&metrics.lock);
	memset(metrics.routes, 0, sizeof(metrics.routes));
	pthread_mutex_unlock(&metrics.lock);
}

void
api_metrics_record(api_route route, unsigned status, double seconds)
{
	route_stats *rs;
	int			i;

	if (route >= ROUTE_COUNT)
		route = ROUTE_OTHER;
	pthread_mutex_lock(&metrics.lock);
	rs = &metrics.routes[route];
	for (i = 0; i < rs->n_statuses; i++)
		if (rs->statuses[i] == status)
			break;
	if (i == rs->n_statuses && rs->n_statuses < MAX_STATUSES)
		rs->statuses[rs->n_statuses++] = status;
	if (i < MAX_STATUSES)
		rs->counts[i]++;
	for (size_t b = 0; b < N_BUCKETS; b++)
		if (seconds <= bucket_bounds[b])
		{
			rs->buckets[b]++;
			break;
		}
	rs->observations++;
	rs->seconds_sum += seconds;
	pthread_mutex_unlock(&metrics.lock);
}

void
api_metrics_render(pf_buf *out)
{
	pthread_mutex_lock(&metrics.lock);
	pf_buf_append_str(out, "# HELP payflow_api_requests_total HTTP requests answered, by route and status.\n"
					  "# TYPE payflow_api_requests_total counter\n");
	for (int r = 0; r < ROUTE_COUNT; r++)
		for (int i = 0; i < metrics.routes[r].n_statuses; i++)
			pf_buf_appendf(out, "payflow_api_requests_total{route=\"%s\",status=\"%u\"} %llu\n",
						   route_names[r], metrics.routes[r].statuses[i], metrics.routes[r].counts[i]);
	pf_buf_append_str(out, "# HELP payflow_api_request_duration_seconds Time from a request's arrival to its answer being queued.\n"
					  "# TYPE payflow_api_request_duration_seconds histogram\n");
	for (int r = 0; r < ROUTE_COUNT; r++)
	{
		const route_stats *rs = &metrics.routes[r];
		unsigned long long cumulative = 0;

		if (rs->observations == 0)
			continue;
		for (size_t b = 0; b < N_BUCKETS; b++)
		{
			cumulative += rs->buckets[b];
			pf_buf_appendf(out, "payflow_api_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"} %llu\n",
						   route_names[r], bucket_bounds[b], cumulative);
		}
		pf_buf_appendf(out, "payflow_api_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %llu\n",
					   route_names[r], rs->observations);
		pf_buf_appendf(out, "payflow_api_request_duration_seconds_sum{route=\"%s\"} %.6f\n",
					   route_names[r], rs->seconds_sum);
		pf_buf_appendf(out, "payflow_api_request_duration_seconds_count{route=\"%s\"} %llu\n",
					   route_names[r], rs->observations);
	}
	pthread_mutex_unlock(&metrics.lock);
	pf_tracer_render_metrics(out);
}

/* A Prometheus metric name part: [a-zA-Z0-9_], camelCase to snake_case. */
static void
append_name_part(pf_buf *name, const char *part)
{
	for (const char *p = part; *p; p++)
	{
		char		c = *p;

		if (c >= 'A' && c <= 'Z')
		{
			if (p != part)
				pf_buf_append_char(name, '_');
			pf_buf_append_char(name, (char) (c - 'A' + 'a'));
		}
		else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))
			pf_buf_append_char(name, c);
		else
			pf_buf_append_char(name, '_');
	}
}

/*
 * {"operations":{"PENDING":{"count":3}}} becomes
 * payflow_operations_count{key="PENDING"} 3: objects whose keys are data
 * (statuses, step names) turn into a label, fixed keys into the name.
 */
typedef struct sample
{
	char	   *line;
	int			seq;			/* keeps the document's order within a name */
} sample;

typedef struct sample_list
{
	int			n;
	int			cap;
	sample	   *items;
} sample_list;

static void
add_sample(sample_list *list, pf_buf *line)
{
	if (list->n == list->cap)
	{
		list->cap = list->cap ? 2 * list->cap : 32;
		list->items = pf_realloc(list->items, sizeof(sample) * (size_t) list->cap);
	}
	list->items[list->n].line = pf_buf_steal(line);
	list->items[list->n].seq = list->n;
	list->n++;
}

static void
flatten(json_t *value, pf_buf *name, const char *label, sample_list *out)
{
	if (json_is_object(value))
	{
		const char *key;
		json_t	   *member;
		size_t		mark = name->len;

		json_object_foreach(value, key, member)
		{
			/* upper-case or spaced keys are data: statuses, step names */
			bool		is_data = key[0] >= 'A' && key[0] <= 'Z';

			name->len = mark;
			name->data[mark] = '\0';
			if (is_data && label == NULL)
				flatten(member, name, key, out);
			else
			{
				pf_buf_append_char(name, '_');
				append_name_part(name, key);
				flatten(member, name, label, out);
			}
		}
		name->len = mark;
		name->data[mark] = '\0';
		return;
	}
	if (json_is_number(value) || json_is_boolean(value))
	{
		double		v = json_is_boolean(value) ? (json_is_true(value) ? 1 : 0) : json_number_value(value);
		pf_buf		line = PF_BUF_INIT;

		if (label)
		{
			json_t	   *escaped = json_string(label);
			char	   *quoted = json_dumps(escaped, JSON_ENCODE_ANY);

			pf_buf_appendf(&line, "%s{key=%s} %.15g\n", pf_buf_str(name), quoted, v);
			free(quoted);
			json_decref(escaped);
		}
		else
			pf_buf_appendf(&line, "%s %.15g\n", pf_buf_str(name), v);
		add_sample(out, &line);
	}
	/* strings, nulls and arrays carry no gauge */
}

/* Prometheus wants the samples of one name together: sort by name, keep order within. */
static int
compare_samples(const void *a, const void *b)
{
	const sample *sa = a;
	const sample *sb = b;
	const char *x = sa->line;
	const char *y = sb->line;
	size_t		nx = strcspn(x, "{ ");
	size_t		ny = strcspn(y, "{ ");
	int			c = strncmp(x, y, nx < ny ? nx : ny);

	if (c != 0)
		return c;
	if (nx != ny)
		return nx < ny ? -1 : 1;
	return sa->seq - sb->seq;
}

void
api_metrics_render_db(const char *json_text, pf_buf *out)
{
	json_t	   *doc = json_loads(json_text, 0, NULL);
	pf_buf		name = PF_BUF_INIT;
	sample_list samples = {0, 0, NULL};

	pf_buf_append_str(&name, "payflow");
	if (doc)
		flatten(doc, &name, NULL, &samples);
	json_decref(doc);
	pf_buf_free(&name);
	qsort(samples.items, (size_t) samples.n, sizeof(sample), compare_samples);
	for (int i = 0; i < samples.n; i++)
	{
		pf_buf_append_str(out, samples.items[i].line);
		free(samples.items[i].line);
	}
	free(samples.items);
}
