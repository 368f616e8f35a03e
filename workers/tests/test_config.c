/*
 * test_config.c
 *		Settings from the environment and PAYFLOW_CONFIG_FILE: valid sets,
 *		missing and invalid values, queue URL pairs, precedence, and proof that
 *		secrets never reach the log or an error message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "payflow/config.h"
#include "payflow/log.h"
#include "unit.h"

#define SECRET_KEY "wJalrXUtnFEMI/K7MDENG+bPxRfiCYSECRETKEY"
#define DB_PASSWORD "s3cr3t-db-pw"

static const char *const all_vars[] = {
	"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
	"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
	"AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
	"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_S3", "AWS_MAX_ATTEMPTS",
	"PAYFLOW_CONFIG_FILE", "PAYFLOW_DATABASE_URL", "PAYFLOW_QUEUE_URLS", "PAYFLOW_QUEUE_URL",
	"PAYFLOW_CONCURRENCY", "PAYFLOW_VISIBILITY_TIMEOUT", "PAYFLOW_DRAIN_SECONDS", "PAYFLOW_WORKER_ID",
	"PAYFLOW_STORE", "PAYFLOW_S3_BUCKET", "PAYFLOW_S3_ADDRESSING", "PAYFLOW_LEGACY_ODBC",
	"PAYFLOW_LEGACY_MODE", "PAYFLOW_LEGACY_CALL", "PAYFLOW_LEGACY_SUBMIT", "PAYFLOW_LEGACY_STATUS",
	"PAYFLOW_LEGACY_LOOKUP", "PAYFLOW_LEGACY_TIMEOUT", "PAYFLOW_POSTPROCESS_FUNCTION",
	"PAYFLOW_POSTPROCESS_URL", "PAYFLOW_INVOICE_URL", "PAYFLOW_LISTEN", "PAYFLOW_LOG_LEVEL",
	"PAYFLOW_RELAY_IN_FLIGHT", "PAYFLOW_POLL_INTERVAL_MS", "PAYFLOW_HTTP_CONNECT_TIMEOUT_MS",
	"PAYFLOW_HTTP_TIMEOUT_MS", "PAYFLOW_STEP_URL", "PAYFLOW_STEP_FUNCTION", "PAYFLOW_STEP_TLS_VERIFY",
	"PAYFLOW_STEP_TIMEOUT_MS", "PAYFLOW_STEP_AUTHORIZATION", NULL
};

static void
clean_env(void)
{
	for (int i = 0; all_vars[i]; i++)
		unsetenv(all_vars[i]);
}

/* A complete relay environment. */
static void
relay_env(void)
{
	clean_env();
	setenv("PAYFLOW_DATABASE_URL", "postgresql://payflow:" DB_PASSWORD "@localhost:5432/payflow", 1);
	setenv("PAYFLOW_QUEUE_URLS",
		   "payment-requests=http://127.0.0.1:4566/000000000000/payment-requests.fifo,"
		   " operation-events = http://127.0.0.1:4566/000000000000/operation-events", 1);
	setenv("AWS_REGION", "eu-west-1", 1);
	setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
	setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY, 1);
}

static bool
load(pf_config *cfg, unsigned programs, char *error)
{
	return pf_config_load(cfg, programs, error, 512);
}

static void
expect_error(unsigned programs, const char *want)
{
	pf_config	cfg;
	char		error[512];

	if (CHECK(!load(&cfg, programs, error)))
		CHECK_STR(error, want);
	else
		pf_config_free(&cfg);
}

static void
test_valid_relay(void)
{
	pf_config	cfg;
	char		error[512];

	relay_env();
	if (!CHECK(load(&cfg, PF_PROGRAM_RELAY, error)))
	{
		fprintf(stderr, "  %s\n", error);
		return;
	}
	CHECK(cfg.queue_urls.count == 2);
	CHECK_STR(pf_queue_map_find(&cfg.queue_urls, "payment-requests"),
			  "http://127.0.0.1:4566/000000000000/payment-requests.fifo");
	CHECK_STR(pf_queue_map_find(&cfg.queue_urls, "operation-events"),
			  "http://127.0.0.1:4566/000000000000/operation-events");
	CHECK(pf_queue_map_find(&cfg.queue_urls, "invoice-requests") == NULL);
	CHECK_STR(cfg.aws_region, "eu-west-1");
	CHECK(cfg.store == PF_STORE_PG);
	CHECK(cfg.concurrency == 8);
	CHECK(cfg.aws_max_attempts == 5);
	CHECK(cfg.log_level == PF_LOG_INFO);
	CHECK_STR(cfg.listen, "127.0.0.1:8080");
	CHECK(cfg.worker_id != NULL && cfg.worker_id[0] != '\0');
	pf_config_free(&cfg);

	/* the older region variable counts too */
	unsetenv("AWS_REGION");
	setenv("AWS_DEFAULT_REGION", "us-east-2", 1);
	CHECK(load(&cfg, PF_PROGRAM_RELAY, error));
	CHECK_STR(cfg.aws_region, "us-east-2");
	pf_config_free(&cfg);
}

