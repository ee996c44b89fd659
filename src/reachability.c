/*-------------------------------------------------------------------------
 *
 * reachability.c
 *	  Every node reachable on layer 0 from the entry point: the
 *	  walk-and-attach loop that builds and VACUUM share, and the build's
 *	  repair of its in-memory graph over it.
 *
 * Pure code: VACUUM runs the same loop over index pages (vacuum.c).
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "buildgraph.h"
#include "neighbors_select.h"
#include "reachability.h"

/* The walk-and-attach loop (reachability.h). */
int64_t
shnsw_reach_all(int64_t n, int64_t entry, const ShnswReachOps *ops, void *arg)
{
	int64_t		added = 0;

	ops->walk(arg, entry);
	for (int64_t i = 0; i < n; i++)
	{
		if (ops->done != NULL && ops->done(arg))
			break;
		shnsw_check_interrupts();
		if (ops->reached(arg, i))
			continue;
		if (ops->step != NULL)
			ops->step(arg, i);
		if (ops->attach(arg, i))
		{
			added++;
			ops->walk(arg, i);
		}
	}
	return added;
}

/*
 * Reachability repair. The walk (shnsw_build_walk) keeps a breadth-first tree of layer 0
 * from the entry point: parent[v] is the reached node whose list gave v its
 * tree link (the entry is its own parent; REACH_NONE: not reached yet). The
 * reached set is closed under layer-0 links, and tree links are never
 * replaced, so every node once reached stays reachable.
 *
 * A full list gives up at most REACH_MAX_REPLACED of its entries while
 * other candidates remain: under inner product the nearest node of every
 * unreached node tends to be one of a few hubs, and letting each repair
 * take a slot of the same hubs cost up to 17 points of recall@10 (2000
 * clustered 16-d vectors, m = 8, ef_search 10); with the cap, recall stays
 * within half a point of the unrepaired graph's.
 */
#define REACH_NONE SHNSW_BUILD_UNREACHED
#define REACH_MAX_REPLACED 1

/* Whether reached node p can take a link: a free slot, or an entry not its tree child. */
static bool
reach_can_attach(const ShnswBuildGraph *g, const uint32_t *parent, uint32_t p)
{
	int			cnt;
	ShnswRef   *nb = shnsw_build_neighbors(g, p, 0, &cnt);

	if (cnt < 2 * g->m)
		return true;
	for (int k = 0; k < cnt; k++)
		if (parent[nb[k]] != p)
			return true;
	return false;
}

/*
 * Link reached node p -> u on layer 0: into a free slot, else (unless
 * capped and p already gave up REACH_MAX_REPLACED entries) over p's farthest
 * neighbour that is not its tree child: that one keeps its tree link, so
 * nothing becomes unreachable. Returns false, changing nothing, if p cannot.
 */
static bool
reach_attach(ShnswBuildGraph *g, const uint32_t *parent, uint8_t *replaced, uint32_t p,
			 uint32_t u, bool capped)
{
	int			cnt;
	ShnswRef   *nb = shnsw_build_neighbors(g, p, 0, &cnt);
	ShnswBuildFrom	from;
	int			victim = -1;
	float		vd = 0;

	if (cnt < 2 * g->m)
	{
		nb[cnt] = u;
		shnsw_build_set_count(g, p, 0, cnt + 1);
		return true;
	}
	if (capped && replaced[p] >= REACH_MAX_REPLACED)
		return false;
	from = shnsw_build_from_node(g, p, 1);
	for (int k = 0; k < cnt; k++)
	{
		float		d;

		if (parent[nb[k]] == p)
			continue;
		d = shnsw_build_distance(g, &from, nb[k]);
		if (victim < 0 || d > vd || (d == vd && nb[k] > nb[victim]))
		{
			victim = k;
			vd = d;
		}
	}
	if (victim < 0)
		return false;
	nb[victim] = u;
	if (replaced[p] < UINT8_MAX)
		replaced[p]++;
	return true;
}

