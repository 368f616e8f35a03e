/*
 * transitions.c
 *		The operation state machine, derived from the pipeline definition.
 *
 * Each version of the pipeline (payflow.pipelines, payflow.step_definitions)
 * defines a graph of operation statuses:
 *
 *	 per step		ready -> running (when they differ), running -> done
 *	 any non-terminal status -> FAILED
 *	 the first step's ready status -> CANCELLED
 *	 replay			FAILED -> any step's ready status, inside payflow.replay()
 *
 * The last step's done status, FAILED and CANCELLED are terminal.  The
 * trigger operations_transition (BEFORE UPDATE OF status, pipeline_version)
 * on payflow.operations calls payflow._guard_transition() for every status
 * change, so an illegal move cannot be written by any SQL path, a bug in
 * payflow's own functions included (PF001).
 *
 * The check runs on the hot path (every claim and completion), so a
 * version's graph is read once per backend through SPI and kept in a hash
 * table: versions never change once written.  Two things could still make
 * a cached graph wrong, and both are handled: a version written by the
 * current transaction may roll back and its number be written again with
 * other steps (such a graph is used but not cached), and DROP EXTENSION
 * followed by CREATE EXTENSION starts the numbers again (the relcache
 * invalidation of the dropped payflow.pipelines clears the cache).
 * The entry points of 0.1.0 to 0.3.0, which had a fixed table, are in
 * transitions_before_0_4.c.
 */
#include "payflow.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"

/* add_step keeps a version to 30 steps: at most 2 * 30 + 1 + 2 statuses */
#define PF_MAX_STATUSES 64
/* status names match ^[A-Z][A-Z0-9_]{0,63}$ (step_definitions) */
#define PF_STATUS_LEN 65

#define BIT(i) (((uint64) 1) << (i))

typedef struct PfGraph
{
	int32		version;		/* hash key */
	int			nstatus;
	int			initial;
	int			failed;
	int			cancelled;
	uint64		terminal;
	uint64		replay_to;		/* what replay may re-enter from FAILED */
	uint64		allowed[PF_MAX_STATUSES];
	char		names[PF_MAX_STATUSES][PF_STATUS_LEN];
} PfGraph;

/* Every status any version knows, for _is_terminal() */
typedef struct PfStatus
{
	char		name[PF_STATUS_LEN];	/* hash key */
	bool		terminal;
} PfStatus;

static HTAB *graphs = NULL;
static HTAB *statuses = NULL;
static Oid	pipelines_relid = InvalidOid;
static bool cache_stale = false;

/* The operation payflow._allow_replay() named, until its next status change */
static char replay_operation[64] = "";

static void
pf_relcache_callback(Datum arg, Oid relid)
{
	/* no catalog access here: only note it, the next lookup rebuilds */
	if (relid == InvalidOid || relid == pipelines_relid)
		cache_stale = true;
}

static void
pf_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
		replay_operation[0] = '\0';
}

static void
pf_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					SubTransactionId parentSubid, void *arg)
{
	/* a replay that rolled back to a savepoint leaves no permission behind */
	if (event == SUBXACT_EVENT_ABORT_SUB)
		replay_operation[0] = '\0';
}

void
payflow_transitions_register_callbacks(void)
{
	CacheRegisterRelcacheCallback(pf_relcache_callback, (Datum) 0);
	RegisterXactCallback(pf_xact_callback, NULL);
	RegisterSubXactCallback(pf_subxact_callback, NULL);
}

