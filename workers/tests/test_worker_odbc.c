/*
 * test_worker_odbc.c
 *		The ODBC connection against a real driver, named by
 *		PAYFLOW_LEGACY_ODBC: the legacy DBMS fixture through psqlODBC
 *		(test/fixtures/legacy; test/integration/worker_payment.sh), or with
 *		PAYFLOW_TEST_ODBC_DIALECT=mariadb or sqlite the fixtures of
 *		test/fixtures/legacy-mariadb and legacy-sqlite through their own
 *		drivers (test/integration/worker_legacy_drivers.sh). Without a
 *		connection string the test says so and passes.
 *
 * What it pins down is what the payment worker relies on: the first row as
 * JSON with exact decimals, no row as NULL, parameters bound as text
 * (quotes and NULLs included), SQLSTATEs as the server raised them, the
 * query time-out (57014; MariaDB's driver refuses it, so payflow's own
 * ends the call), SQLCancel from another thread and a refused one, a lost
 * connection (08S01) that reconnects on the next call, and what the driver
 * says of a statement's result before running it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "payflow/backoff.h"
#include "payflow/odbc.h"
#include "payflow/sqlstate_rules.h"
#include "unit.h"

static void
test_rows(pf_odbc *odbc)
{
	const char *values[3] = {"12.50", "it's \"quoted\" ?", NULL};
	json_t	   *row;
	pf_error	err;

	if (!CHECK(pf_odbc_first_row(odbc, "SELECT ?::numeric AS amount, ?::text AS note, ?::text AS nothing, "
								 "42::int AS n, 7::bigint AS big, 1.5::float8 AS f, true AS flag",
								 3, values, 5, &row, NULL, &err) == PF_OK))
	{
		fprintf(stderr, "  %s %s\n", err.code, err.message);
		return;
	}
	CHECK_STR(json_string_value(json_object_get(row, "amount")), "12.50");
	CHECK_STR(json_string_value(json_object_get(row, "note")), "it's \"quoted\" ?");
	CHECK(json_is_null(json_object_get(row, "nothing")));
	CHECK(json_integer_value(json_object_get(row, "n")) == 42);
	CHECK(json_integer_value(json_object_get(row, "big")) == 7);
	CHECK(json_real_value(json_object_get(row, "f")) == 1.5);
	CHECK(json_object_get(row, "flag") != NULL);
	json_decref(row);

	/* no row: NULL, not an error */
	CHECK(pf_odbc_first_row(odbc, "SELECT 1 WHERE false", 0, NULL, 5, &row, NULL, &err) == PF_OK);
	CHECK(row == NULL);

	/* only the first row counts */
	CHECK(pf_odbc_first_row(odbc, "SELECT g FROM generate_series(3, 5) g", 0, NULL, 5, &row, NULL, &err) == PF_OK);
	CHECK(json_integer_value(json_object_get(row, "g")) == 3);
	json_decref(row);

	/* a long value comes back whole */
	CHECK(pf_odbc_first_row(odbc, "SELECT repeat('x', 5000) AS long", 0, NULL, 5, &row, NULL, &err) == PF_OK);
	CHECK(row && strlen(json_string_value(json_object_get(row, "long"))) == 5000);
	json_decref(row);
}

static void
test_errors(pf_odbc *odbc)
{
	json_t	   *row;
	pf_error	err;
	int64_t		started;

	/* the fixture's functions are what legacy_client may run; anything else is 42501 */
	CHECK(pf_odbc_first_row(odbc, "SELECT * FROM reset_fixture()", 0, NULL, 5, &row, NULL, &err) == PF_ERR_FINAL);
	CHECK_STR(err.code, "42501");
	CHECK(!pf_sqlstate_is_retryable(NULL, err.code));

	CHECK(pf_odbc_first_row(odbc, "SELECT 1/0", 0, NULL, 5, &row, NULL, &err) == PF_ERR_FINAL);
	CHECK_STR(err.code, "22012");
	CHECK(strstr(err.message, "division by zero") != NULL);
	CHECK(strncmp(err.message, "ERROR", 5) != 0);	/* the driver's decoration is gone */

	/* a syntax error in the statement itself */
	CHECK(pf_odbc_first_row(odbc, "SELEC 1", 0, NULL, 5, &row, NULL, &err) == PF_ERR_FINAL);
	CHECK_STR(err.code, "42601");

	/* SQL_ATTR_QUERY_TIMEOUT: psqlODBC sets statement_timeout, so 57014 */
	started = pf_now_ms();
	CHECK(pf_odbc_first_row(odbc, "SELECT pg_sleep(5)", 0, NULL, 1, &row, NULL, &err) != PF_OK);
	CHECK_STR(err.code, "57014");
	CHECK(pf_now_ms() - started < 4000);
	CHECK(pf_sqlstate_is_retryable(NULL, err.code));

	/* the connection is still good afterwards */
	CHECK(pf_odbc_first_row(odbc, "SELECT 1 AS one", 0, NULL, 5, &row, NULL, &err) == PF_OK);
	json_decref(row);
}