static void
test_missing(void)
{
	relay_env();
	unsetenv("PAYFLOW_DATABASE_URL");
	expect_error(PF_PROGRAM_RELAY, "missing PAYFLOW_DATABASE_URL");

	relay_env();
	unsetenv("PAYFLOW_QUEUE_URLS");
	expect_error(PF_PROGRAM_RELAY, "missing PAYFLOW_QUEUE_URLS");
	/* ...which a worker does not need, but it needs its own queue */
	expect_error(PF_PROGRAM_WORKER | PF_PROGRAM_INVOICE, "missing PAYFLOW_QUEUE_URL");
	setenv("PAYFLOW_QUEUE_URL", "http://127.0.0.1:4566/000000000000/invoice-requests", 1);
	expect_error(PF_PROGRAM_WORKER | PF_PROGRAM_INVOICE, "missing PAYFLOW_INVOICE_URL");

	relay_env();
	setenv("PAYFLOW_QUEUE_URLS", "", 1);	/* empty is unset */
	expect_error(PF_PROGRAM_RELAY, "missing PAYFLOW_QUEUE_URLS");

	relay_env();
	unsetenv("AWS_REGION");
	expect_error(PF_PROGRAM_RELAY, "missing AWS_REGION");

	relay_env();
	unsetenv("AWS_SECRET_ACCESS_KEY");
	expect_error(PF_PROGRAM_RELAY,
				 "missing AWS_SECRET_ACCESS_KEY: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY go together");

	relay_env();
	setenv("PAYFLOW_STORE", "s3", 1);
	expect_error(PF_PROGRAM_RELAY, "missing PAYFLOW_S3_BUCKET: PAYFLOW_STORE is s3");

	/* payflow-s3-sweep: a bucket always, AWS credentials, its own limits */
	relay_env();
	expect_error(PF_PROGRAM_S3_SWEEP, "missing PAYFLOW_S3_BUCKET");
	setenv("PAYFLOW_S3_BUCKET", "payflow-payloads", 1);
	setenv("PAYFLOW_S3_SWEEP_PAGE", "1001", 1);
	expect_error(PF_PROGRAM_S3_SWEEP, "invalid PAYFLOW_S3_SWEEP_PAGE: \"1001\" is not an integer from 1 to 1000");
	unsetenv("PAYFLOW_S3_SWEEP_PAGE");
	setenv("PAYFLOW_S3_ORPHAN_GRACE", "0", 1);
	expect_error(PF_PROGRAM_S3_SWEEP, "invalid PAYFLOW_S3_ORPHAN_GRACE: \"0\" is not an integer from 1 to 2592000");
	unsetenv("PAYFLOW_S3_ORPHAN_GRACE");
	unsetenv("AWS_REGION");
	expect_error(PF_PROGRAM_S3_SWEEP, "missing AWS_REGION");
	setenv("AWS_REGION", "eu-west-1", 1);
	{
		pf_config	cfg;
		char		error[512];

		if (CHECK(load(&cfg, PF_PROGRAM_S3_SWEEP, error)))
		{
			CHECK(cfg.s3_orphan_grace == 3600 && cfg.s3_sweep_interval == 3600 && cfg.s3_sweep_page == 1000);
			pf_config_free(&cfg);
		}
	}

	relay_env();
	setenv("PAYFLOW_QUEUE_URL", "http://127.0.0.1:4566/000000000000/payment-completed", 1);
	/* neither hook is fine: the role runs payflow.default_postprocess */
	{
		pf_config	cfg;
		char		error[512];

		if (CHECK(load(&cfg, PF_PROGRAM_WORKER | PF_PROGRAM_POSTPROCESS, error)))
		{
			CHECK(cfg.postprocess_function == NULL && cfg.postprocess_url == NULL);
			pf_config_free(&cfg);
		}
	}
	/* the generic step roles: each needs its one setting */
	expect_error(PF_PROGRAM_WORKER | PF_PROGRAM_HTTP_STEP, "missing PAYFLOW_STEP_URL");
	expect_error(PF_PROGRAM_WORKER | PF_PROGRAM_SQL_STEP, "missing PAYFLOW_STEP_FUNCTION");
	setenv("PAYFLOW_STEP_URL", "https://risk.example.com/check", 1);
	setenv("PAYFLOW_STEP_TLS_VERIFY", "false", 1);
	expect_error(PF_PROGRAM_WORKER | PF_PROGRAM_HTTP_STEP,
				 "invalid PAYFLOW_STEP_TLS_VERIFY: false is accepted only for a loopback "
				 "PAYFLOW_STEP_URL (localhost, 127.0.0.0/8, [::1])");
	setenv("PAYFLOW_STEP_TLS_VERIFY", "true", 1);
	setenv("PAYFLOW_STEP_AUTHORIZATION", "Bearer a\r\nX-Evil: 1", 1);
	expect_error(PF_PROGRAM_WORKER | PF_PROGRAM_HTTP_STEP, "invalid PAYFLOW_STEP_AUTHORIZATION: holds a control character");
	setenv("PAYFLOW_STEP_TIMEOUT_MS", "50", 1);
	unsetenv("PAYFLOW_STEP_AUTHORIZATION");
	expect_error(PF_PROGRAM_WORKER | PF_PROGRAM_HTTP_STEP,
				 "invalid PAYFLOW_STEP_TIMEOUT_MS: \"50\" is not an integer from 100 to 3600000");
	unsetenv("PAYFLOW_STEP_TIMEOUT_MS");
	{
		pf_config	cfg;
		char		error[512];

		if (CHECK(load(&cfg, PF_PROGRAM_WORKER | PF_PROGRAM_HTTP_STEP, error)))
		{
			CHECK(cfg.step_timeout_ms == 30000 && cfg.step_tls_verify == 1);
			CHECK_STR(cfg.step_url, "https://risk.example.com/check");
			pf_config_free(&cfg);
		}
	}
	unsetenv("PAYFLOW_STEP_URL");
	unsetenv("PAYFLOW_STEP_TLS_VERIFY");
	setenv("PAYFLOW_LEGACY_ODBC", "DSN=legacy", 1);
	expect_error(PF_PROGRAM_WORKER | PF_PROGRAM_PAYMENT,
				 "missing PAYFLOW_LEGACY_CALL: PAYFLOW_LEGACY_MODE is blocking");
}

