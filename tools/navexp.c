/*
 * navexp.c
 *	  Issue 14 experiment, no server: where does recall go, the graph or the
 *	  SQ8 navigation? Builds the in-memory graph (graph.c) on float vectors
 *	  and searches it three ways at each ef_search: exact distances only;
 *	  SQ8 distances with the ef results re-ranked exactly (as a scan's first
 *	  round); SQ8 with every visited node re-ranked (a wide pool).
 *
 *	  cc -O2 -Isrc -o /tmp/navexp tools/navexp.c test/unit/port_malloc.c \
 *	     src/kernels.c src/graph.c src/neighbors.c src/reach.c -lm
 *	  /tmp/navexp DIR [seed]   DIR holds rows.f32 queries.f32 truth.i32 meta
 *	  (meta: "rows queries dims l2|cosine|ip"; truth: 10 int32 row numbers a query)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "neighbors.h"
#include "kernels.h"
#include "pqueue.h"

/* port.h: allocation is test/unit/port_malloc.c's; nothing to cancel here */
void
shnsw_check_interrupts(void)
{
}

static void *
slurp(const char *dir, const char *name, size_t bytes)
{
	char		path[1024];
	FILE	   *f;
	void	   *p = malloc(bytes);

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "rb");
	if (!f || fread(p, 1, bytes, f) != bytes)
	{
		fprintf(stderr, "cannot read %s\n", path);
		exit(1);
	}
	fclose(f);
	return p;
}

typedef struct Ctx
{
	ShnswBuildGraph *g;
	const float *q;
	Sq8Query   *sq;
	const uint8_t *codes;
	int			dim;
	uint8_t    *vis;
	uint32_t   *visited;
	int			nvisited;
} Ctx;

static float
dist(Ctx *c, uint32_t j)
{
	if (c->sq)
		return sq8_distance(c->sq, c->codes + (size_t) j * c->dim);
	return shnsw_float_distance(c->g->metric, c->q, c->g->vecs + (size_t) j * c->dim, c->dim);
}

static float
exact(Ctx *c, uint32_t j)
{
	return shnsw_float_distance(c->g->metric, c->q, c->g->vecs + (size_t) j * c->dim, c->dim);
}

/*
 * Beam search of one layer from ep with width ef; leaves the results in res,
 * nearest first by navigation distance, and returns their count. Layer-0
 * visits are recorded (c->visited).
 */
static int
search_layer(Ctx *c, uint32_t ep, int layer, int ef, uint32_t *res)
{
	ShnswBuildGraph *g = c->g;
	uint8_t    *seen = layer == 0 ? c->vis : calloc(g->n, 1);
	float		epd = dist(c, ep);
	ShnswHeap	C,
				W;
	int			n;

	shnsw_heap_init(&C, 64, false);
	shnsw_heap_init(&W, 64, true);
	shnsw_heap_push(&C, epd, ep);
	shnsw_heap_push(&W, epd, ep);
	seen[ep] = 1;
	if (layer == 0)
		c->visited[c->nvisited++] = ep;
	while (C.n > 0)
	{
		ShnswPair	p = shnsw_heap_pop(&C);
		int			cnt;
		ShnswRef   *nb;

		if (W.n >= ef && p.d > shnsw_heap_top(&W).d)
			break;
		nb = shnsw_build_neighbors(g, p.id, layer, &cnt);
		for (int k = 0; k < cnt; k++)
		{
			float		d;

			if (seen[nb[k]])
				continue;
			seen[nb[k]] = 1;
			if (layer == 0)
				c->visited[c->nvisited++] = nb[k];
			d = dist(c, nb[k]);
			if (W.n < ef || d < shnsw_heap_top(&W).d)
			{
				shnsw_heap_push(&C, d, nb[k]);
				shnsw_heap_push(&W, d, nb[k]);
				if (W.n > ef)
					shnsw_heap_pop(&W);
			}
		}
	}
	n = W.n;
	for (int k = n - 1; k >= 0; k--)
		res[k] = shnsw_heap_pop(&W).id;
	shnsw_heap_free(&C);
	shnsw_heap_free(&W);
	if (layer != 0)
		free(seen);
	return n;
}

/*
 * A scan's first round: greedy descent to layer 1, a beam of 4 there (as
 * scan.c's scan_start), a beam of ef on layer 0.
 */
static int
search(Ctx *c, int ef, uint32_t *res)
{
	ShnswBuildGraph *g = c->g;
	uint32_t	ep = g->entry;
	float		epd = dist(c, ep);

	c->nvisited = 0;
	for (int l = g->max_level; l > 1; l--)
	{
		int			changed = 1;

		while (changed)
		{
			int			cnt;
			ShnswRef   *nb = shnsw_build_neighbors(g, ep, l, &cnt);

			changed = 0;
			for (int k = 0; k < cnt; k++)
			{
				float		d = dist(c, nb[k]);

				if (d < epd)
				{
					epd = d;
					ep = nb[k];
					changed = 1;
				}
			}
		}
	}
	if (g->max_level >= 1 && search_layer(c, ep, 1, 4, res) > 0)
		ep = res[0];
	return search_layer(c, ep, 0, ef, res);
}

/* how many of the k exactly nearest of ids[0..n-1] are in truth[0..k-1] */
static int
hits(Ctx *c, uint32_t *ids, int n, const int *truth, int k)
{
	float	   *d = malloc(sizeof(float) * n);
	int			h = 0;

	for (int i = 0; i < n; i++)
		d[i] = exact(c, ids[i]);
	shnsw_sort_by_distance(ids, d, n);
	for (int i = 0; i < n && i < k; i++)
		for (int t = 0; t < k; t++)
			if ((int) ids[i] == truth[t])
				h++;
	free(d);
	return h;
}

