/*-------------------------------------------------------------------------
 *
 * port.c
 *	  The server's side of port.h: what the pure code (format.h, kernels,
 *	  graph, heaps, visited set) gets from its host. The unit tests
 *	  implement the same functions over malloc (test/unit/run_unit.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/memutils.h"

#include "port.h"

/* Allocate in the current memory context; palloc reports failure. */
void *
shnsw_alloc(size_t size)
{
	return MemoryContextAllocHuge(CurrentMemoryContext, Max(size, 1));
}

/* Zeroed, in the current memory context. */
void *
shnsw_alloc0(size_t size)
{
	return MemoryContextAllocExtended(CurrentMemoryContext, Max(size, 1),
									  MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
}

/* Resize a chunk from shnsw_alloc or shnsw_alloc0. */
void *
shnsw_realloc(void *ptr, size_t size)
{
	return repalloc_huge(ptr, Max(size, 1));
}

/* Free a chunk from shnsw_alloc, shnsw_alloc0 or shnsw_realloc. */
void
shnsw_free(void *ptr)
{
	pfree(ptr);
}

/* A long loop of the pure code can be cancelled here. */
void
shnsw_check_interrupts(void)
{
	CHECK_FOR_INTERRUPTS();
}