static void
test_invalid(void)
{
	relay_env();
	setenv("PAYFLOW_QUEUE_URLS", "payment-requests", 1);
	expect_error(PF_PROGRAM_RELAY, "invalid PAYFLOW_QUEUE_URLS: expected destination=url pairs");
	setenv("PAYFLOW_QUEUE_URLS", "payment-requests=", 1);
	expect_error(PF_PROGRAM_RELAY, "invalid PAYFLOW_QUEUE_URLS: expected destination=url pairs");
	setenv("PAYFLOW_QUEUE_URLS", "=http://x/q", 1);
	expect_error(PF_PROGRAM_RELAY, "invalid PAYFLOW_QUEUE_URLS: expected destination=url pairs");
	setenv("PAYFLOW_QUEUE_URLS", ",", 1);
	expect_error(PF_PROGRAM_RELAY, "invalid PAYFLOW_QUEUE_URLS: expected destination=url pairs");
	setenv("PAYFLOW_QUEUE_URLS", "a=http://x/q,a=http://x/r", 1);
	expect_error(PF_PROGRAM_RELAY, "invalid PAYFLOW_QUEUE_URLS: destination a given twice");
	setenv("PAYFLOW_QUEUE_URLS", "a=ftp://x/q", 1);
	expect_error(PF_PROGRAM_RELAY, "invalid PAYFLOW_QUEUE_URLS: a: expected an http:// or https:// queue URL");
	/* the wrong separator must not pass as one odd URL */
	setenv("PAYFLOW_QUEUE_URLS", "a=http://x/q;b=http://x/r", 1);
	expect_error(PF_PROGRAM_RELAY, "invalid PAYFLOW_QUEUE_URLS: a: a queue URL holds no space, ';' or '=' (separate pairs with ',')");

	relay_env();
	setenv("PAYFLOW_CONCURRENCY", "lots", 1);
	expect_error(PF_PROGRAM_RELAY, "invalid PAYFLOW_CONCURRENCY: \"lots\" is not an integer from 1 to 4000");
	setenv("PAYFLOW_CONCURRENCY", "0", 1);
	expect_error(PF_PROGRAM_RELAY, "invalid PAYFLOW_CONCURRENCY: \"0\" is not an integer from 1 to 4000");
	setenv("PAYFLOW_CONCURRENCY", "12x", 1);
	expect_error(PF_PROGRAM_RELAY, "invalid PAYFLOW_CONCURRENCY: \"12x\" is not an integer from 1 to 4000");

	relay_env();
	setenv("PAYFLOW_STORE", "ftp", 1);
	expect_error(PF_PROGRAM_RELAY, "invalid PAYFLOW_STORE: \"ftp\" is not one of pg/s3");
	relay_env();
	setenv("PAYFLOW_LOG_LEVEL", "loud", 1);
	expect_error(PF_PROGRAM_RELAY, "invalid PAYFLOW_LOG_LEVEL: \"loud\" is not one of debug/info/warn/error");
	relay_env();
	setenv("AWS_ENDPOINT_URL", "localhost:4566", 1);
	expect_error(PF_PROGRAM_RELAY, "invalid AWS_ENDPOINT_URL: expected an http:// or https:// URL");
	relay_env();
	setenv("PAYFLOW_LISTEN", "8080", 1);
	expect_error(PF_PROGRAM_API, "invalid PAYFLOW_LISTEN: expected host:port");
	relay_env();
	setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "v2/credentials", 1);
	expect_error(PF_PROGRAM_RELAY,
				 "invalid AWS_CONTAINER_CREDENTIALS_RELATIVE_URI: expected a path starting with /");

	/* a valid mix: case-insensitive enum, IPv6 listen, container credentials only */
	{
		pf_config	cfg;
		char		error[512];

		relay_env();
		unsetenv("AWS_ACCESS_KEY_ID");
		unsetenv("AWS_SECRET_ACCESS_KEY");
		setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/abc", 1);
		setenv("PAYFLOW_LOG_LEVEL", "DEBUG", 1);
		setenv("PAYFLOW_LISTEN", "[::1]:9000", 1);
		CHECK(load(&cfg, PF_PROGRAM_RELAY | PF_PROGRAM_API, error));
		CHECK(cfg.log_level == PF_LOG_DEBUG);
		pf_config_free(&cfg);
	}
}

