/*-------------------------------------------------------------------------
 *
 * layout.c
 *	  Page layout of a built graph: a breadth-first order, and co-location
 *	  of neighbours on pages, band by band of levels.
 *
 * Pure code over the build's in-memory graph (buildgraph.h); build.c and
 * buildpar.c write the nodes to pages in the order it gives.
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "buildgraph.h"
#include "layout.h"

void
shnsw_build_layout_order(const ShnswBuildGraph *g, uint32_t *order)
{
	uint32_t   *parent;
	uint32_t	tail = 0;

	if (g->n == 0)
		return;
	parent = shnsw_alloc(sizeof(uint32_t) * g->n);
	for (uint32_t i = 0; i < g->n; i++)
		parent[i] = SHNSW_BUILD_UNREACHED;
	parent[g->entry] = g->entry;
	order[tail++] = g->entry;
	tail = shnsw_build_walk(g, parent, order, 0, tail);
	/* an unreached node (rare): start a new walk from it */
	for (uint32_t i = 0; i < g->n && tail < g->n; i++)
	{
		if (parent[i] == SHNSW_BUILD_UNREACHED)
		{
			parent[i] = i;
			order[tail] = i;
			tail = shnsw_build_walk(g, parent, order, tail, tail + 1);
		}
	}
	shnsw_free(parent);
}

/*
 * Page placement state of shnsw_build_layout_pages: 0 not placed, 1 on an
 * earlier page, 2 on the page being filled.
 */
#define LP_FREE		0
#define LP_DONE		1
#define LP_PAGE		2

/*
 * The page layout (shnsw_build_layout_pages): co-location, level by level.
 *
 * What a cold search pays for expanding node x on layer l is the number of
 * distinct pages its layer-l neighbours are on, not counting x's own page
 * (read already). Filling page P, a node x is "touched" once P is among
 * those pages or is x's own: x is on P, or one of x's neighbours is.
 * Placing a free node y on P then saves one page read for every touched x
 * whose list names y, and one for y itself if y is touched (P holds one of
 * its neighbours). So y's score is the number of touched lists naming y,
 * plus one if y is touched, and the page takes the free node of highest
 * score. In-links are not stored: the lists that name a placed node p are
 * taken to be those of p's neighbours that name p back (HNSW links are
 * mostly mutual; exact in-links measured no better).
 *
 * Nodes are placed in bands of decreasing level, the entry point first:
 * the nodes of the top layers fill the first pages (so that a scan can
 * read the pages of a whole descent ahead, pageaccess.c), each band
 * co-located on its own layer's lists; the level-0 nodes on layer 0's.
 */
#define CL_TOUCHED	4			/* state bit: touched by the page being filled */
#define CL_PLACE	3			/* state bits: LP_* */

typedef struct ColocPage
{
	const ShnswBuildGraph *g;
	uint8_t    *state;			/* LP_* | CL_TOUCHED */
	int32_t    *score;			/* node -> score on this page (0: none) */
	uint32_t   *touched;		/* nodes touched or scored, to clear */
	size_t		ntouched;
	size_t		captouched;
	ShnswHeap	best;			/* (score, node), stale entries skipped */
	int			layer;			/* the band: nodes of this level */
	uint32_t   *order;
	uint32_t	placed;
} ColocPage;

/* x's list on the band's layer (none if x is below it). */
static ShnswRef *
coloc_list(const ColocPage *cp, uint32_t x, int *cnt)
{
	if (cp->g->levels[x] < cp->layer)
	{
		*cnt = 0;
		return NULL;
	}
	return shnsw_build_neighbors(cp->g, x, cp->layer, cnt);
}

/* Can y go on the page being filled? (Higher bands are placed already.) */
static inline bool
coloc_free(const ColocPage *cp, uint32_t y)
{
	return (cp->state[y] & CL_PLACE) == LP_FREE && cp->g->levels[y] >= cp->layer;
}

static void
coloc_note(ColocPage *cp, uint32_t x)
{
	if (cp->ntouched == cp->captouched)
	{
		cp->captouched *= 2;
		cp->touched = shnsw_realloc(cp->touched, sizeof(uint32_t) * cp->captouched);
	}
	cp->touched[cp->ntouched++] = x;
}

/* One more reason to place free node y on this page. */
static void
coloc_gain(ColocPage *cp, uint32_t y)
{
	if (!coloc_free(cp, y))
		return;
	if (cp->score[y] == 0 && !(cp->state[y] & CL_TOUCHED))
		coloc_note(cp, y);
	cp->score[y]++;
	shnsw_heap_push(&cp->best, (float) cp->score[y], y);
}