typedef struct canceller
{
	pf_odbc    *odbc;
	int			after_ms;
	pf_odbc_cancel_result result;
} canceller;

static void *
cancel_later(void *arg)
{
	canceller  *c = arg;

	pf_error	err;

	pf_sleep_ms(c->after_ms);
	c->result = pf_odbc_cancel(c->odbc, &err);
	return NULL;
}

static void
test_cancel(pf_odbc *odbc)
{
	canceller	c = {odbc, 500, PF_ODBC_CANCEL_IDLE};
	pthread_t	t;
	json_t	   *row;
	pf_error	err;
	int64_t		started = pf_now_ms();

	pthread_create(&t, NULL, cancel_later, &c);
	CHECK(pf_odbc_first_row(odbc, "SELECT pg_sleep(10)", 0, NULL, 30, &row, NULL, &err) != PF_OK);
	pthread_join(t, NULL);
	CHECK(c.result == PF_ODBC_CANCEL_SENT);
	CHECK_STR(err.code, "57014");
	CHECK(pf_now_ms() - started < 5000);

	/* a cancel before the call makes it fail at once, until cleared */
	CHECK(pf_odbc_cancel(odbc, &err) == PF_ODBC_CANCEL_IDLE);
	CHECK(pf_odbc_first_row(odbc, "SELECT 1", 0, NULL, 5, &row, NULL, &err) != PF_OK);
	CHECK_STR(err.code, "HY008");
	pf_odbc_clear_cancel(odbc);
	CHECK(pf_odbc_first_row(odbc, "SELECT 1 AS one", 0, NULL, 5, &row, NULL, &err) == PF_OK);
	json_decref(row);
}

static void
test_connection_lost(pf_odbc *odbc)
{
	json_t	   *row;
	pf_error	err;

	/* the server ends the session: 08S01, and the next call reconnects */
	CHECK(pf_odbc_first_row(odbc, "SELECT pg_terminate_backend(pg_backend_pid())", 0, NULL, 5, &row, NULL, &err)
		  != PF_OK || row != NULL);
	json_decref(row);
	if (CHECK(pf_sqlstate_is_connection_error(err.code)))
		CHECK(!pf_odbc_connected(odbc));
	else
		fprintf(stderr, "  got %s %s\n", err.code, err.message);
	CHECK(pf_odbc_first_row(odbc, "SELECT 2 AS two", 0, NULL, 5, &row, NULL, &err) == PF_OK);
	CHECK(json_integer_value(json_object_get(row, "two")) == 2);
	json_decref(row);
}

static void
test_bad_connection_string(void)
{
	pf_odbc    *odbc = pf_odbc_create("Driver={No Such Driver};Server=127.0.0.1;", 2);
	json_t	   *row;
	pf_error	err;

	CHECK(pf_odbc_first_row(odbc, "SELECT 1", 0, NULL, 5, &row, NULL, &err) == PF_ERR_TRANSIENT);
	CHECK(err.code[0] != '\0');
	CHECK(!pf_odbc_connected(odbc));
	pf_odbc_destroy(odbc);
}

