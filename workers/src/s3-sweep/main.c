/*
 * main.c
 *		payflow-s3-sweep: deletes the S3 objects no operation keeps.
 *
 *		PAYFLOW_DATABASE_URL=... PAYFLOW_S3_BUCKET=... payflow-s3-sweep [--once]
 *
 * Every PAYFLOW_S3_SWEEP_INTERVAL seconds (or once, with --once) a pass
 * lists the two prefixes payflow writes, payments/ (the workers' payloads,
 * payments/<operation id>/…) and requests/ (the HTTP edge's uploads), a page
 * of PAYFLOW_S3_SWEEP_PAGE keys at a time; asks the database which keys of
 * the page no operation keeps (payflow.s3_unretained_keys); and deletes
 * those with one DeleteObjects call: at once the objects of operations
 * whose payloads were purged, and the others (operations purged entirely,
 * uploads whose submit never committed) once older than
 * PAYFLOW_S3_ORPHAN_GRACE, so that an upload whose submit is still
 * committing stays.  Keys of any other shape are never deleted.
 *
 * Nothing is remembered between passes: the bucket and the database say
 * what is left, deletes are idempotent, so a process killed half-way
 * leaves the rest to the next pass (or the next process).  Several
 * sweepers may run; they do the same work twice, nothing worse.
 *
 * Its own program, not a task of a worker role: its S3 rights are list and
 * delete and no read (it never sees card data), its database rights that
 * one function (payflow_s3_sweeper), and a worker holding messages keeps
 * no task busy for it.
 *
 * SIGTERM or SIGINT: the page in hand is finished, then exit 0.  Exit 1
 * when a --once pass failed, 2 on bad settings.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "payflow/aws_client.h"
#include "payflow/aws_credentials.h"
#include "payflow/buf.h"
#include "payflow/clock.h"
#include "payflow/config.h"
#include "payflow/log.h"
#include "payflow/pg.h"
#include "payflow/s3.h"
#include "payflow/stop_signals.h"

#define PROGNAME "payflow-s3-sweep"
/* after a failed pass, the next one starts this soon at most */
#define RETRY_AFTER_MS 60000

static const char *const prefixes[] = {"payments/", "requests/"};

static const char UNRETAINED_SQL[] =
"SELECT object_key, reason FROM payflow.s3_unretained_keys($1::text[])";

typedef struct sweep
{
	pf_config	cfg;
	pf_pg	   *pg;
	pf_aws_credentials_provider *credentials;
	pf_aws_client *aws;
	pf_s3	   *s3;
	int			signal_fd;
	bool		stop;
	/* this pass */
	long		listed;
	long		deleted_purged;
	long		deleted_orphans;
	long		kept_young;
	long		failed;
} sweep;

static void
take_signals(sweep *sw)
{
	while (pf_stop_signals_take(sw->signal_fd) != 0)
		sw->stop = true;
}

/* The listing's keys as a text[] literal. */
static char *
array_literal(const pf_s3_listing *page)
{
	pf_buf		a = PF_BUF_INIT;

	pf_buf_append_char(&a, '{');
	for (int i = 0; i < page->n; i++)
	{
		if (i)
			pf_buf_append_char(&a, ',');
		pf_buf_append_char(&a, '"');
		for (const char *c = page->keys[i]; *c; c++)
		{
			if (*c == '"' || *c == '\\')
				pf_buf_append_char(&a, '\\');
			pf_buf_append_char(&a, *c);
		}
		pf_buf_append_char(&a, '"');
	}
	pf_buf_append_char(&a, '}');
	return pf_buf_steal(&a);
}

/* The listing's index of key, or -1 (keys come back in listing order). */
static int
find_key(const pf_s3_listing *page, const char *key, int from)
{
	for (int i = from; i < page->n; i++)
		if (strcmp(page->keys[i], key) == 0)
			return i;
	for (int i = 0; i < from && i < page->n; i++)
		if (strcmp(page->keys[i], key) == 0)
			return i;
	return -1;
}

/*
 * One page: ask the database, delete what it no longer keeps (the orphans
 * once older than the grace).
 */