static char *
write_temp(const char *text)
{
	char		path[] = "/tmp/payflow-config-XXXXXX";
	int			fd = mkstemp(path);

	if (fd < 0)
		return NULL;
	if (write(fd, text, strlen(text)) < 0)
		return NULL;
	close(fd);
	return strdup(path);
}

static void
test_file_and_env(void)
{
	pf_config	cfg;
	char		error[512];
	char	   *path;

	clean_env();
	path = write_temp("# payflow relay\n"
					  "\n"
					  "PAYFLOW_DATABASE_URL=host=db dbname=payflow\n"
					  "PAYFLOW_QUEUE_URLS = payment-requests=http://q/1\n"
					  "export AWS_REGION=\"eu-central-1\"\n"
					  "AWS_ACCESS_KEY_ID=AKIDFILE\n"
					  "AWS_SECRET_ACCESS_KEY='" SECRET_KEY "'\n"
					  "PAYFLOW_CONCURRENCY=3\n"
					  "PAYFLOW_CONCURRENCY=4\n");
	setenv("PAYFLOW_CONFIG_FILE", path, 1);
	setenv("AWS_REGION", "ap-south-1", 1);	/* the environment wins */
	if (CHECK(load(&cfg, PF_PROGRAM_RELAY, error)))
	{
		CHECK_STR(cfg.aws_region, "ap-south-1");
		CHECK_STR(cfg.database_url, "host=db dbname=payflow");
		CHECK_STR(cfg.aws_secret_access_key, SECRET_KEY);
		CHECK_STR(pf_queue_map_find(&cfg.queue_urls, "payment-requests"), "http://q/1");
		CHECK(cfg.concurrency == 4);	/* the last line wins */
		pf_config_free(&cfg);
	}
	else
		fprintf(stderr, "  %s\n", error);
	unlink(path);
	free(path);

	clean_env();
	path = write_temp("PAYFLOW_DATABASE_URL=host=db\nPAYFLOW_QUEU_URLS=a=http://q/1\n");
	setenv("PAYFLOW_CONFIG_FILE", path, 1);
	if (CHECK(!load(&cfg, PF_PROGRAM_RELAY, error)))
		CHECK(strstr(error, "invalid PAYFLOW_CONFIG_FILE: line 2 of ") == error &&
			  strstr(error, "unknown setting PAYFLOW_QUEU_URLS") != NULL);
	unlink(path);
	free(path);

	clean_env();
	path = write_temp("PAYFLOW_DATABASE_URL\n");
	setenv("PAYFLOW_CONFIG_FILE", path, 1);
	if (CHECK(!load(&cfg, PF_PROGRAM_RELAY, error)))
		CHECK(strstr(error, "expected NAME=value") != NULL);
	unlink(path);
	free(path);

	clean_env();
	setenv("PAYFLOW_CONFIG_FILE", "/nonexistent/payflow.env", 1);
	if (CHECK(!load(&cfg, PF_PROGRAM_RELAY, error)))
		CHECK(strstr(error, "invalid PAYFLOW_CONFIG_FILE: cannot read /nonexistent/payflow.env") == error);
}

