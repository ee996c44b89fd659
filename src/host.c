/*-------------------------------------------------------------------------
 *
 * host.c
 *	  The server's side of host.h: memory and interrupts for the pure code
 *	  (kernels, build graph, search, heaps, visited set). The unit tests
 *	  implement the same functions over malloc (test/unit/host_malloc.c).
 *
 * The lowest layer: the pure code calls it, and it calls none of the pure
 * code (the search pool's end-of-transaction check is the access method's,
 * streamhnsw.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/memutils.h"

#include "host.h"

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

static MemoryContext kept_cxt = NULL;

/* Allocate in the backend's kept context (host.h). */
void *
shnsw_alloc_kept(size_t size)
{
	if (kept_cxt == NULL)
		kept_cxt = AllocSetContextCreate(TopMemoryContext, "streamhnsw search pool",
										 ALLOCSET_DEFAULT_SIZES);
	return MemoryContextAllocHuge(kept_cxt, Max(size, 1));
}

/* Free everything shnsw_alloc_kept gave out. */
void
shnsw_kept_reset(void)
{
	if (kept_cxt != NULL)
		MemoryContextReset(kept_cxt);
}

/* A long loop of the pure code can be cancelled here. */
void
shnsw_check_interrupts(void)
{
	CHECK_FOR_INTERRUPTS();
}
