/*
 * odbc_session_memory — what one open legacy session costs in memory
 * before payflow-worker adds anything of its own.
 *
 *   odbc_session_memory N CONNSTR [SQL]
 *
 * Opens one session to warm the driver up (its libraries, gconv modules,
 * first-use caches), then N more through unixODBC; with SQL, each session
 * also prepares and executes it once, as an executor does.  Prints heap in
 * use (mallinfo2) and resident memory (VmRSS) per session.  This is the floor
 * under worker.sh's "KiB per call": the worker holds one such session per
 * executor for as long as a call runs.  Built and run by worker_scale.sh.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sql.h>
#include <sqlext.h>

static long
rss_kib(void)
{
	FILE	   *f = fopen("/proc/self/status", "r");
	char		line[256];
	long		kib = 0;

	if (f == NULL)
		return 0;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, "VmRSS:", 6) == 0)
			kib = atol(line + 6);
	fclose(f);
	return kib;
}

static SQLHDBC
open_session(SQLHENV env, const char *connstr, const char *sql)
{
	SQLHDBC		dbc;
	SQLHSTMT	stmt;

	if (!SQL_SUCCEEDED(SQLAllocHandle(SQL_HANDLE_DBC, env, &dbc)) ||
		!SQL_SUCCEEDED(SQLDriverConnect(dbc, NULL, (SQLCHAR *) connstr, SQL_NTS,
										NULL, 0, NULL, SQL_DRIVER_NOPROMPT)))
	{
		fprintf(stderr, "odbc_session_memory: cannot connect\n");
		exit(1);
	}
	if (sql != NULL)
	{
		/* the statement stays allocated, as during a call */
		if (!SQL_SUCCEEDED(SQLAllocHandle(SQL_HANDLE_STMT, dbc, &stmt)) ||
			!SQL_SUCCEEDED(SQLExecDirect(stmt, (SQLCHAR *) sql, SQL_NTS)))
		{
			fprintf(stderr, "odbc_session_memory: cannot run the statement\n");
			exit(1);
		}
		SQLFreeStmt(stmt, SQL_CLOSE);
	}
	return dbc;
}

int
main(int argc, char **argv)
{
	SQLHENV		env;
	struct mallinfo2 before,
				after;
	long		rss_before;
	int			n;

	if (argc < 3 || (n = atoi(argv[1])) <= 0)
	{
		fprintf(stderr, "usage: odbc_session_memory N CONNSTR [SQL]\n");
		return 2;
	}
	SQLAllocHandle(SQL_HANDLE_ENV, SQL_NULL_HANDLE, &env);
	SQLSetEnvAttr(env, SQL_ATTR_ODBC_VERSION, (SQLPOINTER) SQL_OV_ODBC3, 0);
	(void) open_session(env, argv[2], argc > 3 ? argv[3] : NULL);

	before = mallinfo2();
	rss_before = rss_kib();
	for (int i = 0; i < n; i++)
		(void) open_session(env, argv[2], argc > 3 ? argv[3] : NULL);
	after = mallinfo2();

	printf("%d sessions: %.1f KiB heap in use, %.1f KiB resident per session\n", n,
		   (double) (after.uordblks - before.uordblks) / 1024 / n,
		   (double) (rss_kib() - rss_before) / n);
	return 0;
}
