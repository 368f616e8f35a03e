/*
 * test_worker_legacy.c
 *		The payment worker's legacy-DBMS helpers that need no database: named
 *		placeholders, SQLSTATE classification with overrides, exact member
 *		text of the request JSON, the redaction of downstream error texts
 *		(card numbers masked by the Luhn check), and the settings that
 *		configure them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payflow/config.h"
#include "payflow/downstream_error.h"
#include "payflow/json_text.h"
#include "payflow/named_sql.h"
#include "payflow/sqlstate_rules.h"
#include "unit.h"

static void
expect_sql(const char *text, const char *want_sql, const char *want_names)
{
	pf_named_sql stmt;
	pf_error	err;
	char		names[512] = "";

	if (!CHECK(pf_named_sql_parse(text, &stmt, &err) == PF_OK))
	{
		fprintf(stderr, "  %s: %s\n", text, err.message);
		return;
	}
	CHECK_STR(stmt.sql, want_sql);
	for (int i = 0; i < stmt.n_params; i++)
	{
		if (i > 0)
			strcat(names, ",");
		strcat(names, stmt.names[i]);
	}
	CHECK_STR(names, want_names);
	pf_named_sql_free(&stmt);
}

static void
expect_sql_error(const char *text, const char *want_fragment)
{
	pf_named_sql stmt;
	pf_error	err;

	if (CHECK(pf_named_sql_parse(text, &stmt, &err) == PF_ERR_INVALID))
	{
		if (!CHECK(strstr(err.message, want_fragment) != NULL))
			fprintf(stderr, "  got: %s\n", err.message);
		CHECK(stmt.sql == NULL && stmt.n_params == 0);
	}
	else
		pf_named_sql_free(&stmt);
}

static void
test_named_sql(void)
{
	pf_named_sql stmt;
	pf_error	err;

	expect_sql("SELECT * FROM charge(:idempotency_key, :payment_id, :details.amount, :details.currency)",
			   "SELECT * FROM charge(?, ?, ?, ?)",
			   "idempotency_key,payment_id,details.amount,details.currency");
	/* casts, strings, identifiers, comments and dollar quotes hide nothing */
	expect_sql("SELECT :attempt::int, ':not_me', \"col:umn\", 'it''s :x' -- :comment\n, :details",
			   "SELECT ?::int, ':not_me', \"col:umn\", 'it''s :x' -- :comment\n, ?",
			   "attempt,details");
	expect_sql("SELECT /* :a /* nested :b */ :c */ :legacy_ref, $$ :d $$, $q$ :e $q$, $1",
			   "SELECT /* :a /* nested :b */ :c */ ?, $$ :d $$, $q$ :e $q$, $1",
			   "legacy_ref");
	expect_sql("SELECT E'\\':x', :operation_id", "SELECT E'\\':x', ?", "operation_id");
	/* the same name twice binds twice */
	expect_sql("{call charge(:payment_id, :payment_id)}", "{call charge(?, ?)}", "payment_id,payment_id");
	/* a colon that starts no name stays */
	expect_sql("SELECT '1' || : 'x', a[1:2]", "SELECT '1' || : 'x', a[1:2]", "");
	/* a dot not followed by a field ends the name */
	expect_sql("SELECT :details.", "SELECT ?.", "details");

	expect_sql_error("SELECT * FROM t WHERE a = ?", "bare '?'");
	expect_sql_error("SELECT 'open", "unterminated string literal");
	expect_sql_error("SELECT \"open", "unterminated quoted identifier");
	expect_sql_error("SELECT /* open", "unterminated block comment");
	expect_sql_error("SELECT $x$ open", "unterminated dollar-quoted");
	expect_sql_error("", "empty statement");

	CHECK(pf_named_sql_parse("SELECT :legacy_ref, :a", &stmt, &err) == PF_OK);
	CHECK(pf_named_sql_uses(&stmt, "legacy_ref"));
	CHECK(!pf_named_sql_uses(&stmt, "legacy"));
	pf_named_sql_free(&stmt);
}

