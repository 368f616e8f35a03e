/*
 * config_table.c
 *		Every setting of every edge program, as one declarative table (the
 *		pgbouncer way): name, type, target member, the programs that read it
 *		and those that require it, default, whether it is secret, and the
 *		type's limits. --print-settings prints it; the deploy checks read
 *		that output, not this file.
 */
#include "config_table.h"

#include <string.h>

#define AT(member) offsetof(pf_config, member)
#define RELAY PF_PROGRAM_RELAY
#define WORKER PF_PROGRAM_WORKER	/* every role */
#define API PF_PROGRAM_API
#define PAYMENT PF_PROGRAM_PAYMENT
#define POSTPROCESS PF_PROGRAM_POSTPROCESS
#define INVOICE PF_PROGRAM_INVOICE
#define WEBHOOK PF_PROGRAM_WEBHOOK
#define HTTP_STEP PF_PROGRAM_HTTP_STEP
#define SQL_STEP PF_PROGRAM_SQL_STEP
#define S3_SWEEP PF_PROGRAM_S3_SWEEP
#define ANY PF_PROGRAM_ANY
/* the AWS clients: SQS in the relay and the workers, S3 in the workers, the api and the sweeper */
#define AWS (RELAY | WORKER | API | S3_SWEEP)
#define NONE 0

/*
 * Requirements that depend on other settings (a bucket for the s3 store, one
 * of the two post-processing hooks, AWS credentials) are checked after the
 * table, in config_rules.c.
 */
