/*-------------------------------------------------------------------------
 *
 * neighbors.c
 *	  The neighbour heuristic and the distance sort (neighbors.h). Pure
 *	  code: see src/README, Layers.
 *
 *-------------------------------------------------------------------------
 */
#include <stdlib.h>

#include "neighbors.h"
#include "port.h"
#include "pqueue.h"

/* The neighbour heuristic (neighbors.h). */
int
shnsw_select_heuristic(const float *d, int n, int max, ShnswCandDistFn dist, void *arg,
					   int *sel)
{
	int			nsel = 0;

	for (int k = 0; k < n && nsel < max; k++)
	{
		bool		good = true;

		for (int r = 0; r < nsel; r++)
		{
			if (dist(arg, k, sel[r]) < d[k])
			{
				good = false;
				break;
			}
		}
		if (good)
			sel[nsel++] = k;
	}
	return nsel;
}

/* qsort order of pairs: distance, then id. */
static int
pair_cmp(const void *a, const void *b)
{
	const ShnswPair *x = (const ShnswPair *) a;
	const ShnswPair *y = (const ShnswPair *) b;

	if (x->d != y->d)
		return x->d < y->d ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* Sort (ids, d) pairs by distance, then id (neighbors.h). */
void
shnsw_sort_by_distance(uint32_t *ids, float *d, int n)
{
	ShnswPair	buf[64];
	ShnswPair  *p = n <= 64 ? buf : shnsw_alloc(sizeof(ShnswPair) * n);

	for (int k = 0; k < n; k++)
	{
		p[k].d = d[k];
		p[k].id = ids[k];
	}
	qsort(p, n, sizeof(ShnswPair), pair_cmp);
	for (int k = 0; k < n; k++)
	{
		d[k] = p[k].d;
		ids[k] = p[k].id;
	}
	if (p != buf)
		shnsw_free(p);
}

/* The back-link rule (neighbors.h). */
int
shnsw_backlink(uint32_t *list, int cnt, int max, uint32_t newnode, bool force,
			   const ShnswListOps *ops, void *arg, bool *kept)
{
	float		dbuf[64];
	float	   *d;

	for (int k = 0; k < cnt; k++)
	{
		if (list[k] == newnode)
		{
			*kept = true;
			return -1;
		}
	}
	if (cnt < max)
	{
		list[cnt] = newnode;
		*kept = true;
		return cnt + 1;
	}
	d = cnt + 1 <= 64 ? dbuf : shnsw_alloc(sizeof(float) * (cnt + 1));
	list[cnt] = newnode;
	ops->distances(arg, list, cnt + 1, d);
	cnt = ops->choose(arg, list, d, cnt + 1, max);
	if (d != dbuf)
		shnsw_free(d);
	*kept = false;
	for (int k = 0; k < cnt && !*kept; k++)
		*kept = list[k] == newnode;
	if (!*kept && force)
	{
		/* nearest first: the last entry is the farthest */
		list[cnt - 1] = newnode;
		*kept = true;
	}
	return cnt;
}
