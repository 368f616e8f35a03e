/*
 * test_worker_odbc.c
 *		The ODBC connection against a real driver: the legacy DBMS fixture
 *		(test/fixtures/legacy) through psqlODBC, named by PAYFLOW_LEGACY_ODBC.
 *		Without it the test says so and passes; test/integration/
 *		worker_payment.sh runs it with the fixture set up.
 *
 * What it pins down is what the payment worker relies on: the first row as
 * JSON with exact decimals, no row as NULL, parameters bound as text
 * (quotes and NULLs included), SQLSTATEs as the server raised them, the
 * query time-out (57014), SQLCancel from another thread, and a lost
 * connection (08S01) that reconnects on the next call.
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
								 3, values, 5, &row, &err) == PF_OK))
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
	CHECK(pf_odbc_first_row(odbc, "SELECT 1 WHERE false", 0, NULL, 5, &row, &err) == PF_OK);
	CHECK(row == NULL);

	/* only the first row counts */
	CHECK(pf_odbc_first_row(odbc, "SELECT g FROM generate_series(3, 5) g", 0, NULL, 5, &row, &err) == PF_OK);
	CHECK(json_integer_value(json_object_get(row, "g")) == 3);
	json_decref(row);

	/* a long value comes back whole */
	CHECK(pf_odbc_first_row(odbc, "SELECT repeat('x', 5000) AS long", 0, NULL, 5, &row, &err) == PF_OK);
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
	CHECK(pf_odbc_first_row(odbc, "SELECT * FROM reset_fixture()", 0, NULL, 5, &row, &err) == PF_ERR_FINAL);
	CHECK_STR(err.code, "42501");
	CHECK(!pf_sqlstate_is_retryable(NULL, err.code));

	CHECK(pf_odbc_first_row(odbc, "SELECT 1/0", 0, NULL, 5, &row, &err) == PF_ERR_FINAL);
	CHECK_STR(err.code, "22012");
	CHECK(strstr(err.message, "division by zero") != NULL);
	CHECK(strncmp(err.message, "ERROR", 5) != 0);	/* the driver's decoration is gone */

	/* a syntax error in the statement itself */
	CHECK(pf_odbc_first_row(odbc, "SELEC 1", 0, NULL, 5, &row, &err) == PF_ERR_FINAL);
	CHECK_STR(err.code, "42601");

	/* SQL_ATTR_QUERY_TIMEOUT: psqlODBC sets statement_timeout, so 57014 */
	started = pf_now_ms();
	CHECK(pf_odbc_first_row(odbc, "SELECT pg_sleep(5)", 0, NULL, 1, &row, &err) != PF_OK);
	CHECK_STR(err.code, "57014");
	CHECK(pf_now_ms() - started < 4000);
	CHECK(pf_sqlstate_is_retryable(NULL, err.code));

	/* the connection is still good afterwards */
	CHECK(pf_odbc_first_row(odbc, "SELECT 1 AS one", 0, NULL, 5, &row, &err) == PF_OK);
	json_decref(row);
}

typedef struct canceller
{
	pf_odbc    *odbc;
	int			after_ms;
	bool		was_running;
} canceller;

static void *
cancel_later(void *arg)
{
	canceller  *c = arg;

	pf_sleep_ms(c->after_ms);
	c->was_running = pf_odbc_cancel(c->odbc);
	return NULL;
}

static void
test_cancel(pf_odbc *odbc)
{
	canceller	c = {odbc, 500, false};
	pthread_t	t;
	json_t	   *row;
	pf_error	err;
	int64_t		started = pf_now_ms();

	pthread_create(&t, NULL, cancel_later, &c);
	CHECK(pf_odbc_first_row(odbc, "SELECT pg_sleep(10)", 0, NULL, 30, &row, &err) != PF_OK);
	pthread_join(t, NULL);
	CHECK(c.was_running);
	CHECK_STR(err.code, "57014");
	CHECK(pf_now_ms() - started < 5000);

	/* a cancel before the call makes it fail at once, until cleared */
	CHECK(!pf_odbc_cancel(odbc));
	CHECK(pf_odbc_first_row(odbc, "SELECT 1", 0, NULL, 5, &row, &err) != PF_OK);
	CHECK_STR(err.code, "HY008");
	pf_odbc_clear_cancel(odbc);
	CHECK(pf_odbc_first_row(odbc, "SELECT 1 AS one", 0, NULL, 5, &row, &err) == PF_OK);
	json_decref(row);
}

static void
test_connection_lost(pf_odbc *odbc)
{
	json_t	   *row;
	pf_error	err;

	/* the server ends the session: 08S01, and the next call reconnects */
	CHECK(pf_odbc_first_row(odbc, "SELECT pg_terminate_backend(pg_backend_pid())", 0, NULL, 5, &row, &err)
		  != PF_OK || row != NULL);
	json_decref(row);
	if (CHECK(pf_sqlstate_is_connection_error(err.code)))
		CHECK(!pf_odbc_connected(odbc));
	else
		fprintf(stderr, "  got %s %s\n", err.code, err.message);
	CHECK(pf_odbc_first_row(odbc, "SELECT 2 AS two", 0, NULL, 5, &row, &err) == PF_OK);
	CHECK(json_integer_value(json_object_get(row, "two")) == 2);
	json_decref(row);
}

static void
test_bad_connection_string(void)
{
	pf_odbc    *odbc = pf_odbc_create("Driver={No Such Driver};Server=127.0.0.1;", 2);
	json_t	   *row;
	pf_error	err;

	CHECK(pf_odbc_first_row(odbc, "SELECT 1", 0, NULL, 5, &row, &err) == PF_ERR_TRANSIENT);
	CHECK(err.code[0] != '\0');
	CHECK(!pf_odbc_connected(odbc));
	pf_odbc_destroy(odbc);
}

int
main(void)
{
	const char *conn = getenv("PAYFLOW_LEGACY_ODBC");
	pf_odbc    *odbc;
	pf_error	err;

	test_bad_connection_string();
	if (conn == NULL || conn[0] == '\0')
	{
		printf("test_worker_odbc: PAYFLOW_LEGACY_ODBC not set, driver tests skipped\n");
		return unit_finish("test_worker_odbc");
	}
	odbc = pf_odbc_create(conn, 5);
	if (!CHECK(pf_odbc_connect(odbc, &err) == PF_OK))
		fprintf(stderr, "  cannot connect: %s %s\n", err.code, err.message);
	else
	{
		test_rows(odbc);
		test_errors(odbc);
		test_cancel(odbc);
		test_connection_lost(odbc);
	}
	pf_odbc_destroy(odbc);
	return unit_finish("test_worker_odbc");
}
