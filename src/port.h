/*-------------------------------------------------------------------------
 *
 * port.h
 *	  What pure code needs from its host: memory allocation and a point
 *	  where a long loop may be interrupted.
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
#ifndef STREAMHNSW_PORT_H
#define STREAMHNSW_PORT_H

#include <stddef.h>

extern void *shnsw_alloc(size_t size);
extern void *shnsw_alloc0(size_t size);
extern void *shnsw_realloc(void *ptr, size_t size);
extern void shnsw_free(void *ptr);
extern void shnsw_check_interrupts(void);

#endif							/* STREAMHNSW_PORT_H */