static pf_result
sweep_page(sweep *sw, const pf_s3_listing *page, pf_error *err)
{
	char	   *keys = array_literal(page);
	const char *values[1] = {keys};
	PGresult   *res = NULL;
	pf_result	r;
	const char **doomed;
	int			n_doomed = 0;
	int			n_purged = 0;
	int			at = 0;
	int64_t		young_after = pf_wall_seconds() - sw->cfg.s3_orphan_grace;

	r = pf_pg_exec(sw->pg, UNRETAINED_SQL, 1, values, &res, err);
	free(keys);
	if (r != PF_OK)
		return r;
	doomed = pf_calloc(PQntuples(res) + 1, sizeof(char *));
	for (int row = 0; row < PQntuples(res); row++)
	{
		const char *key = PQgetvalue(res, row, 0);
		bool		purged = strcmp(PQgetvalue(res, row, 1), "payloads_purged") == 0;
		int			i = find_key(page, key, at);

		if (i < 0)
			continue;
		at = i + 1;
		/* an unreadable LastModified (0) counts as young: never deleted on a guess */
		if (!purged && (page->last_modified[i] == 0 || page->last_modified[i] > young_after))
		{
			sw->kept_young++;
			continue;
		}
		doomed[n_doomed++] = page->keys[i];
		n_purged += purged;
	}
	if (n_doomed > 0)
	{
		int			n_failed = 0;

		r = pf_s3_delete_objects(sw->s3, sw->cfg.s3_bucket, doomed, n_doomed, &n_failed, err);
		if (r == PF_OK)
		{
			/* refused keys are counted once, and tried again by the next pass */
			sw->failed += n_failed;
			sw->deleted_purged += n_purged;
			sw->deleted_orphans += n_doomed - n_purged;
			if (n_failed > 0)
				pf_log_warn(NULL, "S3 refused to delete %d of %d object(s): %s %s", n_failed, n_doomed,
							err->code, err->message);
			else
				pf_log_debug(NULL, "deleted %d object(s)", n_doomed);
		}
	}
	free(doomed);
	PQclear(res);
	return r;
}

static json_t *
pass_json(const sweep *sw, int64_t started_ms)
{
	return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}",
					 "listed", (json_int_t) sw->listed,
					 "deletedPurged", (json_int_t) sw->deleted_purged,
					 "deletedOrphans", (json_int_t) sw->deleted_orphans,
					 "keptYoung", (json_int_t) sw->kept_young,
					 "refused", (json_int_t) sw->failed,
					 "ms", (json_int_t) (pf_now_ms() - started_ms));
}

/* One pass over both prefixes; stops early (PF_OK) on a signal. */
static pf_result
sweep_pass(sweep *sw, pf_error *err)
{
	pf_s3_listing page;
	pf_result	r = PF_OK;
	int64_t		started = pf_now_ms();

	memset(&page, 0, sizeof(page));
	sw->listed = sw->deleted_purged = sw->deleted_orphans = sw->kept_young = sw->failed = 0;
	for (size_t p = 0; p < sizeof(prefixes) / sizeof(prefixes[0]) && r == PF_OK && !sw->stop; p++)
	{
		char	   *token = NULL;

		do
		{
			r = pf_s3_list_objects(sw->s3, sw->cfg.s3_bucket, prefixes[p], token, sw->cfg.s3_sweep_page,
								   &page, err);
			free(token);
			token = NULL;
			if (r != PF_OK)
				break;
			sw->listed += page.n;
			if (page.n > 0)
				r = sweep_page(sw, &page, err);
			token = page.next_token;
			page.next_token = NULL;
			take_signals(sw);
		} while (r == PF_OK && token != NULL && !sw->stop);
		free(token);
	}
	pf_s3_listing_free(&page);
	if (r == PF_OK)
		pf_log_write(PF_LOG_INFO, NULL, pass_json(sw, started), sw->stop ? "pass stopped by a signal" : "pass done");
	else
		pf_log_write(PF_LOG_ERROR, NULL, pass_json(sw, started), "pass failed: %s %s", err->code, err->message);
	return r;
}

