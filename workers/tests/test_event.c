/*
 * test_event.c
 *		Event envelopes (valid ones of each type and every way to be wrong),
 *		claim-check references and checksums.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payflow/digest.h"
#include "payflow/event.h"
#include "payflow/payload_ref.h"
#include "unit.h"

#define OPID "pay_01JABCDEFGHJKMNPQRSTVWXYZ0"
#define UUID "0b5c1d6e-8f4a-4c2b-9d3e-1a2b3c4d5e6f"
#define SUM "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
#define KEYED_SUM "hmac-sha256:4e7b922ee51f5aa0e65814d8d7477dad4e97dc89b993690fed1a7fcd7a72efd0"
#define REF "{\"store\":\"pg\",\"key\":\"payments/" OPID "/request.json\",\"checksum\":\"" SUM "\",\"size\":4}"

static char *
envelope(const char *type, const char *ref_member, const char *extra)
{
	static char buf[4096];

	snprintf(buf, sizeof(buf),
			 "{\"eventType\":\"%s\",\"eventVersion\":1,\"eventId\":\"" UUID "\","
			 "\"operationId\":\"" OPID "\",\"paymentId\":\"payment-12345\",\"attempt\":1,"
			 "\"correlationId\":\"req-789\",\"createdAt\":\"2024-10-01T12:00:00.123Z\"%s%s%s%s%s",
			 type, ref_member ? ",\"" : "", ref_member ? ref_member : "", ref_member ? "\":" REF : "",
			 extra ? extra : "", "}");
	return buf;
}

static pf_event_status
parse(const char *body, pf_event *ev)
{
	char		msg[256];
	pf_event_status st = pf_event_parse(body, strlen(body), ev, msg, sizeof(msg));

	if (st != PF_EVENT_OK)
		CHECK(msg[0] != '\0');	/* every failure says why */
	return st;
}

