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
 * set (_set_tenant is not granted to anyone) and that is forgotten at the
 * end of every transaction, committed or not, has neither problem.  It is
 * backend-local, so _current_tenant() is PARALLEL RESTRICTED.
 */
#include "payflow.h"

#include "access/xact.h"
#include "fmgr.h"
#include "utils/builtins.h"

/* The longest tenant create_api_key accepts */
#define PF_TENANT_MAX_BYTES 200

static char current_tenant[PF_TENANT_MAX_BYTES + 1] = "";

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
			break;
		default:
			break;
	}
}

void
payflow_tenant_register_xact_callback(void)
{
	RegisterXactCallback(pf_tenant_xact_callback, NULL);
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

	if (len > PF_TENANT_MAX_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("tenant is longer than %d bytes", PF_TENANT_MAX_BYTES)));
	if (!IsTransactionState())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("a tenant can only be set inside a transaction")));
	memcpy(current_tenant, VARDATA_ANY(tenant), len);
	current_tenant[len] = '\0';
	PG_RETURN_VOID();
}
