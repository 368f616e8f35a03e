/*
 * transitions_before_0_4.c
 *		The state machine of payflow 0.1.0 to 0.3.0, for their catalogs.
 *
 * Up to 0.3.0 the transition table was written here, not derived from the
 * pipeline definition (transitions.c), and those versions' SQL functions
 * _check_transition(from, to, replay) and _is_terminal(status) name these
 * entry points.  A database still on such a version (the library is
 * installed before ALTER EXTENSION payflow UPDATE runs) has no
 * payflow.pipelines to read, so the library keeps them as they were, as
 * pg_stat_statements keeps its old entry points.
 *
 * PENDING -> PAYMENT_PROCESSING -> PAYMENT_COMPLETED -> POST_PROCESSING
 *		   -> INVOICE_PENDING -> COMPLETED
 * any non-terminal status -> FAILED;  PENDING -> CANCELLED;
 * replay: FAILED -> PENDING, PAYMENT_COMPLETED or INVOICE_PENDING.
 */
#include "payflow.h"

#include "fmgr.h"
#include "utils/builtins.h"

typedef enum PayflowStatus
{
	PF_PENDING,
	PF_PAYMENT_PROCESSING,
	PF_PAYMENT_COMPLETED,
	PF_POST_PROCESSING,
	PF_INVOICE_PENDING,
	PF_COMPLETED,
	PF_FAILED,
	PF_CANCELLED,
	PF_STATUS_COUNT
} PayflowStatus;

static const char *const status_names[PF_STATUS_COUNT] = {
	"PENDING",
	"PAYMENT_PROCESSING",
	"PAYMENT_COMPLETED",
	"POST_PROCESSING",
	"INVOICE_PENDING",
	"COMPLETED",
	"FAILED",
	"CANCELLED",
};

#define BIT(s) (1u << (s))

/* allowed[from] is the set of statuses a normal transition may go to */
static const uint32 allowed[PF_STATUS_COUNT] = {
	[PF_PENDING] = BIT(PF_PAYMENT_PROCESSING) | BIT(PF_FAILED) | BIT(PF_CANCELLED),
	[PF_PAYMENT_PROCESSING] = BIT(PF_PAYMENT_COMPLETED) | BIT(PF_FAILED),
	[PF_PAYMENT_COMPLETED] = BIT(PF_POST_PROCESSING) | BIT(PF_FAILED),
	[PF_POST_PROCESSING] = BIT(PF_INVOICE_PENDING) | BIT(PF_FAILED),
	[PF_INVOICE_PENDING] = BIT(PF_COMPLETED) | BIT(PF_FAILED),
	[PF_COMPLETED] = 0,
	[PF_FAILED] = 0,
	[PF_CANCELLED] = 0,
};

/* replay_allowed[from]: the statuses payflow.replay() may re-enter */
static const uint32 replay_allowed[PF_STATUS_COUNT] = {
	[PF_FAILED] = BIT(PF_PENDING) | BIT(PF_PAYMENT_COMPLETED) | BIT(PF_INVOICE_PENDING),
};

static PayflowStatus
pf_parse_status(text *t)
{
	char	   *s = text_to_cstring(t);

	for (int i = 0; i < PF_STATUS_COUNT; i++)
	{
		if (strcmp(s, status_names[i]) == 0)
			return (PayflowStatus) i;
	}
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unknown operation status \"%s\"", s)));
	pg_unreachable();
}

PG_FUNCTION_INFO_V1(payflow_check_transition);

/*
 * payflow._check_transition(from, to, replay) raises PF001 unless the
 * operation may move from "from" to "to"; returns "to" so SQL can use it
 * inline in an UPDATE.
 */
Datum
payflow_check_transition(PG_FUNCTION_ARGS)
{
	PayflowStatus from = pf_parse_status(PG_GETARG_TEXT_PP(0));
	PayflowStatus to = pf_parse_status(PG_GETARG_TEXT_PP(1));
	bool		replay = PG_GETARG_BOOL(2);
	uint32		set = replay ? replay_allowed[from] : allowed[from];

	if ((set & BIT(to)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_PAYFLOW_ILLEGAL_TRANSITION),
				 errmsg("illegal status transition from %s to %s",
						status_names[from], status_names[to]),
				 (from == PF_COMPLETED || from == PF_FAILED || from == PF_CANCELLED) ?
				 errdetail("%s is a terminal status.", status_names[from]) : 0));
	PG_RETURN_TEXT_P(PG_GETARG_TEXT_PP(1));
}

PG_FUNCTION_INFO_V1(payflow_is_terminal);

/*
 * payflow._is_terminal(status): true for COMPLETED, FAILED and CANCELLED,
 * the statuses no normal transition leaves.
 */
Datum
payflow_is_terminal(PG_FUNCTION_ARGS)
{
	PayflowStatus s = pf_parse_status(PG_GETARG_TEXT_PP(0));

	PG_RETURN_BOOL(allowed[s] == 0);
}
