/*
 * host_malloc.c
 *	  host.h's allocation over malloc, for programs that link the pure code
 *	  without a server (the unit tests, run_unit.c, which define
 *	  shnsw_check_interrupts themselves). Allocation failure aborts.
 */
#include <stdlib.h>

#include "host.h"

void *
shnsw_alloc(size_t size)
{
	void	   *p = malloc(size ? size : 1);

	if (!p)
		abort();
	return p;
}

void *
shnsw_alloc0(size_t size)
{
	void	   *p = calloc(1, size ? size : 1);

	if (!p)
		abort();
	return p;
}

void *
shnsw_realloc(void *ptr, size_t size)
{
	void	   *p = realloc(ptr, size);

	if (!p)
		abort();
	return p;
}

void
shnsw_free(void *ptr)
{
	free(ptr);
}

void *
shnsw_alloc_kept(size_t size)
{
	return shnsw_alloc(size);
}

void
shnsw_kept_reset(void)
{
}