/* pf_config_load_or_exit prints exactly one line, prefixed by the program. */
static void
test_exit_line(void)
{
	int			fds[2];
	pid_t		pid;
	char		out[1024] = {0};
	ssize_t		n;
	int			status;

	relay_env();
	setenv("PAYFLOW_QUEUE_URLS", "nonsense", 1);
	if (!CHECK(pipe(fds) == 0))
		return;
	pid = fork();
	if (pid == 0)
	{
		pf_config	cfg;

		dup2(fds[1], 2);
		pf_config_load_or_exit(&cfg, "payflow-relay", PF_PROGRAM_RELAY);
		_exit(0);
	}
	close(fds[1]);
	n = read(fds[0], out, sizeof(out) - 1);
	close(fds[0]);
	waitpid(pid, &status, 0);
	CHECK(n > 0);
	CHECK_STR(out, "payflow-relay: invalid PAYFLOW_QUEUE_URLS: expected destination=url pairs\n");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 2);
}

static void
test_secrets_never_logged(void)
{
	pf_config	cfg;
	char		error[512];
	FILE	   *logf = tmpfile();
	char	   *logged;
	size_t		len;
	char	   *fields;

	relay_env();
	setenv("AWS_SESSION_TOKEN", "FQoGZXIvYXdzEJr//////////wEaDEXAMPLETOKEN", 1);
	setenv("PAYFLOW_LEGACY_ODBC", "Driver=PostgreSQL;Server=legacy;UID=app;PWD={odbc-pw-123};", 1);
	pf_log_forget_secrets();
	if (!CHECK(load(&cfg, PF_PROGRAM_RELAY, error)))
		return;

	pf_log_set_stream(logf);
	pf_log_init("test", PF_LOG_DEBUG);
	pf_log_write(PF_LOG_INFO, NULL, pf_config_to_json(&cfg), "configuration");
	/* a library echoing a credential in an error message */
	pf_log_error(NULL, "request failed for key %s with token %s", cfg.aws_secret_access_key, cfg.aws_session_token);
	pf_log_write(PF_LOG_WARN, NULL, json_pack("{s:s}", "conninfo", cfg.database_url),
				 "connect to %s failed", cfg.database_url);
	pf_log_write(PF_LOG_WARN, NULL, NULL, "odbc password odbc-pw-123 and db password " DB_PASSWORD);
	fflush(logf);
	pf_log_set_stream(NULL);

	fseek(logf, 0, SEEK_END);
	len = (size_t) ftell(logf);
	rewind(logf);
	logged = calloc(1, len + 1);
	CHECK(fread(logged, 1, len, logf) == len);
	fclose(logf);

	CHECK(strstr(logged, SECRET_KEY) == NULL);
	CHECK(strstr(logged, "wJalrXUtnFEMI\\/K7MDENG") == NULL);	/* escaped form */
	CHECK(strstr(logged, "EXAMPLETOKEN") == NULL);
	CHECK(strstr(logged, DB_PASSWORD) == NULL);
	CHECK(strstr(logged, "odbc-pw-123") == NULL);
	CHECK(strstr(logged, "[redacted]") != NULL);
	/* non-secret settings are still shown */
	CHECK(strstr(logged, "\"AWS_ACCESS_KEY_ID\":\"AKIDEXAMPLE\"") != NULL);
	/* every line is one JSON object */
	for (char *line = strtok(logged, "\n"); line; line = strtok(NULL, "\n"))
	{
		json_t	   *j = json_loads(line, 0, NULL);

		CHECK(json_is_object(j) && json_is_string(json_object_get(j, "ts")) &&
			  json_is_string(json_object_get(j, "msg")));
		json_decref(j);
	}
	free(logged);

	{
		json_t	   *j = pf_config_to_json(&cfg);

		fields = json_dumps(j, JSON_COMPACT);
		json_decref(j);
		CHECK(strstr(fields, SECRET_KEY) == NULL);
		free(fields);
	}
	pf_config_free(&cfg);

	/* the generic HTTP role's Authorization header is a secret too */
	relay_env();
	setenv("PAYFLOW_QUEUE_URL", "http://127.0.0.1:4566/000000000000/risk-requests", 1);
	setenv("PAYFLOW_STEP_URL", "https://risk.example.com/check", 1);
	setenv("PAYFLOW_STEP_AUTHORIZATION", "Bearer step-token-4711", 1);
	if (CHECK(load(&cfg, PF_PROGRAM_WORKER | PF_PROGRAM_HTTP_STEP, error)))
	{
		json_t	   *j = pf_config_to_json(&cfg);

		fields = json_dumps(j, JSON_COMPACT);
		json_decref(j);
		CHECK(strstr(fields, "step-token-4711") == NULL);
		CHECK(strstr(fields, "\"PAYFLOW_STEP_AUTHORIZATION\":\"[redacted]\"") != NULL);
		free(fields);
		pf_config_free(&cfg);
	}
	unsetenv("PAYFLOW_STEP_URL");
	unsetenv("PAYFLOW_STEP_AUTHORIZATION");
	unsetenv("PAYFLOW_QUEUE_URL");

	/* an invalid secret is named but never echoed */
	relay_env();
	setenv("PAYFLOW_DATABASE_URL", "host=db password=" DB_PASSWORD " bogus_option=1", 1);
	if (CHECK(!load(&cfg, PF_PROGRAM_RELAY, error)))
	{
		CHECK_STR(error, "invalid PAYFLOW_DATABASE_URL: not a libpq connection string or URI");
		CHECK(strstr(error, DB_PASSWORD) == NULL);
	}
}

