/*
 * stack_trim.h
 *		Give back the stack pages an executor touched deeper down than it is
 *		now, before it waits through a long call.
 *
 * A login to the legacy DBMS runs 40-50 KiB deep (the ODBC driver, libpq,
 * SCRAM, Kerberos probing); the call that follows waits 8 KiB deep for up
 * to 15 minutes. Those touched pages stay resident for the thread's life:
 * 46 MiB of a worker's 137 MiB at 1,000 calls, measured (make bench). The
 * pages below the stack pointer hold nothing live, so they can be dropped
 * (MADV_DONTNEED: a later touch gets a zeroed page again).
 */
#ifndef PAYFLOW_STACK_TRIM_H
#define PAYFLOW_STACK_TRIM_H

/* Once per thread, at its start: where its stack ends. */
void		stack_trim_init(void);

/* Drop this thread's stack pages below the caller's frame (minus a margin). */
void		stack_trim(void);

#endif							/* PAYFLOW_STACK_TRIM_H */