/* Creates the hash tables, or empties them after an invalidation. */
static void
pf_cache_ready(void)
{
	HASHCTL		ctl;

	if (graphs != NULL && !cache_stale)
		return;
	if (graphs != NULL)
		hash_destroy(graphs);
	if (statuses != NULL)
		hash_destroy(statuses);
	graphs = NULL;
	statuses = NULL;
	cache_stale = false;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(int32);
	ctl.entrysize = sizeof(PfGraph);
	ctl.hcxt = CacheMemoryContext;
	graphs = hash_create("payflow pipeline graphs", 8, &ctl,
						 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = PF_STATUS_LEN;
	ctl.entrysize = sizeof(PfStatus);
	ctl.hcxt = CacheMemoryContext;
	statuses = hash_create("payflow statuses", 32, &ctl,
						   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

/* true if the row version with this xmin was written by this transaction */
static bool
pf_written_here(const char *xmin)
{
	TransactionId xid = (TransactionId) strtoul(xmin, NULL, 10);

	return TransactionIdIsCurrentTransactionId(xid);
}

static int
pf_graph_index(const PfGraph *g, const char *name)
{
	for (int i = 0; i < g->nstatus; i++)
		if (strcmp(g->names[i], name) == 0)
			return i;
	return -1;
}

static int
pf_graph_add(PfGraph *g, const char *name)
{
	int			i = pf_graph_index(g, name);

	if (i >= 0)
		return i;
	if (g->nstatus >= PF_MAX_STATUSES || strlen(name) >= PF_STATUS_LEN)
		elog(ERROR, "pipeline version %d has too many or too long statuses", g->version);
	strlcpy(g->names[g->nstatus], name, PF_STATUS_LEN);
	g->allowed[g->nstatus] = 0;
	return g->nstatus++;
}

/*
 * Reads version's steps through SPI into *g.  Returns false when the
 * version does not exist; sets *cacheable to false when this transaction
 * wrote it.
 */
static bool
pf_graph_read(int32 version, PfGraph *g, bool *cacheable)
{
	Oid			argtypes[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(version)};
	int			last_done = -1;
	uint64		n;

	memset(g, 0, offsetof(PfGraph, names));
	g->version = version;
	g->nstatus = 0;
	*cacheable = true;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args(
							  "SELECT d.ready_status, d.running_status, d.done_status, p.xmin::text,"
							  "       'payflow.pipelines'::pg_catalog.regclass::pg_catalog.oid"
							  "  FROM payflow.pipelines p"
							  "  JOIN payflow.step_definitions d ON d.pipeline_version = p.version"
							  " WHERE p.version = $1 ORDER BY d.position",
							  1, argtypes, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "reading pipeline version %d failed", version);
	n = SPI_processed;
	for (uint64 r = 0; r < n; r++)
	{
		HeapTuple	tup = SPI_tuptable->vals[r];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *ready = SPI_getvalue(tup, desc, 1);
		char	   *running = SPI_getvalue(tup, desc, 2);
		char	   *done = SPI_getvalue(tup, desc, 3);
		int			ir = pf_graph_add(g, ready);
		int			iu = pf_graph_add(g, running);
		int			id = pf_graph_add(g, done);

		if (iu != ir)
			g->allowed[ir] |= BIT(iu);
		g->allowed[iu] |= BIT(id);
		g->replay_to |= BIT(ir);
		if (r == 0)
		{
			bool		isnull;

			g->initial = ir;
			*cacheable = !pf_written_here(SPI_getvalue(tup, desc, 4));
			pipelines_relid = DatumGetObjectId(SPI_getbinval(tup, desc, 5, &isnull));
		}
		last_done = id;
	}
	SPI_finish();
	if (n == 0)
		return false;

	g->failed = pf_graph_add(g, "FAILED");
	g->cancelled = pf_graph_add(g, "CANCELLED");
	g->terminal = BIT(last_done) | BIT(g->failed) | BIT(g->cancelled);
	for (int i = 0; i < g->nstatus; i++)
	{
		if (g->terminal & BIT(i))
			g->allowed[i] = 0;
		else
			g->allowed[i] |= BIT(g->failed);
	}
	g->allowed[g->initial] |= BIT(g->cancelled);
	return true;
}

/* The graph of a version, else 22023. */
static const PfGraph *
pf_graph(int32 version)
{
	static PfGraph uncached;
	PfGraph    *g;
	bool		found;
	bool		cacheable;

	pf_cache_ready();
	g = hash_search(graphs, &version, HASH_FIND, &found);
	if (found)
		return g;
	if (!pf_graph_read(version, &uncached, &cacheable))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("pipeline version %d does not exist", version)));
	/* the read may have seen an invalidation: the table is ready again */
	pf_cache_ready();
	if (!cacheable)
		return &uncached;
	g = hash_search(graphs, &version, HASH_ENTER, &found);
	memcpy(g, &uncached, sizeof(PfGraph));
	return g;
}

/* The newest version, through SPI (not on the hot path). */
static int32
pf_newest_version(void)
{
	bool		isnull;
	int32		version;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute("SELECT max(version) FROM payflow.pipelines", true, 1) != SPI_OK_SELECT)
		elog(ERROR, "reading the newest pipeline version failed");
	version = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();
	if (isnull)
		elog(ERROR, "payflow.pipelines is empty");
	return version;
}

