/*
 * log.h
 *		JSON-lines logging to stderr, one object per line:
 *		{"ts":…,"level":…,"component":…,"msg":…,"operationId":…,"eventId":…,
 *		 "correlationId":…, free fields…}
 *
 * Lines are written with one write so lines from several processes sharing a
 * pipe do not interleave. Registered secrets are replaced by "[redacted]"
 * wherever they appear, so a credential that slips into an error message
 * from a library still never reaches the log.
 */
#ifndef PAYFLOW_LOG_H
#define PAYFLOW_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

typedef enum pf_log_level
{
	PF_LOG_DEBUG = 0,
	PF_LOG_INFO,
	PF_LOG_WARN,
	PF_LOG_ERROR
} pf_log_level;

/* The ids that tie a line to an operation; any member may be NULL. */
typedef struct pf_log_ids
{
	const char *operation_id;
	const char *event_id;
	const char *correlation_id;
	/* the span the line belongs to (trace_context.h): 32 and 16 hex digits */
	const char *trace_id;
	const char *span_id;
} pf_log_ids;

void		pf_log_init(const char *component, pf_log_level level);
void		pf_log_set_level(pf_log_level level);
bool		pf_log_enabled(pf_log_level level);

/* Tests point the log at a file; programs leave it on stderr. */
void		pf_log_set_stream(FILE *stream);
bool		pf_log_level_parse(const char *text, pf_log_level *level);
const char *pf_log_level_name(pf_log_level level);

/* Never print this value (or its JSON-escaped form). Short values are ignored. */
void		pf_log_add_secret(const char *secret);
void		pf_log_forget_secrets(void);

/*
 * Write one line. ids may be NULL; fields is a JSON object of extra members
 * (or NULL) and is consumed (its reference is stolen).
 */
void		pf_log_write(pf_log_level level, const pf_log_ids *ids, json_t *fields,
						 const char *fmt,...) __attribute__((format(printf, 4, 5)));

#define pf_log_debug(ids, ...) \
	do { if (pf_log_enabled(PF_LOG_DEBUG)) pf_log_write(PF_LOG_DEBUG, ids, NULL, __VA_ARGS__); } while (0)
#define pf_log_info(ids, ...)	pf_log_write(PF_LOG_INFO, ids, NULL, __VA_ARGS__)
#define pf_log_warn(ids, ...)	pf_log_write(PF_LOG_WARN, ids, NULL, __VA_ARGS__)
#define pf_log_error(ids, ...)	pf_log_write(PF_LOG_ERROR, ids, NULL, __VA_ARGS__)

/*
 * Whether an event that may repeat for a long time (a failure that goes on)
 * is to be logged now: the first of its run, then one every every_ms.
 * *last_ms keeps when it was last logged (0: never); now_ms is the caller's
 * pf_now_ms().
 */
bool		pf_log_throttled(bool first_of_run, int64_t *last_ms, int64_t now_ms, int64_t every_ms);

/* Replace invalid UTF-8 bytes by '?' in place, so any text can become JSON. */
void		pf_utf8_sanitize(char *text, size_t len);

#endif							/* PAYFLOW_LOG_H */
