/*-------------------------------------------------------------------------
 *
 * buildgraph.c
 *	  The in-memory HNSW graph of an index build: levels, linking (serial
 *	  or concurrent), relinking, and neighbour choice on SQ8 codes.
 *
 * Construction follows Malkov and Yashunin (HNSW, 2016/2018): each node
 * draws a level from an exponential law, descends greedily to its level,
 * then on each layer runs a best-first search of width ef_construction and
 * keeps neighbours chosen by the "heuristic" rule (a candidate is kept only
 * if it is closer to the new node than to any neighbour kept before it).
 * Like pgvector, layer 0 keeps up to 2m neighbours and upper layers m.
 * The heuristic can prune a node out of every layer-0 list, so after
 * linking a repair pass gives every node a path from the entry point
 * (reachability.c).
 *
 *-------------------------------------------------------------------------
 */
#include <math.h>
#include <string.h>

#include "buildgraph.h"
#include "neighbors_select.h"

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

uint32_t
shnsw_build_walk(const ShnswBuildGraph *g, uint32_t *parent, uint32_t *queue, uint32_t head,
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
			if (parent[nb[k]] == SHNSW_BUILD_UNREACHED)
			{
				parent[nb[k]] = c;
				queue[tail++] = nb[k];
			}
		}
	}
	return tail;
}

static inline void
build_set_count(ShnswBuildGraph *g, uint32_t i, int layer, int count)
{
	if (layer == 0)
		g->cnt0[i] = (uint16_t) count;
	else
		g->upper[i][(size_t) (layer - 1) * (g->m + 1)] = (uint32_t) count;
}

void
shnsw_build_set_count(ShnswBuildGraph *g, uint32_t i, int layer, int count)
{
	build_set_count(g, i, layer, count);
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

/* A prepared "from" point (buildgraph.h); slot picks the scratch buffers. */
ShnswBuildFrom
shnsw_build_from_node(ShnswBuildGraph *g, uint32_t i, int slot)
{
	ShnswBuildFrom	f;

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
build_dist(const ShnswBuildGraph *g, const ShnswBuildFrom *f, uint32_t j)
{
	if (g->use_halves)
		return shnsw_half_distance(g->metric, f->v, g->halves + (size_t) j * g->dim,
								   g->dim);
	if (!g->use_codes)
		return shnsw_float_distance(g->metric, f->v, g->vecs + (size_t) j * g->dim, g->dim);
	return sq8_distance(f->sq, g->codes + (size_t) j * g->dim);
}

float
shnsw_build_distance(const ShnswBuildGraph *g, const ShnswBuildFrom *f, uint32_t j)
{
	return build_dist(g, f, j);
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
int
shnsw_build_search_layer(ShnswBuildGraph *g, const ShnswBuildFrom *q, uint32_t qnode,
						 const uint32_t *eps, int neps, int layer, int ef, uint32_t *out,
						 float *outd)
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
	ShnswBuildFrom	e;
} BuildCandDist;

static float
build_cand_dist(void *arg, int a, int b)
{
	BuildCandDist *c = (BuildCandDist *) arg;

	if (c->from != a)
	{
		c->e = shnsw_build_from_node(c->g, c->ids[a], 1);
		c->from = a;
	}
	return build_dist(c->g, &c->e, c->ids[b]);
}

/*
 * The neighbour heuristic (neighbors_select.c) over build candidates
 * ids/dists, sorted nearest first, filled up to fill with the ones passed
 * over; writes the kept node numbers to sel (nearest first), and, if seld
 * is not NULL, their distances to seld and passed-over flags to passed;
 * *nchosen (may be NULL) says how many the heuristic chose.
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
 * SHNSW_FAR_RATIO 4 is twice the distance; L1, Hamming and Jaccard are
 * distances themselves, and take the ratio's square root. Copies of the nearest (code
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
	return d[0] > (metric == SHNSW_METRIC_L1 || shnsw_metric_is_bit(metric) ?
				   sqrtf(SHNSW_FAR_RATIO) : SHNSW_FAR_RATIO) * nearest;
}

/* ShnswListOps over the build graph: the list's owner is prepared (slot 0). */
typedef struct BuildListArg
{
	ShnswBuildGraph *g;
	uint32_t	owner;
	int			layer;
	uint32_t	from;			/* node fx is prepared for (build_node_dist) */
	ShnswBuildFrom	fx;
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
	ShnswBuildFrom	from = {NULL, NULL};
	bool		prepared = false;

	for (int k = 0; k < n; k++)
	{
		if (!a->g->use_codes && build_known_dist(a->g, list[k], a->owner, &d[k]))
			continue;
		if (!prepared)
		{
			from = shnsw_build_from_node(a->g, a->owner, 0);
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
		a->fx = shnsw_build_from_node(a->g, x, 1);
		a->from = x;
	}
	return build_dist(a->g, &a->fx, y);
}

static const ShnswListOps build_list_ops = {
	build_list_distances, build_list_choose, build_list_cache, build_node_dist
};

/* Add new to e's list on a layer (the back-link rule, neighbors_select.c). */
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
uint32_t
shnsw_build_descend(ShnswBuildGraph *g, const ShnswBuildFrom *q, uint32_t ep, int max_level,
					int stop)
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
		ShnswBuildFrom	q = shnsw_build_from_node(g, i, 0);

		/* entry points: the previous layer's results */
		nres = shnsw_build_search_layer(g, &q, i, prev, nprev, l, efc, res, resd);

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
			ShnswBuildFrom	me = shnsw_build_from_node(g, i, 0);
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
		 * strict scans and the insert's upper-layer beam (neighbors_find.c)
		 * are what keep them found.
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
	ShnswBuildFrom	q;

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
	q = shnsw_build_from_node(g, i, 0);
	ep = shnsw_build_descend(g, &q, ep, max_level, level);
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
	ShnswBuildFrom	q;
	uint32_t	ep;

	if (i == g->entry || g->max_level < 0)
		return;
	q = shnsw_build_from_node(g, i, 0);
	ep = shnsw_build_descend(g, &q, g->entry, g->max_level, top);
	build_link_layers(g, i, ep, top);
}
