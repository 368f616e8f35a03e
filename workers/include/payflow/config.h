/*
 * config.h
 *		Settings of the edge processes, read from environment variables (AWS's
 *		standard names and PAYFLOW_*, DESIGN §3) and optionally from the file
 *		named by PAYFLOW_CONFIG_FILE (lines NAME=value; the environment wins).
 *
 * Every setting is one row of a declarative table in config.c: name, type,
 * target member, the programs that require it, default, and whether it is
 * secret. A program states what it is (PF_PROGRAM_* bits); anything missing
 * or invalid stops start-up with one line naming the setting, e.g.
 *
 *		payflow-relay: invalid PAYFLOW_QUEUE_URLS: expected destination=url pairs
 *
 * Secret values are registered with the logger, which redacts them from
 * every line, and are never echoed in configuration errors.
 */
#ifndef PAYFLOW_CONFIG_H
#define PAYFLOW_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "payflow/log.h"
#include "payflow/payload_ref.h"

/* What a program is; settings say which of these require them. */
#define PF_PROGRAM_RELAY		0x01
#define PF_PROGRAM_WORKER		0x02	/* any worker role */
#define PF_PROGRAM_PAYMENT		0x04	/* payflow-worker --role payment */
#define PF_PROGRAM_POSTPROCESS	0x08	/* payflow-worker --role postprocess */
#define PF_PROGRAM_INVOICE		0x10	/* payflow-worker --role invoice */
#define PF_PROGRAM_API			0x20
#define PF_PROGRAM_WEBHOOK		0x40	/* payflow-worker --role webhook */
#define PF_PROGRAM_HTTP_STEP	0x80	/* payflow-worker --role http --step NAME */
#define PF_PROGRAM_SQL_STEP		0x100	/* payflow-worker --role sql --step NAME */
#define PF_PROGRAM_S3_SWEEP		0x200	/* payflow-s3-sweep */
#define PF_PROGRAM_ANY			0x3FF
/* Programs that call AWS (they need a region and credentials). */
#define PF_PROGRAM_USES_AWS		(PF_PROGRAM_RELAY | PF_PROGRAM_WORKER | PF_PROGRAM_S3_SWEEP)

typedef enum pf_legacy_mode
{
	PF_LEGACY_BLOCKING = 0,
	PF_LEGACY_SUBMIT_POLL = 1
} pf_legacy_mode;

typedef enum pf_s3_addressing
{
	PF_S3_ADDRESSING_AUTO = 0,	/* path-style when an endpoint is set */
	PF_S3_ADDRESSING_PATH = 1,
	PF_S3_ADDRESSING_VIRTUAL = 2
} pf_s3_addressing;

typedef struct pf_queue_route
{
	char	   *destination;	/* e.g. "payment-requests" */
	char	   *url;
} pf_queue_route;

typedef struct pf_queue_map
{
	int			count;
	pf_queue_route *routes;
} pf_queue_map;

