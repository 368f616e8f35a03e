/*
 * sqs.h
 *		Amazon SQS client over the AWS JSON 1.0 protocol
 *		(POST / with X-Amz-Target: AmazonSQS.<Action>).
 *
 * The endpoint is AWS_ENDPOINT_URL_SQS, else AWS_ENDPOINT_URL, else
 * https://sqs.<region>.amazonaws.com. Queues whose URL ends in ".fifo" get
 * MessageGroupId and MessageDeduplicationId; standard queues never do.
 * Failures are classified (pf_error.result): PF_ERR_TRANSIENT after the
 * retries ran out on throttling, 5xx or network errors; PF_ERR_NOT_FOUND for
 * a missing queue; PF_ERR_FINAL for the rest.
 *
 * Batch calls succeed as a whole even when some entries failed: look at each
 * entry's result (pf_sqs_batch_result).
 */
#ifndef PAYFLOW_SQS_H
#define PAYFLOW_SQS_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "payflow/aws_client.h"
#include "payflow/config.h"
#include "payflow/error.h"

#define PF_SQS_MAX_BATCH 10

typedef struct pf_sqs pf_sqs;

typedef struct pf_sqs_attribute
{
	const char *name;
	const char *value;			/* sent as DataType "String" */
} pf_sqs_attribute;

typedef struct pf_sqs_send_entry
{
	const char *id;				/* batch entry id: [A-Za-z0-9_-]{1,80} */
	const char *body;
	const char *group_id;		/* FIFO: required (payflow: the paymentId) */
	const char *dedup_id;		/* FIFO: optional (payflow: the eventId) */
	int			delay_seconds;	/* standard queues only; 0 for none */
	const pf_sqs_attribute *attributes;
	int			n_attributes;
} pf_sqs_send_entry;

typedef struct pf_sqs_entry_result
{
	char	   *id;
	bool		ok;
	char	   *message_id;		/* on success (send) */
	char	   *code;			/* on failure */
	char	   *message;
	bool		sender_fault;	/* true: retrying the same entry will not help */
} pf_sqs_entry_result;

typedef struct pf_sqs_batch_result
{
	int			n;
	int			n_failed;
	pf_sqs_entry_result *entries;
} pf_sqs_batch_result;

typedef struct pf_sqs_receipt_entry
{
	const char *id;
	const char *receipt_handle;
	int			visibility_timeout; /* ChangeMessageVisibilityBatch only */
} pf_sqs_receipt_entry;

typedef struct pf_sqs_receive_options
{
	int			max_messages;	/* 1..10 */
	int			wait_seconds;	/* long poll, 0..20 */
	int			visibility_timeout; /* < 0: the queue's default */
} pf_sqs_receive_options;

typedef struct pf_sqs_message
{
	char	   *message_id;
	char	   *receipt_handle;
	char	   *body;			/* NUL-terminated, and may hold U+0000 itself */
	size_t		body_len;		/* its length in bytes: use this, not strlen */
	int			receive_count;	/* ApproximateReceiveCount */
	char	   *group_id;		/* FIFO only */
	json_t	   *system_attributes;	/* "Attributes" as returned */
	json_t	   *message_attributes; /* "MessageAttributes" as returned */
} pf_sqs_message;

typedef struct pf_sqs_messages
{
	int			n;
	pf_sqs_message *items;
} pf_sqs_messages;

pf_sqs	   *pf_sqs_create(pf_aws_client *aws, const pf_config *cfg);
void		pf_sqs_destroy(pf_sqs *sqs);
const char *pf_sqs_endpoint(const pf_sqs *sqs);
bool		pf_sqs_queue_is_fifo(const char *queue_url);

pf_result	pf_sqs_send_message(pf_sqs *sqs, const char *queue_url, const pf_sqs_send_entry *entry,
								char **message_id, pf_error *err);
pf_result	pf_sqs_send_message_batch(pf_sqs *sqs, const char *queue_url, const pf_sqs_send_entry *entries,
									  int n, pf_sqs_batch_result *result, pf_error *err);