static void
test_log_fields(void)
{
	FILE	   *logf = tmpfile();
	char		line[2048] = {0};
	json_t	   *j;
	pf_log_ids	ids = {"pay_01JABCDEFGHJKMNPQRSTVWXYZ0", "0b5c1d6e-8f4a-4c2b-9d3e-1a2b3c4d5e6f", "req-789",
	"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"};

	pf_log_set_stream(logf);
	pf_log_init("payflow-test", PF_LOG_INFO);
	pf_log_debug(&ids, "not shown at info");
	pf_log_write(PF_LOG_INFO, &ids, json_pack("{s:i,s:s,s:s}", "batch", 10, "msg", "spoof", "queue", "q"),
				 "sent %d", 10);
	pf_log_write(PF_LOG_INFO, NULL, NULL, "bad bytes \xff\xc3");
	fflush(logf);
	pf_log_set_stream(NULL);
	rewind(logf);
	CHECK(fgets(line, sizeof(line), logf) != NULL);
	{
		char		second[512];

		/* invalid UTF-8 in a message still makes a JSON line */
		CHECK(fgets(second, sizeof(second), logf) != NULL);
		CHECK(strstr(second, "\"bad bytes ??\"") != NULL);
		CHECK(fgets(second, sizeof(second), logf) == NULL);
	}
	fclose(logf);
	j = json_loads(line, 0, NULL);
	if (CHECK(j != NULL))
	{
		CHECK_STR(json_string_value(json_object_get(j, "level")), "info");
		CHECK_STR(json_string_value(json_object_get(j, "component")), "payflow-test");
		CHECK_STR(json_string_value(json_object_get(j, "msg")), "sent 10");
		CHECK_STR(json_string_value(json_object_get(j, "operationId")), ids.operation_id);
		CHECK_STR(json_string_value(json_object_get(j, "eventId")), ids.event_id);
		CHECK_STR(json_string_value(json_object_get(j, "correlationId")), ids.correlation_id);
		CHECK_STR(json_string_value(json_object_get(j, "traceId")), ids.trace_id);
		CHECK_STR(json_string_value(json_object_get(j, "spanId")), ids.span_id);
		CHECK(json_integer_value(json_object_get(j, "batch")) == 10);
		CHECK(strlen(json_string_value(json_object_get(j, "ts"))) == 24);
		json_decref(j);
	}
}