static int
pf_status_index(const PfGraph *g, const char *name)
{
	int			i = pf_graph_index(g, name);

	if (i < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown operation status \"%s\"", name),
				 errdetail("Pipeline version %d has no such status.", g->version)));
	return i;
}

static void
pf_illegal(const PfGraph *g, int from, int to, bool replay_move)
{
	ereport(ERROR,
			(errcode(ERRCODE_PAYFLOW_ILLEGAL_TRANSITION),
			 errmsg("illegal status transition from %s to %s", g->names[from], g->names[to]),
			 replay_move ?
			 errdetail("Only payflow.replay() re-enters a step from %s.", g->names[from]) :
			 (g->terminal & BIT(from)) ?
			 errdetail("%s is a terminal status.", g->names[from]) : 0));
}

PG_FUNCTION_INFO_V1(payflow_pipeline_check_transition);

/*
 * payflow._check_transition(from, to, replay, pipeline_version) raises
 * PF001 unless an operation of that version (NULL: the newest) may move
 * from "from" to "to" (with replay: the moves replay makes); returns "to".
 */
Datum
payflow_pipeline_check_transition(PG_FUNCTION_ARGS)
{
	char	   *from_name;
	char	   *to_name;
	bool		replay;
	const PfGraph *g;
	int			from;
	int			to;
	uint64		set;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		PG_RETURN_NULL();
	from_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	to_name = text_to_cstring(PG_GETARG_TEXT_PP(1));
	replay = PG_GETARG_BOOL(2);
	g = pf_graph(PG_ARGISNULL(3) ? pf_newest_version() : PG_GETARG_INT32(3));
	from = pf_status_index(g, from_name);
	to = pf_status_index(g, to_name);
	set = replay ? (from == g->failed ? g->replay_to : 0) : g->allowed[from];
	if ((set & BIT(to)) == 0)
		pf_illegal(g, from, to, false);
	PG_RETURN_TEXT_P(PG_GETARG_TEXT_PP(1));
}

/* Every status of every version, with whether it is terminal. */
static void
pf_statuses_read(void)
{
	bool		cacheable = true;
	bool		isnull;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute(
					"SELECT p.xmin::text, 'payflow.pipelines'::pg_catalog.regclass::pg_catalog.oid"
					"  FROM payflow.pipelines p", true, 0) != SPI_OK_SELECT)
		elog(ERROR, "reading the pipeline versions failed");
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		HeapTuple	tup = SPI_tuptable->vals[r];

		/* a version of this transaction may roll back: do not keep it */
		if (pf_written_here(SPI_getvalue(tup, SPI_tuptable->tupdesc, 1)))
			cacheable = false;
		pipelines_relid = DatumGetObjectId(SPI_getbinval(tup, SPI_tuptable->tupdesc, 2, &isnull));
	}
	if (SPI_execute(
					"SELECT s, pg_catalog.bool_or(t) FROM ("
					" SELECT d.ready_status, false FROM payflow.step_definitions d"
					" UNION ALL SELECT d.running_status, false FROM payflow.step_definitions d"
					" UNION ALL SELECT d.done_status, NOT EXISTS (SELECT FROM payflow.step_definitions n"
					"   WHERE n.pipeline_version = d.pipeline_version AND n.position = d.position + 1)"
					"   FROM payflow.step_definitions d"
					" UNION ALL VALUES ('FAILED', true), ('CANCELLED', true)) x(s, t) GROUP BY s",
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "reading the pipeline's statuses failed");
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		HeapTuple	tup = SPI_tuptable->vals[r];
		char	   *name = SPI_getvalue(tup, SPI_tuptable->tupdesc, 1);
		PfStatus   *s;
		bool		found;

		if (strlen(name) >= PF_STATUS_LEN)
			continue;
		s = hash_search(statuses, name, HASH_ENTER, &found);
		s->terminal = DatumGetBool(SPI_getbinval(tup, SPI_tuptable->tupdesc, 2, &isnull));
	}
	SPI_finish();
	if (!cacheable)
		cache_stale = true;		/* answered from, then rebuilt at the next lookup */
}

PG_FUNCTION_INFO_V1(payflow_pipeline_is_terminal);

/*
 * payflow._is_terminal(status): true for a status no normal transition
 * leaves (the last step's done status, FAILED, CANCELLED).  add_step and
 * remove_step keep the last done status, so the answer does not depend on
 * the version.  22023 for a status no version knows.
 */
