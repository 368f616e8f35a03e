/*
 * pg_smoke.c
 *		The pg module and the pg claim-check store against a real PostgreSQL
 *		with the payflow extension (run by tests/pg_smoke.sh).
 */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payflow/backoff.h"
#include "payflow/event.h"
#include "payflow/pg.h"
#include "payflow/store.h"

static int	passed = 0;
static int	failed = 0;

#define CHECK(cond) check((cond), __LINE__, #cond)

static bool
check(bool ok, int line, const char *expr)
{
	if (ok)
		passed++;
	else
	{
		failed++;
		fprintf(stderr, "pg_smoke.c:%d: check failed: %s\n", line, expr);
	}
	return ok;
}

static char *
scalar(pf_pg *pg, const char *sql, int n, const char *const *values, pf_error *err)
{
	PGresult   *res;
	char	   *out = NULL;

	if (pf_pg_exec(pg, sql, n, values, &res, err) == PF_OK)
	{
		if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
			out = strdup(PQgetvalue(res, 0, 0));
		PQclear(res);
	}
	return out;
}

/* How many times the statements under test ran so far. */
static char *
runs(pf_pg *admin)
{
	pf_error	err;

	return scalar(admin, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END::text FROM pg_smoke_runs", 0, NULL,
				  &err);
}

static int
wait_notifications(pf_pg *pg, int timeout_ms)
{
	struct pollfd p = {pf_pg_socket(pg), POLLIN, 0};
	int			count = 0;
	pf_error	err;

	if (poll(&p, 1, timeout_ms) > 0)
		pf_pg_take_notifications(pg, &count, &err);
	return count;
}

/*
 * How many statements with this text the pf_pg's server session keeps
 * prepared under pg_prepared.h's names, and how many times they ran
 * (generic and custom plans). Asked on its connection directly, unprepared.
 */
static int
session_prepared(pf_pg *pg, const char *sql, long *executions)
{
	const char *v[1] = {sql};
	PGresult   *res;
	int			n = -1;

	*executions = -1;
	if (pf_pg_conn(pg) == NULL)
		return -1;
	res = PQexecParams(pf_pg_conn(pg),
					   "SELECT count(*), coalesce(sum(generic_plans + custom_plans), 0) FROM pg_prepared_statements "
					   "WHERE name LIKE 'pf\\_%' AND statement = $1", 1, NULL, v, NULL, NULL, 0);
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
	{
		n = atoi(PQgetvalue(res, 0, 0));
		*executions = atol(PQgetvalue(res, 0, 1));
	}
	PQclear(res);
	return n;
}

static void
deallocate_all(pf_pg *pg)
{
	PQclear(PQexec(pf_pg_conn(pg), "DEALLOCATE ALL"));
}

/*
 * pf_pg_options.prepare (pg_prepared.h): a statement is prepared once per
 * session and run from there; a session that lost it, a statement whose
 * result columns changed and a failing preparation are each handled as
 * the header says.
 */
