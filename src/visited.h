/*-------------------------------------------------------------------------
 *
 * visited.h
 *	  An open-addressing hash set of node references, for the set of nodes
 *	  a disk search has already seen.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_VISITED_H
#define STREAMHNSW_VISITED_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "format.h"
#include "host.h"

typedef struct ShnswVisited
{
	ShnswRef   *slots;			/* SHNSW_INVALID_REF marks an empty slot */
	uint32_t	mask;
	uint32_t	n;
} ShnswVisited;

static inline void
shnsw_visited_init(ShnswVisited *v, uint32_t expected)
{
	uint32_t	size = 64;

	while (size < expected * 2)
		size <<= 1;
	v->slots = (ShnswRef *) shnsw_alloc(sizeof(ShnswRef) * size);
	memset(v->slots, 0xFF, sizeof(ShnswRef) * size);
	v->mask = size - 1;
	v->n = 0;
}

static inline void
shnsw_visited_free(ShnswVisited *v)
{
	if (v->slots)
		shnsw_free(v->slots);
	v->slots = NULL;
}

/* Fibonacci hashing: the high half of the product, where every bit of r counts */
static inline uint32_t
shnsw_visited_hash(ShnswRef r)
{
	return (uint32_t) (((uint64_t) r * 0x9E3779B97F4A7C15ull) >> 32);
}

static bool shnsw_visited_add(ShnswVisited *v, ShnswRef r);

/*
 * Double the table. The slots are resized with shnsw_realloc, so they stay
 * in the memory they came from (search.c's search pool keeps them across
 * scans); the old entries are copied aside and added again.
 */
static inline void
shnsw_visited_grow(ShnswVisited *v)
{
	uint32_t	oldsize = v->mask + 1;
	ShnswRef   *old = (ShnswRef *) shnsw_alloc(sizeof(ShnswRef) * oldsize);

	memcpy(old, v->slots, sizeof(ShnswRef) * oldsize);
	v->slots = (ShnswRef *) shnsw_realloc(v->slots, sizeof(ShnswRef) * oldsize * 2);
	memset(v->slots, 0xFF, sizeof(ShnswRef) * oldsize * 2);
	v->mask = oldsize * 2 - 1;
	v->n = 0;
	for (uint32_t i = 0; i < oldsize; i++)
		if (old[i] != SHNSW_INVALID_REF)
			shnsw_visited_add(v, old[i]);
	shnsw_free(old);
}

/* Empty the set, keeping its table. */
static inline void
shnsw_visited_clear(ShnswVisited *v)
{
	memset(v->slots, 0xFF, sizeof(ShnswRef) * (v->mask + 1));
	v->n = 0;
}

/* Is r in the set? */
static inline bool
shnsw_visited_contains(const ShnswVisited *v, ShnswRef r)
{
	uint32_t	i = shnsw_visited_hash(r) & v->mask;

	while (v->slots[i] != SHNSW_INVALID_REF)
	{
		if (v->slots[i] == r)
			return true;
		i = (i + 1) & v->mask;
	}
	return false;
}

/* Add r; return true if it was not there before. */
static inline bool
shnsw_visited_add(ShnswVisited *v, ShnswRef r)
{
	uint32_t	i;

	if ((v->n + 1) * 2 > v->mask + 1)
		shnsw_visited_grow(v);
	i = shnsw_visited_hash(r) & v->mask;
	while (v->slots[i] != SHNSW_INVALID_REF)
	{
		if (v->slots[i] == r)
			return false;
		i = (i + 1) & v->mask;
	}
	v->slots[i] = r;
	v->n++;
	return true;
}

#endif							/* STREAMHNSW_VISITED_H */