/* Link u from the first of ids[0..n-1] that can take it; returns that node or REACH_NONE. */
static uint32_t
reach_attach_first(ShnswBuildGraph *g, const uint32_t *parent, uint8_t *replaced,
				   const uint32_t *ids, int n, uint32_t u, bool capped)
{
	for (int k = 0; k < n; k++)
		if (reach_attach(g, parent, replaced, ids[k], u, capped))
			return ids[k];
	return REACH_NONE;
}

/*
 * Give unreached node u an incoming link from its nearest reached node that
 * can take one: among u's own layer-0 neighbours, else among the nodes a
 * search for u finds; first sparing lists that already gave up an entry,
 * then not; last (not expected) among all reached nodes queue[0..nreached-1].
 * Returns the new parent, or REACH_NONE if no reached node could take a link.
 */
static uint32_t
reach_link_node(ShnswBuildGraph *g, const uint32_t *parent, uint8_t *replaced,
				const uint32_t *queue, uint32_t nreached, uint32_t u, bool capped_only)
{
	ShnswBuildFrom	q = shnsw_build_from_node(g, u, 0);
	int			ef = g->ef_construction > 2 * g->m ? g->ef_construction : 2 * g->m;
	uint32_t	ids[2 * SHNSW_MAX_M];
	float		d[2 * SHNSW_MAX_M];
	uint32_t   *res;
	float	   *resd;
	uint32_t	eps[2];
	int			n = 0,
				nfound,
				nres = 0,
				cnt;
	ShnswRef   *nb = shnsw_build_neighbors(g, u, 0, &cnt);
	uint32_t	best;
	float		bestd = 0;

	/* u's own neighbours that are reached, nearest first */
	for (int k = 0; k < cnt; k++)
	{
		if (parent[nb[k]] == REACH_NONE)
			continue;
		ids[n] = nb[k];
		d[n] = shnsw_build_distance(g, &q, nb[k]);
		n++;
	}
	shnsw_sort_by_distance(ids, d, n);
	best = reach_attach_first(g, parent, replaced, ids, n, u, true);
	if (best != REACH_NONE)
		return best;

	/* a search for u, as an insert would run, also from the entry point */
	res = shnsw_alloc(sizeof(uint32_t) * (ef + 1));
	resd = shnsw_alloc(sizeof(float) * (ef + 1));
	eps[0] = shnsw_build_descend(g, &q, g->entry, g->max_level, 0);
	eps[1] = g->entry;
	nfound = shnsw_build_search_layer(g, &q, u, eps, 2, 0, ef, res, resd);
	for (int k = 0; k < nfound; k++)
		if (parent[res[k]] != REACH_NONE)
			res[nres++] = res[k];
	best = reach_attach_first(g, parent, replaced, res, nres, u, true);
	if (best == REACH_NONE && !capped_only)
		best = reach_attach_first(g, parent, replaced, ids, n, u, false);
	if (best == REACH_NONE && !capped_only)
		best = reach_attach_first(g, parent, replaced, res, nres, u, false);
	shnsw_free(res);
	shnsw_free(resd);
	if (best != REACH_NONE || capped_only)
		return best;

	/*
	 * Every reached node. Some reached node can always take a link: the
	 * tree has fewer links than reached nodes, so not every list can be
	 * full of tree links.
	 */
	for (uint32_t k = 0; k < nreached; k++)
	{
		uint32_t	p = queue[k];
		float		dp;

		shnsw_check_interrupts();
		if (!reach_can_attach(g, parent, p))
			continue;
		dp = shnsw_build_distance(g, &q, p);
		if (best == REACH_NONE || dp < bestd || (dp == bestd && p < best))
		{
			best = p;
			bestd = dp;
		}
	}
	if (best != REACH_NONE && !reach_attach(g, parent, replaced, best, u, false))
		best = REACH_NONE;
	return best;
}