static void
check_prepared(const char *url, const pf_pg_options *base, pf_pg *admin)
{
	pf_pg_options o = *base;
	pf_pg	   *pg;
	pf_error	err;
	long		executions;
	const char *plus_one = "SELECT $1::int + 1";
	const char *v41[1] = {"41"};

	o.application_name = "payflow-pg-smoke-prepared";
	o.prepare = true;
	pg = pf_pg_create(url, &o);

	/* three runs, one preparation */
	for (int i = 0; i < 3; i++)
	{
		char	   *n = scalar(pg, plus_one, 1, v41, &err);

		CHECK(n != NULL && strcmp(n, "42") == 0);
		free(n);
	}
	CHECK(session_prepared(pg, plus_one, &executions) == 1 && executions == 3);

	/* the session lost it (DISCARD ALL, a pooler's reset): prepared again, the call still answers */
	deallocate_all(pg);
	{
		char	   *n = scalar(pg, plus_one, 1, v41, &err);

		CHECK(n != NULL && strcmp(n, "42") == 0);
		free(n);
	}
	CHECK(session_prepared(pg, plus_one, &executions) == 1 && executions == 1);

	/* a statement that must run once runs once after such a loss */
	CHECK(pf_pg_exec(admin, "DROP SEQUENCE IF EXISTS pg_smoke_prepared_runs", 0, NULL, NULL, &err) == PF_OK);
	CHECK(pf_pg_exec(admin, "CREATE SEQUENCE pg_smoke_prepared_runs", 0, NULL, NULL, &err) == PF_OK);
	CHECK(pf_pg_run(pg, PF_PG_ONCE, "SELECT nextval('pg_smoke_prepared_runs')", 0, NULL, NULL, NULL, 0, NULL, &err) ==
		  PF_OK);
	deallocate_all(pg);
	CHECK(pf_pg_run(pg, PF_PG_ONCE, "SELECT nextval('pg_smoke_prepared_runs')", 0, NULL, NULL, NULL, 0, NULL, &err) ==
		  PF_OK);
	{
		char	   *n = scalar(admin, "SELECT last_value::text FROM pg_smoke_prepared_runs", 0, NULL, &err);

		CHECK(n != NULL && strcmp(n, "2") == 0);
		free(n);
	}
	CHECK(pf_pg_exec(admin, "DROP SEQUENCE pg_smoke_prepared_runs", 0, NULL, NULL, &err) == PF_OK);

	/* its result columns changed under it (as an extension update may): the call gets the new ones */
	CHECK(pf_pg_exec(admin, "DROP TABLE IF EXISTS pg_smoke_shape", 0, NULL, NULL, &err) == PF_OK);
	CHECK(pf_pg_exec(admin, "CREATE TABLE pg_smoke_shape AS SELECT 1 AS a", 0, NULL, NULL, &err) == PF_OK);
	{
		const char *shape = "SELECT * FROM pg_smoke_shape";
		PGresult   *res;

		if (CHECK(pf_pg_exec(pg, shape, 0, NULL, &res, &err) == PF_OK))
		{
			CHECK(PQnfields(res) == 1);
			PQclear(res);
		}
		CHECK(pf_pg_exec(admin, "ALTER TABLE pg_smoke_shape ADD COLUMN b int DEFAULT 2", 0, NULL, NULL, &err) ==
			  PF_OK);
		if (CHECK(pf_pg_exec(pg, shape, 0, NULL, &res, &err) == PF_OK))
		{
			CHECK(PQnfields(res) == 2 && strcmp(PQgetvalue(res, 0, 1), "2") == 0);
			PQclear(res);
		}
		else
			fprintf(stderr, "  changed shape: %s %s\n", err.code, err.message);
		/* and it is prepared again with them at its next call */
		if (CHECK(pf_pg_exec(pg, shape, 0, NULL, &res, &err) == PF_OK))
		{
			CHECK(PQnfields(res) == 2);
			PQclear(res);
		}
		CHECK(session_prepared(pg, shape, &executions) == 1 && executions == 1);
	}
	CHECK(pf_pg_exec(admin, "DROP TABLE pg_smoke_shape", 0, NULL, NULL, &err) == PF_OK);

	/* a statement that cannot be prepared fails as it would unprepared, and leaves nothing behind */
	CHECK(pf_pg_exec(pg, "SELECT no_such_column FROM pg_class", 0, NULL, NULL, &err) == PF_ERR_FINAL);
	CHECK(strcmp(err.code, "42703") == 0);
	CHECK(session_prepared(pg, "SELECT no_such_column FROM pg_class", &executions) == 0);
	pf_pg_destroy(pg);

	/*
	 * A session that keeps losing them (a transaction pooler handing each
	 * statement to another server session): after four misses the
	 * connection's statements run unprepared, and a new connection tries
	 * again.
	 */
	pg = pf_pg_create(url, &o);
	for (int i = 0; i < 5; i++)
	{
		char	   *n;

		if (i > 0)
			deallocate_all(pg);
		n = scalar(pg, plus_one, 1, v41, &err);
		CHECK(n != NULL && strcmp(n, "42") == 0);
		free(n);
	}
	CHECK(session_prepared(pg, plus_one, &executions) == 0);
	{
		char	   *n = scalar(pg, plus_one, 1, v41, &err);

		CHECK(n != NULL && strcmp(n, "42") == 0);
		free(n);
	}
	CHECK(session_prepared(pg, plus_one, &executions) == 0);
	pf_pg_disconnect(pg);
	{
		char	   *n = scalar(pg, plus_one, 1, v41, &err);

		CHECK(n != NULL && strcmp(n, "42") == 0);
		free(n);
	}
	CHECK(session_prepared(pg, plus_one, &executions) == 1);
	pf_pg_destroy(pg);
}

