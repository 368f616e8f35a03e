/*
 * wakeup.c
 *		Waking the relays after commits that wrote the outbox, and the HTTP
 *		edge's event streams after commits that changed an operation's
 *		status, without a NOTIFY in every writing transaction.
 *
 * NOTIFY takes a database-wide lock at commit and so serialises all
 * committing transactions that notified (see the benchmark in the README).
 * Instead, a backend that wrote outbox rows sets a flag in shared memory and
 * the scheduler's latch when its transaction commits; the scheduler worker
 * then sends one NOTIFY payflow_outbox (or payflow_status) for however many
 * commits happened meanwhile.  Without shared_preload_libraries there is no
 * shared state and listeners fall back to polling.
 */
#include "payflow.h"

#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/latch.h"
#include "storage/shmem.h"
#include "storage/spin.h"

typedef struct PayflowWakeupShared
{
	slock_t		mutex;			/* protects scheduler_latch */
	Latch	   *scheduler_latch;	/* NULL while no scheduler runs */
	pg_atomic_uint32 dirty;		/* PF_WAKE_* bits of the commits since the last NOTIFYs */
} PayflowWakeupShared;

static PayflowWakeupShared *wakeup_shared = NULL;

/* PF_WAKE_* bits this transaction earned: the scheduler is woken at commit */
static uint32 wakeup_at_commit = 0;

void
payflow_wakeup_shmem_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(PayflowWakeupShared)));
}

void
payflow_wakeup_shmem_startup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	wakeup_shared = ShmemInitStruct("payflow wakeup",
									sizeof(PayflowWakeupShared), &found);
	if (!found)
	{
		SpinLockInit(&wakeup_shared->mutex);
		wakeup_shared->scheduler_latch = NULL;
		pg_atomic_init_u32(&wakeup_shared->dirty, 0);
	}
	LWLockRelease(AddinShmemInitLock);
}

static void
pf_wakeup_xact_callback(XactEvent event, void *arg)
{
	Latch	   *latch;

	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			/*
			 * Only the first commit since the scheduler last consumed the
			 * bits wakes it: it then waits for the next NOTIFY's time
			 * without consuming them, so later commits find bits set and
			 * leave it asleep.  (Every commit used to wake it: a kill() in
			 * each committing backend and a wake-up of the scheduler per
			 * commit, 300 a second for one session making single-item
			 * calls.)  A commit that finds bits set knows that whoever set
			 * them sets the latch after, and that the scheduler reads the
			 * bits after resetting its latch, so they are all notified.
			 */
			if (wakeup_at_commit != 0 && wakeup_shared != NULL &&
				pg_atomic_fetch_or_u32(&wakeup_shared->dirty, wakeup_at_commit) == 0)
			{
				SpinLockAcquire(&wakeup_shared->mutex);
				latch = wakeup_shared->scheduler_latch;
				SpinLockRelease(&wakeup_shared->mutex);
				if (latch != NULL)
					SetLatch(latch);
			}
			wakeup_at_commit = 0;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			wakeup_at_commit = 0;
			break;
		default:
			break;
	}
}

void
payflow_wakeup_register_xact_callback(void)
{
	RegisterXactCallback(pf_wakeup_xact_callback, NULL);
}

static void
pf_wakeup_detach(int code, Datum arg)
{
	payflow_wakeup_detach_scheduler();
}

/* Called by the scheduler worker once connected */
void
payflow_wakeup_attach_scheduler(void)
{
	if (wakeup_shared == NULL)
		return;
	SpinLockAcquire(&wakeup_shared->mutex);
	wakeup_shared->scheduler_latch = MyLatch;
	SpinLockRelease(&wakeup_shared->mutex);
	on_shmem_exit(pf_wakeup_detach, (Datum) 0);
}

void
payflow_wakeup_detach_scheduler(void)
{
	if (wakeup_shared == NULL)
		return;
	SpinLockAcquire(&wakeup_shared->mutex);
	if (wakeup_shared->scheduler_latch == MyLatch)
		wakeup_shared->scheduler_latch = NULL;
	SpinLockRelease(&wakeup_shared->mutex);
}

/* Whether a commit set PF_WAKE_* bits since the last consume (they stay set) */
bool
payflow_wakeup_pending(void)
{
	return wakeup_shared != NULL && pg_atomic_read_u32(&wakeup_shared->dirty) != 0;
}

/* The PF_WAKE_* bits of the commits since the last call (each seen once) */
uint32
payflow_wakeup_consume(void)
{
	if (wakeup_shared == NULL)
		return 0;
	return pg_atomic_exchange_u32(&wakeup_shared->dirty, 0);
}

PG_FUNCTION_INFO_V1(payflow_outbox_written);

/*
 * payflow._outbox_written() marks the current transaction as one that wrote
 * outbox rows; the wake-up happens only if and when it commits.
 */
Datum
payflow_outbox_written(PG_FUNCTION_ARGS)
{
	wakeup_at_commit |= PF_WAKE_OUTBOX;
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(payflow_status_changed);

/*
 * payflow._status_changed() marks the current transaction as one that
 * changed an operation's status; event-stream listeners are woken (NOTIFY
 * payflow_status) if and when it commits.
 */
Datum
payflow_status_changed(PG_FUNCTION_ARGS)
{
	wakeup_at_commit |= PF_WAKE_STATUS;
	PG_RETURN_VOID();
}
