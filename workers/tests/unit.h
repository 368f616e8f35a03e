/*
 * unit.h
 *		A few assertion macros for the library's unit tests. A failed check is
 *		reported with its file and line and the test goes on, so one run shows
 *		every failure; unit_finish() prints the totals and gives the exit code.
 */
#ifndef PAYFLOW_TESTS_UNIT_H
#define PAYFLOW_TESTS_UNIT_H

#include <stdbool.h>
#include <stddef.h>

extern int	unit_passed;
extern int	unit_failed;

bool		unit_check(bool ok, const char *file, int line, const char *expr);
bool		unit_check_str(const char *got, const char *want, const char *file, int line,
						   const char *expr);
int			unit_finish(const char *name);

/* Read a whole file; NULL when it cannot be read. The caller frees it. */
char	   *unit_read_file(const char *path, size_t *len);

#define CHECK(cond) unit_check((cond), __FILE__, __LINE__, #cond)
#define CHECK_STR(got, want) unit_check_str((got), (want), __FILE__, __LINE__, #got)

#endif							/* PAYFLOW_TESTS_UNIT_H */