int
main(void)
{
	const char *url = getenv("PAYFLOW_DATABASE_URL");
	pf_pg_options opts = {.application_name = "payflow-pg-smoke",.connect_timeout_s = 5,.max_attempts = 4,
	.backoff_base_ms = 50,.backoff_cap_ms = 500};
	pf_pg_options short_opts = {.application_name = "payflow-pg-smoke-timeout",.connect_timeout_s = 5,
	.statement_timeout_ms = 100,.max_attempts = 3,.backoff_base_ms = 10,.backoff_cap_ms = 50};
	pf_pg	   *pg;
	pf_pg	   *admin;
	pf_pg	   *hasty;
	pf_error	err;
	pf_config	cfg;
	pf_store   *store;
	pf_payload_ref ref;
	pf_checksum_key mac = {0};
	pf_buf		out = PF_BUF_INIT;
	char	   *op;
	char	   *pid;
	const char *payload = "{\"invoiceId\":\"inv-1\",\"total\":1234}";

	signal(SIGPIPE, SIG_IGN);
	if (url == NULL)
	{
		fprintf(stderr, "pg_smoke: PAYFLOW_DATABASE_URL not set\n");
		return 1;
	}
	pg = pf_pg_create(url, &opts);
	admin = pf_pg_create(url, &opts);
	CHECK(pf_pg_connect(pg, &err) == PF_OK);

	/* an operation to hang payloads on */
	{
		const char *v[2] = {"payment-pg-smoke", "{\"amount\":1234}"};

		op = scalar(pg, "SELECT payflow.submit($1, $2::jsonb)", 2, v, &err);
		if (!CHECK(op != NULL && pf_operation_id_valid(op)))
		{
			fprintf(stderr, "  submit: %s %s\n", err.code, err.message);
			return 1;
		}
	}

	/* the pg store: write, read back, both verified */
	memset(&cfg, 0, sizeof(cfg));
	cfg.store = PF_STORE_PG;
	store = pf_store_create(pg, NULL, &cfg);
	/* the checksum key, through payflow.payload_mac_key() (payflow_payload_mac) */
	if (!CHECK(pf_checksum_key_load(pg, &mac, &err) == PF_OK && mac.set))
		fprintf(stderr, "  payload_mac_key: %s %s\n", err.code, err.message);
	pf_store_set_checksum_key(store, &mac);
	/* only the lease holder of the running step may write its result */
	CHECK(pf_store_write(store, op, "payment-result.json", payload, strlen(payload), &ref, &err) == PF_ERR_FINAL &&
		  strcmp(err.code, "PF004") == 0);
	{
		const char *v[1] = {op};
		char	   *claimed = scalar(pg, "SELECT payflow.claim_step($1, 'PROCESS_PAYMENT', 'pg-smoke') ->> 'action'", 1, v, &err);

		CHECK(claimed != NULL && strcmp(claimed, "run") == 0);
		free(claimed);
	}
	pf_store_set_lease(store, "PROCESS_PAYMENT", "pg-smoke");
	if (CHECK(pf_store_write(store, op, "payment-result.json", payload, strlen(payload), &ref, &err) == PF_OK))
	{
		CHECK(ref.store == PF_STORE_PG && ref.size == (long long) strlen(payload));
		CHECK(strstr(ref.key, op) != NULL);
		CHECK(pf_checksum_keyed(ref.checksum) && pf_checksum_verify(&mac, payload, strlen(payload), ref.checksum));
		CHECK(pf_store_read(store, &ref, &out, &err) == PF_OK);
		CHECK(out.len == strlen(payload) && memcmp(out.data, payload, out.len) == 0);

		/* a reference whose checksum does not match is refused by the database: PF005 */
		{
			pf_payload_ref bad;

			pf_payload_ref_copy(&bad, &ref);
			memcpy(bad.checksum + 12, "00000000", 8);
			CHECK(pf_store_read(store, &bad, &out, &err) == PF_ERR_CHECKSUM);
			CHECK(strcmp(err.code, "PF005") == 0 && strstr(err.message, "checksum mismatch") != NULL);
			CHECK(out.len == 0);
			pf_payload_ref_free(&bad);
		}
		/* the stored bytes corrupted behind the reference's back */
		{
			const char *v[2] = {"{\"invoiceId\":\"inv-X\",\"total\":1234}", ref.key};

			CHECK(pf_pg_exec(admin, "UPDATE payflow.payloads SET content = convert_to($1, 'UTF8') WHERE key = $2",
							 2, v, NULL, &err) == PF_OK);
			CHECK(pf_store_read(store, &ref, &out, &err) == PF_ERR_CHECKSUM);
			CHECK(strcmp(err.code, "PF005") == 0);
		}
		pf_payload_ref_free(&ref);
	}
	else
		fprintf(stderr, "  store write: %s %s\n", err.code, err.message);
	CHECK(pf_store_write(store, op, "../escape", "x", 1, &ref, &err) == PF_ERR_INVALID);

	/* final errors come back with their SQLSTATE */
	{
		const char *v[1] = {"pay_01JABCDEFGHJKMNPQRSTVWXYZ0"};
		const char *bad[1] = {"abc"};

		CHECK(pf_pg_exec(pg, "SELECT payflow.status($1)", 1, v, NULL, &err) == PF_ERR_NOT_FOUND);
		CHECK(strcmp(err.code, "PF003") == 0);
		CHECK(pf_pg_exec(pg, "SELECT $1::int", 1, bad, NULL, &err) == PF_ERR_FINAL);
		CHECK(strcmp(err.code, "22P02") == 0);
	}

	/*
	 * Each statement's kind decides whether it runs again (pg.h). A sequence
	 * counts the runs: nextval is not rolled back with the statement.
	 */
	CHECK(pf_pg_exec(admin, "DROP SEQUENCE IF EXISTS pg_smoke_runs", 0, NULL, NULL, &err) == PF_OK);
	CHECK(pf_pg_exec(admin, "CREATE SEQUENCE pg_smoke_runs", 0, NULL, NULL, &err) == PF_OK);
	/* odd runs lose their connection mid-statement, as a crash between commit and answer would */
	CHECK(pf_pg_exec(admin,
					 "CREATE OR REPLACE FUNCTION pg_smoke_lose_odd_runs() RETURNS bigint LANGUAGE plpgsql AS $$ "
					 "DECLARE n bigint := nextval('pg_smoke_runs'); BEGIN "
					 "IF n % 2 = 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(10); END IF; "
					 "RETURN n; END $$", 0, NULL, NULL, &err) == PF_OK);

	/* 57014 (statement_timeout) is reported as transient at once, never run again */
	hasty = pf_pg_create(url, &short_opts);
	{
		char	   *before = runs(admin);
		char	   *after;

		CHECK(pf_pg_exec(hasty, "SELECT nextval('pg_smoke_runs'), pg_sleep(1)", 0, NULL, NULL, &err) ==
			  PF_ERR_TRANSIENT);
		CHECK(strcmp(err.code, "57014") == 0);
		after = runs(admin);
		CHECK(before && after && atol(after) == atol(before) + 1);
		free(before);
		free(after);
	}
	pf_pg_destroy(hasty);
	CHECK(pf_pg_exec(admin, "SELECT setval('pg_smoke_runs', 2)", 0, NULL, NULL, &err) == PF_OK);

	/* lost in flight, idempotent: run again on a new connection (run 3 is lost, run 4 answers) */
	{
		char	   *n = NULL;
		PGresult   *res;

		if (CHECK(pf_pg_run(pg, PF_PG_IDEMPOTENT, "SELECT pg_smoke_lose_odd_runs()", 0, NULL, NULL, NULL, 0, &res,
							&err) == PF_OK))
		{
			n = strdup(PQgetvalue(res, 0, 0));
			PQclear(res);
		}
		CHECK(n != NULL && strcmp(n, "4") == 0);
		free(n);
	}
	/* lost in flight, once: not run again (run 5 only), and the caller is told the outcome is unknown */
	{
		unsigned long generation = pf_pg_generation(pg);
		char	   *n;

		CHECK(pf_pg_run(pg, PF_PG_ONCE, "SELECT pg_smoke_lose_odd_runs()", 0, NULL, NULL, NULL, 0, NULL, &err) ==
			  PF_ERR_TRANSIENT);
		CHECK(strcmp(err.code, "08007") == 0 && strstr(err.message, "may or may not") != NULL);
		n = runs(admin);
		CHECK(n != NULL && strcmp(n, "5") == 0);
		free(n);
		/* a once statement runs on a new connection when the old one died before it was sent */
		CHECK(pf_pg_run(pg, PF_PG_ONCE, "SELECT nextval('pg_smoke_runs')", 0, NULL, NULL, NULL, 0, NULL, &err) ==
			  PF_OK);
		CHECK(pf_pg_generation(pg) == generation + 1);
		pid = scalar(pg, "SELECT pg_backend_pid()::text", 0, NULL, &err);
		{
			const char *kv[1] = {pid};

			CHECK(pf_pg_exec(admin, "SELECT pg_terminate_backend($1::int, 5000)", 1, kv, NULL, &err) == PF_OK);
		}
		free(pid);
		CHECK(pf_pg_run(pg, PF_PG_ONCE, "SELECT nextval('pg_smoke_runs')", 0, NULL, NULL, NULL, 0, NULL, &err) ==
			  PF_OK);
		CHECK(pf_pg_generation(pg) == generation + 2);
		n = runs(admin);
		CHECK(n != NULL && strcmp(n, "7") == 0);
		free(n);
	}
	CHECK(pf_pg_exec(admin, "DROP FUNCTION pg_smoke_lose_odd_runs()", 0, NULL, NULL, &err) == PF_OK);
	CHECK(pf_pg_exec(admin, "DROP SEQUENCE pg_smoke_runs", 0, NULL, NULL, &err) == PF_OK);

	check_prepared(url, &opts, admin);

	/* LISTEN survives a lost connection */
	CHECK(pf_pg_listen(pg, "payflow_smoke", &err) == PF_OK);
	{
		const char *v[1] = {"payflow_smoke"};

		CHECK(pf_pg_exec(admin, "SELECT pg_notify($1, 'wake')", 1, v, NULL, &err) == PF_OK);
		CHECK(wait_notifications(pg, 2000) == 1);

		pid = scalar(pg, "SELECT pg_backend_pid()::text", 0, NULL, &err);
		{
			const char *kv[1] = {pid};

			CHECK(pf_pg_exec(admin, "SELECT pg_terminate_backend($1::int, 5000)", 1, kv, NULL, &err) == PF_OK);
		}
		/* the next statement reconnects by itself and listens again */
		{
			char	   *newpid = scalar(pg, "SELECT pg_backend_pid()::text", 0, NULL, &err);

			CHECK(newpid != NULL && strcmp(newpid, pid) != 0);
			free(newpid);
		}
		free(pid);
		CHECK(pf_pg_exec(admin, "SELECT pg_notify($1, 'wake')", 1, v, NULL, &err) == PF_OK);
		CHECK(wait_notifications(pg, 2000) == 1);
	}

	pf_buf_free(&out);
	pf_store_destroy(store);
	pf_pg_destroy(pg);
	pf_pg_destroy(admin);
	free(op);
	printf("pg_smoke: %d passed, %d failed\n", passed, failed);
	return failed == 0 ? 0 : 1;
}