static void
test_sqlstate_defaults(void)
{
	/* what psqlODBC reports for the fixture's faults (test/fixtures/legacy) */
	const char *retryable[] = {"08S01", "08001", "08006", "40001", "40P01", "57014", "HYT00", "HYT01",
	"HY008", "55P03", "53300", "57P01", "HY000", "XX000", "", "70100", "HY018", NULL};

	/* MariaDB's SIGNAL (45000), a strict-mode truncation (01000), its data error (22007) */
	const char *permanent[] = {"22023", "22P02", "23514", "23505", "P0001", "P0002", "42501", "42883",
	"28P01", "0A000", "45000", "01000", "22007", "23000", "42000", NULL};

	for (int i = 0; retryable[i]; i++)
		if (!CHECK(pf_sqlstate_is_retryable(NULL, retryable[i])))
			fprintf(stderr, "  %s should be retryable\n", retryable[i]);
	for (int i = 0; permanent[i]; i++)
		if (!CHECK(!pf_sqlstate_is_retryable(NULL, permanent[i])))
			fprintf(stderr, "  %s should be permanent\n", permanent[i]);
	CHECK(pf_sqlstate_is_retryable(NULL, NULL));
	CHECK(pf_sqlstate_is_connection_error("08S01"));
	CHECK(!pf_sqlstate_is_connection_error("40001"));
	CHECK(!pf_sqlstate_is_connection_error(NULL));
}

static void
test_sqlstate_overrides(void)
{
	pf_sqlstate_rules rules;
	char		why[256];

	if (CHECK(pf_sqlstate_rules_init(&rules, " p0001 , XX", "40P01,57", why, sizeof(why))))
	{
		CHECK(rules.n == 4);
		CHECK(pf_sqlstate_is_retryable(&rules, "P0001"));	/* a procedure's "try later" */
		CHECK(!pf_sqlstate_is_retryable(&rules, "P0002"));	/* its class stays permanent */
		CHECK(pf_sqlstate_is_retryable(&rules, "XX001"));
		CHECK(!pf_sqlstate_is_retryable(&rules, "40P01"));
		CHECK(pf_sqlstate_is_retryable(&rules, "40001"));
		CHECK(!pf_sqlstate_is_retryable(&rules, "57014"));	/* an override class beats a default code */
		CHECK(!pf_sqlstate_is_retryable(&rules, "22023"));
		pf_sqlstate_rules_free(&rules);
	}
	CHECK(pf_sqlstate_rules_init(&rules, NULL, NULL, why, sizeof(why)) && rules.n == 0);
	pf_sqlstate_rules_free(&rules);
	CHECK(pf_sqlstate_rules_init(&rules, "", ",,", why, sizeof(why)) && rules.n == 0);
	pf_sqlstate_rules_free(&rules);

	CHECK(!pf_sqlstate_rules_init(&rules, "4000", NULL, why, sizeof(why)));
	CHECK(strstr(why, "neither a SQLSTATE") != NULL);
	CHECK(!pf_sqlstate_rules_init(&rules, NULL, "40-01", why, sizeof(why)));
	CHECK(strstr(why, "permanent SQLSTATEs") != NULL);
	CHECK(!pf_sqlstate_rules_init(&rules, "40001", "40001", why, sizeof(why)));
	CHECK(strstr(why, "named twice") != NULL);
	CHECK(rules.rules == NULL);
}

static void
expect_masked(const char *text, const char *want)
{
	char	   *copy = strdup(text);

	pf_mask_card_numbers(copy);
	CHECK_STR(copy, want);
	free(copy);
}