/* The build's side of the walk-and-attach (reachability.h): a breadth-first tree. */
typedef struct BuildReach
{
	ShnswBuildGraph *g;
	uint32_t   *parent;			/* tree parent of each reached node */
	uint32_t   *queue;			/* reached nodes, in walk order */
	uint8_t    *replaced;
	uint32_t	tail;
	uint32_t   *adopted;		/* nodes the repair linked, in order */
	uint32_t	nadopted;
	uint32_t	nadopted_next;	/* first of them that may take a link */
} BuildReach;

static void
build_reach_walk(void *arg, int64_t i)
{
	BuildReach *r = (BuildReach *) arg;

	if (r->parent[i] == REACH_NONE)
		r->parent[i] = (uint32_t) i;	/* the entry point: its own root */
	r->queue[r->tail] = (uint32_t) i;
	r->tail = shnsw_build_walk(r->g, r->parent, r->queue, r->tail, r->tail + 1);
}

static bool
build_reach_reached(void *arg, int64_t i)
{
	return ((BuildReach *) arg)->parent[i] != REACH_NONE;
}

static bool
build_reach_attach(void *arg, int64_t i)
{
	BuildReach *r = (BuildReach *) arg;
	uint32_t	p = REACH_NONE;

	/*
	 * Under inner product most nodes can be unreached (interior points are
	 * no node's near neighbour: 8,400 of 10,000 3-d points), and once every
	 * reached node near them has given up its one entry, giving each a
	 * link from its nearest reached node costs the nodes searches go
	 * through more and more entries: recall@20 fell from 1.0 to 0.80. Then
	 * they hang off the nodes the repair linked before (each list holds up
	 * to 2m tree links), leaving the lists searches use as they were.
	 */
	if (r->g->metric == SHNSW_METRIC_IP)
	{
		p = reach_link_node(r->g, r->parent, r->replaced, r->queue, r->tail, (uint32_t) i, true);
		while (p == REACH_NONE && r->nadopted_next < r->nadopted)
		{
			if (reach_attach(r->g, r->parent, r->replaced, r->adopted[r->nadopted_next],
							 (uint32_t) i, false))
				p = r->adopted[r->nadopted_next];
			else
				r->nadopted_next++;
		}
	}
	if (p == REACH_NONE)
		p = reach_link_node(r->g, r->parent, r->replaced, r->queue, r->tail, (uint32_t) i, false);
	if (p == REACH_NONE)
		return false;			/* cannot happen; see reach_link_node */
	r->parent[i] = p;
	r->adopted[r->nadopted++] = (uint32_t) i;
	return true;
}

static bool
build_reach_done(void *arg)
{
	BuildReach *r = (BuildReach *) arg;

	return r->tail >= r->g->n;
}

static const ShnswReachOps build_reach_ops = {
	build_reach_walk, build_reach_reached, build_reach_attach, build_reach_done, NULL
};

uint32_t
shnsw_build_ensure_reachable(ShnswBuildGraph *g)
{
	BuildReach	r;
	uint32_t	added;

	if (g->n < 2)
		return 0;
	r.g = g;
	r.parent = shnsw_alloc(sizeof(uint32_t) * g->n);
	r.queue = shnsw_alloc(sizeof(uint32_t) * g->n);
	r.replaced = shnsw_alloc0(g->n);
	r.tail = 0;
	r.adopted = shnsw_alloc(sizeof(uint32_t) * g->n);
	r.nadopted = 0;
	r.nadopted_next = 0;
	memset(r.parent, 0xFF, sizeof(uint32_t) * g->n);

	/*
	 * One pass suffices: each unreached node, in node order, is linked from
	 * a reached node, and the walk continues from it; replaced links are
	 * never tree links.
	 */
	added = (uint32_t) shnsw_reach_all(g->n, g->entry, &build_reach_ops, &r);
	shnsw_free(r.parent);
	shnsw_free(r.queue);
	shnsw_free(r.replaced);
	shnsw_free(r.adopted);
	return added;
}
