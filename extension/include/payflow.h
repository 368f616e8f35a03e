/*
 * payflow.h
 *		Declarations shared by the C parts of the payflow extension.
 *
 * The SQL script holds tables and business rules; C holds what is hot or
 * needs the server's internals: operation ids, the transition check (its
 * graph derived from the pipeline definition), the
 * backoff formula, the relay wake-up, the transaction's tenant and the
 * scheduler background worker.
 */
#ifndef PAYFLOW_H
#define PAYFLOW_H

#include "postgres.h"

/*
 * Domain SQLSTATEs, class PF.  The SQL script raises the same codes by
 * name ('PF002' ...); keep the README's error table in step with this list.
 */
#define ERRCODE_PAYFLOW_ILLEGAL_TRANSITION	MAKE_SQLSTATE('P','F','0','0','1')
#define ERRCODE_PAYFLOW_IDEMPOTENCY_MISMATCH	MAKE_SQLSTATE('P','F','0','0','2')
#define ERRCODE_PAYFLOW_UNKNOWN_OPERATION	MAKE_SQLSTATE('P','F','0','0','3')
#define ERRCODE_PAYFLOW_LEASE_NOT_HELD		MAKE_SQLSTATE('P','F','0','0','4')
#define ERRCODE_PAYFLOW_CHECKSUM_MISMATCH	MAKE_SQLSTATE('P','F','0','0','5')
#define ERRCODE_PAYFLOW_ALREADY_TERMINAL	MAKE_SQLSTATE('P','F','0','0','6')
#define ERRCODE_PAYFLOW_PAYLOAD_TOO_LARGE	MAKE_SQLSTATE('P','F','0','0','7')

/* GUCs (payflow.c) */
extern char *payflow_database_name;
extern int	payflow_scheduler_naptime_ms;
extern int	payflow_notify_interval_ms;
extern int	payflow_scheduler_batch_size;

/* wakeup.c: shared memory used to wake relays without NOTIFY per commit */
extern void payflow_wakeup_shmem_request(void);
extern void payflow_wakeup_shmem_startup(void);
extern void payflow_wakeup_register_xact_callback(void);
extern void payflow_wakeup_attach_scheduler(void);
extern void payflow_wakeup_detach_scheduler(void);
extern bool payflow_wakeup_pending(void);
extern uint32 payflow_wakeup_consume(void);

/* What a commit woke the scheduler for: one NOTIFY channel per bit */
#define PF_WAKE_OUTBOX	0x1		/* NOTIFY payflow_outbox: relays */
#define PF_WAKE_STATUS	0x2		/* NOTIFY payflow_status: event streams */

/* tenant.c: the tenant of the current transaction (set by authenticate) */
extern void payflow_tenant_register_xact_callback(void);

/* transitions.c: the state machine's cache and the replay permission */
extern void payflow_transitions_register_callbacks(void);

/* scheduler.c */
extern void payflow_register_scheduler(void);
PGDLLEXPORT void payflow_scheduler_main(Datum main_arg);

#endif							/* PAYFLOW_H */
