/*
 * layout_eval: distinct pages per layer-0 neighbour list (not counting the
 * owner's own page) of a real index's graph under the build's layouts.
 *
 *   python bench/issue17/layout_dump.py INDEX > graph.bin   (kept devloop server)
 *   cc -O2 -Isrc -o layout_eval bench/issue17/layout_eval.c test/unit/port_malloc.c \
 *      src/graph.c src/kernels.c src/neighbors.c src/reach.c src/lookahead.c -lm
 *   ./layout_eval graph.bin PER_PAGE
 *
 * graph.bin: uint32 n, m, entry; then per node (in the index's order)
 * uint32 level and, for each layer 0..level, uint32 count and count uint32
 * node numbers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph.h"

/* test/unit/port_malloc.c has the allocation stubs; the unit runner has this one */
void		shnsw_check_interrupts(void);

void
shnsw_check_interrupts(void)
{
}

static double pages_per_list_at(const ShnswBuildGraph *g, const uint32_t *order, int per_page,
								int own, int layer);

static double
pages_per_list(const ShnswBuildGraph *g, const uint32_t *order, int per_page, int own)
{
	return pages_per_list_at(g, order, per_page, own, 0);
}

static int
cmp_u32(const void *a, const void *b)
{
	uint32_t	x = *(const uint32_t *) a,
				y = *(const uint32_t *) b;

	return x < y ? -1 : x > y;
}

/* Distinct values among pages[0..n-1] other than skip (sorts them). */
static int
distinct_except(uint32_t *pages, int n, uint32_t skip)
{
	int			d = 0;

	qsort(pages, n, sizeof(uint32_t), cmp_u32);
	for (int k = 0; k < n; k++)
		d += pages[k] != skip && (k == 0 || pages[k] != pages[k - 1]);
	return d;
}

static double
pages_per_list_at(const ShnswBuildGraph *g, const uint32_t *order, int per_page, int own, int layer)
{
	uint32_t   *page = malloc(sizeof(uint32_t) * g->n);
	double		total = 0;
	uint32_t	nodes = 0;

	for (uint32_t p = 0; p < g->n; p++)
		page[order[p]] = p / per_page;
	for (uint32_t i = 0; i < g->n; i++)
	{
		int			cnt;
		ShnswRef   *nb;
		uint32_t	pages[2 * SHNSW_MAX_M];

		if (g->levels[i] < layer)
			continue;
		nodes++;
		nb = shnsw_build_neighbors(g, i, layer, &cnt);
		for (int k = 0; k < cnt; k++)
			pages[k] = page[nb[k]];
		total += distinct_except(pages, cnt, own ? UINT32_MAX : page[i]);
	}
	free(page);
	return total / (nodes ? nodes : 1);
}

int
main(int argc, char **argv)
{
	FILE	   *f = fopen(argv[1], "rb");
	int			per_page = atoi(argv[2]);
	uint32_t	hdr[3];
	ShnswBuildGraph g;
	uint32_t   *order,
			   *scratch,
			   *ident;
	clock_t		t;

	memset(&g, 0, sizeof(g));
	if (!f || fread(hdr, 4, 3, f) != 3)
		return 1;
	g.n = hdr[0];
	g.m = (int) hdr[1];
	g.entry = hdr[2];
	g.nbr0 = calloc((size_t) g.n * 2 * g.m, sizeof(ShnswRef));
	g.cnt0 = calloc(g.n, sizeof(uint16_t));
	g.levels = calloc(g.n, 1);
	g.upper = calloc(g.n, sizeof(uint32_t *));
	for (uint32_t i = 0; i < g.n; i++)
	{
		uint32_t	c,
					lvl;

		if (fread(&lvl, 4, 1, f) != 1 || lvl > SHNSW_MAX_LEVEL ||
			fread(&c, 4, 1, f) != 1 || c > (uint32_t) (2 * g.m) ||
			fread(g.nbr0 + (size_t) i * 2 * g.m, 4, c, f) != c)
			return 2;
		g.cnt0[i] = (uint16_t) c;
		g.levels[i] = (uint8_t) lvl;
		if (lvl > g.max_level)
			g.max_level = lvl;
		g.upper[i] = lvl ? calloc((size_t) lvl * (g.m + 1), 4) : NULL;
		for (uint32_t l = 1; l <= lvl; l++)
		{
			uint32_t   *u = g.upper[i] + (size_t) (l - 1) * (g.m + 1);

			if (fread(&c, 4, 1, f) != 1 || c > (uint32_t) g.m || fread(u + 1, 4, c, f) != c)
				return 3;
			u[0] = c;
		}
	}
	order = malloc(sizeof(uint32_t) * g.n);
	scratch = malloc(sizeof(uint32_t) * g.n);
	ident = malloc(sizeof(uint32_t) * g.n);
	for (uint32_t i = 0; i < g.n; i++)
		ident[i] = i;
	printf("n %u m %d per page %d: pages per list (beyond own page / all)\n", g.n, g.m, per_page);
	printf("  as stored:      %.2f / %.2f\n", pages_per_list(&g, ident, per_page, 0),
		   pages_per_list(&g, ident, per_page, 1));
	shnsw_build_layout_order(&g, order);
	printf("  breadth-first:  %.2f / %.2f\n", pages_per_list(&g, order, per_page, 0),
		   pages_per_list(&g, order, per_page, 1));
	t = clock();
	shnsw_build_layout_pages(&g, per_page, order, scratch);
	printf("  this build's:   %.2f / %.2f (%.1f s)\n", pages_per_list(&g, order, per_page, 0),
		   pages_per_list(&g, order, per_page, 1), (double) (clock() - t) / CLOCKS_PER_SEC);
	/*
	 * A read of G adjacent pages costs about one read of one on storage
	 * whose latency dominates: how many such groups a list spans (a
	 * built index keeps its graph pages adjacent, in this order).
	 */
	for (int gp = 2; gp <= 8; gp *= 2)
		printf("  groups of %d adjacent pages per list beyond own group: as stored %.2f\n", gp,
			   pages_per_list(&g, ident, per_page * gp, 0));
	for (int l = 1; l <= g.max_level && l <= 3; l++)
		printf("  layer %d lists beyond own page: as stored %.2f, this build's %.2f\n", l,
			   pages_per_list_at(&g, ident, per_page, 0, l),
			   pages_per_list_at(&g, order, per_page, 0, l));
	{
		uint32_t	hi = 0,
					maxp = 0;

		for (uint32_t p = 0; p < g.n; p++)
			if (g.levels[order[p]] >= 2)
			{
				hi++;
				maxp = p;
			}
		printf("  %u nodes of level >= 2, on the first %u pages (this build)\n", hi,
			   maxp / per_page + 1);
	}
	return 0;
}
