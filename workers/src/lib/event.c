/*
 * event.c
 *		Parsing and validating event envelopes.
 */
#include "payflow/event.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payflow/buf.h"

#define PAYMENT_ID_MAX 255
#define CORRELATION_ID_MAX 255

typedef struct event_kind
{
	const char *name;
	const char *destination;
	const char *ref_member;
	bool		ref_required;
} event_kind;

/* Indexed by pf_event_type. */
static event_kind event_kinds[] = {
	{"PaymentRequested", "payment-requests", "payload", true},
	{"PaymentCompleted", "payment-completed", "result", true},
	{"InvoiceRequested", "invoice-requests", "invoiceInput", true},
	/* its "result" is the last step's result object inline, not a reference */
	{"OperationCompleted", "operation-events", NULL, false},
	{"OperationFailed", "operation-events", NULL, false},
	/* set by pf_event_define_step_request; a NULL name matches nothing */
	{NULL, NULL, NULL, false},
};

#define N_EVENT_KINDS (sizeof(event_kinds) / sizeof(event_kinds[0]))

const char *
pf_event_type_name(pf_event_type type)
{
	return (size_t) type < N_EVENT_KINDS && event_kinds[type].name ? event_kinds[type].name : "unknown";
}

bool
pf_event_define_step_request(const char *name, const char *ref_member, const char *destination)
{
	event_kind *k = &event_kinds[PF_EVENT_STEP_REQUESTED];
	pf_event_type known;

	if (name == NULL || name[0] == '\0' || (pf_event_type_parse(name, &known) && known != PF_EVENT_STEP_REQUESTED))
		return false;
	free((char *) k->name);
	free((char *) k->ref_member);
	free((char *) k->destination);
	k->name = pf_strdup(name);
	k->ref_member = ref_member ? pf_strdup(ref_member) : NULL;
	k->destination = destination ? pf_strdup(destination) : NULL;
	/* the claim answer carries the input reference too: the event need not */
	k->ref_required = false;
	return true;
}

bool
pf_event_type_parse(const char *name, pf_event_type *type)
{
	for (size_t i = 0; i < N_EVENT_KINDS; i++)
	{
		if (event_kinds[i].name != NULL && strcmp(event_kinds[i].name, name) == 0)
		{
			*type = (pf_event_type) i;
			return true;
		}
	}
	return false;
}

const char *
pf_event_destination(pf_event_type type)
{
	return (size_t) type < N_EVENT_KINDS ? event_kinds[type].destination : NULL;
}

const char *
pf_event_ref_member(pf_event_type type)
{
	return (size_t) type < N_EVENT_KINDS ? event_kinds[type].ref_member : NULL;
}

const char *
pf_event_status_name(pf_event_status status)
{
	switch (status)
	{
		case PF_EVENT_OK:
			return "ok";
		case PF_EVENT_BAD_JSON:
			return "bad_json";
		case PF_EVENT_UNKNOWN_TYPE:
			return "unknown_type";
		case PF_EVENT_UNKNOWN_VERSION:
			return "unknown_version";
		case PF_EVENT_MISSING_FIELD:
			return "missing_field";
		case PF_EVENT_BAD_FIELD:
			return "bad_field";
	}
	return "unknown";
}

bool
pf_uuid_valid(const char *text)
{
	if (strlen(text) != PF_UUID_LEN)
		return false;
	for (int i = 0; i < PF_UUID_LEN; i++)
	{
		if (i == 8 || i == 13 || i == 18 || i == 23)
		{
			if (text[i] != '-')
				return false;
		}
		else if (!isxdigit((unsigned char) text[i]))
			return false;
	}
	return true;
}

