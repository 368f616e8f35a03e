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

int
main(void)
{
	const char *url = getenv("PAYFLOW_DATABASE_URL");
	pf_pg_options opts = {"payflow-pg-smoke", 5, 0, 4, 50, 500, NULL};
	pf_pg_options short_opts = {"payflow-pg-smoke-timeout", 5, 100, 3, 10, 50, NULL};
	pf_pg	   *pg;
	pf_pg	   *admin;
	pf_pg	   *hasty;
	pf_error	err;
	pf_config	cfg;
	pf_store   *store;
	pf_payload_ref ref;
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
	if (CHECK(pf_store_write(store, op, "result.json", payload, strlen(payload), &ref, &err) == PF_OK))
	{
		CHECK(ref.store == PF_STORE_PG && ref.size == (long long) strlen(payload));
		CHECK(strstr(ref.key, op) != NULL);
		CHECK(pf_checksum_verify(payload, strlen(payload), ref.checksum));
		CHECK(pf_store_read(store, &ref, &out, &err) == PF_OK);
		CHECK(out.len == strlen(payload) && memcmp(out.data, payload, out.len) == 0);

		/* a reference whose checksum does not match is refused by the database: PF005 */
		{
			pf_payload_ref bad;

			pf_payload_ref_copy(&bad, &ref);
			memcpy(bad.checksum + 7, "00000000", 8);
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

	/* 57014 (statement_timeout) is retried, then reported as transient */
	hasty = pf_pg_create(url, &short_opts);
	{
		int64_t		t0 = pf_now_ms();

		CHECK(pf_pg_exec(hasty, "SELECT pg_sleep(1)", 0, NULL, NULL, &err) == PF_ERR_TRANSIENT);
		CHECK(strcmp(err.code, "57014") == 0);
		CHECK(pf_now_ms() - t0 < 2000);
	}
	pf_pg_destroy(hasty);

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