typedef struct pf_config
{
	/* AWS standard variables */
	char	   *aws_region;
	char	   *aws_access_key_id;
	char	   *aws_secret_access_key;
	char	   *aws_session_token;
	char	   *aws_container_credentials_relative_uri;
	char	   *aws_container_credentials_full_uri;
	char	   *aws_container_authorization_token;
	char	   *aws_container_authorization_token_file;
	char	   *aws_endpoint_url;
	char	   *aws_endpoint_url_sqs;
	char	   *aws_endpoint_url_s3;
	int			aws_max_attempts;

	/* payflow */
	char	   *database_url;
	pf_queue_map queue_urls;
	char	   *queue_url;
	int			concurrency;
	int			visibility_timeout;
	int			drain_seconds;
	char	   *worker_id;
	int			store;			/* pf_store_kind */
	char	   *s3_bucket;
	int			s3_addressing;	/* pf_s3_addressing */
	char	   *legacy_odbc;
	int			legacy_mode;	/* pf_legacy_mode */
	char	   *legacy_call;
	char	   *legacy_submit;
	char	   *legacy_status;
	char	   *legacy_lookup;
	int			legacy_timeout;
	int			legacy_connect_timeout;
	int			legacy_connects_at_once;	/* logins in progress per process */
	char	   *metrics_listen; /* payflow-worker's /metrics; NULL: off */
	int			legacy_poll_interval_ms;
	char	   *legacy_done_statuses;
	char	   *legacy_failed_statuses;
	char	   *legacy_retryable_sqlstates;
	char	   *legacy_permanent_sqlstates;
	char	   *postprocess_function;
	char	   *postprocess_url;
	char	   *invoice_url;
	char	   *step_url;		/* --role http */
	char	   *step_function;	/* --role sql */
	char	   *listen;
	/* payflow-api: its pool of PostgreSQL connections, HTTP limits, time-outs */
	int			api_pool_size;
	int			api_pool_wait_ms;	/* longest wait for a connection, then 503 */
	int			api_threads;	/* HTTP threads */
	int			api_max_body;	/* bytes; a larger request gets 413 */
	int			api_s3_threshold;	/* bytes of details above which they go to S3 */
	int			api_max_header_bytes;
	int			api_statement_timeout_ms;
	int			api_idle_timeout;	/* seconds without traffic on a connection */
	int			api_retry_after;	/* seconds, the Retry-After sent */
	int			api_max_streams;	/* concurrent event streams */
	int			api_max_streams_per_key;	/* event streams one API key may hold */
	int			api_max_connections;	/* HTTP connections, streams included */
	int			api_max_connections_per_address;	/* from one client address; 0: no limit */
	int			api_header_timeout; /* seconds to send a request's head */
	int			log_level;		/* pf_log_level */
	int			relay_in_flight;
	int			relay_lease_seconds;
	int			db_connections;
	int			poll_interval_ms;
	int			sqs_batch_wait_ms;	/* longest wait of a partial SQS batch to fill */
	int			sqs_delete_wait_ms; /* the same for a worker's deletes */
	int			http_connect_timeout_ms;
	int			http_timeout_ms;
	int			invoice_timeout_ms;
	int			invoice_tls_verify; /* 0 false, 1 true */
	int			postprocess_timeout_ms;
	int			postprocess_tls_verify;
	int			step_timeout_ms;
	int			step_tls_verify;
	int			webhook_max_attempts;
	int			webhook_timeout_ms;
	int			webhook_backoff_base_s;
	int			webhook_backoff_max_s;
	int			webhook_allow_http; /* 0 false, 1 true: http:// to loopback URLs */
	char	   *invoice_authorization;	/* Authorization header value, a secret */
	char	   *postprocess_authorization;
	char	   *step_authorization;
	int			raw_error_text; /* 1: downstream error texts kept, masked */
	int			hand_over_uncancelled;	/* 1: a call deaf to its cancel loses its lease */
	char	   *ecs_agent_uri;	/* set by ECS in every task: task scale-in protection */
	int			protection_minutes; /* ExpiresInMinutes of each protection */
	int			protection_idle_seconds;	/* released once nothing was held this long */
	int			protection_renew_seconds;	/* renewed when less than this is left */
	int			s3_orphan_grace;	/* seconds: younger unkept objects stay */
	int			s3_sweep_interval;	/* seconds from one sweep's start to the next */
	int			s3_sweep_page;	/* keys per listing page */
} pf_config;

/*
 * Load every setting. programs is a set of PF_PROGRAM_* bits. On failure
 * returns false and writes one line into error ("invalid NAME: why" or
 * "missing NAME"); cfg then holds nothing to free.
 */
bool		pf_config_load(pf_config *cfg, unsigned programs, char *error, size_t error_len);

/*
 * pf_config_load for a program's main(): on failure prints
 * "<progname>: <error>" to stderr and exits with status 2. Also sets the log
 * level and registers secrets with the logger.
 */
void		pf_config_load_or_exit(pf_config *cfg, const char *progname, unsigned programs);

/* One warning line per PAYFLOW_* variable that is no setting (a typo?) */
void		pf_config_warn_unknown_variables(void);

void		pf_config_free(pf_config *cfg);

/*
 * --print-settings: the rows of the settings table that a program (programs:
 * its PF_PROGRAM_* bits; role: the worker's --role, or NULL) reads, as JSON
 * lines (the format is described in config_print.c and the README). Prints
 * the table only, never a value.
 */
void		pf_config_print_settings(FILE *out, const char *program, const char *role, unsigned programs);

/* The same, with more members for the first line (head_extra, consumed; may be NULL). */
void		pf_config_print_settings_with(FILE *out, const char *program, const char *role, unsigned programs,
										  json_t *head_extra);

/* The effective settings for a start-up log line; secrets show as "[redacted]". */
json_t	   *pf_config_to_json(const pf_config *cfg);

/* Parse "destination=url,destination=url". */
bool		pf_queue_map_parse(const char *text, pf_queue_map *map, char *why, size_t why_len);
const char *pf_queue_map_find(const pf_queue_map *map, const char *destination);
void		pf_queue_map_free(pf_queue_map *map);

#endif							/* PAYFLOW_CONFIG_H */
