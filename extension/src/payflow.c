/*
 * payflow.c
 *		Module load: GUC definitions, shared memory hooks and the scheduler
 *		worker registration.
 *
 * The SQL API works without shared_preload_libraries: the library is then
 * loaded by the first call of one of its C functions and only defines the
 * GUCs.  With preloading it also reserves a little shared memory (relay
 * wake-up) and registers the "payflow scheduler" background worker.
 */
#include "payflow.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include <limits.h>

PG_MODULE_MAGIC;

char	   *payflow_database_name = NULL;
int			payflow_scheduler_naptime_ms = 1000;
int			payflow_notify_interval_ms = 10;
int			payflow_scheduler_batch_size = 1000;

/* Policy settings: read from SQL through payflow._setting() */
static int	retry_base_delay_s = 10;
static int	retry_max_delay_s = 900;
static double retry_jitter = 0.2;
static int	max_attempts = 5;
static int	retention_completed_s = 7 * 86400;
static int	retention_failed_s = 30 * 86400;
static int	retention_payloads_s = 86400;
static int	retention_consumed_s = 14 * 86400;
static int	retention_published_s = 3600;
static int	payload_max_bytes = 256 * 1024;
static int	stuck_after_s = 600;
static int	webhook_secret_overlap_s = 86400;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void pf_shmem_request(void);
static void pf_shmem_startup(void);
static void pf_define_gucs(void);

void		_PG_init(void);

/*
 * Defines the GUCs first (so they exist in every backend that loaded the
 * library), then stops unless the library is being preloaded.
 */
void
_PG_init(void)
{
	pf_define_gucs();

	/* Every backend wakes the scheduler after commits that wrote the outbox */
	payflow_wakeup_register_xact_callback();
	/* ... and forgets the transaction's tenant when it ends */
	payflow_tenant_register_xact_callback();
	/* ... and its replay permission; pipeline graphs follow DROP EXTENSION */
	payflow_transitions_register_callbacks();

	if (!process_shared_preload_libraries_in_progress)
		return;

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = pf_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = pf_shmem_startup;

	payflow_register_scheduler();
}

static void
pf_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	payflow_wakeup_shmem_request();
}

static void
pf_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	payflow_wakeup_shmem_startup();
}

/*
 * Policy settings are PGC_SUSET: the roles that call payflow's functions
 * must not be able to loosen retry, size or retention rules for themselves.
 */
static void
pf_define_gucs(void)
{
	/* A PGC_POSTMASTER GUC can only be defined while preloading (FATAL otherwise) */
	if (process_shared_preload_libraries_in_progress)
		DefineCustomStringVariable("payflow.database_name",
								   "Sets the database in which the payflow scheduler runs.",
								   NULL, &payflow_database_name, "postgres",
								   PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("payflow.scheduler_naptime",
							"Sets the time between two runs of payflow.run_scheduler() by the background worker.",
							NULL, &payflow_scheduler_naptime_ms, 1000, 10, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("payflow.notify_interval",
							"Sets the shortest time between two wake-up NOTIFY transactions of the background worker.",
							"Commits that wrote the outbox or changed a status meanwhile share one NOTIFY per channel.",
							&payflow_notify_interval_ms, 10, 0, 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("payflow.scheduler_batch_size",
							"Sets the maximum number of rows the background worker handles per scheduler run.",
							NULL, &payflow_scheduler_batch_size, 1000, 1, 1000000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("payflow.retry_base_delay",
							"Sets the delay before the first retry of a failed step.",
							NULL, &retry_base_delay_s, 10, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("payflow.retry_max_delay",
							"Sets the longest delay between two retries of a step, before jitter.",
							NULL, &retry_max_delay_s, 900, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomRealVariable("payflow.retry_jitter",
							 "Sets the random fraction of a retry delay added to it.",
							 NULL, &retry_jitter, 0.2, 0.0, 1.0,
							 PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("payflow.max_attempts",
							"Sets how many times a step runs before its operation fails.",
							NULL, &max_attempts, 5, 1, 1000,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("payflow.retention_completed",
							"Sets how long completed and cancelled operations are kept.",
							NULL, &retention_completed_s, 7 * 86400, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("payflow.retention_failed",
							"Sets how long failed operations are kept for investigation and replay.",
							NULL, &retention_failed_s, 30 * 86400, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("payflow.retention_payloads",
							"Sets how long the payloads of completed and cancelled operations are kept.",
							NULL, &retention_payloads_s, 86400, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("payflow.retention_consumed",
							"Sets how long consumed event ids are remembered for de-duplication.",
							NULL, &retention_consumed_s, 14 * 86400, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("payflow.retention_published",
							"Sets how long the log of published outbox events is kept.",
							NULL, &retention_published_s, 3600, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("payflow.payload_max_bytes",
							"Sets the largest request details accepted by payflow.submit().",
							NULL, &payload_max_bytes, 256 * 1024, 1, MaxAllocSize / 2,
							PGC_SUSET, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("payflow.stuck_after",
							"Sets how long a step may wait unclaimed before its event is emitted again.",
							NULL, &stuck_after_s, 600, 1, INT_MAX,
							PGC_SUSET, GUC_UNIT_S, NULL, NULL, NULL);

	DefineCustomIntVariable("payflow.webhook_secret_overlap",
							"Sets how long a rotated webhook secret still signs deliveries beside the new one.",
							NULL, &webhook_secret_overlap_s, 86400, 0, 7 * 86400,
							PGC_SUSET, GUC_UNIT_S, NULL, NULL, NULL);

	MarkGUCPrefixReserved("payflow");
}

PG_FUNCTION_INFO_V1(payflow_setting);

/*
 * payflow._setting(name) returns a payflow GUC in its base unit, without the
 * unit suffix (seconds, bytes, ms).  Calling it loads the library, which is
 * what makes the GUCs exist in a backend that has not preloaded payflow.
 */
Datum
payflow_setting(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char		fullname[NAMEDATALEN * 2];
	const char *value;

	snprintf(fullname, sizeof(fullname), "payflow.%s", name);
	value = GetConfigOption(fullname, true, false);
	if (value == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("unrecognized payflow setting \"%s\"", name)));
	PG_RETURN_TEXT_P(cstring_to_text(value));
}
