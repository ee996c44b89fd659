/*-------------------------------------------------------------------------
 *
 * neighbors.c
 *	  The neighbour heuristic and the distance sort (neighbors.h). Pure
 *	  code: see src/README, Layers.
 *
 *-------------------------------------------------------------------------
 */
#include "neighbors.h"
#include "port.h"

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

/*
 * Sort (ids, d) pairs by distance, then id (neighbors.h). The lists sorted
 * here are short (at most 2m + 1 in the build's back-links, about 2m in its
 * reachability pass), so an insertion sort, as the build had before (qsort
 * made no difference measurable above the noise).
 */
void
shnsw_sort_by_distance(uint32_t *ids, float *d, int n)
{
	for (int i = 1; i < n; i++)
	{
		uint32_t	id = ids[i];
		float		dv = d[i];
		int			j = i - 1;

		while (j >= 0 && (d[j] > dv || (d[j] == dv && ids[j] > id)))
		{
			ids[j + 1] = ids[j];
			d[j + 1] = d[j];
			j--;
		}
		ids[j + 1] = id;
		d[j + 1] = dv;
	}
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
