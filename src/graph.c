/*-------------------------------------------------------------------------
 *
 * graph.c
 *	  Pure HNSW algorithms: in-memory construction and the disk search.
 *
 * Construction follows Malkov and Yashunin (HNSW, 2016/2018): each node
 * draws a level from an exponential law, descends greedily to its level,
 * then on each layer runs a best-first search of width ef_construction and
 * keeps neighbours chosen by the "heuristic" rule (a candidate is kept only
 * if it is closer to the new node than to any neighbour kept before it).
 * Like pgvector, layer 0 keeps up to 2m neighbours and upper layers m.
 * The heuristic can prune a node out of every layer-0 list, so after
 * linking a repair pass gives every node a path from the entry point.
 *
 * The disk search navigates on SQ8 codes only. Unlike the textbook search
 * it is resumable: nodes pushed out of the result set, or never admitted,
 * are kept in a "discarded" heap so a later round can continue from them
 * when the executor wants more rows (iterative scan).
 *
 *-------------------------------------------------------------------------
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "graph.h"
#include "neighbors.h"
#include "reach.h"

/* ---------------------------------------------------------------------
 * In-memory construction
 * ---------------------------------------------------------------------
 */



size_t
shnsw_build_node_bytes(int dim, int m, bool use_codes, bool use_halves)
{
	size_t		sz = 0;

	sz += (size_t) dim * (use_codes ? 1 : use_halves ? sizeof(uint16_t) : sizeof(float));
	sz += sizeof(ShnswRef) * 2 * m + sizeof(uint16_t) + sizeof(uint8_t);
	sz += (sizeof(float) + sizeof(uint8_t)) * 2 * m;	/* dist0, pruned0 */
	sz += sizeof(uint32_t *) + sizeof(uint32_t) + sizeof(float);	/* upper, vis, vdist */
	/* expected upper-layer storage: about 1/(m-1) nodes per upper layer */
	sz += (sizeof(uint32_t) * (m + 1) * 2) / (m > 1 ? (size_t) (m - 1) : 1);
	return sz;
}

