/*-------------------------------------------------------------------------
 *
 * port.h
 *	  What pure code needs from its host: memory allocation.
 *
 * In the server, shnsw_alloc is palloc in the current memory context
 * (errors are thrown by palloc); the unit tests use malloc.
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

#endif							/* STREAMHNSW_PORT_H */