/* --print-settings: the rows a program reads, its requirements, never a value. */
static void
test_print_settings(void)
{
	char	   *text = NULL;
	size_t		len = 0;
	FILE	   *out;

	relay_env();
	out = open_memstream(&text, &len);
	pf_config_print_settings(out, "payflow-relay", NULL, PF_PROGRAM_RELAY);
	fclose(out);
	CHECK(strncmp(text, "{\"format\":\"payflow-settings/1\",\"program\":\"payflow-relay\",\"callsAws\":true}\n", 71) == 0);
	CHECK(strstr(text, "{\"name\":\"PAYFLOW_QUEUE_URLS\",\"type\":\"queue-map\",\"default\":null,\"required\":true,"
				 "\"secret\":false,\"readBy\":[\"relay\"],\"requiredBy\":[\"relay\"]}\n") != NULL);
	CHECK(strstr(text, "\"name\":\"PAYFLOW_RELAY_IN_FLIGHT\",\"type\":\"integer\",\"default\":\"4\"") != NULL);
	CHECK(strstr(text, "\"name\":\"PAYFLOW_DATABASE_URL\",\"type\":\"conninfo\",\"default\":null,\"required\":true,"
				 "\"secret\":true") != NULL);
	CHECK(strstr(text, "\"PAYFLOW_CONFIG_FILE\"") != NULL);
	/* another role's setting is not the relay's */
	CHECK(strstr(text, "PAYFLOW_INVOICE_URL") == NULL);
	/* values set in the environment are never shown */
	CHECK(strstr(text, SECRET_KEY) == NULL && strstr(text, DB_PASSWORD) == NULL && strstr(text, "4566") == NULL);
	free(text);

	out = open_memstream(&text, &len);
	pf_config_print_settings(out, "payflow-worker", "invoice", PF_PROGRAM_WORKER | PF_PROGRAM_INVOICE);
	fclose(out);
	CHECK(strstr(text, "\"role\":\"invoice\"") != NULL);
	CHECK(strstr(text, "\"name\":\"PAYFLOW_INVOICE_URL\",\"type\":\"url\",\"default\":null,\"required\":true") != NULL);
	CHECK(strstr(text, "\"name\":\"PAYFLOW_INVOICE_TLS_VERIFY\",\"type\":\"enum\",\"default\":\"true\"") != NULL &&
		  strstr(text, "\"choices\":[\"false\",\"true\"]") != NULL);
	CHECK(strstr(text, "\"name\":\"PAYFLOW_QUEUE_URL\",\"type\":\"url\",\"default\":null,\"required\":true,\"secret\":false,"
				 "\"readBy\":[\"worker:payment\",\"worker:postprocess\",\"worker:invoice\",\"worker:webhook\","
				 "\"worker:http\",\"worker:sql\"]") != NULL);
	CHECK(strstr(text, "PAYFLOW_LEGACY_ODBC") == NULL && strstr(text, "PAYFLOW_QUEUE_URLS") == NULL);
	free(text);
	clean_env();
}

int
main(void)
{
	test_valid_relay();
	test_missing();
	test_invalid();
	test_file_and_env();
	test_exit_line();
	test_secrets_never_logged();
	test_log_fields();
	test_print_settings();
	return unit_finish("test_config");
}