pf_result	pf_sqs_receive_message(pf_sqs *sqs, const char *queue_url, const pf_sqs_receive_options *opts,
								   pf_sqs_messages *messages, pf_error *err);
pf_result	pf_sqs_delete_message(pf_sqs *sqs, const char *queue_url, const char *receipt_handle,
								  pf_error *err);
pf_result	pf_sqs_delete_message_batch(pf_sqs *sqs, const char *queue_url, const pf_sqs_receipt_entry *entries,
										int n, pf_sqs_batch_result *result, pf_error *err);
pf_result	pf_sqs_change_message_visibility(pf_sqs *sqs, const char *queue_url, const char *receipt_handle,
											 int visibility_timeout, pf_error *err);
pf_result	pf_sqs_change_message_visibility_batch(pf_sqs *sqs, const char *queue_url,
												   const pf_sqs_receipt_entry *entries, int n,
												   pf_sqs_batch_result *result, pf_error *err);

/* names: NULL-terminated, e.g. {"ApproximateNumberOfMessages", NULL}; NULL for All. */
pf_result	pf_sqs_get_queue_attributes(pf_sqs *sqs, const char *queue_url, const char *const *names,
										json_t **attributes, pf_error *err);
pf_result	pf_sqs_get_queue_url(pf_sqs *sqs, const char *queue_name, char **queue_url, pf_error *err);

/*
 * Asynchronous forms, for callers that keep several calls in flight (the
 * relay's batches, a worker's long poll beside its heartbeats). *_start
 * returns a call, or NULL with err set when the input is invalid; collect
 * finished calls with pf_sqs_wait and hand each to its *_finish, which frees
 * it. pf_sqs_call_user gives back the pointer passed to *_start.
 */
pf_aws_call *pf_sqs_send_message_batch_start(pf_sqs *sqs, const char *queue_url,
											 const pf_sqs_send_entry *entries, int n, void *user,
											 pf_error *err);
pf_result	pf_sqs_send_message_batch_finish(pf_aws_call *call, pf_sqs_batch_result *result, pf_error *err);
pf_aws_call *pf_sqs_receive_message_start(pf_sqs *sqs, const char *queue_url,
										  const pf_sqs_receive_options *opts, void *user);
pf_result	pf_sqs_receive_message_finish(pf_aws_call *call, pf_sqs_messages *messages, pf_error *err);

/* Any action: request is consumed; *response (may be NULL) is the caller's. */
pf_aws_call *pf_sqs_start(pf_sqs *sqs, const char *action, json_t *request, void *user);
pf_result	pf_sqs_finish(pf_aws_call *call, json_t **response, pf_error *err);
pf_aws_call *pf_sqs_wait(pf_sqs *sqs, int timeout_ms, int extra_fd);
void	   *pf_sqs_call_user(const pf_aws_call *call);
const char *pf_sqs_call_action(const pf_aws_call *call);

/*
 * Calls started per action, and the entries they carried (batch entries
 * sent; for ReceiveMessage, messages received), since pf_sqs_create: what
 * the programs log so that batching can be measured from their side.
 */
typedef struct pf_sqs_action_count
{
	char		action[32];
	long		calls;
	long		entries;
} pf_sqs_action_count;

#define PF_SQS_MAX_COUNTED_ACTIONS 12

/* {"<Action>": {"calls": n, "entries": m}, …}, only actions called. */
json_t	   *pf_sqs_counts_json(const pf_sqs *sqs);

/* The count of one action (zeros when never called). */
pf_sqs_action_count pf_sqs_count(const pf_sqs *sqs, const char *action);

void		pf_sqs_batch_result_free(pf_sqs_batch_result *result);
const pf_sqs_entry_result *pf_sqs_batch_result_find(const pf_sqs_batch_result *result, const char *id);
void		pf_sqs_messages_free(pf_sqs_messages *messages);

/* A String message attribute's value, or NULL. */
const char *pf_sqs_message_attribute(const pf_sqs_message *message, const char *name);

/* Parse an SQS JSON error body into err (exposed for tests). */
void		pf_sqs_parse_error(long status, const char *body, const char *query_error_header, pf_error *err);

#endif							/* PAYFLOW_SQS_H */