static void
test_valid_events(void)
{
	struct
	{
		const char *type;
		const char *member;
		pf_event_type want;
		const char *destination;
	}			cases[] = {
		{"PaymentRequested", "payload", PF_EVENT_PAYMENT_REQUESTED, "payment-requests"},
		{"PaymentCompleted", "result", PF_EVENT_PAYMENT_COMPLETED, "payment-completed"},
		{"InvoiceRequested", "invoiceInput", PF_EVENT_INVOICE_REQUESTED, "invoice-requests"},
		{"OperationCompleted", NULL, PF_EVENT_OPERATION_COMPLETED, "operation-events"},
		{"OperationFailed", NULL, PF_EVENT_OPERATION_FAILED, "operation-events"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
	{
		pf_event	ev;

		if (!CHECK(parse(envelope(cases[i].type, cases[i].member, NULL), &ev) == PF_EVENT_OK))
			continue;
		CHECK(ev.type == cases[i].want);
		CHECK_STR(pf_event_type_name(ev.type), cases[i].type);
		CHECK_STR(pf_event_destination(ev.type), cases[i].destination);
		CHECK_STR(ev.event_id, UUID);
		CHECK_STR(ev.operation_id, OPID);
		CHECK_STR(ev.payment_id, "payment-12345");
		CHECK_STR(ev.correlation_id, "req-789");
		CHECK(ev.attempt == 1);
		CHECK(ev.has_ref == (cases[i].member != NULL));
		if (ev.has_ref)
		{
			CHECK(ev.ref.store == PF_STORE_PG);
			CHECK_STR(ev.ref.key, "payments/" OPID "/request.json");
			CHECK_STR(ev.ref.checksum, SUM);
			CHECK(ev.ref.size == 4);
		}
		pf_event_free(&ev);
	}
}

static void
test_optional_members(void)
{
	pf_event	ev;
	const char *body =
	"{\"eventType\":\"OperationFailed\",\"eventVersion\":1,\"eventId\":\"" UUID "\","
	"\"operationId\":\"" OPID "\",\"paymentId\":\"p\",\"attempt\":3,"
	"\"createdAt\":\"2024-10-01T12:00:00.123456+00:00\",\"error\":{\"code\":\"X\"},"
	"\"someFutureField\":true}";

	CHECK(parse(body, &ev) == PF_EVENT_OK);
	CHECK(ev.correlation_id == NULL);
	CHECK(ev.attempt == 3);
	/* members the library does not model stay reachable */
	CHECK(json_is_object(json_object_get(ev.body, "error")));
	pf_event_free(&ev);

	/* OperationCompleted as the extension writes it: the result inline */
	CHECK(parse("{\"eventType\":\"OperationCompleted\",\"eventVersion\":1,\"eventId\":\"" UUID "\","
				"\"operationId\":\"" OPID "\",\"paymentId\":\"p\",\"attempt\":1,\"status\":\"COMPLETED\","
				"\"createdAt\":\"2024-10-01T12:00:00Z\",\"result\":{\"invoiceId\":\"inv_1\",\"httpStatus\":201}}",
				&ev) == PF_EVENT_OK);
	CHECK(!ev.has_ref);
	pf_event_free(&ev);

	/* a null correlationId is the same as none */
	CHECK(parse("{\"eventType\":\"OperationCompleted\",\"eventVersion\":1,\"eventId\":\"" UUID "\","
				"\"operationId\":\"" OPID "\",\"paymentId\":\"p\",\"attempt\":1,\"correlationId\":null,"
				"\"createdAt\":\"2024-10-01T12:00:00Z\"}", &ev) == PF_EVENT_OK);
	pf_event_free(&ev);
}

static void
expect(const char *body, pf_event_status want, const char *why)
{
	pf_event	ev;
	pf_event_status got = parse(body, &ev);

	if (!CHECK(got == want))
		fprintf(stderr, "  %s: got %s want %s\n", why, pf_event_status_name(got), pf_event_status_name(want));
	pf_event_free(&ev);
}

static void
replace_and_expect(const char *from, const char *to, pf_event_status want)
{
	char		body[4096];
	const char *base = envelope("PaymentRequested", "payload", NULL);
	const char *at = strstr(base, from);

	if (!CHECK(at != NULL))
		return;
	snprintf(body, sizeof(body), "%.*s%s%s", (int) (at - base), base, to, at + strlen(from));
	expect(body, want, body);
}

static void
test_invalid_events(void)
{
	const char *good = envelope("PaymentRequested", "payload", NULL);
	char		truncated[4096];

	/* garbage and truncation */
	expect("", PF_EVENT_BAD_JSON, "empty");
	expect("garbage", PF_EVENT_BAD_JSON, "garbage");
	expect("\x01\xff\xfe", PF_EVENT_BAD_JSON, "binary");
	expect("[1,2,3]", PF_EVENT_BAD_JSON, "array");
	expect("\"PaymentRequested\"", PF_EVENT_BAD_JSON, "string");
	for (size_t cut = 1; cut < strlen(good); cut += 7)
	{
		snprintf(truncated, sizeof(truncated), "%.*s", (int) cut, good);
		expect(truncated, PF_EVENT_BAD_JSON, "truncated");
	}
	expect("{\"eventType\":\"PaymentRequested\",\"eventType\":\"PaymentCompleted\"}", PF_EVENT_BAD_JSON,
		   "duplicate member");

	/* type and version */
	replace_and_expect("\"PaymentRequested\"", "\"PaymentRefunded\"", PF_EVENT_UNKNOWN_TYPE);
	replace_and_expect("\"eventType\":\"PaymentRequested\",", "", PF_EVENT_UNKNOWN_TYPE);
	replace_and_expect("\"PaymentRequested\"", "42", PF_EVENT_UNKNOWN_TYPE);
	replace_and_expect("\"eventVersion\":1", "\"eventVersion\":2", PF_EVENT_UNKNOWN_VERSION);
	replace_and_expect("\"eventVersion\":1", "\"eventVersion\":\"1\"", PF_EVENT_UNKNOWN_VERSION);
	replace_and_expect("\"eventVersion\":1", "\"eventVersion\":1.0", PF_EVENT_UNKNOWN_VERSION);
	replace_and_expect("\"eventVersion\":1,", "", PF_EVENT_UNKNOWN_VERSION);

	/* missing members */
	replace_and_expect("\"eventId\":\"" UUID "\",", "", PF_EVENT_MISSING_FIELD);
	replace_and_expect("\"operationId\":\"" OPID "\",", "", PF_EVENT_MISSING_FIELD);
	replace_and_expect("\"paymentId\":\"payment-12345\",", "", PF_EVENT_MISSING_FIELD);
	replace_and_expect("\"attempt\":1,", "", PF_EVENT_MISSING_FIELD);
	replace_and_expect(",\"createdAt\":\"2024-10-01T12:00:00.123Z\"", "", PF_EVENT_MISSING_FIELD);
	replace_and_expect(",\"payload\":", ",\"result\":", PF_EVENT_MISSING_FIELD);

	/* wrong types and bad ids */
	replace_and_expect("\"" UUID "\"", "\"not-a-uuid\"", PF_EVENT_BAD_FIELD);
	replace_and_expect("\"" UUID "\"", "\"0b5c1d6e8f4a4c2b9d3e1a2b3c4d5e6f\"", PF_EVENT_BAD_FIELD);
	replace_and_expect("\"" UUID "\"", "\"0b5c1d6e-8f4a-4c2b-9d3e-1a2b3c4d5e6g\"", PF_EVENT_BAD_FIELD);
	replace_and_expect("\"" UUID "\"", "17", PF_EVENT_BAD_FIELD);
	replace_and_expect("\"" OPID "\"", "\"pay_01JABC\"", PF_EVENT_BAD_FIELD);
	replace_and_expect("\"" OPID "\"", "\"op_01JABCDEFGHJKMNPQRSTVWXYZ0\"", PF_EVENT_BAD_FIELD);
	replace_and_expect("\"" OPID "\"", "\"pay_01JABCDEFGHIKMNPQRSTVWXYZ0\"", PF_EVENT_BAD_FIELD);	/* I */
	replace_and_expect("\"" OPID "\"", "\"pay_01jabcdefghjkmnpqrstvwxyz0\"", PF_EVENT_BAD_FIELD);
	replace_and_expect("\"" OPID "\"", "\"pay_81JABCDEFGHJKMNPQRSTVWXYZ0\"", PF_EVENT_BAD_FIELD);	/* > 128 bits */
	replace_and_expect("\"payment-12345\"", "\"\"", PF_EVENT_BAD_FIELD);
	replace_and_expect("\"payment-12345\"", "12345", PF_EVENT_BAD_FIELD);
	replace_and_expect("\"attempt\":1", "\"attempt\":0", PF_EVENT_BAD_FIELD);
	replace_and_expect("\"attempt\":1", "\"attempt\":\"1\"", PF_EVENT_BAD_FIELD);
	replace_and_expect("\"attempt\":1", "\"attempt\":1.5", PF_EVENT_BAD_FIELD);
	replace_and_expect("\"req-789\"", "789", PF_EVENT_BAD_FIELD);
	replace_and_expect("2024-10-01T12:00:00.123Z", "yesterday", PF_EVENT_BAD_FIELD);
	replace_and_expect("2024-10-01T12:00:00.123Z", "2024-13-01T12:00:00Z", PF_EVENT_BAD_FIELD);
	replace_and_expect("2024-10-01T12:00:00.123Z", "2024-10-01T12:00:00", PF_EVENT_BAD_FIELD);
	replace_and_expect("\"store\":\"pg\"", "\"store\":\"ftp\"", PF_EVENT_BAD_FIELD);
	replace_and_expect("\"size\":4", "\"size\":-1", PF_EVENT_BAD_FIELD);
	replace_and_expect("\"size\":4", "\"size\":\"4\"", PF_EVENT_BAD_FIELD);
	replace_and_expect(SUM, "md5:abc", PF_EVENT_BAD_FIELD);
	replace_and_expect("payments/" OPID "/request.json", "../etc/passwd", PF_EVENT_BAD_FIELD);
	replace_and_expect(REF, "\"not an object\"", PF_EVENT_BAD_FIELD);
}

static void
test_checksums(void)
{
	char		sum[PF_CHECKSUM_LEN + 1];
	char		upper[PF_CHECKSUM_LEN + 1];
	unsigned char digest[32];
	char	   *b64;

	pf_checksum_key key = {0};
	pf_checksum_key other = {0};

	/* no key, no checksum: nothing is ever named by a plain hash */
	CHECK(!pf_checksum_of(&key, "test", 4, sum));
	CHECK(!pf_checksum_of(NULL, "test", 4, sum));
	CHECK(pf_checksum_key_from_hex("\\x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", &key));
	CHECK(!pf_checksum_key_from_hex("0001", &other));
	CHECK(!pf_checksum_key_from_hex("zz0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", &other));
	CHECK(!other.set);
	/* HMAC-SHA256 as "openssl dgst -sha256 -mac HMAC -macopt hexkey:0001…1f" gives it */
	CHECK(pf_checksum_of(&key, "test", 4, sum));
	CHECK_STR(sum, KEYED_SUM);
	CHECK(pf_checksum_keyed(sum));
	CHECK(pf_checksum_verify(&key, "test", 4, KEYED_SUM));
	CHECK(!pf_checksum_verify(&key, "tesT", 4, KEYED_SUM));
	CHECK(!pf_checksum_verify(NULL, "test", 4, KEYED_SUM)); /* a keyed one needs the key */
	CHECK(pf_checksum_key_from_hex("1f1e1d1c1b1a191817161514131211100f0e0d0c0b0a09080706050403020100", &other));
	CHECK(!pf_checksum_verify(&other, "test", 4, KEYED_SUM));
	/* a plain one (references made before 0.5.0) is still read */
	CHECK(!pf_checksum_keyed(SUM));
	CHECK(pf_checksum_verify(NULL, "test", 4, SUM));
	CHECK(pf_checksum_verify(&key, "test", 4, SUM));
	CHECK(!pf_checksum_verify(&key, "tesT", 4, SUM));
	CHECK(!pf_checksum_verify(&key, "test", 4, "sha256:"));
	CHECK(pf_checksum_parse(KEYED_SUM, digest));
	CHECK(digest[0] == 0x4e && digest[31] == 0xd0);
	CHECK(pf_checksum_parse(SUM, digest));
	CHECK(digest[0] == 0x9f && digest[31] == 0x08);
	snprintf(upper, sizeof(upper), "sha256:%s", "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08");
	CHECK(pf_checksum_parse(upper, NULL));
	CHECK(!pf_checksum_parse("sha256:9f86", NULL));
	CHECK(!pf_checksum_parse("SHA256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", NULL));
	CHECK(!pf_checksum_parse("sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a0z", NULL));
	CHECK(!pf_checksum_parse(NULL, NULL));

	pf_sha256("", 0, digest);
	b64 = pf_base64_encode(digest, 32);
	CHECK_STR(b64, "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=");
	free(b64);
	b64 = pf_base64_encode("ab", 2);
	CHECK_STR(b64, "YWI=");
	free(b64);
}

static void
test_refs(void)
{
	pf_payload_ref ref;
	pf_payload_ref copy;
	pf_error	err;
	char	   *text;

	CHECK(pf_payload_ref_parse(REF, &ref, &err) == PF_OK);
	text = pf_payload_ref_dumps(&ref);
	CHECK_STR(text, REF);		/* round trip, member order kept */
	free(text);
	pf_payload_ref_copy(&copy, &ref);
	pf_payload_ref_free(&ref);
	CHECK_STR(copy.key, "payments/" OPID "/request.json");
	pf_payload_ref_free(&copy);

	/* upper-case hex is accepted and normalised */
	CHECK(pf_payload_ref_parse("{\"store\":\"s3\",\"key\":\"k\",\"checksum\":"
							   "\"sha256:9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08\",\"size\":0}",
							   &ref, &err) == PF_OK);
	CHECK(ref.store == PF_STORE_S3);
	CHECK_STR(ref.checksum, SUM);
	pf_payload_ref_free(&ref);

	CHECK(pf_payload_ref_parse("{", &ref, &err) == PF_ERR_INVALID);
	CHECK(pf_payload_ref_parse("{\"store\":\"pg\"}", &ref, &err) == PF_ERR_INVALID);
	CHECK(strstr(err.message, "key") != NULL);
	CHECK(pf_payload_ref_parse("{\"store\":\"pg\",\"key\":\"k\",\"checksum\":\"" SUM "\",\"size\":1.5}", &ref, &err)
		  == PF_ERR_INVALID);
	CHECK(strstr(err.message, "size") != NULL);

	CHECK(pf_payload_key_valid("payments/" OPID "/request.json"));
	CHECK(!pf_payload_key_valid(""));
	CHECK(!pf_payload_key_valid("/abs"));
	CHECK(!pf_payload_key_valid("a//b"));
	CHECK(!pf_payload_key_valid("a/./b"));
	CHECK(!pf_payload_key_valid("a/../b"));
	CHECK(!pf_payload_key_valid("a/b/"));
	CHECK(!pf_payload_key_valid("a\nb"));
}

static void
test_ids(void)
{
	CHECK(pf_uuid_valid(UUID));
	CHECK(pf_uuid_valid("0B5C1D6E-8F4A-4C2B-9D3E-1A2B3C4D5E6F"));
	CHECK(!pf_uuid_valid(""));
	CHECK(pf_operation_id_valid(OPID));
	CHECK(!pf_operation_id_valid("pay_"));
	CHECK(pf_timestamp_valid("2024-02-29T23:59:60Z"));
	CHECK(pf_timestamp_valid("2024-02-29T23:59:59-05:00"));
	CHECK(!pf_timestamp_valid("2024-02-29T23:59:59+0500"));
	CHECK(!pf_timestamp_valid("2024-02-29T23:59:59.Z"));
}

/* the payload key rules: one for an operation's payloads, one for a request put before its operation exists */
static void
test_payload_keys(void)
{
	char		key[PF_PAYLOAD_KEY_MAX + 1];
	char		name[PF_PAYLOAD_KEY_MAX];

	CHECK(pf_payload_key(OPID, "request.json", key));
	CHECK_STR(key, "payments/" OPID "/request.json");
	CHECK(pf_request_key(KEYED_SUM, key));
	CHECK_STR(key, "requests/hmac-4e7b922ee51f5aa0e65814d8d7477dad4e97dc89b993690fed1a7fcd7a72efd0.json");
	/* never named by a plain hash of its content */
	CHECK(!pf_request_key(SUM, key));
	CHECK(!pf_request_key("md5:1234", key));
	memset(name, 'x', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	CHECK(!pf_payload_key(OPID, name, key));	/* longer than a key may be */
}

/* a step added by SQL: its request event is defined at start-up from the database */
static void
test_step_request(void)
{
	pf_event	ev;

	/* not known before it is defined */
	CHECK(parse(envelope("RiskCheckRequested", "input", NULL), &ev) == PF_EVENT_UNKNOWN_TYPE);
	CHECK_STR(pf_event_type_name(PF_EVENT_STEP_REQUESTED), "unknown");
	/* a built-in type's name cannot be taken */
	CHECK(!pf_event_define_step_request("InvoiceRequested", "input", "x"));
	CHECK(!pf_event_define_step_request("", "input", "x"));
	CHECK(pf_event_define_step_request("RiskCheckRequested", "input", "risk-requests"));
	CHECK_STR(pf_event_type_name(PF_EVENT_STEP_REQUESTED), "RiskCheckRequested");
	CHECK_STR(pf_event_destination(PF_EVENT_STEP_REQUESTED), "risk-requests");
	CHECK_STR(pf_event_ref_member(PF_EVENT_STEP_REQUESTED), "input");
	if (CHECK(parse(envelope("RiskCheckRequested", "input", NULL), &ev) == PF_EVENT_OK))
	{
		CHECK(ev.type == PF_EVENT_STEP_REQUESTED && ev.has_ref);
		CHECK_STR(ev.ref.key, "payments/" OPID "/request.json");
		pf_event_free(&ev);
	}
	/* the claim carries the input too: the member may be absent, but not malformed */
	if (CHECK(parse(envelope("RiskCheckRequested", NULL, NULL), &ev) == PF_EVENT_OK))
	{
		CHECK(!ev.has_ref);
		pf_event_free(&ev);
	}
	CHECK(parse(envelope("RiskCheckRequested", NULL, ",\"input\":{\"store\":\"ftp\"}"), &ev) == PF_EVENT_BAD_FIELD);
	/* the built-in types are unchanged */
	if (CHECK(parse(envelope("InvoiceRequested", "invoiceInput", NULL), &ev) == PF_EVENT_OK))
	{
		CHECK(ev.type == PF_EVENT_INVOICE_REQUESTED);
		pf_event_free(&ev);
	}
	/* redefined (one per process, but safe) */
	CHECK(pf_event_define_step_request("NotifyCustomerRequested", NULL, NULL));
	CHECK(parse(envelope("RiskCheckRequested", "input", NULL), &ev) == PF_EVENT_UNKNOWN_TYPE);
}

int
main(void)
{
	test_valid_events();
	test_optional_members();
	test_invalid_events();
	test_checksums();
	test_refs();
	test_ids();
	test_step_request();
	test_payload_keys();
	return unit_finish("test_event");
}