bool
pf_operation_id_valid(const char *text)
{
	/* Crockford base32 as ULIDs print it: no I, L, O, U; upper case */
	static const char alphabet[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

	if (strlen(text) != PF_OPERATION_ID_LEN || strncmp(text, "pay_", 4) != 0)
		return false;
	for (int i = 4; i < PF_OPERATION_ID_LEN; i++)
		if (strchr(alphabet, text[i]) == NULL)
			return false;
	/* 26 base32 digits hold 130 bits; a ULID's first digit is at most 7 */
	return text[4] <= '7';
}

static bool
digits(const char *p, int n)
{
	for (int i = 0; i < n; i++)
		if (!isdigit((unsigned char) p[i]))
			return false;
	return true;
}

/*
 * RFC 3339 date-time: YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM). PostgreSQL's
 * to_json(timestamptz) writes "+00:00", JavaScript writes "Z"; both pass.
 */
bool
pf_timestamp_valid(const char *t)
{
	size_t		len = strlen(t);
	const char *p;

	if (len < 20 || !digits(t, 4) || t[4] != '-' || !digits(t + 5, 2) || t[7] != '-' ||
		!digits(t + 8, 2) || (t[10] != 'T' && t[10] != 't' && t[10] != ' ') ||
		!digits(t + 11, 2) || t[13] != ':' || !digits(t + 14, 2) || t[16] != ':' ||
		!digits(t + 17, 2))
		return false;
	if (atoi(t + 5) < 1 || atoi(t + 5) > 12 || atoi(t + 8) < 1 || atoi(t + 8) > 31 ||
		atoi(t + 11) > 23 || atoi(t + 14) > 59 || atoi(t + 17) > 60)
		return false;
	p = t + 19;
	if (*p == '.')
	{
		p++;
		if (!isdigit((unsigned char) *p))
			return false;
		while (isdigit((unsigned char) *p))
			p++;
	}
	if ((*p == 'Z' || *p == 'z') && p[1] == '\0')
		return true;
	if ((*p == '+' || *p == '-') && digits(p + 1, 2) && p[3] == ':' && digits(p + 4, 2) && p[6] == '\0')
		return true;
	return false;
}

static pf_event_status
fail(pf_event_status status, char *message, size_t message_len, const char *fmt,...)
{
	va_list		ap;

	if (message && message_len > 0)
	{
		va_start(ap, fmt);
		vsnprintf(message, message_len, fmt, ap);
		va_end(ap);
	}
	return status;
}

/* A required string member; NULL with status set when absent or mistyped. */
static const char *
get_string(json_t *obj, const char *name, bool required, pf_event_status *status,
		   char *message, size_t message_len)
{
	json_t	   *v = json_object_get(obj, name);

	if (v == NULL || json_is_null(v))
	{
		if (required)
			*status = fail(PF_EVENT_MISSING_FIELD, message, message_len, "missing %s", name);
		return NULL;
	}
	if (!json_is_string(v))
	{
		*status = fail(PF_EVENT_BAD_FIELD, message, message_len, "%s must be a string", name);
		return NULL;
	}
	return json_string_value(v);
}

static pf_event_status
parse_envelope(json_t *body, pf_event *ev, char *message, size_t message_len)
{
	pf_event_status status = PF_EVENT_OK;
	const char *type_name;
	json_t	   *version,
			   *attempt,
			   *ref;
	const char *s;
	const char *ref_member;

	if (!json_is_object(body))
		return fail(PF_EVENT_BAD_JSON, message, message_len, "message body is not a JSON object");

	/* type and version first: nothing else can be judged without them */
	type_name = json_string_value(json_object_get(body, "eventType"));
	if (type_name == NULL)
		return fail(PF_EVENT_UNKNOWN_TYPE, message, message_len, "eventType missing or not a string");
	if (!pf_event_type_parse(type_name, &ev->type))
		return fail(PF_EVENT_UNKNOWN_TYPE, message, message_len, "unknown eventType \"%.64s\"", type_name);

	version = json_object_get(body, "eventVersion");
	if (!json_is_integer(version))
		return fail(PF_EVENT_UNKNOWN_VERSION, message, message_len, "eventVersion missing or not an integer");
	if (json_integer_value(version) != PF_EVENT_VERSION)
		return fail(PF_EVENT_UNKNOWN_VERSION, message, message_len, "unknown eventVersion %lld of %s",
					(long long) json_integer_value(version), type_name);
	ev->version = PF_EVENT_VERSION;

	if ((s = get_string(body, "eventId", true, &status, message, message_len)) == NULL)
		return status;
	if (!pf_uuid_valid(s))
		return fail(PF_EVENT_BAD_FIELD, message, message_len, "eventId is not a UUID");
	memcpy(ev->event_id, s, PF_UUID_LEN + 1);

	if ((s = get_string(body, "operationId", true, &status, message, message_len)) == NULL)
		return status;
	if (!pf_operation_id_valid(s))
		return fail(PF_EVENT_BAD_FIELD, message, message_len, "operationId is not pay_ followed by a ULID");
	memcpy(ev->operation_id, s, PF_OPERATION_ID_LEN + 1);

	if ((s = get_string(body, "paymentId", true, &status, message, message_len)) == NULL)
		return status;
	if (s[0] == '\0' || strlen(s) > PAYMENT_ID_MAX)
		return fail(PF_EVENT_BAD_FIELD, message, message_len, "paymentId must be 1 to %d characters", PAYMENT_ID_MAX);
	ev->payment_id = pf_strdup(s);

	attempt = json_object_get(body, "attempt");
	if (attempt == NULL)
		return fail(PF_EVENT_MISSING_FIELD, message, message_len, "missing attempt");
	if (!json_is_integer(attempt) || json_integer_value(attempt) < 1 ||
		json_integer_value(attempt) > 1000000)
		return fail(PF_EVENT_BAD_FIELD, message, message_len, "attempt must be a positive integer");
	ev->attempt = (int) json_integer_value(attempt);

	s = get_string(body, "correlationId", false, &status, message, message_len);
	if (status != PF_EVENT_OK)
		return status;
	if (s != NULL)
	{
		if (strlen(s) > CORRELATION_ID_MAX)
			return fail(PF_EVENT_BAD_FIELD, message, message_len, "correlationId longer than %d characters",
						CORRELATION_ID_MAX);
		ev->correlation_id = pf_strdup(s);
	}

	if ((s = get_string(body, "createdAt", true, &status, message, message_len)) == NULL)
		return status;
	if (!pf_timestamp_valid(s))
		return fail(PF_EVENT_BAD_FIELD, message, message_len, "createdAt is not an RFC 3339 timestamp");
	ev->created_at = pf_strdup(s);

	ref_member = event_kinds[ev->type].ref_member;
	ref = ref_member ? json_object_get(body, ref_member) : NULL;
	if (ref_member && (ref == NULL || json_is_null(ref)))
	{
		if (event_kinds[ev->type].ref_required)
			return fail(PF_EVENT_MISSING_FIELD, message, message_len, "missing %s", ref_member);
	}
	else if (ref_member)
	{
		pf_error	err;

		if (pf_payload_ref_from_json(ref, &ev->ref, &err) != PF_OK)
			return fail(PF_EVENT_BAD_FIELD, message, message_len, "%s: %s", ref_member, err.message);
		ev->has_ref = true;
	}
	return PF_EVENT_OK;
}

pf_event_status
pf_event_parse(const char *body, size_t len, pf_event *event, char *message, size_t message_len)
{
	json_error_t jerr;
	json_t	   *json;
	pf_event_status status;

	memset(event, 0, sizeof(*event));
	if (message && message_len > 0)
		message[0] = '\0';

	/* duplicates would let two readers see two different events */
	json = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (json == NULL)
		return fail(PF_EVENT_BAD_JSON, message, message_len, "message body is not valid JSON: %s at position %d",
					jerr.text, jerr.position);

	status = parse_envelope(json, event, message, message_len);
	if (status != PF_EVENT_OK)
	{
		json_decref(json);
		pf_event_free(event);
		return status;
	}
	event->body = json;
	return PF_EVENT_OK;
}

void
pf_event_free(pf_event *event)
{
	free(event->payment_id);
	free(event->correlation_id);
	free(event->created_at);
	pf_payload_ref_free(&event->ref);
	json_decref(event->body);
	memset(event, 0, sizeof(*event));
}
