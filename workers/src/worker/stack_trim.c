/*
 * stack_trim.c
 *		Drop an executor's unused stack pages (stack_trim.h).
 */
#include "stack_trim.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

/* Kept resident below the caller's frame: what the call itself starts with. */
#define KEEP_BELOW_BYTES (4 * 1024)

/* the lowest address of this thread's stack; 0: unknown (no trimming) */
static __thread uintptr_t stack_low;

void
stack_trim_init(void)
{
	pthread_attr_t attr;
	void	   *addr;
	size_t		size;

	if (pthread_getattr_np(pthread_self(), &attr) != 0)
		return;
	if (pthread_attr_getstack(&attr, &addr, &size) == 0)
		stack_low = (uintptr_t) addr;
	pthread_attr_destroy(&attr);
}

void
stack_trim(void)
{
	volatile char here;
	uintptr_t	page = (uintptr_t) sysconf(_SC_PAGESIZE);
	uintptr_t	top = ((uintptr_t) &here - KEEP_BELOW_BYTES) & ~(page - 1);

	/* pthread_attr_getstack's range leaves out the guard page */
	if (stack_low == 0 || top <= stack_low + page)
		return;
	(void) madvise((void *) stack_low, top - stack_low, MADV_DONTNEED);
}
