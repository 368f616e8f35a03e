/*
 * tenant.c
 *		The tenant of the current transaction.
 *
 * payflow.authenticate(api_key) checks an API key and binds its tenant to
 * the transaction; submit, status, history, cancel, changes and the
 * row-level security policies then see that tenant's operations only.
 *
 * Why not a GUC: a SECURITY DEFINER function with a SET clause (and all of
 * payflow's pin search_path) undoes every SET LOCAL made inside it when it
 * returns, and a session-level SET would outlive the transaction on a pooled
 * connection.  A backend-local value that only payflow's own functions can
 * set (_set_tenant is granted to no role) and that follows the transaction
 * has neither problem: it is forgotten when the transaction ends, committed
 * or not, and a rolled-back subtransaction (ROLLBACK TO SAVEPOINT, a
 * PL/pgSQL exception block) restores the tenant it replaced.  It is
 * backend-local, so _current_tenant() is PARALLEL RESTRICTED.
 */
#include "payflow.h"

#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

/* create_api_key allows 200 characters; UTF-8 needs up to 4 bytes each */
#define PF_TENANT_MAX_BYTES 800

static char current_tenant[PF_TENANT_MAX_BYTES + 1] = "";

/*
 * What each _set_tenant replaced, newest first, with the subtransaction
 * level it was made at.  Lives in TopTransactionContext, so it goes with
 * the transaction.
 */
typedef struct TenantUndo
{
	struct TenantUndo *next;
	int			nest_level;
	char		previous[FLEXIBLE_ARRAY_MEMBER];
} TenantUndo;

static TenantUndo *tenant_undo = NULL;

static void
pf_tenant_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			current_tenant[0] = '\0';
			tenant_undo = NULL; /* freed with TopTransactionContext */
			break;
		default:
			break;
	}
}

static void
pf_tenant_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						   SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();

	switch (event)
	{
		case SUBXACT_EVENT_ABORT_SUB:
			/* undo what this subtransaction (and its children) set */
			while (tenant_undo != NULL && tenant_undo->nest_level >= level)
			{
				TenantUndo *undo = tenant_undo;

				strlcpy(current_tenant, undo->previous, sizeof(current_tenant));
				tenant_undo = undo->next;
				pfree(undo);
			}
			break;
		case SUBXACT_EVENT_COMMIT_SUB:
			/* what it set now belongs to its parent */
			for (TenantUndo *undo = tenant_undo; undo != NULL && undo->nest_level >= level; undo = undo->next)
				undo->nest_level = level - 1;
			break;
		default:
			break;
	}
}

void
payflow_tenant_register_xact_callback(void)
{
	RegisterXactCallback(pf_tenant_xact_callback, NULL);
	RegisterSubXactCallback(pf_tenant_subxact_callback, NULL);
}

PG_FUNCTION_INFO_V1(payflow_current_tenant);

/* payflow._current_tenant(): '' outside an authenticated transaction */
Datum
payflow_current_tenant(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(current_tenant));
}

PG_FUNCTION_INFO_V1(payflow_set_tenant);

/* payflow._set_tenant(tenant): until the end of the current transaction */
Datum
payflow_set_tenant(PG_FUNCTION_ARGS)
{
	text	   *tenant = PG_GETARG_TEXT_PP(0);
	int			len = VARSIZE_ANY_EXHDR(tenant);
	size_t		previous_len = strlen(current_tenant);
	TenantUndo *undo;

	if (len > PF_TENANT_MAX_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("tenant is longer than %d bytes", PF_TENANT_MAX_BYTES)));
	if (!IsTransactionState())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("a tenant can only be set inside a transaction")));

	undo = MemoryContextAlloc(TopTransactionContext,
							  offsetof(TenantUndo, previous) + previous_len + 1);
	undo->nest_level = GetCurrentTransactionNestLevel();
	memcpy(undo->previous, current_tenant, previous_len + 1);
	undo->next = tenant_undo;
	tenant_undo = undo;

	memcpy(current_tenant, VARDATA_ANY(tenant), len);
	current_tenant[len] = '\0';
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(payflow_outer_role);

/*
 * payflow._outer_role(): the role the caller acts as (its login role, or
 * the one it SET ROLE to).  Inside a SECURITY DEFINER function current_user
 * is the owner and session_user ignores SET ROLE; the outer user id is the
 * one that says who called.
 */
Datum
payflow_outer_role(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(GetUserNameFromId(GetOuterUserId(), false)));
}
