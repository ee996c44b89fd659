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

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/memutils.h"

#include "graph.h"
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

static MemoryContext kept_cxt = NULL;

/* No search runs past its transaction: free a pool an error left held. */
static void
kept_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PREPARE)
		shnsw_search_pool_end_xact();
}

/* Allocate in the backend's kept context (port.h). */
void *
shnsw_alloc_kept(size_t size)
{
	if (kept_cxt == NULL)
	{
		kept_cxt = AllocSetContextCreate(TopMemoryContext, "streamhnsw search pool",
										 ALLOCSET_DEFAULT_SIZES);
		RegisterXactCallback(kept_xact_callback, NULL);
	}
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