static void
test_card_masking(void)
{
	CHECK(pf_luhn_valid("4111111111111111", 16));
	CHECK(pf_luhn_valid("5500005555555559", 16));
	CHECK(pf_luhn_valid("378282246310005", 15));
	CHECK(!pf_luhn_valid("4111111111111112", 16));
	CHECK(!pf_luhn_valid("41x1", 4));

	expect_masked("invalid input syntax for type numeric: \"4111111111111111x\"",
				  "invalid input syntax for type numeric: \"************1111x\"");
	expect_masked("Incorrect decimal value: 'card 5500 0055 5555 5559' for column",
				  "Incorrect decimal value: 'card **** **** **** 5559' for column");
	expect_masked("5500-0055-5555-5559", "****-****-****-5559");
	/* a card after other digit groups of the same run */
	expect_masked("ref 12 50 4111 1111 1111 1111 end", "ref 12 50 **** **** **** 1111 end");
	expect_masked("two: 4111111111111111, 378282246310005.", "two: ************1111, ***********0005.");
	/* not cards: Luhn-invalid, too short, too long, plain numbers */
	expect_masked("4111111111111112 and 411111111111 and 12.50 and 2024-05-01",
				  "4111111111111112 and 411111111111 and 12.50 and 2024-05-01");
	expect_masked("41111111111111111111", "41111111111111111111");
	expect_masked("", "");
	/* a UUID's digit groups (1767842442884 is Luhn-valid) are no card */
	expect_masked("{\"eventId\":\"17678424-4288-4eea-b643-769411a65bd3\",\"card\":\"4111111111111111\"}",
				  "{\"eventId\":\"17678424-4288-4eea-b643-769411a65bd3\",\"card\":\"************1111\"}");
	expect_masked("1767842442884", "*********2884");
	CHECK(pf_mask_card_numbers(NULL) == 0);
}

static void
test_downstream_errors(void)
{
	const char *echo = "invalid input syntax for type numeric: \"4111111111111111x\"";
	json_t	   *e;
	char		buf[256];

	CHECK_STR(pf_sqlstate_class("45000"), "declined");
	CHECK_STR(pf_sqlstate_class("P0001"), "declined");
	CHECK_STR(pf_sqlstate_class("22P02"), "data");
	CHECK_STR(pf_sqlstate_class("23505"), "constraint");
	CHECK_STR(pf_sqlstate_class("08S01"), "connection");
	CHECK_STR(pf_sqlstate_class("70100"), "timeout");
	CHECK_STR(pf_sqlstate_class("57014"), "timeout");
	CHECK_STR(pf_sqlstate_class("57P01"), "unavailable");
	CHECK_STR(pf_sqlstate_class("XX000"), "dbms");
	CHECK_STR(pf_sqlstate_class(NULL), "dbms");

	/* a DBMS's own text: payflow's words instead, the raw text nowhere */
	e = pf_downstream_sql_error("legacy", "22P02", echo, false);
	CHECK_STR(json_string_value(json_object_get(e, "code")), "22P02");
	CHECK_STR(json_string_value(json_object_get(e, "class")), "data");
	CHECK_STR(json_string_value(json_object_get(e, "message")),
			  "the legacy DBMS refused a value of the request (SQLSTATE 22P02)");
	CHECK(json_object_get(e, "rawMessage") == NULL);
	json_decref(e);

	/* ... and with the operator's consent, masked */
	e = pf_downstream_sql_error("postprocess", "22P02", echo, true);
	CHECK_STR(json_string_value(json_object_get(e, "rawMessage")),
			  "invalid input syntax for type numeric: \"************1111x\"");
	CHECK(strncmp(json_string_value(json_object_get(e, "message")), "the post-processing hook", 24) == 0);
	json_decref(e);

	/* a decline a procedure raised keeps its words, masked */
	e = pf_downstream_sql_error("legacy", "45000", "card 5500005555555559 declined", false);
	CHECK_STR(json_string_value(json_object_get(e, "message")), "card ************5559 declined");
	CHECK_STR(json_string_value(json_object_get(e, "class")), "declined");
	json_decref(e);

	/* an HTTP answer: its body goes, its message is masked */
	e = json_pack("{s:s,s:s,s:s}", "code", "http_400", "message", "hook answered HTTP 400: card 4111111111111111",
				  "body", "{\"card\":\"4111111111111111\"}");
	pf_downstream_error_redact(e, "rejected", NULL, false);
	CHECK_STR(json_string_value(json_object_get(e, "message")), "hook answered HTTP 400: card ************1111");
	CHECK(json_object_get(e, "body") == NULL);
	CHECK_STR(json_string_value(json_object_get(e, "class")), "rejected");
	json_decref(e);

	CHECK_STR(pf_downstream_log_text("22P02", echo, false, buf, sizeof(buf)),
			  "the legacy DBMS refused a value of the request (SQLSTATE 22P02)");
	CHECK(strstr(pf_downstream_log_text("22P02", echo, true, buf, sizeof(buf)), "4111111111111111") == NULL);
}