int
main(int argc, char **argv)
{
	int			n, nq, dim;
	char		metric_s[16];
	FILE	   *f;
	char		path[1024];
	float	   *rows, *queries;
	int		   *truth;
	ShnswMetric metric;
	ShnswBuildGraph g;
	float	   *mins, *maxs, *lo, *scale;
	uint8_t    *codes;
	int			efs[] = {10, 20, 40, 100};

	shnsw_kernels_init(SHNSW_SIMD_AVX512);
	snprintf(path, sizeof(path), "%s/meta", argv[1]);
	f = fopen(path, "r");
	if (!f || fscanf(f, "%d %d %d %15s", &n, &nq, &dim, metric_s) != 4)
		return 1;
	fclose(f);
	metric = strcmp(metric_s, "l2") == 0 ? SHNSW_METRIC_L2
		: strcmp(metric_s, "ip") == 0 ? SHNSW_METRIC_IP : SHNSW_METRIC_COSINE;
	rows = slurp(argv[1], "rows.f32", sizeof(float) * (size_t) n * dim);
	queries = slurp(argv[1], "queries.f32", sizeof(float) * (size_t) nq * dim);
	truth = slurp(argv[1], "truth.i32", sizeof(int) * (size_t) nq * 10);
	if (metric == SHNSW_METRIC_COSINE)
	{
		for (int i = 0; i < n; i++)
			shnsw_normalize(rows + (size_t) i * dim, dim);
		for (int i = 0; i < nq; i++)
			shnsw_normalize(queries + (size_t) i * dim, dim);
	}
	mins = malloc(sizeof(float) * dim);
	maxs = malloc(sizeof(float) * dim);
	lo = malloc(sizeof(float) * dim);
	scale = malloc(sizeof(float) * dim);
	codes = malloc((size_t) n * dim);
	sq8_train_init(mins, maxs, dim);
	for (int i = 0; i < n; i++)
		sq8_train_add(mins, maxs, rows + (size_t) i * dim, dim);
	sq8_train_finish(mins, maxs, lo, scale, dim);
	for (int i = 0; i < n; i++)
		sq8_encode(lo, scale, rows + (size_t) i * dim, codes + (size_t) i * dim, dim);

	shnsw_build_init(&g, dim, 16, 64, metric, n, false, NULL, NULL,
					 argc > 2 ? strtoull(argv[2], NULL, 10) : 42, NULL);
	for (int i = 0; i < n; i++)
		shnsw_build_link(&g, shnsw_build_add_vector(&g, rows + (size_t) i * dim));
	{
		long		deg = 0;
		uint32_t	added = shnsw_build_ensure_reachable(&g);

		for (uint32_t i = 0; i < g.n; i++)
		{
			int			cnt;

			shnsw_build_neighbors(&g, i, 0, &cnt);
			deg += cnt;
		}
		printf("repaired %u, mean layer-0 degree %.2f\n", added,
			   (double) deg / g.n);
	}

	for (int e = 0; e < 4; e++)
	{
		int			ef = efs[e];
		long		h_exact = 0, h_sq = 0, h_sq2 = 0, h_wide = 0, v_exact = 0, v_sq = 0;
		Ctx			c = {&g, NULL, NULL, codes, dim, calloc(n, 1),
		malloc(sizeof(uint32_t) * n), 0};
		uint32_t   *res = malloc(sizeof(uint32_t) * (n + 1));
		Sq8Query	sq;
		float	   *sqbuf = malloc(sizeof(float) * 2 * dim);

		sq.dim = dim;
		sq.qs = sqbuf;
		sq.w = sqbuf + dim;
		for (int qi = 0; qi < nq; qi++)
		{
			int			nr;

			c.q = queries + (size_t) qi * dim;
			c.sq = NULL;
			nr = search(&c, ef, res);
			h_exact += hits(&c, res, nr, truth + qi * 10, 10);
			v_exact += c.nvisited;
			for (int k = 0; k < c.nvisited; k++)
				c.vis[c.visited[k]] = 0;

			/* cosine navigates on L2 between unit vectors, as scans do */
			sq8_prepare_query(&sq, metric == SHNSW_METRIC_IP ? metric : SHNSW_METRIC_L2,
							  c.q, lo, scale);
			c.sq = &sq;
			nr = search(&c, ef, res);
			v_sq += c.nvisited;
			h_sq += hits(&c, res, nr, truth + qi * 10, 10);
			/* the visited nodes: re-rank all of them */
			memcpy(res, c.visited, sizeof(uint32_t) * c.nvisited);
			h_wide += hits(&c, res, c.nvisited, truth + qi * 10, 10);
			for (int k = 0; k < c.nvisited; k++)
				c.vis[c.visited[k]] = 0;
			/* SQ8 at 2 ef re-ranked to... (same budget as exact 2ef) */
			nr = search(&c, 2 * ef, res);
			h_sq2 += hits(&c, res, nr, truth + qi * 10, 10);
			for (int k = 0; k < c.nvisited; k++)
				c.vis[c.visited[k]] = 0;
		}
		printf("ef %3d  exact %.4f (visit %.0f)  sq8 %.4f (visit %.0f)  sq8-wide %.4f  sq8@2ef %.4f\n",
			   ef, h_exact / (10.0 * nq), (double) v_exact / nq, h_sq / (10.0 * nq),
			   (double) v_sq / nq, h_wide / (10.0 * nq), h_sq2 / (10.0 * nq));
		free(c.vis);
		free(c.visited);
		free(res);
		free(sqbuf);
	}
	return 0;
}