static uint64_t
xorshift(uint64_t *s)
{
	uint64_t	x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

int
shnsw_random_level(uint64_t *rng, double ml, int max_level)
{
	double		u = ((double) (xorshift(rng) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
	int			level = (int) floor(-log(u) * ml);

	return level > max_level ? max_level : level;
}

/* Fields and per-process scratch common to shnsw_build_init and _attach. */
static void
build_init_common(ShnswBuildGraph *g, int dim, int m, int ef_construction,
				  ShnswMetric metric, uint32_t capacity, bool use_codes,
				  const float *lo, const float *scale)
{
	memset(g, 0, sizeof(*g));
	g->dim = dim;
	g->m = m;
	g->ef_construction = ef_construction;
	g->metric = metric;
	g->use_codes = use_codes;
	g->ml = 1.0 / log((double) (m > 1 ? m : 2));
	g->cap = capacity > 0 ? capacity : 1;
	if (use_codes)
	{
		g->lo = lo;
		g->scale = scale;
	}
	g->vis = shnsw_alloc0(sizeof(uint32_t) * (size_t) g->cap);
	g->vdist = shnsw_alloc(sizeof(float) * (size_t) g->cap);
	g->vis_node = UINT32_MAX;
	g->qbuf = shnsw_alloc(sizeof(float) * dim);
	g->qbuf2 = shnsw_alloc(sizeof(float) * dim);
	g->sq.dim = g->sq2.dim = dim;
	g->sq.qs = shnsw_alloc(sizeof(float) * dim);
	g->sq.w = shnsw_alloc(sizeof(float) * dim);
	g->sq2.qs = shnsw_alloc(sizeof(float) * dim);
	g->sq2.w = shnsw_alloc(sizeof(float) * dim);
	shnsw_heap_init(&g->cand, ef_construction * 2, false);
	shnsw_heap_init(&g->res, ef_construction + 1, true);
	g->entry = 0;
	g->max_level = -1;
}

/* A process-local graph's levels and neighbour lists, for g->cap nodes. */
static void
build_alloc_links(ShnswBuildGraph *g)
{
	g->levels = shnsw_alloc(g->cap);
	g->nbr0 = shnsw_alloc(sizeof(ShnswRef) * (size_t) g->cap * 2 * g->m);
	g->cnt0 = shnsw_alloc0(sizeof(uint16_t) * (size_t) g->cap);
	g->dist0 = shnsw_alloc(sizeof(float) * (size_t) g->cap * 2 * g->m);
	g->pruned0 = shnsw_alloc(sizeof(uint8_t) * (size_t) g->cap * 2 * g->m);
	g->upper = shnsw_alloc0(sizeof(uint32_t *) * (size_t) g->cap);
}

void
shnsw_build_init(ShnswBuildGraph *g, int dim, int m, int ef_construction,
				 ShnswMetric metric, uint32_t capacity, bool use_codes,
				 const float *lo, const float *scale, uint64_t seed, float *vecs)
{
	build_init_common(g, dim, m, ef_construction, metric, capacity, use_codes, lo, scale);
	g->rng = seed ? seed : 0x9E3779B97F4A7C15ULL;
	if (use_codes)
		g->codes = shnsw_alloc((size_t) g->cap * dim);
	else if (vecs != NULL)
		g->vecs = vecs;
	else
		g->vecs = shnsw_alloc(sizeof(float) * (size_t) g->cap * dim);
	build_alloc_links(g);
}

void
shnsw_build_init_halves(ShnswBuildGraph *g, int dim, int m, int ef_construction,
						ShnswMetric metric, uint32_t capacity, uint64_t seed,
						uint16_t *halves, float half_scale)
{
	build_init_common(g, dim, m, ef_construction, metric, capacity, false, NULL, NULL);
	g->rng = seed ? seed : 0x9E3779B97F4A7C15ULL;
	g->use_halves = true;
	g->half_scale = half_scale;
	g->halves = halves != NULL ? halves
		: shnsw_alloc(sizeof(uint16_t) * (size_t) g->cap * dim);
	build_alloc_links(g);
}

void
shnsw_build_draw_levels(uint8_t *levels, uint32_t n, int m, uint64_t seed)
{
	uint64_t	rng = seed ? seed : 0x9E3779B97F4A7C15ULL;
	double		ml = 1.0 / log((double) (m > 1 ? m : 2));

	for (uint32_t i = 0; i < n; i++)
		levels[i] = (uint8_t) shnsw_random_level(&rng, ml, SHNSW_MAX_LEVEL);
}

size_t
shnsw_build_upper_words(const uint8_t *levels, uint32_t n, int m)
{
	size_t		words = 0;

	for (uint32_t i = 0; i < n; i++)
		words += (size_t) levels[i] * (m + 1);
	return words;
}

void
shnsw_build_attach(ShnswBuildGraph *g, int dim, int m, int ef_construction,
				   ShnswMetric metric, uint32_t n, bool use_codes,
				   const float *lo, const float *scale, float *vecs,
				   uint8_t *codes, uint8_t *levels, ShnswRef *nbr0,
				   uint16_t *cnt0, float *dist0, uint8_t *pruned0,
				   uint32_t *upper_pool)
{
	size_t		off = 0;

	build_init_common(g, dim, m, ef_construction, metric, n, use_codes, lo, scale);
	g->external = true;
	g->n = n;
	g->vecs = use_codes ? NULL : vecs;
	g->codes = use_codes ? codes : NULL;
	g->levels = levels;
	g->nbr0 = nbr0;
	g->cnt0 = cnt0;
	g->dist0 = dist0;
	g->pruned0 = pruned0;
	g->upper = shnsw_alloc0(sizeof(uint32_t *) * (size_t) g->cap);
	for (uint32_t i = 0; i < n; i++)
	{
		if (levels[i] == 0)
			continue;
		g->upper[i] = upper_pool + off;
		off += (size_t) levels[i] * (m + 1);
	}
}

void
shnsw_build_attach_halves(ShnswBuildGraph *g, uint16_t *halves, float half_scale)
{
	g->vecs = NULL;
	g->halves = halves;
	g->use_halves = true;
	g->half_scale = half_scale;
}

void
shnsw_build_free(ShnswBuildGraph *g)
{
	if (!g->external)
	{
		for (uint32_t i = 0; i < g->n; i++)
			if (g->upper[i])
				shnsw_free(g->upper[i]);
		if (g->vecs)
			shnsw_free(g->vecs);
		if (g->halves)
			shnsw_free(g->halves);
		if (g->codes)
			shnsw_free(g->codes);
		shnsw_free(g->levels);
		shnsw_free(g->nbr0);
		shnsw_free(g->cnt0);
		shnsw_free(g->dist0);
		shnsw_free(g->pruned0);
	}
	shnsw_free(g->upper);
	shnsw_free(g->vis);
	shnsw_free(g->vdist);
	shnsw_free(g->qbuf);
	shnsw_free(g->qbuf2);
	shnsw_free(g->sq.qs);
	shnsw_free(g->sq.w);
	shnsw_free(g->sq2.qs);
	shnsw_free(g->sq2.w);
	shnsw_heap_free(&g->cand);
	shnsw_heap_free(&g->res);
	memset(g, 0, sizeof(*g));
}

static uint32_t
build_add_common(ShnswBuildGraph *g)
{
	uint32_t	i = g->n++;
	int			level = shnsw_random_level(&g->rng, g->ml, SHNSW_MAX_LEVEL);

	g->levels[i] = (uint8_t) level;
	g->cnt0[i] = 0;
	g->upper[i] = NULL;
	if (level > 0)
		g->upper[i] = shnsw_alloc0(sizeof(uint32_t) * (size_t) level * (g->m + 1));
	return i;
}

uint32_t
shnsw_build_add_in_place(ShnswBuildGraph *g)
{
	return build_add_common(g);
}

uint32_t
shnsw_build_add_vector(ShnswBuildGraph *g, const float *v)
{
	uint32_t	i = build_add_common(g);

	if (g->use_halves)
		shnsw_floats_to_halves(v, g->half_scale, g->halves + (size_t) i * g->dim, g->dim);
	else
		memcpy(g->vecs + (size_t) i * g->dim, v, sizeof(float) * g->dim);
	return i;
}

uint32_t
shnsw_build_add_code(ShnswBuildGraph *g, const uint8_t *code)
{
	uint32_t	i = build_add_common(g);

	memcpy(g->codes + (size_t) i * g->dim, code, g->dim);
	return i;
}

ShnswRef *
shnsw_build_neighbors(const ShnswBuildGraph *g, uint32_t i, int layer, int *count)
{
	if (layer == 0)
	{
		*count = g->cnt0[i];
		return g->nbr0 + (size_t) i * 2 * g->m;
	}
	else
	{
		uint32_t   *u = g->upper[i] + (size_t) (layer - 1) * (g->m + 1);

		*count = (int) u[0];
		return u + 1;
	}
}

static inline void
build_set_count(ShnswBuildGraph *g, uint32_t i, int layer, int count)
{
	if (layer == 0)
		g->cnt0[i] = (uint16_t) count;
	else
		g->upper[i][(size_t) (layer - 1) * (g->m + 1)] = (uint32_t) count;
}

/*
 * Node i's list on a layer, for reading: in a concurrent build a copy in buf
 * (room for 2m), taken under i's lock; else the list itself.
 */
static inline const ShnswRef *
build_read_list(const ShnswBuildGraph *g, uint32_t i, int layer, ShnswRef *buf, int *count)
{
	ShnswRef   *nb;

	if (g->sync == NULL)
		return shnsw_build_neighbors(g, i, layer, count);
	g->sync->lock_node(g->sync->arg, i, false);
	nb = shnsw_build_neighbors(g, i, layer, count);
	memcpy(buf, nb, sizeof(ShnswRef) * *count);
	g->sync->unlock_node(g->sync->arg, i);
	return buf;
}

/*
 * A prepared "from" point for build distances: a float vector (a half
 * vector widened to floats, exactly), or in the low-memory path an SQ8
 * query made from a decoded code. slot picks which of the two scratch
 * buffers to use.
 */
typedef struct BuildFrom
{
	const float *v;
	const Sq8Query *sq;
} BuildFrom;

static BuildFrom
build_from_node(ShnswBuildGraph *g, uint32_t i, int slot)
{
	BuildFrom	f;

	if (g->use_halves)
	{
		float	   *buf = slot ? g->qbuf2 : g->qbuf;

		shnsw_halves_to_floats_nav(g->halves + (size_t) i * g->dim, buf, g->dim);
		f.v = buf;
		f.sq = NULL;
	}
	else if (!g->use_codes)
	{
		f.v = g->vecs + (size_t) i * g->dim;
		f.sq = NULL;
	}
	else
	{
		float	   *buf = slot ? g->qbuf2 : g->qbuf;
		Sq8Query   *sq = slot ? &g->sq2 : &g->sq;

		sq8_decode(g->lo, g->scale, g->codes + (size_t) i * g->dim, buf, g->dim);
		sq8_prepare_query(sq, g->metric, buf, g->lo, g->scale);
		f.v = NULL;
		f.sq = sq;
	}
	return f;
}

static inline float
build_dist(const ShnswBuildGraph *g, const BuildFrom *f, uint32_t j)
{
	if (g->use_halves)
		return shnsw_half_distance(g->metric, f->v, g->halves + (size_t) j * g->dim,
								   g->dim);
	if (!g->use_codes)
		return shnsw_float_distance(g->metric, f->v, g->vecs + (size_t) j * g->dim, g->dim);
	return sq8_distance(f->sq, g->codes + (size_t) j * g->dim);
}

static void
build_next_stamp(ShnswBuildGraph *g)
{
	if (++g->stamp == 0)
	{
		memset(g->vis, 0, sizeof(uint32_t) * g->cap);
		g->stamp = 1;
	}
}

/*
 * The distance from node x to node y if the last search, for x, computed
 * it: the value build_dist would compute again (the same from-point and
 * row, in every representation), so using it changes nothing but the
 * time. The back-link rule measures a new node against the lists of its
 * neighbours, nodes its search has mostly visited. Returns false if not
 * known.
 */
static inline bool
build_known_dist(const ShnswBuildGraph *g, uint32_t x, uint32_t y, float *d)
{
	if (x != g->vis_node || g->vis[y] != g->stamp)
		return false;
	*d = g->vdist[y];
	return true;
}

/*
 * Best-first search of one layer from entry points eps for node qnode
 * (prepared as q); leaves up to ef results, nearest first, in out/outd and
 * returns their count. The distance of every node it visits stays in
 * g->vdist until the next search (build_known_dist).
 */
static int
build_search_layer(ShnswBuildGraph *g, const BuildFrom *q, uint32_t qnode, const uint32_t *eps,
				   int neps, int layer, int ef, uint32_t *out, float *outd)
{
	ShnswHeap  *C = &g->cand,
			   *W = &g->res;
	int			n;
	ShnswRef	buf[2 * SHNSW_MAX_M];

	build_next_stamp(g);
	g->vis_node = qnode;
	C->n = W->n = 0;
	for (int k = 0; k < neps; k++)
	{
		float		d;

		if (g->vis[eps[k]] == g->stamp)
			continue;
		g->vis[eps[k]] = g->stamp;
		d = build_dist(g, q, eps[k]);
		g->vdist[eps[k]] = d;
		shnsw_heap_push(C, d, eps[k]);
		shnsw_heap_push(W, d, eps[k]);
		if (W->n > ef)
			shnsw_heap_pop(W);
	}
	while (C->n > 0)
	{
		ShnswPair	c = shnsw_heap_pop(C);
		int			cnt;
		const ShnswRef *nb;

		shnsw_check_interrupts();
		if (W->n >= ef && c.d > shnsw_heap_top(W).d)
			break;
		nb = build_read_list(g, c.id, layer, buf, &cnt);
		for (int k = 0; k < cnt; k++)
		{
			uint32_t	e = nb[k];
			float		d;

			if (g->vis[e] == g->stamp)
				continue;
			g->vis[e] = g->stamp;
			d = build_dist(g, q, e);
			g->vdist[e] = d;
			if (W->n < ef || d < shnsw_heap_top(W).d)
			{
				shnsw_heap_push(C, d, e);
				shnsw_heap_push(W, d, e);
				if (W->n > ef)
					shnsw_heap_pop(W);
			}
		}
	}
	n = W->n;
	for (int k = n - 1; k >= 0; k--)
	{
		ShnswPair	p = shnsw_heap_pop(W);

		out[k] = p.id;
		outd[k] = p.d;
	}
	return n;
}

/*
 * Distances between build candidates for the heuristic: ids are node
 * numbers; the "from" node is prepared once per candidate a (slot 1).
 */
typedef struct BuildCandDist
{
	ShnswBuildGraph *g;
	const uint32_t *ids;
	int			from;			/* candidate e is prepared for, or -1 */
	BuildFrom	e;
} BuildCandDist;

static float
build_cand_dist(void *arg, int a, int b)
{
	BuildCandDist *c = (BuildCandDist *) arg;

	if (c->from != a)
	{
		c->e = build_from_node(c->g, c->ids[a], 1);
		c->from = a;
	}
	return build_dist(c->g, &c->e, c->ids[b]);
}

/*
 * The neighbour heuristic (neighbors.c) over build candidates ids/dists,
 * sorted nearest first, filled up to fill with the ones passed over; writes
 * the kept node numbers to sel (nearest first), and, if seld is not NULL,
 * their distances to seld and passed-over flags to passed; *nchosen (may
 * be NULL) says how many the heuristic chose.
 */
static int
build_select(ShnswBuildGraph *g, const uint32_t *ids, const float *dists, int n,
			 int max, int fill, uint32_t *sel, float *seld, uint8_t *passed, int *nchosen)
{
	BuildCandDist c = {g, ids, -1, {NULL, NULL}};
	int			pos[2 * SHNSW_MAX_M + 1];
	int		   *p = n <= (int) (sizeof(pos) / sizeof(pos[0])) ? pos : shnsw_alloc(sizeof(int) * n);
	int			nsel = shnsw_select_heuristic(dists, n, max, fill, build_cand_dist, &c, p,
											  passed, nchosen);

	for (int k = 0; k < nsel; k++)
	{
		sel[k] = ids[p[k]];
		if (seld != NULL)
			seld[k] = dists[p[k]];
	}
	if (p != pos)
		shnsw_free(p);
	return nsel;
}

/*
 * Distances between code candidates: codes[k * dim]. The heuristic asks
 * for the distance from each candidate to the chosen ones; the distances
 * are symmetric, so each chosen candidate is prepared as a query once,
 * from its code, and measured to the others' codes (it chooses far fewer
 * than it examines).
 */
typedef struct CodeCandDist
{
	const uint8_t *codes;
	int			dim;
	ShnswMetric metric;
	const float *lo;
	const float *scale;
	float	   *scratch;		/* (1 + max) * dim floats */
	int			nprep;
	int			prepared[2 * SHNSW_MAX_M + 1];	/* candidate of each query */
	Sq8Query	sq[2 * SHNSW_MAX_M + 1];
} CodeCandDist;

static float
code_cand_dist(void *arg, int a, int b)
{
	CodeCandDist *c = (CodeCandDist *) arg;
	int			q = 0;

	/* b is a chosen candidate: the heuristic chooses them in order */
	while (q < c->nprep && c->prepared[q] != b)
		q++;
	if (q == c->nprep)
	{
		c->sq[q].dim = c->dim;
		c->sq[q].w = c->scratch;
		c->sq[q].qs = c->scratch + (size_t) (1 + q) * c->dim;
		sq8_prepare_code(&c->sq[q], c->metric, c->codes + (size_t) b * c->dim, c->lo, c->scale);
		c->prepared[q] = b;
		c->nprep++;
	}
	return sq8_distance(&c->sq[q], c->codes + (size_t) a * c->dim);
}

ShnswMetric
shnsw_code_metric(ShnswMetric metric)
{
	return metric == SHNSW_METRIC_COSINE ? SHNSW_METRIC_L2 : metric;
}

int
shnsw_select_by_codes(const float *d, const uint8_t *codes, int n, int max, int fill, int dim,
					  ShnswMetric metric, const float *lo, const float *scale,
					  float *scratch, int *sel, int *nchosen)
{
	CodeCandDist c;

	c.codes = codes;
	c.dim = dim;
	c.metric = shnsw_code_metric(metric);
	c.lo = lo;
	c.scale = scale;
	c.scratch = scratch;
	c.nprep = 0;
	return shnsw_select_heuristic(d, n, max, fill, code_cand_dist, &c, sel, NULL, nchosen);
}

/*
 * Squared L2 is the form under L2 and cosine (shnsw_code_metric), so
 * SHNSW_FAR_RATIO 4 is twice the distance. Copies of the nearest (code
 * distance 0: duplicate rows, which the list's fill keeps) are no scale:
 * the scale is the nearest other vector, and neighbours that are all
 * copies never count as far (else every insert of a duplicated value
 * would search twice).
 */
bool
shnsw_codes_lie_apart(const float *d, const uint8_t *codes, int n, int dim, ShnswMetric metric,
					  const float *lo, const float *scale, float *scratch)
{
	Sq8Query	sq;
	float		nearest = INFINITY;

	metric = shnsw_code_metric(metric);
	if (n < 2 || metric == SHNSW_METRIC_IP)
		return false;
	sq.dim = dim;
	sq.qs = scratch;
	sq.w = scratch + dim;
	sq8_prepare_code(&sq, metric, codes, lo, scale);
	for (int k = 1; k < n; k++)
	{
		float		dk = sq8_distance(&sq, codes + (size_t) k * dim);

		if (dk > 0.0f && dk < nearest)
			nearest = dk;
	}
	return d[0] > SHNSW_FAR_RATIO * nearest;
}

/* ShnswListOps over the build graph: the list's owner is prepared (slot 0). */
typedef struct BuildListArg
{
	ShnswBuildGraph *g;
	uint32_t	owner;
	int			layer;
	uint32_t	from;			/* node fx is prepared for (build_node_dist) */
	BuildFrom	fx;
} BuildListArg;

/*
 * The owner's distances to list. An entry the last search was for (the
 * node being linked, which the back-link rule measures against its new
 * neighbours) takes its distance from that search when the distances are
 * symmetric bit for bit: floats and halves (a product or difference does
 * not depend on the order of its operands, and the kernels sum them in
 * the order of the dimensions), not SQ8 codes (the query side is
 * prepared differently).
 */
static void
build_list_distances(void *arg, const uint32_t *list, int n, float *d)
{
	BuildListArg *a = (BuildListArg *) arg;
	BuildFrom	from = {NULL, NULL};
	bool		prepared = false;

	for (int k = 0; k < n; k++)
	{
		if (!a->g->use_codes && build_known_dist(a->g, list[k], a->owner, &d[k]))
			continue;
		if (!prepared)
		{
			from = build_from_node(a->g, a->owner, 0);
			prepared = true;
		}
		d[k] = build_dist(a->g, &from, list[k]);
	}
}

static int
build_list_choose(void *arg, uint32_t *list, float *d, int n, int max, int *nchosen)
{
	BuildListArg *a = (BuildListArg *) arg;
	uint32_t	sel[2 * SHNSW_MAX_M + 1];
	int			nsel;

	shnsw_sort_by_distance(list, d, n);
	nsel = build_select(a->g, list, d, n, max, max, sel, NULL, NULL, nchosen);
	memcpy(list, sel, sizeof(uint32_t) * nsel);
	return nsel;
}

/* A layer-0 list's cached distances and flags (dist0, pruned0). */
static bool
build_list_cache(void *arg, float **d, uint8_t **passed)
{
	BuildListArg *a = (BuildListArg *) arg;
	size_t		off = (size_t) a->owner * 2 * a->g->m;

	if (a->layer != 0)
		return false;
	*d = a->g->dist0 + off;
	*passed = a->g->pruned0 + off;
	return true;
}

static float
build_node_dist(void *arg, uint32_t x, uint32_t y)
{
	BuildListArg *a = (BuildListArg *) arg;
	float		d;

	if (build_known_dist(a->g, x, y, &d))
		return d;
	if (a->from != x)
	{
		a->fx = build_from_node(a->g, x, 1);
		a->from = x;
	}
	return build_dist(a->g, &a->fx, y);
}

static const ShnswListOps build_list_ops = {
	build_list_distances, build_list_choose, build_list_cache, build_node_dist
};

/* Add new to e's list on a layer (the back-link rule, neighbors.c). */
static void
build_add_backlink(ShnswBuildGraph *g, uint32_t e, uint32_t newnode, int layer)
{
	int			max = layer == 0 ? 2 * g->m : g->m;
	int			cnt;
	ShnswRef   *nb = shnsw_build_neighbors(g, e, layer, &cnt);
	uint32_t	list[2 * SHNSW_MAX_M + 1];
	BuildListArg arg = {g, e, layer, UINT32_MAX, {NULL, NULL}};
	bool		kept;

	if (g->sync)
	{
		g->sync->lock_node(g->sync->arg, e, true);
		nb = shnsw_build_neighbors(g, e, layer, &cnt);
	}
	memcpy(list, nb, sizeof(uint32_t) * cnt);
	cnt = shnsw_backlink(list, cnt, max, newnode, false, &build_list_ops, &arg, &kept, NULL);
	if (cnt >= 0)
	{
		memcpy(nb, list, sizeof(ShnswRef) * cnt);
		build_set_count(g, e, layer, cnt);
	}
	if (g->sync)
		g->sync->unlock_node(g->sync->arg, e);
}

/* Greedy descent from ep through layers max_level..stop+1; returns the node reached. */
static uint32_t
build_descend(ShnswBuildGraph *g, const BuildFrom *q, uint32_t ep, int max_level, int stop)
{
	float		epd = build_dist(g, q, ep);
	ShnswRef	buf[2 * SHNSW_MAX_M];

	for (int l = max_level; l > stop; l--)
	{
		bool		changed = true;

		while (changed)
		{
			int			cnt;
			const ShnswRef *nb = build_read_list(g, ep, l, buf, &cnt);

			shnsw_check_interrupts();
			changed = false;
			for (int k = 0; k < cnt; k++)
			{
				float		d = build_dist(g, q, nb[k]);

				if (d < epd)
				{
					epd = d;
					ep = nb[k];
					changed = true;
				}
			}
		}
	}
	return ep;
}

/*
 * Link node i on layers top..0 from ep (the node the descent reached):
 * search each layer, choose i's neighbours among the results and the
 * entries i's list already has (other processes' back-links in a concurrent
 * build, or i's old list when it is linked again), write i's list, and add
 * the back-links.
 */
static void
build_link_layers(ShnswBuildGraph *g, uint32_t i, uint32_t ep, int top)
{
	const ShnswBuildSync *sync = g->sync;
	int			efc = g->ef_construction;
	int			room = efc + 2 * g->m + 1;
	uint32_t   *res = shnsw_alloc(sizeof(uint32_t) * room);
	float	   *resd = shnsw_alloc(sizeof(float) * room);
	uint32_t   *prev = shnsw_alloc(sizeof(uint32_t) * room);
	int			nprev = 1;
	uint32_t   *chosen = shnsw_alloc(sizeof(uint32_t) * (size_t) (top + 1) * 2 * g->m);
	int		   *nchosen = shnsw_alloc(sizeof(int) * (top + 1));
	float		seld[2 * SHNSW_MAX_M];
	uint8_t		selpr[2 * SHNSW_MAX_M];

	prev[0] = ep;
	for (int l = top; l >= 0; l--)
	{
		int			max = l == 0 ? 2 * g->m : g->m;
		uint32_t   *sel = chosen + (size_t) l * 2 * g->m;
		int			nres;
		int			nsel;
		int			cnt;
		int			kept = 0;
		ShnswRef   *mine;
		BuildFrom	q = build_from_node(g, i, 0);

		/* entry points: the previous layer's results */
		nres = build_search_layer(g, &q, i, prev, nprev, l, efc, res, resd);

		/*
		 * A node is not its own neighbour: a search for a node already in
		 * the graph (linked again, or found by another process) finds it.
		 */
		for (int k = 0; k < nres; k++)
		{
			if (res[k] == i)
				continue;
			res[kept] = res[k];
			resd[kept] = resd[k];
			kept++;
		}
		nres = kept;
		if (nres > 0)
		{
			memcpy(prev, res, sizeof(uint32_t) * nres);
			nprev = nres;
		}

		if (sync != NULL)
			sync->lock_node(sync->arg, i, true);
		mine = shnsw_build_neighbors(g, i, l, &cnt);
		if (cnt > 0)
		{
			/* keep what the list has among the candidates */
			BuildFrom	me = build_from_node(g, i, 0);
			int			n0 = nres;

			for (int k = 0; k < cnt; k++)
			{
				bool		dup = false;

				for (int r = 0; r < n0 && !dup; r++)
					dup = res[r] == mine[k];
				if (dup || mine[k] == i)
					continue;
				res[nres] = mine[k];
				resd[nres] = build_dist(g, &me, mine[k]);
				nres++;
			}
			shnsw_sort_by_distance(res, resd, nres);
		}

		/*
		 * Pruned connections are kept up to the list's capacity, as
		 * pgvector keeps them (src/README, Departures): filled to half,
		 * layer 0 kept about 25 of 32 entries and recall@10 at ef_search
		 * 20-40 was 2 points lower on uniform 10k x 128. Outliers and rows
		 * inserted later into regions the build never saw compete for
		 * places in full lists; the build's reachability pass, the sweep of
		 * strict scans and the insert's upper-layer beam (links.c) are what
		 * keep them found.
		 */
		nsel = build_select(g, res, resd, nres, max, max, sel, seld, selpr, NULL);
		memcpy(mine, sel, sizeof(ShnswRef) * nsel);
		build_set_count(g, i, l, nsel);
		if (l == 0)
		{
			/* the cache build_list_cache gives the back-link rule */
			memcpy(g->dist0 + (size_t) i * 2 * g->m, seld, sizeof(float) * nsel);
			memcpy(g->pruned0 + (size_t) i * 2 * g->m, selpr, nsel);
		}
		if (sync != NULL)
			sync->unlock_node(sync->arg, i);
		nchosen[l] = nsel;
	}

	/*
	 * The back-links, layer 0 first, once every list of the node is
	 * written: a back-link on an upper layer lets other processes reach
	 * the node there, and one whose greedy descent ended at it would
	 * otherwise start its layer-0 search from a node with no layer-0 list
	 * yet, and link to it alone (in a concurrent build, bursts of 20 rows
	 * of 8,000 were then not found by their own vector). A back-link on
	 * one layer changes no list that the search of another layer reads, so
	 * a serial build's graph is the same either way.
	 */
	for (int l = 0; l <= top; l++)
		for (int k = 0; k < nchosen[l]; k++)
			build_add_backlink(g, chosen[(size_t) l * 2 * g->m + k], i, l);
	shnsw_free(chosen);
	shnsw_free(nchosen);
	shnsw_free(prev);
	shnsw_free(res);
	shnsw_free(resd);
}

void
shnsw_build_link(ShnswBuildGraph *g, uint32_t i)
{
	const ShnswBuildSync *sync = g->sync;
	int			level = g->levels[i];
	uint32_t	ep;
	int			max_level;
	bool		hold_entry = false;
	uint32_t	before = 0;
	BuildFrom	q;

	if (sync != NULL)
	{
		/*
		 * A node that goes above the entry level keeps the entry lock
		 * exclusive until it is the entry (see ShnswBuildSync).
		 */
		before = sync->progress(sync->arg);
		sync->lock_entry(sync->arg, false);
		ep = *sync->entry;
		max_level = *sync->max_level;
		sync->unlock_entry(sync->arg);
		if (level > max_level)
		{
			sync->lock_entry(sync->arg, true);
			ep = *sync->entry;
			max_level = *sync->max_level;
			if (level > max_level)
				hold_entry = true;
			else
				sync->unlock_entry(sync->arg);
		}
	}
	else
	{
		ep = g->entry;
		max_level = g->max_level;
	}

	if (max_level < 0)
	{
		g->entry = i;
		g->max_level = level;
		if (sync != NULL)
		{
			*sync->entry = i;
			*sync->max_level = level;
			if (hold_entry)
				sync->unlock_entry(sync->arg);
		}
		return;
	}

	/* greedy descent through the layers above the new node's level */
	q = build_from_node(g, i, 0);
	ep = build_descend(g, &q, ep, max_level, level);
	build_link_layers(g, i, ep, level < max_level ? level : max_level);

	if (level > max_level)
	{
		g->entry = i;
		g->max_level = level;
		if (sync != NULL)
		{
			*sync->entry = i;
			*sync->max_level = level;
		}
	}
	if (hold_entry)
		sync->unlock_entry(sync->arg);

	/*
	 * A process held up (descheduled) while it linked chose from a graph
	 * that many nodes have joined since: its back-links then lose to those
	 * nearer nodes and the node keeps few in-links (3 processes on a loaded
	 * 2-core machine left up to 11 of 8,000 rows unfound by their own
	 * vector at ef_search 200; serial builds none). Such a node is linked
	 * again once linking is over (shnsw_build_relink).
	 */
	if (sync != NULL && sync->progress(sync->arg) - before > sync->stale_after)
		sync->mark_stale(sync->arg, i);
}

void
shnsw_build_relink(ShnswBuildGraph *g, uint32_t i)
{
	int			level = g->levels[i];
	int			top = level < g->max_level ? level : g->max_level;
	BuildFrom	q;
	uint32_t	ep;

	if (i == g->entry || g->max_level < 0)
		return;
	q = build_from_node(g, i, 0);
	ep = build_descend(g, &q, g->entry, g->max_level, top);
	build_link_layers(g, i, ep, top);
}

/*
 * Reachability repair. The walk below keeps a breadth-first tree of layer 0
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
#define REACH_NONE UINT32_MAX
#define REACH_MAX_REPLACED 1

/* Walk layer 0 from queue[head..tail-1], adopting unreached nodes; returns the new tail. */
static uint32_t
reach_walk(const ShnswBuildGraph *g, uint32_t *parent, uint32_t *queue, uint32_t head,
		   uint32_t tail)
{
	while (head < tail)
	{
		uint32_t	c = queue[head++];
		int			cnt;
		ShnswRef   *nb = shnsw_build_neighbors(g, c, 0, &cnt);

		shnsw_check_interrupts();
		for (int k = 0; k < cnt; k++)
		{
			if (parent[nb[k]] == REACH_NONE)
			{
				parent[nb[k]] = c;
				queue[tail++] = nb[k];
			}
		}
	}
	return tail;
}

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
	BuildFrom	from;
	int			victim = -1;
	float		vd = 0;

	if (cnt < 2 * g->m)
	{
		nb[cnt] = u;
		build_set_count(g, p, 0, cnt + 1);
		return true;
	}
	if (capped && replaced[p] >= REACH_MAX_REPLACED)
		return false;
	from = build_from_node(g, p, 1);
	for (int k = 0; k < cnt; k++)
	{
		float		d;

		if (parent[nb[k]] == p)
			continue;
		d = build_dist(g, &from, nb[k]);
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
	BuildFrom	q = build_from_node(g, u, 0);
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
		d[n] = build_dist(g, &q, nb[k]);
		n++;
	}
	shnsw_sort_by_distance(ids, d, n);
	best = reach_attach_first(g, parent, replaced, ids, n, u, true);
	if (best != REACH_NONE)
		return best;

	/* a search for u, as an insert would run, also from the entry point */
	res = shnsw_alloc(sizeof(uint32_t) * (ef + 1));
	resd = shnsw_alloc(sizeof(float) * (ef + 1));
	eps[0] = build_descend(g, &q, g->entry, g->max_level, 0);
	eps[1] = g->entry;
	nfound = build_search_layer(g, &q, u, eps, 2, 0, ef, res, resd);
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
		dp = build_dist(g, &q, p);
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

/* The build's side of the walk-and-attach (reach.h): a breadth-first tree. */
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
	r->tail = reach_walk(r->g, r->parent, r->queue, r->tail, r->tail + 1);
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

void
shnsw_build_layout_order(const ShnswBuildGraph *g, uint32_t *order)
{
	uint8_t    *seen = shnsw_alloc0(g->n ? g->n : 1);
	uint32_t	head = 0,
				tail = 0;

	if (g->n == 0)
	{
		shnsw_free(seen);
		return;
	}
	order[tail++] = g->entry;
	seen[g->entry] = 1;
	for (;;)
	{
		while (head < tail)
		{
			uint32_t	c = order[head++];
			int			cnt;
			ShnswRef   *nb = shnsw_build_neighbors(g, c, 0, &cnt);

			shnsw_check_interrupts();
			for (int k = 0; k < cnt; k++)
			{
				if (!seen[nb[k]])
				{
					seen[nb[k]] = 1;
					order[tail++] = nb[k];
				}
			}
		}
		if (tail == g->n)
			break;
		/* an unreached node (rare): start a new walk from it */
		for (uint32_t i = 0; i < g->n; i++)
		{
			if (!seen[i])
			{
				seen[i] = 1;
				order[tail++] = i;
				break;
			}
		}
	}
	shnsw_free(seen);
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

/* ---------------------------------------------------------------------
 * Disk search
 * ---------------------------------------------------------------------
 */

/*
 * The search pool: the growing arrays of a search (candidates, saved
 * neighbour lists, visited set, the three heaps), kept from one search to
 * the next in memory the host keeps across queries (port.h,
 * shnsw_alloc_kept), so that a hot scan allocates none of them and never
 * faults in fresh pages for them (a profile of 2,000 hot scans had 9% of a
 * backend's time in page faults, memmove and clearing new pages, most of
 * it these arrays being allocated and grown per scan). One search at a
 * time holds them (a second one, as in a nested scan, allocates its own);
 * shnsw_search_free gives them back, dropping arrays grown past
 * POOL_MAX_BYTES so that one large search does not make every later one
 * clear a large visited set. A search that ends in an error never gives
 * them back: shnsw_search_pool_reset (the host calls it at the end of
 * every transaction) then frees them all.
 */
#define POOL_MAX_BYTES (1u << 20)

typedef struct SearchPool
{
	bool		in_use;
	bool		have;
	ShnswCand  *cands;
	uint32_t	capcands;
	ShnswRef   *nbrs;
	uint32_t	capnbrs;
	ShnswVisited visited;
	ShnswHeap	C,
				W,
				D;
} SearchPool;

static SearchPool pool;

static void
pool_heap(ShnswHeap *h, int cap, bool max)
{
	h->cap = cap;
	h->a = shnsw_alloc_kept(sizeof(ShnswPair) * cap);
	h->n = 0;
	h->max = max;
}

/* Give the pool's arrays to s (the caller checked it is free). */
static void
pool_take(ShnswSearch *s, int m)
{
	if (!pool.have)
	{
		pool.capcands = 256;
		pool.cands = shnsw_alloc_kept(sizeof(ShnswCand) * pool.capcands);
		pool.capnbrs = 256 * 2 * 16;
		pool.nbrs = shnsw_alloc_kept(sizeof(ShnswRef) * pool.capnbrs);
		pool.visited.slots = shnsw_alloc_kept(sizeof(ShnswRef) * 1024);
		pool.visited.mask = 1023;
		pool_heap(&pool.C, 128, false);
		pool_heap(&pool.W, 128, true);
		pool_heap(&pool.D, 128, false);
		pool.have = true;
	}
	pool.in_use = true;
	s->pooled = true;
	s->cands = pool.cands;
	s->capcands = pool.capcands;
	s->nbrs = pool.nbrs;
	s->capnbrs = pool.capnbrs;
	if (s->capnbrs < 2u * m)
	{
		s->capnbrs = 2 * m;
		s->nbrs = shnsw_realloc(s->nbrs, sizeof(ShnswRef) * s->capnbrs);
	}
	s->visited = pool.visited;
	shnsw_visited_clear(&s->visited);
	s->C = pool.C;
	s->W = pool.W;
	s->D = pool.D;
	s->C.n = s->W.n = s->D.n = 0;
}

/* Take s's arrays back into the pool (or free them if they grew too large). */
static void
pool_give_back(ShnswSearch *s)
{
	pool.in_use = false;
	if (sizeof(ShnswCand) * s->capcands > POOL_MAX_BYTES ||
		sizeof(ShnswRef) * s->capnbrs > POOL_MAX_BYTES ||
		sizeof(ShnswRef) * (s->visited.mask + 1) > POOL_MAX_BYTES ||
		sizeof(ShnswPair) * s->C.cap > POOL_MAX_BYTES ||
		sizeof(ShnswPair) * s->W.cap > POOL_MAX_BYTES ||
		sizeof(ShnswPair) * s->D.cap > POOL_MAX_BYTES)
	{
		shnsw_search_pool_reset();
		return;
	}
	pool.cands = s->cands;
	pool.capcands = s->capcands;
	pool.nbrs = s->nbrs;
	pool.capnbrs = s->capnbrs;
	pool.visited = s->visited;
	pool.C = s->C;
	pool.W = s->W;
	pool.D = s->D;
}

void
shnsw_search_pool_reset(void)
{
	memset(&pool, 0, sizeof(pool));
	shnsw_kept_reset();
}

void
shnsw_search_pool_end_xact(void)
{
	if (pool.in_use)
		shnsw_search_pool_reset();
}

void
shnsw_search_init(ShnswSearch *s, const Sq8Query *q, const ShnswNodeSource *ops, int m,
				  uint32_t max_discovered)
{
	memset(s, 0, sizeof(*s));
	s->q = q;
	s->ops = ops;
	s->m = m;
	s->max_discovered = max_discovered;
	s->target = SHNSW_INVALID_REF;
	s->round_floor = INFINITY;
	s->park_least = -1;
	if (!pool.in_use)
		pool_take(s, m);
	else
	{
		s->capcands = 256;
		s->cands = shnsw_alloc(sizeof(ShnswCand) * s->capcands);
		shnsw_visited_init(&s->visited, 512);
		shnsw_heap_init(&s->C, 128, false);
		shnsw_heap_init(&s->W, 128, true);
		shnsw_heap_init(&s->D, 128, false);
		s->capnbrs = 256 * 2 * m;
		s->nbrs = shnsw_alloc(sizeof(ShnswRef) * s->capnbrs);
	}
	s->spec = shnsw_alloc(sizeof(ShnswRef) * 2 * m * SHNSW_SPECULATIVE_CANDIDATES);
	s->ubuf = shnsw_alloc(sizeof(ShnswRef) * m);
	s->locs = shnsw_alloc(sizeof(ShnswUpperLoc) * 2 * m);
	/* (a small chunk: larger ones cost a malloc and page faults per scan) */
	s->stage = q->dim <= SHNSW_STAGE_MAX_DIM ? shnsw_alloc((size_t) SHNSW_STAGE * q->dim) : NULL;
	s->dists = shnsw_alloc(sizeof(float) * 2 * m);
}

void
shnsw_search_set_clamp_slack(ShnswSearch *s, double unit, double factor, double max_slack)
{
	s->clamp_on = max_slack > 0.0;
	if (!s->clamp_on)
		return;
	if (s->F.a == NULL)
		shnsw_heap_init(&s->F, 64, false);
	s->clamp_slack[0] = max_slack;
	for (int k = 1; k < SHNSW_NODE_CLAMP_CLASSES; k++)
		s->clamp_slack[k] = fmin(shnsw_clamp_class_limit(k, unit) * factor, max_slack);
}

float
shnsw_clamp_distance(ShnswMetric nav_metric, float d, double slack)
{
	double		x;
	float		f;

	if (nav_metric == SHNSW_METRIC_IP)
		x = (double) d - slack;
	else
	{
		x = sqrt(fmax((double) d, 0.0)) - slack;
		x = x > 0.0 ? x * x : 0.0;
	}
	f = (float) x;
	if ((double) f > x)
		f = nextafterf(f, -INFINITY);
	return f;
}

void
shnsw_search_set_target(ShnswSearch *s, ShnswRef target)
{
	s->target = target;
	s->target_seen = false;
}

void
shnsw_search_free(ShnswSearch *s)
{
	if (s->pooled)
		pool_give_back(s);
	else
	{
		shnsw_free(s->cands);
		shnsw_visited_free(&s->visited);
		shnsw_heap_free(&s->C);
		shnsw_heap_free(&s->W);
		shnsw_heap_free(&s->D);
		shnsw_free(s->nbrs);
	}
	s->pooled = false;
	if (s->F.a != NULL)
		shnsw_heap_free(&s->F);
	shnsw_free(s->spec);
	shnsw_free(s->ubuf);
	shnsw_free(s->locs);
	if (s->stage)
		shnsw_free(s->stage);
	shnsw_free(s->dists);
	if (s->taken)
		shnsw_free(s->taken);
}

/* How many of node's layer-0 list entries a search reads (at most 2m). */
static inline int
search_list_len(const ShnswSearch *s, const ShnswNodeHeader *node)
{
	return node->nneighbors < 2 * s->m ? node->nneighbors : 2 * s->m;
}

/*
 * Record node as candidate slot j (j == s->ncands appends one), without its
 * distance (search_add_nodes computes the distances of a batch together).
 * keep_nbrs: save its layer-0 neighbours (not for swept nodes, which are
 * never expanded).
 */
static void
search_set_cand(ShnswSearch *s, uint32_t j, ShnswRef ref, const ShnswNodeHeader *node,
				bool keep_nbrs)
{
	ShnswCand  *c;

	if (j == s->ncands && s->ncands == s->capcands)
	{
		s->capcands *= 2;
		s->cands = shnsw_realloc(s->cands, sizeof(ShnswCand) * s->capcands);
	}
	c = &s->cands[j];
	c->ref = ref;
	c->d = 0.0f;
	c->node_flags = node->flags;
	c->state = 0;
	c->tid_blk = shnsw_node_tid_block(node);
	c->tid_off = node->tid_off;
	c->extra_tids = (uint8_t) (node->extra_tids < SHNSW_NODE_TIDS ? node->extra_tids : 0);
	c->vec_block = node->vec_block;
	c->vec_offset = node->vec_offset;
	c->level = node->level;
	c->upper = shnsw_node_upper_loc(node);

	/*
	 * Keep its layer-0 neighbours: expanding it later needs no second read
	 * of its page, and read-ahead can name the pages it will lead to.
	 */
	c->nbr_count = search_list_len(s, node);
	if (!keep_nbrs)
		c->nbr_count = 0;
	if (s->nnbrs + c->nbr_count > s->capnbrs)
	{
		s->capnbrs *= 2;
		s->nbrs = shnsw_realloc(s->nbrs, sizeof(ShnswRef) * s->capnbrs);
	}
	c->nbr_start = s->nnbrs;
	memcpy(s->nbrs + s->nnbrs, shnsw_node_neighbors(node), sizeof(ShnswRef) * c->nbr_count);
	s->nnbrs += c->nbr_count;
	if (j == s->ncands)
	{
		s->ncands++;
		s->ndistances++;
	}
}

/* Record a node with its distance d; returns its index in cands. */
static uint32_t
search_add_cand_ex(ShnswSearch *s, ShnswRef ref, float d, const ShnswNodeHeader *node,
				   bool keep_nbrs)
{
	uint32_t	j = s->ncands;

	search_set_cand(s, j, ref, node, keep_nbrs);
	s->cands[j].d = d;
	return j;
}

/* read_nodes callback: record a candidate and stage its code. */
typedef struct AddArg
{
	ShnswSearch *s;
	const ShnswRef *refs;
	uint32_t   *idx;			/* out: candidate index per ref */
} AddArg;

/* Distances of the staged codes, into s->dists by position. */
static void
search_flush_stage(ShnswSearch *s)
{
	float		d[SHNSW_STAGE];

	if (s->nstage == 0)
		return;
	sq8_distances_at(s->q, s->stage_at, s->nstage, d);
	for (int k = 0; k < s->nstage; k++)
		s->dists[s->stage_pos[k]] = d[k];
	s->nstage = 0;
}

/*
 * Record the node of refs[i] as its candidate. A source that read a record
 * racily may call again for i: the last call wins (its candidate slot is
 * rewritten, its code staged after the earlier one, so its distance is
 * stored last).
 */
static inline ShnswSearch *
search_add_record(AddArg *a, int i, const ShnswNodeHeader *node)
{
	ShnswSearch *s = a->s;

	if (a->idx[i] == UINT32_MAX)
		a->idx[i] = s->ncands;
	search_set_cand(s, a->idx[i], a->refs[i], node, !s->ops->reread_cheap);
	return s;
}

static void
search_add_cb(void *arg, int i, const ShnswNodeHeader *node)
{
	ShnswSearch *s = search_add_record((AddArg *) arg, i, node);
	uint8_t    *slot;

	if (s->stage == NULL)
	{
		s->dists[i] = sq8_distance(s->q, shnsw_node_code(node, s->m));
		return;
	}
	slot = s->stage + (size_t) s->nstage * s->q->dim;
	memcpy(slot, shnsw_node_code(node, s->m), s->q->dim);
	s->stage_at[s->nstage] = slot;
	s->stage_pos[s->nstage++] = i;
	if (s->nstage == SHNSW_STAGE)
		search_flush_stage(s);
}

_Static_assert(SHNSW_HELD_BATCH <= SHNSW_STAGE, "a held batch fits the stage");

/*
 * read_nodes_held callback: as search_add_cb, but the code is read where
 * the source holds it, at the next flush (search_held_flush_cb).
 */
static void
search_add_held_cb(void *arg, int i, const ShnswNodeHeader *node)
{
	ShnswSearch *s = search_add_record((AddArg *) arg, i, node);

	if (s->nstage == SHNSW_STAGE)	/* (not with SHNSW_HELD_BATCH calls a flush) */
		search_flush_stage(s);
	s->stage_at[s->nstage] = shnsw_node_code(node, s->m);
	s->stage_pos[s->nstage++] = i;
}

static void
search_held_flush_cb(void *arg)
{
	search_flush_stage(((AddArg *) arg)->s);
}

/*
 * read_nodes callback at expansion when the source rereads cheaply: the
 * node's layer-0 list (a racy read is followed by another call: the last
 * one wins).
 */
static void
search_nbrs_cb(void *arg, int i, const ShnswNodeHeader *node)
{
	ShnswSearch *s = (ShnswSearch *) arg;
	int			n = search_list_len(s, node);

	(void) i;					/* one node asked for */
	memcpy(s->expand_nbrs, shnsw_node_neighbors(node), sizeof(ShnswRef) * n);
	s->nexpand_nbrs = n;
}

/*
 * Read refs[0..n-1] (n <= 2m), recording candidates (idx gets their
 * indexes) and their distances, computed SHNSW_STAGE codes at a time by
 * the batch kernels (kernels.c, sq8_distances: each load of the query
 * serves several codes).
 */
static void
search_add_nodes(ShnswSearch *s, const ShnswRef *refs, int n, uint32_t *idx)
{
	AddArg		a = {s, refs, idx};

	if (n <= 0)
		return;
	for (int k = 0; k < n; k++)
		idx[k] = UINT32_MAX;
	s->nstage = 0;
	if (s->ops->read_nodes_held != NULL && s->stage != NULL)
		s->ops->read_nodes_held(s->ops->ctx, refs, n, search_add_held_cb,
								search_held_flush_cb, &a);
	else
	{
		s->ops->read_nodes(s->ops->ctx, refs, n, search_add_cb, &a);
		search_flush_stage(s);
	}
	for (int k = 0; k < n; k++)
		s->cands[idx[k]].d = s->dists[k];
}

/*
 * The greedy descent's reads over a memory source: a memory prefetch of
 * all the records of a hop before the first is read, so that their cache
 * misses overlap instead of coming one record after another (layer 0 and
 * layer 1's beam do the same through the prefetch they ask for at every
 * expansion). Not for the buffer source: the descent's pages have
 * read-ahead of their own (pageaccess.c).
 */
static inline void
search_prefetch_upper(ShnswSearch *s, const ShnswRef *refs, int n)
{
	if (s->ops->reread_cheap && s->ops->prefetch != NULL && n > 0)
		s->ops->prefetch(s->ops->ctx, refs, n, false);
}

ShnswRef
shnsw_search_descend(ShnswSearch *s, ShnswRef entry, int entry_level, int stop_layer)
{
	uint32_t	cur;
	uint32_t   *idx = shnsw_alloc(sizeof(uint32_t) * s->m);

	search_add_nodes(s, &entry, 1, &cur);

	/*
	 * Start at the entry node's own level if the caller's is higher (a
	 * corrupt or stale entry level must not make this loop count down from
	 * a huge number). Each hop strictly decreases the distance, so the
	 * greedy walk of a layer cannot cycle.
	 */
	if (entry_level > s->cands[cur].level)
		entry_level = s->cands[cur].level;
	for (int l = entry_level; l > stop_layer; l--)
	{
		bool		changed = true;

		while (changed)
		{
			int			n;

			shnsw_check_interrupts();
			changed = false;
			if (s->cands[cur].level < l)
				break;			/* cannot happen in a well-formed graph */
			n = s->ops->read_upper(s->ops->ctx, s->cands[cur].upper, l, s->ubuf);
			search_prefetch_upper(s, s->ubuf, n);
			search_add_nodes(s, s->ubuf, n, idx);
			for (int k = 0; k < n; k++)
			{
				if (s->cands[idx[k]].d < s->cands[cur].d)
				{
					cur = idx[k];
					changed = true;
				}
			}
		}
	}
	shnsw_free(idx);
	return s->cands[cur].ref;
}

/*
 * A greedy step on SQ8 codes can take the wrong turn where two clusters are
 * about as near: on pgvector's 4000 x 64 clustered l2 build case one query
 * in 100 started layer 0 in the wrong cluster and found none of its rows at
 * ef_search 10 and 20. A beam of a few nodes on layer 1 picks the start
 * among more than one local minimum, for about 1 % more distances there
 * and 4 % on 100k x 384 sentence embeddings at ef_search 33.
 */
ShnswRef
shnsw_search_start(ShnswSearch *s, ShnswRef entry, int entry_level)
{
	ShnswRef	start = shnsw_search_descend(s, entry, entry_level, 1);
	uint32_t	best[SHNSW_START_EF];

	if (entry_level >= 1 &&
		shnsw_search_upper_layer(s, start, 1, SHNSW_START_EF, best) > 0)
		start = s->cands[best[0]].ref;
	return start;
}

/*
 * upper_read_ahead names, for the page layer to read ahead, the unvisited
 * neighbours on this layer of the candidates still queued in an upper
 * layer's beam that can still be expanded (none farther than the worst
 * of the ef kept), as layer 0's search_read_ahead does: each expansion of
 * the beam otherwise costs a round trip to storage on a cold index, its
 * neighbours' records being named only once it is popped. Their upper
 * records are on the pages the descent reads ahead (pageaccess.c).
 * Speculative: a wrong guess costs a read, never a result.
 */
static void
upper_read_ahead(ShnswSearch *s, const ShnswHeap *C, const ShnswHeap *W, int ef,
				 ShnswVisited *vis, int layer, ShnswRef *buf)
{
	float		bound = W->n >= ef ? shnsw_heap_top(W).d : INFINITY;
	int			n = 0;

	for (int q = 0; q < C->n && q < SHNSW_SPECULATIVE_CANDIDATES; q++)
	{
		ShnswCand  *c = &s->cands[C->a[q].id];
		int			cnt;

		if (C->a[q].d > bound || c->level < layer)
			continue;
		cnt = s->ops->read_upper(s->ops->ctx, c->upper, layer, buf);
		for (int k = 0; k < cnt; k++)
			if (!shnsw_visited_contains(vis, buf[k]))
				s->spec[n++] = buf[k];
	}
	if (n > 0)
		s->ops->prefetch(s->ops->ctx, s->spec, n, true);
}

int
shnsw_search_upper_layer(ShnswSearch *s, ShnswRef entry, int layer, int ef, uint32_t *out)
{
	ShnswVisited vis;
	ShnswHeap	C,
				W;
	uint32_t	first;
	uint32_t   *idx = shnsw_alloc(sizeof(uint32_t) * s->m);
	ShnswRef   *fresh = shnsw_alloc(sizeof(ShnswRef) * s->m);
	ShnswRef   *ubuf2 = s->ops->speculative ? shnsw_alloc(sizeof(ShnswRef) * s->m) : NULL;
	int			n;

	shnsw_visited_init(&vis, 64);
	shnsw_heap_init(&C, ef, false);
	shnsw_heap_init(&W, ef + 1, true);
	search_add_nodes(s, &entry, 1, &first);
	shnsw_visited_add(&vis, entry);
	shnsw_heap_push(&C, s->cands[first].d, first);
	shnsw_heap_push(&W, s->cands[first].d, first);
	while (C.n > 0)
	{
		ShnswPair	c = shnsw_heap_pop(&C);
		int			cnt,
					nf = 0;

		shnsw_check_interrupts();
		if (W.n >= ef && c.d > shnsw_heap_top(&W).d)
			break;
		if (s->cands[c.id].level < layer)
			continue;
		cnt = s->ops->read_upper(s->ops->ctx, s->cands[c.id].upper, layer, s->ubuf);
		for (int k = 0; k < cnt; k++)
			if (shnsw_visited_add(&vis, s->ubuf[k]))
				fresh[nf++] = s->ubuf[k];
		if (s->ops->prefetch != NULL)
		{
			/* this hop's records first (cache lines or pages), then guesses */
			if (nf > 0)
				s->ops->prefetch(s->ops->ctx, fresh, nf, false);
			if (s->ops->speculative)
				upper_read_ahead(s, &C, &W, ef, &vis, layer, ubuf2);
		}
		search_add_nodes(s, fresh, nf, idx);
		for (int k = 0; k < nf; k++)
		{
			float		d = s->cands[idx[k]].d;

			if (W.n < ef || d < shnsw_heap_top(&W).d)
			{
				shnsw_heap_push(&C, d, idx[k]);
				shnsw_heap_push(&W, d, idx[k]);
				if (W.n > ef)
					shnsw_heap_pop(&W);
			}
		}
	}
	n = W.n;
	for (int k = n - 1; k >= 0; k--)
		out[k] = shnsw_heap_pop(&W).id;
	shnsw_visited_free(&vis);
	shnsw_heap_free(&C);
	shnsw_heap_free(&W);
	shnsw_free(idx);
	shnsw_free(fresh);
	if (ubuf2)
		shnsw_free(ubuf2);
	return n;
}

/*
 * search_read_ahead names, best first, the unvisited neighbours of the best
 * few candidates still queued, for the page layer to read ahead.
 */
static void
search_read_ahead(ShnswSearch *s, int ef)
{
	ShnswPair	top[SHNSW_SPECULATIVE_CANDIDATES];
	int			ntop = 0,
				n = 0;
	float		bound = s->W.n >= ef ? shnsw_heap_top(&s->W).d : INFINITY;

	while (ntop < SHNSW_SPECULATIVE_CANDIDATES && s->C.n > 0)
	{
		ShnswPair	p = shnsw_heap_pop(&s->C);

		if (s->cands[p.id].state & SHNSW_CAND_EXPANDED)
			continue;			/* stale entry: it would be skipped anyway */
		if (p.d > bound)
		{
			/* neither it nor any after it is expanded this round */
			shnsw_heap_push(&s->C, p.d, p.id);
			break;
		}
		top[ntop++] = p;
	}
	for (int t = 0; t < ntop; t++)
	{
		ShnswCand  *c = &s->cands[top[t].id];

		for (int k = 0; k < c->nbr_count; k++)
		{
			ShnswRef	r = s->nbrs[c->nbr_start + k];

			if (!shnsw_visited_contains(&s->visited, r))
				s->spec[n++] = r;
		}
		shnsw_heap_push(&s->C, top[t].d, top[t].id);
	}
	if (n > 0)
		s->ops->prefetch(s->ops->ctx, s->spec, n, true);
}

/*
 * D, the parked nodes. A search parks most nodes it sees (some 800 of a
 * hot query's 840 on 100k x 384 sentences at ef_search 40) and looks at
 * few of them again: only their least, for the frontier, unless a later
 * round or the scan takes some. So a node is parked by appending it, its
 * least kept on the side, and D is made a heap only when one must be
 * popped (search_park_pop). The heap part is D.a[0..park_heaped-1].
 */
static inline void
search_park(ShnswSearch *s, float d, uint32_t j)
{
	ShnswHeap  *h = &s->D;
	int			at = shnsw_heap_append(h, d, j);

	if (s->park_least < 0 || shnsw_heap_above(h, &h->a[at], &h->a[s->park_least]))
		s->park_least = at;
}

/* D's least parked node, without reordering D; false if D is empty. */
static inline bool
search_park_least(const ShnswSearch *s, ShnswPair *out)
{
	const ShnswHeap *h = &s->D;

	if (s->park_heaped > 0 &&
		(s->park_least < 0 || shnsw_heap_above(h, &h->a[0], &h->a[s->park_least])))
		*out = h->a[0];
	else if (s->park_least >= 0)
		*out = h->a[s->park_least];
	else
		return false;
	return true;
}

/* Remove and return D's least parked node (D must not be empty). */
static ShnswPair
search_park_pop(ShnswSearch *s)
{
	ShnswHeap  *h = &s->D;
	ShnswPair	p;

	if (s->park_heaped < h->n)
	{
		int			n = h->n;

		h->n = s->park_heaped;
		for (int i = s->park_heaped; i < n; i++)
		{
			ShnswPair	x = h->a[i];

			shnsw_heap_push(h, x.d, x.id);
		}
		s->park_least = -1;
	}
	p = shnsw_heap_pop(h);
	s->park_heaped = h->n;
	return p;
}

/* Drop emitted nodes from the top of D; D's least then, or INFINITY. */
static float
search_park_front(ShnswSearch *s)
{
	ShnswPair	p;

	while (search_park_least(s, &p))
	{
		if (!(s->cands[p.id].state & SHNSW_CAND_EMITTED))
			return p.d;
		(void) search_park_pop(s);
	}
	return INFINITY;
}

/* Offer candidate j to this round's results W, else park it in D. */
static void
search_offer(ShnswSearch *s, uint32_t j, int ef, bool expandable)
{
	ShnswCand  *c = &s->cands[j];

	if (s->clamp_on && (c->node_flags & SHNSW_NODE_CLAMPED))
		shnsw_heap_push(&s->F, shnsw_cand_bound_distance(s, c), j);
	if (s->W.n < ef || c->d < shnsw_heap_top(&s->W).d)
	{
		if (expandable && !(c->state & SHNSW_CAND_EXPANDED))
			shnsw_heap_push(&s->C, c->d, j);
		shnsw_heap_push(&s->W, c->d, j);
		c->state |= SHNSW_CAND_IN_RESULTS;
		if (s->W.n > ef)
		{
			ShnswPair	out = shnsw_heap_pop(&s->W);

			s->cands[out.id].state &= ~SHNSW_CAND_IN_RESULTS;
			search_park(s, out.d, out.id);
		}
	}
	else
		search_park(s, c->d, j);
}

/* Offer the best parked nodes not emitted to W, until it holds ef. */
static void
search_offer_parked(ShnswSearch *s, int ef)
{
	while (s->D.n > 0 && s->W.n < ef)
	{
		ShnswPair	p = search_park_pop(s);

		if (s->cands[p.id].state & SHNSW_CAND_EMITTED)
			continue;
		search_offer(s, p.id, ef, true);
	}
}

/*
 * search_drain hands out up to ef nodes parked in D, nearest first, once the
 * budget forbids expanding more (as pgvector returns its discarded
 * candidates when hnsw.max_scan_tuples is reached).
 */
static int
search_drain(ShnswSearch *s, int ef, uint32_t *out)
{
	int			n = 0;

	while (s->D.n > 0 && n < ef)
	{
		ShnswPair	p = search_park_pop(s);
		ShnswCand  *c = &s->cands[p.id];

		if (c->state & SHNSW_CAND_EMITTED)
			continue;
		c->state |= SHNSW_CAND_EMITTED;
		out[n++] = p.id;
	}
	if (n == 0)
		s->exhausted = true;
	return n;
}

float
shnsw_search_parked(ShnswSearch *s)
{
	return search_park_front(s);
}

/*
 * Emit parked candidate j to the caller; the next round expands it (unless
 * it is expanded or the budget is spent).
 */
static int64_t
search_take_cand(ShnswSearch *s, uint32_t j)
{
	s->cands[j].state |= SHNSW_CAND_EMITTED;
	if (!(s->cands[j].state & SHNSW_CAND_EXPANDED) && !s->budget_spent)
	{
		if (s->ntaken == s->captaken)
		{
			s->captaken = s->captaken ? s->captaken * 2 : 64;
			s->taken = s->taken ? shnsw_realloc(s->taken, sizeof(uint32_t) * s->captaken)
				: shnsw_alloc(sizeof(uint32_t) * s->captaken);
		}
		s->taken[s->ntaken++] = j;
	}
	return j;
}

int64_t
shnsw_search_take(ShnswSearch *s)
{
	if (s->exhausted || isinf(shnsw_search_parked(s)))
		return -1;
	return search_take_cand(s, search_park_pop(s).id);
}

float
shnsw_search_clamped(ShnswSearch *s)
{
	if (!s->clamp_on)
		return INFINITY;
	while (s->F.n > 0 && (s->cands[shnsw_heap_top(&s->F).id].state & SHNSW_CAND_EMITTED))
		shnsw_heap_pop(&s->F);
	return s->F.n > 0 ? shnsw_heap_top(&s->F).d : INFINITY;
}

int64_t
shnsw_search_take_clamped(ShnswSearch *s)
{
	if (isinf(shnsw_search_clamped(s)))
		return -1;
	return search_take_cand(s, shnsw_heap_pop(&s->F).id);
}

float
shnsw_search_frontier(ShnswSearch *s)
{
	float		f = search_park_front(s);

	if (!s->budget_spent && !s->exhausted)
	{
		/*
		 * An emitted node still queued is one shnsw_search_take emitted (the
		 * next round queues it again) or one a spent budget left
		 * unexpanded: the caller knows its exact distance.
		 */
		while (s->C.n > 0 &&
			   (s->cands[shnsw_heap_top(&s->C).id].state & (SHNSW_CAND_EXPANDED | SHNSW_CAND_EMITTED)))
			shnsw_heap_pop(&s->C);
		if (s->C.n > 0 && shnsw_heap_top(&s->C).d < f)
			f = shnsw_heap_top(&s->C).d;
		if (s->round_floor < f)
			f = s->round_floor;
	}
	return f;
}

static int	search_run(ShnswSearch *s, int ef, float *median, uint32_t *out);

/* Queue the nodes shnsw_search_take emitted since the last round. */
static void
search_queue_taken(ShnswSearch *s)
{
	for (uint32_t k = 0; k < s->ntaken; k++)
		shnsw_heap_push(&s->C, s->cands[s->taken[k]].d, s->taken[k]);
	s->ntaken = 0;
}

int
shnsw_search_next(ShnswSearch *s, ShnswRef start, int ef, uint32_t *out)
{
	if (s->exhausted)
		return 0;
	s->rounds++;
	s->W.n = 0;
	if (s->budget_spent)
		return search_drain(s, ef, out);

	if (!s->started)
	{
		uint32_t	first;

		s->started = true;
		s->target_seen |= start == s->target;
		shnsw_visited_add(&s->visited, start);
		search_add_nodes(s, &start, 1, &first);
		search_offer(s, first, ef, true);
	}
	else
	{
		/*
		 * The frontier as this round starts bounds what the caller may
		 * return after it: this round explores the shell past it, where the
		 * neighbours that lead back into it lie.
		 */
		s->round_floor = INFINITY;
		s->round_floor = shnsw_search_frontier(s);

		/* nodes taken since the last round are expanded first */
		search_queue_taken(s);
		search_offer_parked(s, ef);
	}
	return search_run(s, ef, NULL, out);
}

/*
 * shnsw_search_widen continues the first round as if it had been ef wide
 * from the start: its results so far (emitted) count towards the ef, so
 * it finds about ef minus those new rows, and *median is the navigation
 * distance of the middle one of all ef (the first round's floor of a round
 * that wide). Not a new round: the frontier is not fixed where it starts.
 */
int
shnsw_search_widen(ShnswSearch *s, int ef, uint32_t *out, float *median)
{
	*median = INFINITY;
	if (s->exhausted || s->budget_spent || !s->started)
		return 0;
	s->widened++;
	s->W.n = 0;
	search_queue_taken(s);
	/*
	 * The nearest rows found so far, at most half of W: nodes the caller
	 * took one at a time count too, and W must keep room for new rows, or
	 * a W full of emitted rows would end the walk as if nothing were left.
	 */
	for (uint32_t j = 0; j < s->ncands; j++)
	{
		ShnswCand  *c = &s->cands[j];

		if (!(c->state & SHNSW_CAND_EMITTED))
			continue;
		shnsw_heap_push(&s->W, c->d, j);
		c->state |= SHNSW_CAND_IN_RESULTS;
		if (s->W.n > ef / 2)
			s->cands[shnsw_heap_pop(&s->W).id].state &= ~SHNSW_CAND_IN_RESULTS;
	}
	search_offer_parked(s, ef);
	return search_run(s, ef, median, out);
}

/*
 * search_run expands until W holds ef results and no candidate can improve
 * them, then writes W's nodes not yet emitted into out and marks them
 * emitted; with median, also the navigation distance of W's middle node.
 */
static int
search_run(ShnswSearch *s, int ef, float *median, uint32_t *out)
{
	uint32_t	idx[2 * SHNSW_MAX_M];
	ShnswRef	fresh[2 * SHNSW_MAX_M];
	int			n,
				popped,
				mid;

	while (s->C.n > 0)
	{
		ShnswPair	c = shnsw_heap_top(&s->C);
		ShnswCand  *cand;
		const ShnswRef *nbrs;
		int			nnbrs;
		int			nf = 0;

		shnsw_check_interrupts();
		if (s->W.n >= ef && c.d > shnsw_heap_top(&s->W).d)
			break;
		shnsw_heap_pop(&s->C);
		cand = &s->cands[c.id];
		if (cand->state & SHNSW_CAND_EXPANDED)
			continue;
		if (s->max_discovered > 0 && s->ncands >= s->max_discovered)
		{
			shnsw_heap_push(&s->C, c.d, c.id);	/* still unexpanded */
			s->budget_spent = true;
			break;
		}
		cand->state |= SHNSW_CAND_EXPANDED;
		s->nexpanded++;
		nbrs = s->nbrs + cand->nbr_start;
		nnbrs = cand->nbr_count;
		if (s->ops->reread_cheap)
		{
			/* its list now, from the record (plain loads) */
			s->nexpand_nbrs = 0;
			s->ops->read_nodes(s->ops->ctx, &cand->ref, 1, search_nbrs_cb, s);
			nbrs = s->expand_nbrs;
			nnbrs = s->nexpand_nbrs;
		}

		for (int k = 0; k < nnbrs; k++)
		{
			ShnswRef	r = nbrs[k];

			if (shnsw_visited_add(&s->visited, r))
				fresh[nf++] = r;
			s->target_seen |= r == s->target;
		}
		if (s->ops->prefetch != NULL)
		{
			/* this expansion's pages first, then the likely next ones */
			if (nf > 0)
				s->ops->prefetch(s->ops->ctx, fresh, nf, false);
			if (s->ops->speculative)
				search_read_ahead(s, ef);
		}
		search_add_nodes(s, fresh, nf, idx);
		for (int k = 0; k < nf; k++)
			search_offer(s, idx[k], ef, true);
		if (s->target_seen)
			break;
	}

	n = 0;
	/* W pops farthest first: its middle node is popped after mid others */
	mid = s->W.n - 1 - (s->W.n - 1) / 2;
	for (popped = 0; s->W.n > 0; popped++)
	{
		ShnswPair	p = shnsw_heap_pop(&s->W);
		ShnswCand  *c = &s->cands[p.id];

		if (median && popped == mid)
			*median = p.d;
		c->state &= ~SHNSW_CAND_IN_RESULTS;
		if (c->state & SHNSW_CAND_EMITTED)
			continue;
		c->state |= SHNSW_CAND_EMITTED;
		out[n++] = p.id;
	}
	if (n == 0)
	{
		if (s->budget_spent)
			return search_drain(s, ef, out);
		s->exhausted = true;
	}
	return n;
}

bool
shnsw_search_sweep_node(ShnswSearch *s, ShnswRef ref, const ShnswNodeHeader *node,
						float d, uint32_t *idx)
{
	uint32_t	j;

	if (!shnsw_visited_add(&s->visited, ref))
		return false;
	j = search_add_cand_ex(s, ref, d, node, false);
	search_park(s, s->cands[j].d, j);
	*idx = j;
	return true;
}

void
shnsw_search_swept(ShnswSearch *s)
{
	/*
	 * Every node is seen: expanding adds nothing, and the frontier is the
	 * nearest parked node alone (shnsw_search_frontier with a spent budget:
	 * after a round ends, every node not emitted is parked in D).
	 */
	s->budget_spent = true;
	s->exhausted = false;		/* a walk that had ended has new nodes parked */
	s->round_floor = INFINITY;
}

/* ---------------------------------------------------------------------
 * Lower bound on exact distances
 * ---------------------------------------------------------------------
 */

void
shnsw_bound_prepare(ShnswBound *b, ShnswMetric metric, bool unbounded, const float *nav,
					const float *lo, const float *scale, int dims, double residual)
{
	const double eps = FLT_EPSILON;
	double		sumsq = 0.0,
				sumabs = 0.0,
				mag = 0.0,
				rndsq = 0.0,
				rndabs = 0.0,
				qsq = 0.0,
				varmax = 0.0,
				varq = 0.0;

	/*
	 * A code c stands for x' = lo + c * scale, |x_i - x'_i| <= scale_i / 2
	 * inside the trained range. Besides that half step, allow for float
	 * rounding: per dimension, of decoding and of the query's offsets
	 * (absolute, relative to the magnitudes involved), and of the sums
	 * (relative, growing with the number of dimensions), in both the
	 * navigation and the exact distance.
	 */
	for (int i = 0; i < dims; i++)
	{
		double		sc = scale[i];
		double		x0 = fabs(lo[i]),
					x1 = fabs(lo[i] + 255.0 * sc);
		double		xmax = x0 > x1 ? x0 : x1;	/* finite: no libm fmax call */
		double		r = 2 * eps * (xmax + fabs(nav[i]));
		double		e = sc / 2 + r;

		sumsq += e * e;
		sumabs += fabs(nav[i]) * e;
		mag += fabs(nav[i]) * xmax;
		rndsq += r * r;
		rndabs += fabs(nav[i]) * r;
		qsq += (double) nav[i] * nav[i];
		if (sc * sc / 12 > varmax)
			varmax = sc * sc / 12;
		varq += (double) nav[i] * nav[i] * sc * sc / 12;
	}
	b->metric = metric;
	b->unbounded = unbounded;
	b->dims = dims;
	b->nav = nav;
	b->lo = lo;
	b->scale = scale;
	b->err_rel = 2 * eps * (dims + 8);
	b->qnorm = sqrt(qsq);
	b->res_range = shnsw_clamp_unit(scale, dims);
	if (metric != SHNSW_METRIC_IP)
		b->err_abs = sqrt(sumsq);
	else
		b->err_abs = sumabs + b->err_rel * mag;

	/*
	 * The typical error. Rounding leaves x - x' = e with e_i about uniform
	 * on [-step_i / 2, step_i / 2], independent from one dimension to the
	 * next: var e_i = step_i^2 / 12. With u = (q - x') / |q - x'|,
	 * |q - x|^2 = |q - x'|^2 - 2 |q - x'| u.e + |e|^2 >= |q - x'|^2 -
	 * 2 |q - x'| u.e, and u.e has a variance of at most the largest
	 * step_i^2 / 12, so |q - x| >= sqrt(est) - 6 sd but with odds below
	 * 1e-8 (a sum of uniforms has lighter tails than the normal). Inner
	 * product: -q.x = -q.x' - q.e, var q.e = sum q_i^2 step_i^2 / 12. In
	 * 384 dimensions this is a fifth of the worst case (every dimension
	 * off by half a step at once, in the worst direction); in 3 it is
	 * larger, and the worst case stands.
	 */
	if (metric != SHNSW_METRIC_IP)
		b->err_typ = SHNSW_BOUND_SIGMAS * sqrt(varmax) + sqrt(rndsq);
	else
		b->err_typ = SHNSW_BOUND_SIGMAS * sqrt(varq) + rndabs + b->err_rel * mag;
	b->err_typ = fmin(b->err_typ, b->err_abs);

	/*
	 * The largest actual residual |x - x'| of any node (kept on the
	 * metapage) is far below the worst case of every dimension off by half
	 * a step at once (0.63 of it on clustered 384-d data), and covers
	 * clamped values too: |q - x| >= |q - x'| - |x - x'| (decoding's
	 * rounding added); inner product: -q.x >= -q.x' - |q| |x - x'|.
	 */
	b->rnd_l2 = sqrt(rndsq);
	b->rnd_ip = rndabs;
	b->mag = mag;
	if (residual >= 0.0)
		shnsw_bound_set_residual(b, residual);
}

void
shnsw_bound_set_residual(ShnswBound *b, double residual)
{
	residual = residual * (1 + 1e-6) + 1e-12;
	if (b->metric != SHNSW_METRIC_IP)
		b->err_abs = residual + b->rnd_l2;
	else
		b->err_abs = b->qnorm * (1 + (double) FLT_EPSILON) * residual + b->rnd_ip +
			b->err_rel * b->mag;
}

double
shnsw_code_residual(const float *lo, const float *scale, const float *v, const uint8_t *code,
					int dims)
{
	double		sum = 0.0;

	for (int i = 0; i < dims; i++)
	{
		double		r = (double) v[i] - ((double) lo[i] + (double) code[i] * (double) scale[i]);

		sum += r * r;
	}
	/* double rounding of the sums, upwards (the bound rounds it up again) */
	return sqrt(sum) * (1 + 1e-9) + 1e-12;
}

double
shnsw_code_excess(const float *lo, const float *scale, const float *v, const uint8_t *code,
				  int dims)
{
	double		sum = 0.0;

	for (int i = 0; i < dims; i++)
	{
		double		x = (double) lo[i] + (double) code[i] * (double) scale[i];
		/* the float rounding of encoding: of v - lo, and of its quotient */
		double		tol = 2 * FLT_EPSILON * (fabs((double) v[i]) + fabs(x) + 256.0 * scale[i]);
		double		e = fabs((double) v[i] - x) - (double) scale[i] / 2;

		if (e > tol)
			sum += e * e;
	}
	if (sum == 0.0)
		return 0.0;
	return sqrt(sum) * (1 + 1e-9) + 1e-12;
}

double
shnsw_clamp_unit(const float *scale, int dims)
{
	double		halfsq = 0.0;

	for (int i = 0; i < dims; i++)
		halfsq += (double) scale[i] * scale[i] / 4;
	return sqrt(halfsq);
}

double
shnsw_clamp_class_limit(int k, double unit)
{
	return unit * exp2((k - 20) / 4.0);
}

uint8_t
shnsw_clamp_flags(double excess, double unit)
{
	if (!(excess > 0.0))
		return 0;
	for (int k = 1; k < SHNSW_NODE_CLAMP_CLASSES; k++)
	{
		/* (a class limit a hair below the excess is not enough) */
		if (excess * (1 + 1e-6) <= shnsw_clamp_class_limit(k, unit))
			return SHNSW_NODE_CLAMPED | (uint8_t) (k << SHNSW_NODE_CLAMP_SHIFT);
	}
	return SHNSW_NODE_CLAMPED;
}

double
shnsw_bound_upper(const ShnswBound *b, double est)
{
	double		base;

	switch (b->metric)
	{
		case SHNSW_METRIC_L2:
			base = sqrt(fmax(est, 0.0)) + b->err_abs;
			break;
		case SHNSW_METRIC_COSINE:
			if (b->unbounded)
				return INFINITY;
			base = sqrt(fmax(est, 0.0)) + b->err_abs;
			base += b->err_rel * base;
			return base * base / 2 + b->err_rel;
		default:
			base = est + b->err_abs;
			break;
	}
	return base + b->err_rel * fabs(base);
}

double
shnsw_bound_lower(const ShnswBound *b, double est)
{
	double		base;

	switch (b->metric)
	{
		case SHNSW_METRIC_L2:
			/* est = |q - x'|^2; |q - x| >= sqrt(est) - |x - x'| */
			base = sqrt(fmax(est, 0.0));
			break;
		case SHNSW_METRIC_COSINE:
			if (b->unbounded)
				return -INFINITY;

			/*
			 * est = |qn - x'|^2 for the normalized query and row; for unit
			 * vectors the cosine distance is |qn - xn|^2 / 2, and |qn - xn|
			 * >= sqrt(est) - |xn - x'|. The sums' rounding is absolute here
			 * (pgvector computes 1 - similarity), err_rel of it.
			 */
			base = sqrt(fmax(est, 0.0));
			base = fmax(base - b->err_abs - b->err_rel * base, 0.0);
			return base * base / 2 - b->err_rel;
		default:
			/* est = -q.x'; -q.x >= est - sum |q_i| |x_i - x'_i| */
			base = est;
			break;
	}
	return base - b->err_abs - b->err_rel * fabs(base);
}

bool
shnsw_code_at_edge(const uint8_t *code, int dims)
{
	return memchr(code, 0, dims) != NULL || memchr(code, 255, dims) != NULL;
}

double
shnsw_bound_code(const ShnswBound *b, const uint8_t *code)
{
	const double eps = FLT_EPSILON;
	double		sum = 0.0,
				mag = 0.0;

	if (b->metric == SHNSW_METRIC_COSINE && b->unbounded)
		return -INFINITY;
	for (int i = 0; i < b->dims; i++)
	{
		double		sc = b->scale[i];
		double		x = (double) b->lo[i] + code[i] * sc;
		double		xmax = fmax(fabs(b->lo[i]), fabs(b->lo[i] + 255.0 * sc));
		double		q = b->nav[i];
		double		e = sc / 2 + 2 * eps * (xmax + fabs(q));
		double		lo = code[i] == 0 ? -INFINITY : x - e;
		double		hi = code[i] == 255 ? INFINITY : x + e;

		if (b->metric == SHNSW_METRIC_IP)
		{
			/* the least -q_i x_i over [lo, hi] */
			if (q > 0)
				sum += isinf(hi) ? -INFINITY : -q * hi;
			else if (q < 0)
				sum += isinf(lo) ? -INFINITY : -q * lo;
			mag += fabs(q) * xmax;
		}
		else
		{
			/* the distance from q_i to [lo, hi] */
			double		g = q < lo ? lo - q : q > hi ? q - hi : 0.0;

			sum += g * g;
		}
	}
	if (b->metric == SHNSW_METRIC_IP)
		return sum - b->err_rel * (fabs(sum) + mag);
	sum = sqrt(sum);
	sum = fmax(sum - b->err_rel * sum, 0.0);
	if (b->metric == SHNSW_METRIC_COSINE)
		return sum * sum / 2 - b->err_rel;
	return sum;
}