static void
expect_member(const char *json, const char *name, pf_json_member_kind want_kind, const char *want_text)
{
	pf_json_member_kind kind;
	char	   *text;
	pf_error	err;

	if (!CHECK(pf_json_member_text(json, strlen(json), name, &kind, &text, &err) == PF_OK))
	{
		fprintf(stderr, "  %s in %s: %s\n", name, json, err.message);
		return;
	}
	if (!CHECK(kind == want_kind))
		fprintf(stderr, "  %s in %s: kind %d, want %d\n", name, json, (int) kind, (int) want_kind);
	if (want_text)
		CHECK_STR(text, want_text);
	else
		CHECK(text == NULL);
	free(text);
}

static void
test_json_member_text(void)
{
	const char *details = "{\"amount\": 12.50, \"currency\":\"EUR\", \"tiny\":0.1, \"big\":12345678901234567890123,"
	" \"ok\":true, \"none\":null, \"nested\":{\"a\":[1,\"}\",{\"b\":2}]}, \"esc\":\"a\\\"b\\u00e9\","
	" \"k\\u0065y\":7, \"list\":[ 1, 2 ],\"last\":-1e-3}";
	pf_json_member_kind kind;
	char	   *text;
	pf_error	err;

	expect_member(details, "amount", PF_JSON_MEMBER_OTHER, "12.50");	/* not 12.5 */
	expect_member(details, "tiny", PF_JSON_MEMBER_OTHER, "0.1");
	expect_member(details, "big", PF_JSON_MEMBER_OTHER, "12345678901234567890123");
	expect_member(details, "currency", PF_JSON_MEMBER_STRING, "EUR");
	expect_member(details, "ok", PF_JSON_MEMBER_OTHER, "true");
	expect_member(details, "none", PF_JSON_MEMBER_NULL, NULL);
	expect_member(details, "nested", PF_JSON_MEMBER_OTHER, "{\"a\":[1,\"}\",{\"b\":2}]}");
	expect_member(details, "esc", PF_JSON_MEMBER_STRING, "a\"b\xc3\xa9");
	expect_member(details, "key", PF_JSON_MEMBER_OTHER, "7");	/* escaped key */
	expect_member(details, "list", PF_JSON_MEMBER_OTHER, "[ 1, 2 ]");
	expect_member(details, "last", PF_JSON_MEMBER_OTHER, "-1e-3");
	expect_member(details, "missing", PF_JSON_MEMBER_ABSENT, NULL);
	expect_member("{\"a\":1,\"a\":2}", "a", PF_JSON_MEMBER_OTHER, "2"); /* last wins */
	expect_member("{\"a\":\"x\",\"b\":{\"a\":1}}", "a", PF_JSON_MEMBER_STRING, "x");
	expect_member("{\"b\":{\"a\":1},\"a\":3}", "a", PF_JSON_MEMBER_OTHER, "3"); /* not the nested one */

	CHECK(pf_json_member_text("[1]", 3, "a", &kind, &text, &err) == PF_ERR_INVALID);
	CHECK(pf_json_member_text("{\"a\":", 5, "a", &kind, &text, &err) == PF_ERR_INVALID);
	CHECK(text == NULL && kind == PF_JSON_MEMBER_ABSENT);
}

static void
clear_env(void)
{
	const char *vars[] = {"PAYFLOW_CONFIG_FILE", "PAYFLOW_LEGACY_RETRYABLE_SQLSTATES",
		"PAYFLOW_LEGACY_PERMANENT_SQLSTATES", "PAYFLOW_LEGACY_POLL_INTERVAL_MS", "PAYFLOW_VISIBILITY_TIMEOUT",
	"PAYFLOW_DB_CONNECTIONS", "PAYFLOW_LEGACY_MODE", "PAYFLOW_RAW_ERROR_TEXT", "PAYFLOW_HAND_OVER_UNCANCELLED", NULL};

	for (int i = 0; vars[i]; i++)
		unsetenv(vars[i]);
	setenv("PAYFLOW_DATABASE_URL", "postgresql://localhost/payflow", 1);
	setenv("PAYFLOW_QUEUE_URL", "http://127.0.0.1:4566/000000000000/payment-requests", 1);
	setenv("AWS_REGION", "us-east-1", 1);
	setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "secret-example-key", 1);
	setenv("PAYFLOW_LEGACY_ODBC", "Driver={PostgreSQL Unicode};Server=127.0.0.1;Pwd=odbc-secret;", 1);
	setenv("PAYFLOW_LEGACY_CALL", "SELECT * FROM charge(:idempotency_key)", 1);
}

