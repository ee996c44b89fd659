/*-------------------------------------------------------------------------
 *
 * host.h
 *	  What pure code needs from its host: memory allocation and a point
 *	  where a long loop may be interrupted. The server implements it in
 *	  host.c, the unit tests in test/unit/host_malloc.c.
 *
 * In the server, shnsw_alloc is palloc in the current memory context
 * (errors are thrown by palloc); the unit tests use malloc.
 *
 * shnsw_check_interrupts is called once per step of every loop whose length
 * depends on the data (one expansion of a search, one node of a build
 * pass). In the server it is CHECK_FOR_INTERRUPTS(), so a query cancel or
 * statement_timeout ends a long search or build with an ERROR (which
 * unwinds through the pure code: it holds no resources the host's memory
 * contexts do not free); the unit tests count the calls.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_HOST_H
#define STREAMHNSW_HOST_H

#include <stddef.h>

extern void *shnsw_alloc(size_t size);
extern void *shnsw_alloc0(size_t size);
extern void *shnsw_realloc(void *ptr, size_t size);
extern void shnsw_free(void *ptr);

/*
 * Memory kept from one query to the next (search.c's search pool): in the
 * server, a memory context of its own under TopMemoryContext; resized with
 * shnsw_realloc (which keeps a chunk in its context) and freed with
 * shnsw_free, or all at once by shnsw_kept_reset (after an error, when
 * the search that held it is gone).
 */
extern void *shnsw_alloc_kept(size_t size);
extern void shnsw_kept_reset(void);
extern void shnsw_check_interrupts(void);

#endif							/* STREAMHNSW_HOST_H */