/* x is touched by the page: every free node its list names gains. */
static void
coloc_touch(ColocPage *cp, uint32_t x)
{
	int			cnt;
	ShnswRef   *nb;

	if (cp->state[x] & CL_TOUCHED)
		return;
	if (cp->score[x] == 0)
		coloc_note(cp, x);
	cp->state[x] |= CL_TOUCHED;
	nb = coloc_list(cp, x, &cnt);
	for (int k = 0; k < cnt; k++)
		coloc_gain(cp, nb[k]);
	coloc_gain(cp, x);
}

/* Does x's list on the band's layer name y? */
static bool
coloc_links(const ColocPage *cp, uint32_t x, uint32_t y)
{
	int			cnt;
	ShnswRef   *nb = coloc_list(cp, x, &cnt);

	for (int k = 0; k < cnt; k++)
		if (nb[k] == y)
			return true;
	return false;
}

/* p's placement touches p and the lists that name it. */
static void
coloc_touch_around(ColocPage *cp, uint32_t p)
{
	int			cnt;
	ShnswRef   *nb = coloc_list(cp, p, &cnt);

	coloc_touch(cp, p);
	for (int k = 0; k < cnt; k++)
		if (!(cp->state[nb[k]] & CL_TOUCHED) && coloc_links(cp, nb[k], p))
			coloc_touch(cp, nb[k]);
}

/* Place p on the page being filled. */
static void
coloc_place(ColocPage *cp, uint32_t p)
{
	cp->state[p] = (cp->state[p] & CL_TOUCHED) | LP_PAGE;
	cp->order[cp->placed++] = p;
	coloc_touch_around(cp, p);
}

/* The free node of highest score on this page, or UINT32_MAX. */
static uint32_t
coloc_best(ColocPage *cp)
{
	while (cp->best.n > 0)
	{
		ShnswPair	t = shnsw_heap_pop(&cp->best);

		if (coloc_free(cp, t.id) && (float) cp->score[t.id] == t.d)
			return t.id;
	}
	return UINT32_MAX;
}

/* Forget the page's scores and marks (its nodes stay where they are). */
static void
coloc_clear(ColocPage *cp)
{
	for (size_t k = 0; k < cp->ntouched; k++)
	{
		cp->score[cp->touched[k]] = 0;
		cp->state[cp->touched[k]] &= ~CL_TOUCHED;
	}
	cp->ntouched = 0;
	cp->best.n = 0;
}

/* A band is done mid-page: score the page again on the next one's layer. */
static void
coloc_next_band(ColocPage *cp, uint32_t first)
{
	coloc_clear(cp);
	cp->layer--;
	for (uint32_t p = first; p < cp->placed; p++)
		coloc_touch_around(cp, cp->order[p]);
}

void
shnsw_build_layout_pages(const ShnswBuildGraph *g, int per_page, uint32_t *order,
						 uint32_t *scratch)
{
	ColocPage	cp;
	uint32_t	left[SHNSW_MAX_LEVEL + 1] = {0};	/* free nodes per level */
	uint32_t	scan = 0;
	uint32_t	x = g->entry;

	if (g->n == 0)
		return;
	if (per_page < 2)
	{
		shnsw_build_layout_order(g, order);
		return;
	}
	memset(&cp, 0, sizeof(cp));
	cp.g = g;
	cp.state = shnsw_alloc0(g->n);
	cp.score = (int32_t *) scratch;
	memset(cp.score, 0, sizeof(int32_t) * g->n);
	cp.captouched = 1024;
	cp.touched = shnsw_alloc(sizeof(uint32_t) * cp.captouched);
	shnsw_heap_init(&cp.best, 1024, true);
	cp.order = order;
	for (uint32_t i = 0; i < g->n; i++)
		left[g->levels[i]]++;	/* levels are at most SHNSW_MAX_LEVEL */
	cp.layer = g->levels[g->entry];
	while (cp.placed < g->n)
	{
		uint32_t	first = cp.placed;

		shnsw_check_interrupts();
		while (cp.placed - first < (uint32_t) per_page && cp.placed < g->n)
		{
			while (left[cp.layer] == 0 && cp.layer > 0)
			{
				coloc_next_band(&cp, first);
				scan = 0;
				x = UINT32_MAX;
			}
			if (x == UINT32_MAX || !coloc_free(&cp, x))
			{
				while (!coloc_free(&cp, scan))
					scan++;
				x = scan;
			}
			left[g->levels[x]]--;
			coloc_place(&cp, x);
			x = coloc_best(&cp);
		}
		/* the next page starts from this one's best leftover (x) */
		coloc_clear(&cp);
		for (uint32_t p = first; p < cp.placed; p++)
			cp.state[order[p]] = LP_DONE;
	}
	shnsw_free(cp.state);
	shnsw_free(cp.touched);
	shnsw_heap_free(&cp.best);
}