static void
test_settings(void)
{
	const unsigned payment = PF_PROGRAM_WORKER | PF_PROGRAM_PAYMENT;
	pf_config	cfg;
	char		error[512];

	clear_env();
	if (CHECK(pf_config_load(&cfg, payment, error, sizeof(error))))
	{
		CHECK(cfg.legacy_poll_interval_ms == 2000);
		CHECK(cfg.legacy_connect_timeout == 10);
		CHECK(cfg.db_connections == 0);
		CHECK(cfg.legacy_retryable_sqlstates == NULL);
		CHECK(strstr(cfg.legacy_done_statuses, "charged") != NULL);
		CHECK(strstr(cfg.legacy_failed_statuses, "failed") != NULL);
		CHECK(cfg.raw_error_text == 0 && cfg.hand_over_uncancelled == 0);	/* off unless asked for */
		pf_config_free(&cfg);
	}

	setenv("PAYFLOW_VISIBILITY_TIMEOUT", "4", 1);
	setenv("PAYFLOW_LEGACY_RETRYABLE_SQLSTATES", "P0001", 1);
	setenv("PAYFLOW_LEGACY_PERMANENT_SQLSTATES", "40P01,57", 1);
	if (CHECK(pf_config_load(&cfg, payment, error, sizeof(error))))
	{
		CHECK(cfg.visibility_timeout == 4);
		CHECK_STR(cfg.legacy_retryable_sqlstates, "P0001");
		pf_config_free(&cfg);
	}

	setenv("PAYFLOW_RAW_ERROR_TEXT", "true", 1);
	setenv("PAYFLOW_HAND_OVER_UNCANCELLED", "true", 1);
	if (CHECK(pf_config_load(&cfg, payment, error, sizeof(error))))
	{
		CHECK(cfg.raw_error_text == 1 && cfg.hand_over_uncancelled == 1);
		pf_config_free(&cfg);
	}
	setenv("PAYFLOW_RAW_ERROR_TEXT", "yes", 1);
	CHECK(!pf_config_load(&cfg, payment, error, sizeof(error)));
	CHECK(strstr(error, "PAYFLOW_RAW_ERROR_TEXT") != NULL);
	unsetenv("PAYFLOW_RAW_ERROR_TEXT");
	unsetenv("PAYFLOW_HAND_OVER_UNCANCELLED");

	setenv("PAYFLOW_VISIBILITY_TIMEOUT", "1", 1);
	CHECK(!pf_config_load(&cfg, payment, error, sizeof(error)));
	CHECK(strstr(error, "PAYFLOW_VISIBILITY_TIMEOUT") != NULL);
	unsetenv("PAYFLOW_VISIBILITY_TIMEOUT");

	setenv("PAYFLOW_LEGACY_PERMANENT_SQLSTATES", "P0001", 1);
	CHECK(!pf_config_load(&cfg, payment, error, sizeof(error)));
	CHECK_STR(error, "invalid PAYFLOW_LEGACY_PERMANENT_SQLSTATES: permanent SQLSTATEs: P0001 is named twice, "
			  "or also in the other list");
	setenv("PAYFLOW_LEGACY_PERMANENT_SQLSTATES", "4000", 1);
	unsetenv("PAYFLOW_LEGACY_RETRYABLE_SQLSTATES");
	CHECK(!pf_config_load(&cfg, payment, error, sizeof(error)));
	CHECK(strncmp(error, "invalid PAYFLOW_LEGACY_PERMANENT_SQLSTATES", 42) == 0);
	unsetenv("PAYFLOW_LEGACY_PERMANENT_SQLSTATES");
}

int
main(void)
{
	test_named_sql();
	test_sqlstate_defaults();
	test_sqlstate_overrides();
	test_card_masking();
	test_downstream_errors();
	test_json_member_text();
	test_settings();
	return unit_finish("test_worker_legacy");
}
