/*-------------------------------------------------------------------------
 *
 * neighbors_select.c
 *	  Which candidates a node keeps as neighbours: the heuristic, the
 *	  back-link rule and the distance sort (neighbors_select.h). Pure code.
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "host.h"
#include "neighbors_select.h"

/* The neighbour heuristic, keeping pruned connections up to fill. */
int
shnsw_select_heuristic(const float *d, int n, int max, int fill, ShnswCandDistFn dist,
					   void *arg, int *sel, uint8_t *passed, int *nchosen)
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
	if (nchosen != NULL)
		*nchosen = nsel;
	if (passed != NULL)
		for (int k = 0; k < nsel; k++)
			passed[k] = 0;
	if (nsel < (n < fill ? n : fill))
	{
		/*
		 * Every candidate was examined: merge the chosen ones (in sel, in
		 * order) with the nearest ones passed over, from the back so that
		 * sel can be written in place.
		 */
		int			total = n < fill ? n : fill;
		int			nfill = total - nsel;
		int			out = total,
					next = nsel - 1;

		/* the passed-over candidates taken are the nfill nearest */
		for (int k = n - 1; k >= 0 && out > 0; k--)
		{
			bool		chosen = next >= 0 && sel[next] == k;
			int			before = k - (next + 1);	/* passed over, before k */

			if (chosen)
			{
				sel[--out] = k;
				if (passed != NULL)
					passed[out] = 0;
				next--;
			}
			else if (before < nfill)
			{
				sel[--out] = k;
				if (passed != NULL)
					passed[out] = 1;
			}
		}
		nsel = total;
	}
	return nsel;
}

/*
 * Sort (ids, d) pairs by distance, then id (neighbors_select.h). The lists
 * sorted here are short (at most 2m + 1 in the build's back-links, about 2m
 * in its reachability pass), so an insertion sort, as the build had before
 * (qsort made no difference measurable above the noise).
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

/* The incremental back-link rule on a cached list (neighbors_select.h). */
int
shnsw_keep_update(uint32_t *list, float *d, uint8_t *passed, int cnt, int max,
				  uint32_t newnode, float dnew, ShnswNodeDistFn dist, void *arg)
{
	int			p = 0,
				victim = -1;
	bool		npassed = false;

	while (p < cnt && (d[p] < dnew || (d[p] == dnew && list[p] < newnode)))
		p++;
	if (cnt == max && p == cnt)
	{
		/* newnode would be the farthest: it stays out unless it is chosen and ... */
		for (int k = cnt - 1; k >= 0 && victim < 0; k--)
			if (passed[k])
				victim = k;
		if (victim < 0)
			return cnt;			/* ... a passed-over entry can make room */
	}
	for (int k = 0; k < p; k++)
	{
		if (!passed[k] && dist(arg, newnode, list[k]) < dnew)
		{
			npassed = true;
			break;
		}
	}
	if (cnt == max && p == cnt && npassed)
		return cnt;
	if (!npassed)
		for (int k = p; k < cnt; k++)
			if (!passed[k] && dist(arg, newnode, list[k]) < d[k])
				passed[k] = 1;
	if (cnt == max)
	{
		victim = -1;
		for (int k = cnt - 1; k >= 0 && victim < 0; k--)
			if (passed[k])
				victim = k;
		if (npassed && (victim < 0 || victim < p))
			return cnt;			/* newnode is the farthest passed-over one */
		if (victim < 0)
			victim = cnt - 1;
		memmove(list + victim, list + victim + 1, sizeof(uint32_t) * (cnt - 1 - victim));
		memmove(d + victim, d + victim + 1, sizeof(float) * (cnt - 1 - victim));
		memmove(passed + victim, passed + victim + 1, cnt - 1 - victim);
		cnt--;
		if (victim < p)
			p--;
	}
	memmove(list + p + 1, list + p, sizeof(uint32_t) * (cnt - p));
	memmove(d + p + 1, d + p, sizeof(float) * (cnt - p));
	memmove(passed + p + 1, passed + p, cnt - p);
	list[p] = newnode;
	d[p] = dnew;
	passed[p] = npassed;
	return cnt + 1;
}

/* The back-link rule (neighbors_select.h). */
int
shnsw_backlink(uint32_t *list, int cnt, int max, uint32_t newnode, bool force,
			   const ShnswListOps *ops, void *arg, bool *kept, int *nchosen)
{
	float		dbuf[64];
	float	   *d;
	float	   *cd;
	uint8_t    *cp;
	int			chosen = max;

	if (nchosen != NULL)
		*nchosen = max;
	for (int k = 0; k < cnt; k++)
	{
		if (list[k] == newnode)
		{
			*kept = true;
			return -1;
		}
	}
	if (ops->cache != NULL && ops->cache(arg, &cd, &cp))
	{
		float		dnew;

		ops->distances(arg, &newnode, 1, &dnew);
		cnt = shnsw_keep_update(list, cd, cp, cnt, max, newnode, dnew, ops->dist, arg);
		*kept = false;
		for (int k = 0; k < cnt && !*kept; k++)
			*kept = list[k] == newnode;
		return cnt;
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
	cnt = ops->choose(arg, list, d, cnt + 1, max, &chosen);
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
		chosen = max;
	}
	if (nchosen != NULL)
		*nchosen = chosen;
	return cnt;
}
