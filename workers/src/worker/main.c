/*
 * main.c
 *		payflow-worker --role payment|postprocess|invoice|webhook
 *		payflow-worker --role http|sql --step NAME
 *
 * Settings come from the environment (config.h); the role decides which
 * are required. Exit status: 0 after a clean drain (SIGTERM or SIGINT),
 * 2 for a usage or settings error or a pipeline in the database that
 * does not match the role or has no step NAME (pipeline_check.c), 1 when start-up fails otherwise,
 * 128 + the signal when a second signal cut the drain short.
 */
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "worker.h"

#include "payflow/stop_signals.h"
#include "payflow/tracer.h"

static const role_ops *const roles[] = {&payment_role, &postprocess_role, &invoice_role, &webhook_role,
&http_step_role, &sql_step_role, NULL};

/* a generic role with its --step */
static role_ops named_step_role;

/* payflow.add_step's rule for a step name: ^[A-Z][A-Z0-9_]{0,63}$ */
static bool
step_name_valid(const char *step)
{
	size_t		n = strlen(step);

	if (n == 0 || n > 64 || step[0] < 'A' || step[0] > 'Z')
		return false;
	for (size_t i = 1; i < n; i++)
		if (!((step[i] >= 'A' && step[i] <= 'Z') || (step[i] >= '0' && step[i] <= '9') || step[i] == '_'))
			return false;
	return true;
}

static void
usage(FILE *out)
{
	fprintf(out, "usage: payflow-worker --role payment|postprocess|invoice|webhook [--check-role | --print-settings]\n"
			"       payflow-worker --role http|sql --step NAME [--check-role | --print-settings]\n"
			"Consumes PAYFLOW_QUEUE_URL and runs the role's step of each operation:\n"
			"  payment      PROCESS_PAYMENT through the legacy DBMS (PAYFLOW_LEGACY_*)\n"
			"  postprocess  POST_PROCESS with PAYFLOW_POSTPROCESS_FUNCTION or PAYFLOW_POSTPROCESS_URL\n"
			"               (neither: payflow.default_postprocess)\n"
			"  invoice      CREATE_INVOICE at PAYFLOW_INVOICE_URL\n"
			"  webhook      OperationCompleted/Failed events POSTed, signed, to each tenant's webhook URL\n"
			"  http         step NAME (added by payflow.add_step): its input POSTed to PAYFLOW_STEP_URL\n"
			"  sql          step NAME: PAYFLOW_STEP_FUNCTION run in the transaction that completes it\n"
			"--check-role exits 0 when the role exists, without starting.\n"
			"--print-settings prints every setting the role reads as JSON lines, without starting.\n");
}

static const role_ops *
parse_args(int argc, char **argv, bool *check_only, bool *print_settings)
{
	const char *name = NULL;
	const char *step = NULL;
	const role_ops *role = NULL;

	for (int i = 1; i < argc; i++)
	{
		if (strcmp(argv[i], "--check-role") == 0)
			*check_only = true;
		else if (strcmp(argv[i], "--print-settings") == 0)
			*print_settings = true;
		else if (strcmp(argv[i], "--role") == 0 && i + 1 < argc)
			name = argv[++i];
		else if (strncmp(argv[i], "--role=", 7) == 0)
			name = argv[i] + 7;
		else if (strcmp(argv[i], "--step") == 0 && i + 1 < argc)
			step = argv[++i];
		else if (strncmp(argv[i], "--step=", 7) == 0)
			step = argv[i] + 7;
		else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
		{
			usage(stdout);
			return NULL;
		}
		else
		{
			fprintf(stderr, "payflow-worker: unknown argument %s\n", argv[i]);
			usage(stderr);
			return NULL;
		}
	}
	if (name == NULL)
	{
		fprintf(stderr, "payflow-worker: missing --role\n");
		usage(stderr);
		return NULL;
	}
	for (int i = 0; roles[i]; i++)
		if (strcmp(roles[i]->name, name) == 0)
			role = roles[i];
	if (role == NULL)
	{
		fprintf(stderr, "payflow-worker: unknown or unavailable role %s\n", name);
		usage(stderr);
		return NULL;
	}
	if (!role->step_from_argv)
	{
		if (step != NULL)
		{
			fprintf(stderr, "payflow-worker: --role %s runs %s: --step is for --role http|sql\n", name, role->step);
			return NULL;
		}
		return role;
	}
	if (step == NULL)
	{
		fprintf(stderr, "payflow-worker: missing --step: --role %s runs the step it names\n", name);
		return NULL;
	}
	if (!step_name_valid(step))
	{
		fprintf(stderr, "payflow-worker: invalid --step %.80s: a step name is A-Z, 0-9 and _, "
				"starting with a letter, at most 64 characters\n", step);
		return NULL;
	}
	named_step_role = *role;
	named_step_role.step = step;
	return &named_step_role;
}

int
main(int argc, char **argv)
{
	bool		check_only = false;
	bool		print_settings = false;
	const role_ops *role = parse_args(argc, argv, &check_only, &print_settings);
	int			signal_fd;
	worker	   *w;
	char		why[512] = "";
	int			rc;
	int			status;

	if (role == NULL)
		return argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) ? 0 : 2;
	if (check_only)
		return 0;
	if (print_settings)
	{
		/* the exit margin: what a deployment must allow beyond PAYFLOW_DRAIN_SECONDS (deploy/check) */
		pf_config_print_settings_with(stdout, "payflow-worker", role->name, PF_PROGRAM_WORKER | role->program,
									  json_pack("{s:i}", "exitMarginSeconds", worker_exit_margin_seconds()));
		return 0;
	}

	/* ODBC drivers convert SQL_C_CHAR data by the locale: make that UTF-8 */
	if (setlocale(LC_CTYPE, "C.UTF-8") == NULL)
		setlocale(LC_CTYPE, "");
	/* before any thread starts (stop_signals.h): the main loop reads them */
	signal_fd = pf_stop_signals_block();
	if (signal_fd < 0)
	{
		perror("payflow-worker: signalfd");
		return 1;
	}

	{
		char		service[64];

		/* each role a service of its own in a trace (OTEL_SERVICE_NAME overrides it) */
		snprintf(service, sizeof(service), "payflow-worker-%s", role->name);
		pf_tracer_start(service, json_pack("{s:s}", "payflow.role", role->name));
	}
	w = worker_create(role, signal_fd, why, sizeof(why), &status);
	if (w == NULL)
	{
		fprintf(stderr, "payflow-worker: %s\n", why);
		if (status != 0)
			return status;
		return strncmp(why, "invalid ", 8) == 0 || strncmp(why, "missing ", 8) == 0 ? 2 : 1;
	}
	rc = worker_run(w);
	pf_tracer_stop(2000);
	worker_destroy(w);
	close(signal_fd);
	return rc;
}
