/*
 * event.h
 *		The event envelope carried by every queue message (DESIGN §2):
 *
 *		{"eventType":"PaymentRequested","eventVersion":1,"eventId":"<uuid>",
 *		 "operationId":"pay_<26 Crockford base32>","paymentId":"…","attempt":1,
 *		 "correlationId":"…","createdAt":"…Z","payload":{<payload ref>}}
 *
 * A message that fails to parse gets a distinct status and a message to log;
 * workers never retry it themselves but leave it to the queue's redrive
 * policy, so a poison message ends in the DLQ instead of looping.
 */
#ifndef PAYFLOW_EVENT_H
#define PAYFLOW_EVENT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "payflow/payload_ref.h"

#define PF_EVENT_VERSION 1
#define PF_UUID_LEN 36
#define PF_OPERATION_ID_LEN 30	/* "pay_" + 26 */

typedef enum pf_event_type
{
	PF_EVENT_PAYMENT_REQUESTED = 0,
	PF_EVENT_PAYMENT_COMPLETED,
	PF_EVENT_INVOICE_REQUESTED,
	PF_EVENT_OPERATION_COMPLETED,
	PF_EVENT_OPERATION_FAILED,
	/*
	 * The request event of a step added to the pipeline by SQL
	 * (payflow.add_step): its name and input member are the database's,
	 * made known to the parser by pf_event_define_step_request.
	 */
	PF_EVENT_STEP_REQUESTED
} pf_event_type;

typedef enum pf_event_status
{
	PF_EVENT_OK = 0,
	PF_EVENT_BAD_JSON,			/* not JSON, truncated, or not an object */
	PF_EVENT_UNKNOWN_TYPE,		/* eventType missing or not one we know */
	PF_EVENT_UNKNOWN_VERSION,	/* eventVersion missing or not 1 */
	PF_EVENT_MISSING_FIELD,		/* a required member is absent */
	PF_EVENT_BAD_FIELD			/* a member has the wrong type or form */
} pf_event_status;

typedef struct pf_event
{
	pf_event_type type;
	int			version;
	char		event_id[PF_UUID_LEN + 1];
	char		operation_id[PF_OPERATION_ID_LEN + 1];
	char	   *payment_id;
	int			attempt;
	char	   *correlation_id; /* NULL when absent */
	char	   *created_at;
	bool		has_ref;
	pf_payload_ref ref;			/* payload, result or invoiceInput, by type */
	json_t	   *body;			/* the whole message, for members not above */
} pf_event;

/*
 * Parse and validate a message body. On failure the event is left empty
 * (safe to pf_event_free) and message describes the problem in one line.
 */
pf_event_status pf_event_parse(const char *body, size_t len, pf_event *event,
							   char *message, size_t message_len);
void		pf_event_free(pf_event *event);

const char *pf_event_status_name(pf_event_status status);
const char *pf_event_type_name(pf_event_type type);
bool		pf_event_type_parse(const char *name, pf_event_type *type);

/*
 * Names the event type PF_EVENT_STEP_REQUESTED stands for, with the member
 * holding its input reference and the destination it is published to, as
 * payflow.pipeline() gives them. Once per process, before any thread
 * parses (a generic step worker runs one step); a name of a built-in type
 * is refused (false).
 */
bool		pf_event_define_step_request(const char *name, const char *ref_member, const char *destination);

/* The queue destination an event type is published to (DESIGN §2). */
const char *pf_event_destination(pf_event_type type);

/* The name of the member holding the type's payload reference, or NULL. */
const char *pf_event_ref_member(pf_event_type type);

/* Identifier forms, shared with the store and the programs. */
bool		pf_uuid_valid(const char *text);
bool		pf_operation_id_valid(const char *text);
bool		pf_timestamp_valid(const char *text);

#endif							/* PAYFLOW_EVENT_H */
