/*
 * unit.c
 *		Counters and reporting for the unit tests.
 */
#include "unit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int			unit_passed = 0;
int			unit_failed = 0;

bool
unit_check(bool ok, const char *file, int line, const char *expr)
{
	if (ok)
		unit_passed++;
	else
	{
		unit_failed++;
		fprintf(stderr, "%s:%d: check failed: %s\n", file, line, expr);
	}
	return ok;
}

bool
unit_check_str(const char *got, const char *want, const char *file, int line, const char *expr)
{
	bool		ok = got != NULL && want != NULL && strcmp(got, want) == 0;

	if (ok)
		unit_passed++;
	else
	{
		unit_failed++;
		fprintf(stderr, "%s:%d: %s\n  got:  %s\n  want: %s\n", file, line, expr,
				got ? got : "(null)", want ? want : "(null)");
	}
	return ok;
}

int
unit_finish(const char *name)
{
	printf("%s: %d passed, %d failed\n", name, unit_passed, unit_failed);
	return unit_failed == 0 ? 0 : 1;
}

char *
unit_read_file(const char *path, size_t *len)
{
	FILE	   *f = fopen(path, "rb");
	char	   *data = NULL;
	size_t		n = 0;
	size_t		cap = 0;
	size_t		got;

	if (f == NULL)
		return NULL;
	do
	{
		if (n + 4096 + 1 > cap)
		{
			cap = cap ? cap * 2 : 8192;
			data = realloc(data, cap);
		}
		got = fread(data + n, 1, 4096, f);
		n += got;
	} while (got > 0);
	fclose(f);
	data[n] = '\0';
	if (len)
		*len = n;
	return data;
}