const pf_setting pf_settings[] = {
	/* name, type, target, read by, required by, default, secret, choices, min, max, alias */
	{"AWS_REGION", T_STRING, AT(aws_region), AWS, NONE, NULL, false, NULL, 0, 0, "AWS_DEFAULT_REGION"},
	{"AWS_ACCESS_KEY_ID", T_STRING, AT(aws_access_key_id), AWS, NONE, NULL, false, NULL, 0, 0, NULL},
	{"AWS_SECRET_ACCESS_KEY", T_STRING, AT(aws_secret_access_key), AWS, NONE, NULL, true, NULL, 0, 0, NULL},
	{"AWS_SESSION_TOKEN", T_STRING, AT(aws_session_token), AWS, NONE, NULL, true, NULL, 0, 0, NULL},
	{"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", T_STRING, AT(aws_container_credentials_relative_uri), AWS, NONE, NULL, false, NULL, 0, 0, NULL},
	{"AWS_CONTAINER_CREDENTIALS_FULL_URI", T_URL, AT(aws_container_credentials_full_uri), AWS, NONE, NULL, false, NULL, 0, 0, NULL},
	{"AWS_CONTAINER_AUTHORIZATION_TOKEN", T_STRING, AT(aws_container_authorization_token), AWS, NONE, NULL, true, NULL, 0, 0, NULL},
	{"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", T_STRING, AT(aws_container_authorization_token_file), AWS, NONE, NULL, false, NULL, 0, 0, NULL},
	{"AWS_ENDPOINT_URL", T_URL, AT(aws_endpoint_url), AWS, NONE, NULL, false, NULL, 0, 0, NULL},
	{"AWS_ENDPOINT_URL_SQS", T_URL, AT(aws_endpoint_url_sqs), RELAY | WORKER, NONE, NULL, false, NULL, 0, 0, NULL},
	{"AWS_ENDPOINT_URL_S3", T_URL, AT(aws_endpoint_url_s3), WORKER | API | S3_SWEEP, NONE, NULL, false, NULL, 0, 0, NULL},
	{"AWS_MAX_ATTEMPTS", T_INT, AT(aws_max_attempts), AWS, NONE, "5", false, NULL, 1, 20, NULL},

	{"PAYFLOW_DATABASE_URL", T_CONNINFO, AT(database_url), ANY, PF_PROGRAM_ANY, NULL, true, NULL, 0, 0, NULL},
	{"PAYFLOW_QUEUE_URLS", T_QUEUE_MAP, AT(queue_urls), RELAY, RELAY, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_QUEUE_URL", T_URL, AT(queue_url), WORKER, WORKER, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_CONCURRENCY", T_INT, AT(concurrency), WORKER, NONE, "8", false, NULL, 1, 4000, NULL},
	/* as low as 2 s so tests of redelivery and takeover run in seconds */
	{"PAYFLOW_VISIBILITY_TIMEOUT", T_INT, AT(visibility_timeout), WORKER, NONE, "120", false, NULL, 2, 43200, NULL},
	{"PAYFLOW_DRAIN_SECONDS", T_INT, AT(drain_seconds), ANY, NONE, "30", false, NULL, 0, 3600, NULL},
	{"PAYFLOW_WORKER_ID", T_STRING, AT(worker_id), RELAY | WORKER, NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_STORE", T_ENUM, AT(store), WORKER | API, NONE, "pg", false, "pg|s3", 0, 0, NULL},
	{"PAYFLOW_S3_BUCKET", T_STRING, AT(s3_bucket), WORKER | API | S3_SWEEP, S3_SWEEP, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_S3_ADDRESSING", T_ENUM, AT(s3_addressing), WORKER | API | S3_SWEEP, NONE, "auto", false, "auto|path|virtual", 0, 0, NULL},
	{"PAYFLOW_LEGACY_ODBC", T_STRING, AT(legacy_odbc), PAYMENT, PF_PROGRAM_PAYMENT, NULL, true, NULL, 0, 0, NULL},
	{"PAYFLOW_LEGACY_MODE", T_ENUM, AT(legacy_mode), PAYMENT, NONE, "blocking", false, "blocking|submit-poll", 0, 0, NULL},
	{"PAYFLOW_LEGACY_CALL", T_STRING, AT(legacy_call), PAYMENT, NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_LEGACY_SUBMIT", T_STRING, AT(legacy_submit), PAYMENT, NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_LEGACY_STATUS", T_STRING, AT(legacy_status), PAYMENT, NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_LEGACY_LOOKUP", T_STRING, AT(legacy_lookup), PAYMENT, NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_LEGACY_TIMEOUT", T_INT, AT(legacy_timeout), PAYMENT, NONE, "1800", false, NULL, 1, 86400, NULL},
	{"PAYFLOW_LEGACY_CONNECT_TIMEOUT", T_INT, AT(legacy_connect_timeout), PAYMENT, NONE, "10", false, NULL, 1, 300, NULL},
	{"PAYFLOW_LEGACY_CONNECTS_AT_ONCE", T_INT, AT(legacy_connects_at_once), PAYMENT, NONE, "8", false, NULL, 1, 10000, NULL},
	{"PAYFLOW_LEGACY_POLL_INTERVAL_MS", T_INT, AT(legacy_poll_interval_ms), PAYMENT, NONE, "2000", false, NULL, 50, 3600000, NULL},
	{"PAYFLOW_LEGACY_DONE_STATUSES", T_STRING, AT(legacy_done_statuses), PAYMENT, NONE, "done,succeeded,success,completed,charged,ok", false, NULL, 0, 0, NULL},
	{"PAYFLOW_LEGACY_FAILED_STATUSES", T_STRING, AT(legacy_failed_statuses), PAYMENT, NONE, "failed,failure,error,rejected,declined,cancelled,canceled", false, NULL, 0, 0, NULL},
	{"PAYFLOW_LEGACY_RETRYABLE_SQLSTATES", T_STRING, AT(legacy_retryable_sqlstates), PAYMENT, NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_LEGACY_PERMANENT_SQLSTATES", T_STRING, AT(legacy_permanent_sqlstates), PAYMENT, NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_POSTPROCESS_FUNCTION", T_STRING, AT(postprocess_function), POSTPROCESS, NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_POSTPROCESS_URL", T_URL, AT(postprocess_url), POSTPROCESS, NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_INVOICE_URL", T_URL, AT(invoice_url), INVOICE, PF_PROGRAM_INVOICE, NULL, false, NULL, 0, 0, NULL},
	/* the generic step roles: where --role http POSTs, what --role sql runs */
	{"PAYFLOW_STEP_URL", T_URL, AT(step_url), HTTP_STEP, HTTP_STEP, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_STEP_FUNCTION", T_STRING, AT(step_function), SQL_STEP, SQL_STEP, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_LISTEN", T_HOST_PORT, AT(listen), API, NONE, "127.0.0.1:8080", false, NULL, 0, 0, NULL},
	{"PAYFLOW_METRICS_LISTEN", T_HOST_PORT, AT(metrics_listen), WORKER, NONE, NULL, false, NULL, 0, 0, NULL},
	/* payflow-api: pool, HTTP limits and time-outs */
	{"PAYFLOW_API_POOL_SIZE", T_INT, AT(api_pool_size), API, NONE, "8", false, NULL, 1, 500, NULL},
	{"PAYFLOW_API_POOL_WAIT_MS", T_INT, AT(api_pool_wait_ms), API, NONE, "2000", false, NULL, 1, 600000, NULL},
	{"PAYFLOW_API_THREADS", T_INT, AT(api_threads), API, NONE, "8", false, NULL, 1, 256, NULL},
	{"PAYFLOW_API_MAX_BODY", T_INT, AT(api_max_body), API, NONE, "1048576", false, NULL, 256, 268435456, NULL},
	{"PAYFLOW_API_S3_THRESHOLD", T_INT, AT(api_s3_threshold), API, NONE, "262144", false, NULL, 0, 268435456, NULL},
	{"PAYFLOW_API_MAX_HEADER_BYTES", T_INT, AT(api_max_header_bytes), API, NONE, "16384", false, NULL, 1024, 1048576, NULL},
	{"PAYFLOW_API_STATEMENT_TIMEOUT_MS", T_INT, AT(api_statement_timeout_ms), API, NONE, "5000", false, NULL, 10, 3600000, NULL},
	{"PAYFLOW_API_IDLE_TIMEOUT", T_INT, AT(api_idle_timeout), API, NONE, "30", false, NULL, 1, 3600, NULL},
	{"PAYFLOW_API_RETRY_AFTER", T_INT, AT(api_retry_after), API, NONE, "1", false, NULL, 1, 3600, NULL},
	{"PAYFLOW_API_MAX_STREAMS", T_INT, AT(api_max_streams), API, NONE, "1000", false, NULL, 1, 100000, NULL},
	{"PAYFLOW_API_MAX_STREAMS_PER_KEY", T_INT, AT(api_max_streams_per_key), API, NONE, "250", false, NULL, 1, 100000, NULL},
	/* abuse limits: every connection is a descriptor; one address, one slow head cannot take them all */
	{"PAYFLOW_API_MAX_CONNECTIONS", T_INT, AT(api_max_connections), API, NONE, "4096", false, NULL, 16, 1000000, NULL},
	{"PAYFLOW_API_MAX_CONNECTIONS_PER_ADDRESS", T_INT, AT(api_max_connections_per_address), API, NONE, "256", false, NULL, 0, 1000000, NULL},
	{"PAYFLOW_API_HEADER_TIMEOUT", T_INT, AT(api_header_timeout), API, NONE, "10", false, NULL, 1, 3600, NULL},
	{"PAYFLOW_LOG_LEVEL", T_ENUM, AT(log_level), ANY, NONE, "info", false, "debug|info|warn|error", 0, 0, NULL},
	{"PAYFLOW_RELAY_IN_FLIGHT", T_INT, AT(relay_in_flight), RELAY, NONE, "4", false, NULL, 1, 64, NULL},
	{"PAYFLOW_DB_CONNECTIONS", T_INT, AT(db_connections), WORKER, NONE, "0", false, NULL, 0, 1000, NULL},
	{"PAYFLOW_RELAY_LEASE_SECONDS", T_INT, AT(relay_lease_seconds), RELAY, NONE, "30", false, NULL, 5, 600, NULL},
	{"PAYFLOW_POLL_INTERVAL_MS", T_INT, AT(poll_interval_ms), RELAY | API, NONE, "1000", false, NULL, 10, 600000, NULL},
	/*
	 * visibility changes, the relay's sends and a worker's receive during a
	 * backlog wait this long at most for a batch of ten; only while more is
	 * coming (a claim in flight, a queue answering in full), so a lone event
	 * never waits.  50, not 20: 1.60 -> 1.39 SQS calls per operation in the
	 * pipeline bench, steady-load latency no worse
	 */
	{"PAYFLOW_SQS_BATCH_WAIT_MS", T_INT, AT(sqs_batch_wait_ms), RELAY | WORKER, NONE, "50", false, NULL, 0, 1000, NULL},
	/*
	 * deletes alone wait longer: a step's outcome is committed before its
	 * delete is queued, so waiting costs no latency, and a burst's deletes
	 * leave ten at a time instead of a handful
	 */
	{"PAYFLOW_SQS_DELETE_WAIT_MS", T_INT, AT(sqs_delete_wait_ms), WORKER, NONE, "100", false, NULL, 0, 1000, NULL},
	{"PAYFLOW_HTTP_CONNECT_TIMEOUT_MS", T_INT, AT(http_connect_timeout_ms), AWS, NONE, "3000", false, NULL, 100, 60000, NULL},
	{"PAYFLOW_HTTP_TIMEOUT_MS", T_INT, AT(http_timeout_ms), AWS, NONE, "30000", false, NULL, 100, 3600000, NULL},
	/* a call to the invoice API or an HTTP hook: the whole call, connect included */
	{"PAYFLOW_INVOICE_TIMEOUT_MS", T_INT, AT(invoice_timeout_ms), INVOICE, NONE, "30000", false, NULL, 100, 3600000, NULL},
	{"PAYFLOW_INVOICE_TLS_VERIFY", T_ENUM, AT(invoice_tls_verify), INVOICE, NONE, "true", false, "false|true", 0, 0, NULL},
	{"PAYFLOW_POSTPROCESS_TIMEOUT_MS", T_INT, AT(postprocess_timeout_ms), POSTPROCESS, NONE, "30000", false, NULL, 100, 3600000, NULL},
	{"PAYFLOW_POSTPROCESS_TLS_VERIFY", T_ENUM, AT(postprocess_tls_verify), POSTPROCESS, NONE, "true", false, "false|true", 0, 0, NULL},
	{"PAYFLOW_STEP_TIMEOUT_MS", T_INT, AT(step_timeout_ms), HTTP_STEP, NONE, "30000", false, NULL, 100, 3600000, NULL},
	{"PAYFLOW_STEP_TLS_VERIFY", T_ENUM, AT(step_tls_verify), HTTP_STEP, NONE, "true", false, "false|true", 0, 0, NULL},
	/* webhook deliveries: attempts are the message's receive count, delays its visibility (at most 12 h) */
	{"PAYFLOW_WEBHOOK_MAX_ATTEMPTS", T_INT, AT(webhook_max_attempts), WEBHOOK, NONE, "8", false, NULL, 1, 100, NULL},
	{"PAYFLOW_WEBHOOK_TIMEOUT_MS", T_INT, AT(webhook_timeout_ms), WEBHOOK, NONE, "10000", false, NULL, 100, 600000, NULL},
	{"PAYFLOW_WEBHOOK_BACKOFF_BASE_SECONDS", T_INT, AT(webhook_backoff_base_s), WEBHOOK, NONE, "30", false, NULL, 1, 43200, NULL},
	{"PAYFLOW_WEBHOOK_BACKOFF_MAX_SECONDS", T_INT, AT(webhook_backoff_max_s), WEBHOOK, NONE, "3600", false, NULL, 1, 43200, NULL},
	/* plain http:// is refused unless this is true, and even then only to a loopback host */
	{"PAYFLOW_WEBHOOK_ALLOW_HTTP", T_ENUM, AT(webhook_allow_http), WEBHOOK, NONE, "false", false, "false|true", 0, 0, NULL},
	/* the Authorization header of the invoice API and of the HTTP hook (e.g. "Bearer <token>"), from a secret */
	{"PAYFLOW_INVOICE_AUTHORIZATION", T_STRING, AT(invoice_authorization), INVOICE, NONE, NULL, true, NULL, 0, 0, NULL},
	{"PAYFLOW_POSTPROCESS_AUTHORIZATION", T_STRING, AT(postprocess_authorization), POSTPROCESS, NONE, NULL, true, NULL, 0, 0, NULL},
	{"PAYFLOW_STEP_AUTHORIZATION", T_STRING, AT(step_authorization), HTTP_STEP, NONE, NULL, true, NULL, 0, 0, NULL},
	/* downstream error texts echo input (card numbers): only on request, and masked (downstream_error.h) */
	{"PAYFLOW_RAW_ERROR_TEXT", T_ENUM, AT(raw_error_text), PAYMENT | POSTPROCESS | HTTP_STEP | SQL_STEP, NONE, "false", false, "false|true", 0, 0, NULL},
	/* a call that ignores its cancel keeps the step's lease unless the operator lets it go (loop.c) */
	{"PAYFLOW_HAND_OVER_UNCANCELLED", T_ENUM, AT(hand_over_uncancelled), WORKER, NONE, "false", false, "false|true", 0, 0, NULL},
	/* ECS sets it in every task: the worker then protects its task from scale-in while it holds work (protection.c) */
	{"ECS_AGENT_URI", T_URL, AT(ecs_agent_uri), WORKER, NONE, NULL, false, NULL, 0, 0, NULL},
	{"PAYFLOW_PROTECTION_MINUTES", T_INT, AT(protection_minutes), WORKER, NONE, "40", false, NULL, 1, 2880, NULL},
	{"PAYFLOW_PROTECTION_IDLE_SECONDS", T_INT, AT(protection_idle_seconds), WORKER, NONE, "60", false, NULL, 0, 86400, NULL},
	{"PAYFLOW_PROTECTION_RENEW_SECONDS", T_INT, AT(protection_renew_seconds), WORKER, NONE, "300", false, NULL, 1, 172800, NULL},
	/*
	 * payflow-s3-sweep: an object no operation keeps is deleted once this
	 * old (unless its payloads were purged: at once), so that an upload
	 * whose submit is still committing is left alone
	 */
	{"PAYFLOW_S3_ORPHAN_GRACE", T_INT, AT(s3_orphan_grace), S3_SWEEP, NONE, "3600", false, NULL, 1, 2592000, NULL},
	{"PAYFLOW_S3_SWEEP_INTERVAL", T_INT, AT(s3_sweep_interval), S3_SWEEP, NONE, "3600", false, NULL, 1, 604800, NULL},
	{"PAYFLOW_S3_SWEEP_PAGE", T_INT, AT(s3_sweep_page), S3_SWEEP, NONE, "1000", false, NULL, 1, 1000, NULL},
};
const size_t pf_n_settings = sizeof(pf_settings) / sizeof(pf_settings[0]);

const pf_setting *
pf_setting_find(const char *name)
{
	for (size_t i = 0; i < pf_n_settings; i++)
		if (strcmp(pf_settings[i].name, name) == 0 ||
			(pf_settings[i].alias && strcmp(pf_settings[i].alias, name) == 0))
			return &pf_settings[i];
	return NULL;
}

const char *
pf_setting_type_name(pf_setting_type type)
{
	switch (type)
	{
		case T_STRING:
			return "string";
		case T_URL:
			return "url";
		case T_CONNINFO:
			return "conninfo";
		case T_INT:
			return "integer";
		case T_ENUM:
			return "enum";
		case T_HOST_PORT:
			return "host:port";
		case T_QUEUE_MAP:
			return "queue-map";
	}
	return "unknown";
}