static void
usage(FILE *out)
{
	fprintf(out,
			"usage: " PROGNAME " [--once]\n"
			"Deletes the S3 objects under payments/ and requests/ that no payflow operation keeps:\n"
			"those of operations whose payloads were purged at once, the others (operations purged\n"
			"entirely, uploads whose submit never committed) once older than PAYFLOW_S3_ORPHAN_GRACE.\n"
			"A pass every PAYFLOW_S3_SWEEP_INTERVAL seconds; --once: one pass, then exit (0, or 1 if it failed).\n"
			"Settings come from the environment: PAYFLOW_DATABASE_URL, PAYFLOW_S3_BUCKET,\n"
			"  PAYFLOW_S3_ORPHAN_GRACE, PAYFLOW_S3_SWEEP_INTERVAL, PAYFLOW_S3_SWEEP_PAGE,\n"
			"  PAYFLOW_S3_ADDRESSING, PAYFLOW_LOG_LEVEL, AWS_*.\n"
			"--print-settings prints every setting it reads as JSON lines, without starting.\n");
}

int
main(int argc, char **argv)
{
	sweep		sw;
	pf_pg_options pg_options;
	pf_error	err;
	bool		once = false;
	int			status = 0;

	if (argc == 2 && strcmp(argv[1], "--print-settings") == 0)
	{
		pf_config_print_settings(stdout, PROGNAME, NULL, PF_PROGRAM_S3_SWEEP);
		return 0;
	}
	if (argc == 2 && strcmp(argv[1], "--once") == 0)
		once = true;
	else if (argc > 1)
	{
		bool		help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;

		usage(help ? stdout : stderr);
		return help ? 0 : 2;
	}
	memset(&sw, 0, sizeof(sw));
	sw.signal_fd = pf_stop_signals_block();
	if (sw.signal_fd < 0)
	{
		perror(PROGNAME ": signalfd");
		return 1;
	}
	pf_config_load_or_exit(&sw.cfg, PROGNAME, PF_PROGRAM_S3_SWEEP);
	pf_log_write(PF_LOG_INFO, NULL, pf_config_to_json(&sw.cfg), "starting");
	pf_config_warn_unknown_variables();

	sw.credentials = pf_aws_credentials_provider_create(&sw.cfg, &err);
	if (sw.credentials == NULL)
	{
		pf_log_error(NULL, "no AWS credentials: %s", err.message);
		pf_config_free(&sw.cfg);
		return 2;
	}
	sw.aws = pf_aws_client_create(&sw.cfg, sw.credentials);
	sw.s3 = pf_s3_create(sw.aws, &sw.cfg);

	memset(&pg_options, 0, sizeof(pg_options));
	pg_options.application_name = PROGNAME;
	pg_options.statement_timeout_ms = 15000;
	sw.pg = pf_pg_create(sw.cfg.database_url, &pg_options);
	pf_pg_watch_stop_signals(sw.pg, sw.signal_fd);

	for (;;)
	{
		int64_t		next = pf_now_ms() + (int64_t) sw.cfg.s3_sweep_interval * 1000;
		pf_result	r = sweep_pass(&sw, &err);

		/* a signal also cuts a database retry short: that pass ends by the signal, not by a failure */
		take_signals(&sw);
		if (once || sw.stop)
		{
			status = r == PF_OK || sw.stop ? 0 : 1;
			break;
		}
		if (r != PF_OK && next > pf_now_ms() + RETRY_AFTER_MS)
			next = pf_now_ms() + RETRY_AFTER_MS;
		while (!sw.stop && pf_now_ms() < next)
		{
			int64_t		left = next - pf_now_ms();

			if (pf_stop_signals_wait(sw.signal_fd, (int) (left > 1000 ? 1000 : left)) != 0)
				sw.stop = true;
		}
		if (sw.stop)
			break;
	}
	pf_log_info(NULL, "stopped");

	pf_pg_destroy(sw.pg);
	pf_s3_destroy(sw.s3);
	pf_aws_client_destroy(sw.aws);
	pf_aws_credentials_provider_destroy(sw.credentials);
	pf_config_free(&sw.cfg);
	return status;
}