/* What the driver says of a statement's result before running it. */
static void
expect_columns(pf_odbc *odbc, const char *sql, int want, const char *first)
{
	char	  **names;
	int			n;
	pf_error	err;

	if (!CHECK(pf_odbc_describe(odbc, sql, &n, &names, &err) == PF_OK))
	{
		fprintf(stderr, "  %s: %s %s\n", sql, err.code, err.message);
		return;
	}
	if (!CHECK(want < 0 ? n > 0 : n == want))
		fprintf(stderr, "  %s: %d columns\n", sql, n);
	if (first && n > 0)
		CHECK_STR(names[0], first);
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

static void
test_postgresql_driver(pf_odbc *odbc)
{
	char		why[256];

	CHECK(!pf_odbc_timeout_refused(odbc, why, sizeof(why)));
	expect_columns(odbc, "SELECT * FROM charge(?, ?, ?, ?)", 4, "charge_id");
}

/*
 * MariaDB Connector/ODBC: no query time-out (01S02), so payflow's own ends
 * the call within its time-out; a cancel of a procedure running as its
 * definer is refused, the call runs on and its connection is closed after
 * it; a procedure's result is unknown before it runs.
 */
static void
test_mariadb(pf_odbc *odbc)
{
	const char *card[4] = {"pay_x:process_payment", "p-card", "card 4111111111111111", "EUR"};
	pf_odbc_call_info info;
	char		why[256];
	json_t	   *row;
	pf_error	err;
	int64_t		started;
	pf_result	r;

	CHECK(pf_odbc_connect(odbc, &err) == PF_OK);
	if (CHECK(pf_odbc_timeout_refused(odbc, why, sizeof(why))))
		CHECK(strstr(why, "01S02") != NULL);

	/* payflow's own time-out: SLEEP ends early (1) when its KILL QUERY comes */
	started = pf_now_ms();
	r = pf_odbc_first_row(odbc, "SELECT SLEEP(10) AS slept", 0, NULL, 1, &row, &info, &err);
	CHECK(info.timed_out && !info.cancel_failed);
	if (!CHECK(pf_now_ms() - started < 2500))
		fprintf(stderr, "  the 1 s time-out ended the call after %lld ms\n", (long long) (pf_now_ms() - started));
	if (r == PF_OK)
		CHECK(json_integer_value(json_object_get(row, "slept")) == 1);
	else
		CHECK_STR(err.code, "HYT00");
	json_decref(row);
	CHECK(pf_odbc_first_row(odbc, "SELECT 1 AS one", 0, NULL, 5, &row, &info, &err) == PF_OK);
	CHECK(json_integer_value(json_object_get(row, "one")) == 1 && !info.timed_out);
	json_decref(row);

	/* a refused cancel: the call runs to its end, the connection is closed after it */
	started = pf_now_ms();
	r = pf_odbc_first_row(odbc, "CALL slow_as_owner(2)", 0, NULL, 1, &row, &info, &err);
	CHECK(r == PF_OK && info.timed_out && info.cancel_failed && info.answered);
	CHECK(pf_now_ms() - started >= 1900);
	CHECK(json_integer_value(json_object_get(row, "slept")) == 0);
	json_decref(row);
	CHECK(!pf_odbc_connected(odbc));
	CHECK(pf_odbc_first_row(odbc, "SELECT 2 AS two", 0, NULL, 5, &row, &info, &err) == PF_OK);
	CHECK(json_integer_value(json_object_get(row, "two")) == 2);
	json_decref(row);

	/* the DBMS's words without the driver's "[ma-…][…]" prefix */
	CHECK(pf_odbc_first_row(odbc, "CALL charge(?, ?, ?, ?)", 4, card, 5, &row, &info, &err) == PF_ERR_FINAL);
	CHECK_STR(err.code, "22007");
	CHECK(strncmp(err.message, "Incorrect decimal value", 23) == 0);
	CHECK(!pf_sqlstate_is_retryable(NULL, err.code));

	expect_columns(odbc, "SELECT 1 AS one, 2 AS two", 2, "one");
	expect_columns(odbc, "CALL lookup_charge(?)", 0, NULL);
}

/* SQLite's driver: INSERT … RETURNING returns no result set, and says so. */
static void
test_sqlite(pf_odbc *odbc)
{
	expect_columns(odbc, "INSERT INTO charges (idempotency_key, payment_id, amount, currency) VALUES (?, ?, ?, ?) "
				   "RETURNING charge_id", 0, NULL);
	expect_columns(odbc, "SELECT charge_id, amount FROM charges WHERE idempotency_key = ?", 2, "charge_id");
}

int
main(void)
{
	const char *conn = getenv("PAYFLOW_LEGACY_ODBC");
	const char *dialect = getenv("PAYFLOW_TEST_ODBC_DIALECT");
	pf_odbc    *odbc;
	pf_error	err;

	test_bad_connection_string();
	if (conn == NULL || conn[0] == '\0')
	{
		/* a SKIP, never a silent pass: make check lists the lines of PF_SKIP_LOG */
		const char *why = "driver tests: PAYFLOW_LEGACY_ODBC not set (worker_payment runs them against the fixture)";
		const char *skip_log = getenv("PF_SKIP_LOG");
		FILE	   *f = skip_log && skip_log[0] ? fopen(skip_log, "a") : NULL;

		printf("SKIP - test_worker_odbc %s\n", why);
		if (f != NULL)
		{
			fprintf(f, "test_worker_odbc %s\n", why);
			fclose(f);
		}
		return unit_finish("test_worker_odbc");
	}
	if (dialect == NULL || dialect[0] == '\0')
		dialect = "postgresql";
	odbc = pf_odbc_create(conn, 5);
	if (!CHECK(pf_odbc_connect(odbc, &err) == PF_OK))
		fprintf(stderr, "  cannot connect: %s %s\n", err.code, err.message);
	else if (strcmp(dialect, "mariadb") == 0)
		test_mariadb(odbc);
	else if (strcmp(dialect, "sqlite") == 0)
		test_sqlite(odbc);
	else
	{
		test_rows(odbc);
		test_errors(odbc);
		test_cancel(odbc);
		test_connection_lost(odbc);
		test_postgresql_driver(odbc);
	}
	pf_odbc_destroy(odbc);
	return unit_finish("test_worker_odbc");
}
