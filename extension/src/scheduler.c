/*
 * scheduler.c
 *		The "payflow scheduler" background worker.
 *
 * It holds no business logic: every payflow.scheduler_naptime it calls
 * payflow.run_scheduler() in one short transaction, and when committed
 * transactions wrote the outbox it sends one NOTIFY payflow_outbox to wake
 * the relays (and one NOTIFY payflow_status after status changes, for the
 * HTTP edge's event streams).  Keeping the logic in SQL lets pg_cron drive the same function
 * where no C library can be loaded.  Shaped after worker_spi: handlers only
 * set flags, the loop waits on its latch and exits with the postmaster.
 */
#include "payflow.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/* Whether CREATE EXTENSION payflow was seen in this database (logged once) */
static bool sch_missing_logged = false;

void
payflow_register_scheduler(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "payflow");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "payflow_scheduler_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "payflow scheduler");
	snprintf(worker.bgw_type, BGW_MAXLEN, "payflow scheduler");
	RegisterBackgroundWorker(&worker);
}

/*
 * Runs one SQL statement in its own transaction.  An error is logged and
 * swallowed so that one bad run (a deadlock, a lock time-out, a bug hit by
 * one row) does not stop the worker; the next naptime tries again.  With
 * needs_payflow, the statement runs only if payflow is installed in this
 * database, and the return value says whether it is.  With a plan slot, the
 * statement is planned once and kept for the worker's life (the NOTIFYs, up
 * to one per payflow.notify_interval: parsed and planned each time they
 * cost 0.04 ms of planning alone, 2,443 times in a pipeline bench run).
 */
static bool
sch_execute(const char *sql, int nargs, Oid *argtypes, Datum *args, bool needs_payflow,
			SPIPlanPtr *kept)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	bool		installed = true;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PG_TRY();
	{
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		pgstat_report_activity(STATE_RUNNING, sql);

		if (needs_payflow)
		{
			if (SPI_execute("SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'payflow'",
							true, 1) != SPI_OK_SELECT)
				elog(ERROR, "could not look up the payflow extension");
			installed = (SPI_processed == 1);
		}
		if (installed && kept != NULL && *kept == NULL)
		{
			SPIPlanPtr	plan = SPI_prepare(sql, nargs, argtypes);

			if (plan == NULL || SPI_keepplan(plan) != 0)
				elog(ERROR, "could not prepare \"%s\"", sql);
			*kept = plan;
		}
		if (installed &&
			(kept != NULL ? SPI_execute_plan(*kept, args, NULL, false, 0)
			 : SPI_execute_with_args(sql, nargs, argtypes, args, NULL, false, 0)) < 0)
			elog(ERROR, "could not run \"%s\"", sql);

		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		ereport(LOG,
				(errmsg("payflow scheduler: %s failed: %s", sql, edata->message)));
		FreeErrorData(edata);
	}
	PG_END_TRY();

	pgstat_report_stat(true);
	pgstat_report_activity(STATE_IDLE, NULL);
	return installed;
}

/*
 * The NOTIFYs for each combination of PF_WAKE_* bits, in one transaction.
 * NOTIFY assigns an xid, so each of these commits writes a commit record,
 * and with synchronous_commit on it would wait for a WAL flush: up to one
 * per payflow.notify_interval, for a transaction that writes nothing a
 * crash could lose (a notification is never durable; the rows it announces
 * were committed, and flushed, by their own transactions).  So these
 * commit asynchronously: set_config(..., true) lasts this transaction only.
 */
#define NOTIFY_ASYNC "SELECT pg_catalog.set_config('synchronous_commit', 'off', true), "
static const char *const notify_sql[4] = {
	NULL,
	NOTIFY_ASYNC "pg_catalog.pg_notify('payflow_outbox', '')",
	NOTIFY_ASYNC "pg_catalog.pg_notify('payflow_status', '')",
	NOTIFY_ASYNC "pg_catalog.pg_notify('payflow_outbox', ''), pg_catalog.pg_notify('payflow_status', '')",
};

void
payflow_scheduler_main(Datum main_arg)
{
	TimestampTz next_run;
	TimestampTz last_notify = 0;
	SPIPlanPtr	notify_plan[4] = {NULL};	/* by PF_WAKE_* bits, as notify_sql */

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	BackgroundWorkerInitializeConnection(payflow_database_name, NULL, 0);
	payflow_wakeup_attach_scheduler();

	ereport(LOG,
			(errmsg("payflow scheduler started in database \"%s\"",
					payflow_database_name)));

	next_run = GetCurrentTimestamp();
	for (;;)
	{
		long		timeout_ms;
		TimestampTz now = GetCurrentTimestamp();

		timeout_ms = TimestampDifferenceMilliseconds(now, next_run);
		if (payflow_wakeup_pending())
			timeout_ms = Min(timeout_ms,
							 TimestampDifferenceMilliseconds(now, TimestampTzPlusMilliseconds(last_notify,
																							  payflow_notify_interval_ms)));
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		/*
		 * One NOTIFY per channel for all the commits that wrote the outbox
		 * or changed a status meanwhile, both in one transaction, and at
		 * most one such transaction per payflow.notify_interval: under load
		 * a commit-per-wake-up would cost a transaction per step.  The bits
		 * are consumed only when their NOTIFY goes out: while they stay set
		 * no commit wakes this worker again (wakeup.c), and the wait above
		 * ends at the NOTIFY's time.  Read after ResetLatch, so a commit
		 * that set its latch meanwhile is seen now or wakes it again.
		 */
		now = GetCurrentTimestamp();
		if (now >= TimestampTzPlusMilliseconds(last_notify, payflow_notify_interval_ms) &&
			payflow_wakeup_pending())
		{
			uint32		wake = payflow_wakeup_consume() & (PF_WAKE_OUTBOX | PF_WAKE_STATUS);

			if (wake != 0)
				sch_execute(notify_sql[wake], 0, NULL, NULL, false, &notify_plan[wake]);
			last_notify = now;
		}

		now = GetCurrentTimestamp();
		if (now >= next_run)
		{
			Oid			argtypes[1] = {INT4OID};
			Datum		args[1] = {Int32GetDatum(payflow_scheduler_batch_size)};

			if (sch_execute("SELECT payflow.run_scheduler($1)", 1, argtypes, args, true, NULL))
				sch_missing_logged = false;
			else if (!sch_missing_logged)
			{
				ereport(LOG,
						(errmsg("payflow scheduler: extension payflow is not installed in database \"%s\"",
								payflow_database_name),
						 errhint("Run CREATE EXTENSION payflow there, or set payflow.database_name.")));
				sch_missing_logged = true;
			}
			next_run = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												   payflow_scheduler_naptime_ms);
		}
	}
}