Datum
payflow_pipeline_is_terminal(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	PfStatus   *s = NULL;
	bool		found = false;
	bool		terminal;

	pf_cache_ready();
	if (strlen(name) < PF_STATUS_LEN)
		s = hash_search(statuses, name, HASH_FIND, &found);
	if (!found)
	{
		/* a status of a version newer than the cache */
		pf_statuses_read();
		if (strlen(name) < PF_STATUS_LEN)
			s = hash_search(statuses, name, HASH_FIND, &found);
		if (!found)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("unknown operation status \"%s\"", name)));
	}
	terminal = s->terminal;
	PG_RETURN_BOOL(terminal);
}

PG_FUNCTION_INFO_V1(payflow_allow_replay);

/*
 * payflow._allow_replay(operation_id): the next status change of this
 * operation in this transaction may be a replay move (FAILED -> a step's
 * ready status).  Called by payflow.replay() only (granted to no role);
 * forgotten after that change, at a subtransaction's abort and at the end
 * of the transaction.
 */
Datum
payflow_allow_replay(PG_FUNCTION_ARGS)
{
	text	   *id = PG_GETARG_TEXT_PP(0);

	if (VARSIZE_ANY_EXHDR(id) >= sizeof(replay_operation))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid operation id")));
	text_to_cstring_buffer(id, replay_operation, sizeof(replay_operation));
	PG_RETURN_VOID();
}

static char *
pf_text_attr(HeapTuple tup, TupleDesc desc, const char *attname)
{
	bool		isnull;
	Datum		d = heap_getattr(tup, SPI_fnumber(desc, attname), desc, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

static int32
pf_int_attr(HeapTuple tup, TupleDesc desc, const char *attname, bool *isnull)
{
	Datum		d = heap_getattr(tup, SPI_fnumber(desc, attname), desc, isnull);

	return *isnull ? 0 : DatumGetInt32(d);
}

PG_FUNCTION_INFO_V1(payflow_guard_transition);

/*
 * The trigger of payflow.operations: a status change follows the graph of
 * the operation's version (replay moves only after _allow_replay); the
 * version never changes.
 */
Datum
payflow_guard_transition(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	HeapTuple	newtup;
	HeapTuple	oldtup;
	const PfGraph *g;
	bool		isnull;
	bool		old_isnull;
	int32		version;
	int32		old_version;
	char	   *status;
	char	   *old_status;
	int			from;
	int			to;

	/*
	 * AFTER since 0.5.0: a BEFORE row trigger locks the row before every
	 * update of the table (GetTupleForTrigger), WHEN clause or not, and
	 * that lock is a WAL record of its own; BEFORE is still accepted for
	 * the trigger of an older version's schema.
	 */
	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_FOR_ROW(td->tg_event) || !TRIGGER_FIRED_BY_UPDATE(td->tg_event))
		elog(ERROR, "payflow._guard_transition() must be a ROW UPDATE trigger");
	desc = td->tg_relation->rd_att;
	newtup = td->tg_newtuple;
	oldtup = td->tg_trigtuple;

	version = pf_int_attr(newtup, desc, "pipeline_version", &isnull);
	old_version = pf_int_attr(oldtup, desc, "pipeline_version", &old_isnull);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NOT_NULL_VIOLATION),
				 errmsg("an operation needs a pipeline version")));
	if (old_isnull || old_version != version)
		ereport(ERROR,
				(errcode(ERRCODE_PAYFLOW_ILLEGAL_TRANSITION),
				 errmsg("an operation's pipeline version never changes"),
				 errdetail("It started on version %d and finishes on it.", old_version)));

	status = pf_text_attr(newtup, desc, "status");
	old_status = pf_text_attr(oldtup, desc, "status");
	if (status == NULL || old_status == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NOT_NULL_VIOLATION),
				 errmsg("an operation needs a status")));
	if (strcmp(old_status, status) == 0)
		return PointerGetDatum(newtup);

	g = pf_graph(version);
	from = pf_status_index(g, old_status);
	to = pf_status_index(g, status);
	if ((g->allowed[from] & BIT(to)) == 0)
	{
		char	   *id = pf_text_attr(newtup, desc, "id");
		bool		replay_move = from == g->failed && (g->replay_to & BIT(to)) != 0;

		if (!replay_move || id == NULL || strcmp(id, replay_operation) != 0)
			pf_illegal(g, from, to, replay_move);
		replay_operation[0] = '\0'; /* one move per permission */
	}
	return PointerGetDatum(newtup);
}
