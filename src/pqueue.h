/*-------------------------------------------------------------------------
 *
 * pqueue.h
 *	  Binary heaps of (distance, id) pairs: a min-heap of candidates to
 *	  expand and a max-heap of the best results so far.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_PQUEUE_H
#define STREAMHNSW_PQUEUE_H

#include <stdbool.h>
#include <stdint.h>

#include "host.h"

typedef struct ShnswPair
{
	float		d;
	uint32_t	id;
} ShnswPair;

typedef struct ShnswHeap
{
	ShnswPair  *a;
	int			n;
	int			cap;
	bool		max;			/* max-heap if true, else min-heap */
} ShnswHeap;

static inline void
shnsw_heap_init(ShnswHeap *h, int cap, bool max)
{
	h->cap = cap > 4 ? cap : 4;
	h->a = (ShnswPair *) shnsw_alloc(sizeof(ShnswPair) * h->cap);
	h->n = 0;
	h->max = max;
}

static inline void
shnsw_heap_free(ShnswHeap *h)
{
	if (h->a)
		shnsw_free(h->a);
	h->a = NULL;
	h->n = h->cap = 0;
}

/* true if x should sit above y */
static inline bool
shnsw_heap_above(const ShnswHeap *h, const ShnswPair *x, const ShnswPair *y)
{
	if (x->d != y->d)
		return h->max ? x->d > y->d : x->d < y->d;
	/* tie-break on id for determinism */
	return h->max ? x->id > y->id : x->id < y->id;
}

/*
 * Append (d, id) at the end, growing the array, without restoring the heap
 * order (shnsw_heap_push does; search.c's parked nodes do it later, if at
 * all). Returns its position.
 */
static inline int
shnsw_heap_append(ShnswHeap *h, float d, uint32_t id)
{
	if (h->n == h->cap)
	{
		h->cap *= 2;
		h->a = (ShnswPair *) shnsw_realloc(h->a, sizeof(ShnswPair) * h->cap);
	}
	h->a[h->n].d = d;
	h->a[h->n].id = id;
	return h->n++;
}

static inline void
shnsw_heap_push(ShnswHeap *h, float d, uint32_t id)
{
	int			i = shnsw_heap_append(h, d, id);

	while (i > 0)
	{
		int			p = (i - 1) / 2;
		ShnswPair	t;

		if (!shnsw_heap_above(h, &h->a[i], &h->a[p]))
			break;
		t = h->a[i];
		h->a[i] = h->a[p];
		h->a[p] = t;
		i = p;
	}
}

static inline ShnswPair
shnsw_heap_top(const ShnswHeap *h)
{
	return h->a[0];
}

static inline ShnswPair
shnsw_heap_pop(ShnswHeap *h)
{
	ShnswPair	top = h->a[0];
	int			i = 0;

	h->a[0] = h->a[--h->n];
	for (;;)
	{
		int			l = 2 * i + 1,
					r = l + 1,
					b = i;
		ShnswPair	t;

		if (l < h->n && shnsw_heap_above(h, &h->a[l], &h->a[b]))
			b = l;
		if (r < h->n && shnsw_heap_above(h, &h->a[r], &h->a[b]))
			b = r;
		if (b == i)
			break;
		t = h->a[i];
		h->a[i] = h->a[b];
		h->a[b] = t;
		i = b;
	}
	return top;
}

/* x before y: nearer, then the lower id */
static inline bool
shnsw_pair_before(const ShnswPair *x, const ShnswPair *y)
{
	return x->d < y->d || (x->d == y->d && x->id < y->id);
}

/*
 * shnsw_pairs_nearest moves the k nearest of a[0..n) to its front, nearest
 * first (the rest in no order), in O(n + k^2) on average: a selection, then
 * an insertion sort of the k. Returns min(k, n).
 */
static inline int
shnsw_pairs_nearest(ShnswPair *a, int n, int k)
{
	int			lo = 0,
				hi = n - 1;

	if (k > n)
		k = n;
	while (k > 0 && k < n && lo < hi)
	{
		ShnswPair	pivot = a[lo + (hi - lo) / 2];
		int			i = lo,
					j = hi;

		while (i <= j)
		{
			ShnswPair	t;

			while (shnsw_pair_before(&a[i], &pivot))
				i++;
			while (shnsw_pair_before(&pivot, &a[j]))
				j--;
			if (i > j)
				break;
			t = a[i];
			a[i++] = a[j];
			a[j--] = t;
		}
		/* now a[lo..j] <= pivot <= a[i..hi], and a[j+1..i-1] == pivot */
		if (k - 1 <= j)
			hi = j;
		else if (k - 1 >= i)
			lo = i;
		else
			break;
	}
	for (int x = 1; x < k; x++)
	{
		ShnswPair	t = a[x];
		int			y = x;

		for (; y > 0 && shnsw_pair_before(&t, &a[y - 1]); y--)
			a[y] = a[y - 1];
		a[y] = t;
	}
	return k;
}

#endif							/* STREAMHNSW_PQUEUE_H */
