/*
 * run_unit.c
 *	  Unit tests of streamhnsw's pure code (kernels, SQ8, heaps, visited set,
 *	  graph construction and the disk search), without a server.
 *
 * The disk search runs over "pages" held in plain memory through the same
 * ShnswPageOps interface the server implements over shared buffers.
 * Prints "N passed, N failed" and exits non-zero on any failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "kernels.h"
#include "lookahead.h"
#include "pqueue.h"
#include "visited.h"

/* port.h for the unit tests */
void *
shnsw_alloc(size_t size)
{
	void	   *p = malloc(size ? size : 1);

	if (!p)
		abort();
	return p;
}

void *
shnsw_alloc0(size_t size)
{
	void	   *p = calloc(1, size ? size : 1);

	if (!p)
		abort();
	return p;
}

void *
shnsw_realloc(void *ptr, size_t size)
{
	void	   *p = realloc(ptr, size);

	if (!p)
		abort();
	return p;
}

void
shnsw_free(void *ptr)
{
	free(ptr);
}

static int	npassed,
			nfailed;

#define CHECK(cond, ...) \
	do { \
		if (cond) npassed++; \
		else { nfailed++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } \
	} while (0)

static uint64_t rng_state = 12345;

static double
urand(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (double) (rng_state >> 11) / 9007199254740992.0;
}

static double
nrand(void)
{
	double		u = urand() + 1e-12,
				v = urand();

	return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

/* clustered data: n points in dim around nc centers */
static float *
make_data(int n, int dim, int nc)
{
	float	   *centers = malloc(sizeof(float) * nc * dim);
	float	   *x = malloc(sizeof(float) * n * dim);

	for (int i = 0; i < nc * dim; i++)
		centers[i] = (float) nrand();
	for (int i = 0; i < n; i++)
	{
		int			c = (int) (urand() * nc) % nc;

		for (int j = 0; j < dim; j++)
			x[i * dim + j] = centers[c * dim + j] + 0.3f * (float) nrand();
	}
	free(centers);
	return x;
}

static void
test_kernels(void)
{
	int			dims[] = {1, 3, 7, 8, 15, 16, 17, 100, 128, 769};

	for (int level = SHNSW_SIMD_PORTABLE; level <= SHNSW_SIMD_AVX512; level++)
	{
		ShnswSimdLevel got = shnsw_kernels_init((ShnswSimdLevel) level);

		for (size_t t = 0; t < sizeof(dims) / sizeof(dims[0]); t++)
		{
			int			dim = dims[t];
			float	   *a = make_data(1, dim, 1),
					   *b = make_data(1, dim, 1);
			double		l2 = 0,
						dot = 0;
			float		lo[1024],
						scale[1024],
						mins[1024],
						maxs[1024],
						qs[1024],
						w[1024];
			uint8_t		code[1024];
			Sq8Query	sq = {.dim = dim,.qs = qs,.w = w};
			double		ref;

			for (int i = 0; i < dim; i++)
			{
				l2 += (double) (a[i] - b[i]) * (a[i] - b[i]);
				dot += (double) a[i] * b[i];
			}
			CHECK(fabs(shnsw_l2sq_f32(a, b, dim) - l2) <= 1e-4 * (1 + l2),
				  "l2 level %d dim %d", got, dim);
			CHECK(fabs(shnsw_dot_f32(a, b, dim) - dot) <= 1e-4 * (1 + fabs(dot)),
				  "dot level %d dim %d", got, dim);

			/* SQ8 distance equals the float distance to the decoded code */
			sq8_train_init(mins, maxs, dim);
			sq8_train_add(mins, maxs, a, dim);
			sq8_train_add(mins, maxs, b, dim);
			for (int i = 0; i < dim; i++)
				maxs[i] += 1.0f;	/* avoid zero ranges */
			sq8_train_finish(mins, maxs, lo, scale, dim);
			sq8_encode(lo, scale, b, code, dim);
			{
				float		dec[1024];

				sq8_decode(lo, scale, code, dec, dim);
				for (int i = 0; i < dim; i++)
					if (fabsf(dec[i] - b[i]) > scale[i] * 0.5001f)
					{
						CHECK(0, "decode error dim %d i %d", dim, i);
						break;
					}
				sq8_prepare_query(&sq, SHNSW_METRIC_L2, a, lo, scale);
				ref = 0;
				for (int i = 0; i < dim; i++)
					ref += (double) (a[i] - dec[i]) * (a[i] - dec[i]);
				CHECK(fabs(sq8_distance(&sq, code) - ref) <= 1e-3 * (1 + ref),
					  "sq8 l2 level %d dim %d: %f vs %f", got, dim, sq8_distance(&sq, code), ref);
				sq8_prepare_query(&sq, SHNSW_METRIC_IP, a, lo, scale);
				ref = 0;
				for (int i = 0; i < dim; i++)
					ref -= (double) a[i] * dec[i];
				CHECK(fabs(sq8_distance(&sq, code) - ref) <= 1e-3 * (1 + fabs(ref)),
					  "sq8 ip level %d dim %d", got, dim);
			}
			free(a);
			free(b);
		}
	}
	shnsw_kernels_init(SHNSW_SIMD_AVX512);
}

static void
test_sq8_clamp_and_half(void)
{
	float		lo[2] = {0, -1},
				scale[2] = {1.0f / 255, 2.0f / 255};
	float		v[2] = {5.0f, -7.0f};
	uint8_t		code[2];

	sq8_encode(lo, scale, v, code, 2);
	CHECK(code[0] == 255 && code[1] == 0, "clamping: %d %d", code[0], code[1]);
	v[0] = NAN;
	sq8_encode(lo, scale, v, code, 2);
	CHECK(code[0] == 0, "NaN encodes to 0");

	CHECK(shnsw_half_to_float(0x3C00) == 1.0f, "half 1.0");
	CHECK(shnsw_half_to_float(0xC000) == -2.0f, "half -2.0");
	CHECK(shnsw_half_to_float(0x0001) == 5.960464477539063e-08f, "half subnormal");
	CHECK(shnsw_half_to_float(0x7BFF) == 65504.0f, "half max");
	CHECK(isinf(shnsw_half_to_float(0x7C00)), "half inf");

	{
		float		z[3] = {0, 0, 0},
					u[2] = {3, 4};

		CHECK(!shnsw_normalize(z, 3), "zero vector does not normalize");
		CHECK(shnsw_normalize(u, 2) && fabsf(u[0] - 0.6f) < 1e-6f, "normalize");
	}
}

static void
test_heap_visited(void)
{
	ShnswHeap	h;
	ShnswVisited v;
	float		last = -1;
	bool		ok = true;
	int			added = 0;

	shnsw_heap_init(&h, 2, false);
	for (int i = 0; i < 1000; i++)
		shnsw_heap_push(&h, (float) urand(), i);
	while (h.n > 0)
	{
		ShnswPair	p = shnsw_heap_pop(&h);

		if (p.d < last)
			ok = false;
		last = p.d;
	}
	CHECK(ok, "min-heap pops in order");
	shnsw_heap_free(&h);

	shnsw_visited_init(&v, 4);
	for (uint32_t i = 0; i < 5000; i++)
		added += shnsw_visited_add(&v, i * 7919u);
	for (uint32_t i = 0; i < 5000; i++)
		added -= shnsw_visited_add(&v, i * 7919u) ? 0 : 1;
	CHECK(added == 0 && v.n == 5000, "visited set: %d %u", added, v.n);
	shnsw_visited_free(&v);
}

/* ---- a memory-backed index for the disk search ---- */

typedef struct MemIndex
{
	int			m,
				dim,
				slot_bits,
				per_page;
	size_t		node_size;
	char	   *nodes;			/* node records, laid out by position */
	uint32_t   *upper;			/* per position: pointer into build graph's upper */
	ShnswBuildGraph *g;
	uint32_t   *pos_of;			/* node number -> position */
	uint32_t   *node_at;		/* position -> node number */
	int			reads;
} MemIndex;

static ShnswRef
mem_ref(MemIndex *mi, uint32_t pos)
{
	return shnsw_make_ref(pos / mi->per_page, pos % mi->per_page, mi->slot_bits);
}

static uint32_t
mem_pos(MemIndex *mi, ShnswRef r)
{
	return shnsw_ref_block(r, mi->slot_bits) * mi->per_page + shnsw_ref_slot(r, mi->slot_bits);
}

static void
mem_read_nodes(void *ctx, const ShnswRef *refs, int n, ShnswNodeFn fn, void *arg)
{
	MemIndex   *mi = ctx;

	for (int i = 0; i < n; i++)
	{
		mi->reads++;
		fn(arg, i, (ShnswNodeHeader *) (mi->nodes + mi->node_size * mem_pos(mi, refs[i])));
	}
}

static int
mem_read_upper(void *ctx, ShnswUpperLoc loc, int layer, ShnswRef *out)
{
	MemIndex   *mi = ctx;
	uint32_t	node = mi->node_at[loc.block];	/* we store the position in block */
	int			cnt;
	ShnswRef   *nb = shnsw_build_neighbors(mi->g, node, layer, &cnt);

	for (int k = 0; k < cnt; k++)
		out[k] = mem_ref(mi, mi->pos_of[nb[k]]);
	return cnt;
}

static int	prefetch_known,
			prefetch_spec;

static void
mem_prefetch(void *ctx, const ShnswRef *refs, int n, bool speculative)
{
	(void) ctx;
	(void) refs;
	if (speculative)
		prefetch_spec += n;
	else
		prefetch_known += n;
}

static void
test_graph_search(ShnswMetric metric, int n, int dim, int m, int efc, bool use_codes)
{
	int			nq = 50,
				k = 10,
				ef = 40;
	float	   *x = make_data(n + nq, dim, 30);
	float	   *mins = malloc(sizeof(float) * dim),
			   *maxs = malloc(sizeof(float) * dim),
			   *lo = malloc(sizeof(float) * dim),
			   *scale = malloc(sizeof(float) * dim);
	uint8_t    *codes = malloc((size_t) n * dim);
	ShnswBuildGraph g;
	MemIndex	mi;
	uint32_t   *order = malloc(sizeof(uint32_t) * n);
	ShnswPageOps ops;
	double		hits = 0;
	int			connected;
	int			reachable;

	if (metric == SHNSW_METRIC_COSINE)
		for (int i = 0; i < n + nq; i++)
			shnsw_normalize(x + (size_t) i * dim, dim);
	sq8_train_init(mins, maxs, dim);
	for (int i = 0; i < n; i++)
		sq8_train_add(mins, maxs, x + (size_t) i * dim, dim);
	sq8_train_finish(mins, maxs, lo, scale, dim);
	for (int i = 0; i < n; i++)
		sq8_encode(lo, scale, x + (size_t) i * dim, codes + (size_t) i * dim, dim);

	shnsw_build_init(&g, dim, m, efc, metric, n, use_codes, lo, scale, 42, NULL);
	for (int i = 0; i < n; i++)
	{
		uint32_t	id = use_codes ? shnsw_build_add_code(&g, codes + (size_t) i * dim)
			: shnsw_build_add_vector(&g, x + (size_t) i * dim);

		shnsw_build_link(&g, id);
	}
	shnsw_build_layout_order(&g, order);
	{
		uint8_t    *seen = calloc(n, 1);

		connected = 1;
		for (int i = 0; i < n; i++)
		{
			if (seen[order[i]])
				connected = 0;
			seen[order[i]] = 1;
		}
		free(seen);
	}
	CHECK(connected, "layout order is a permutation");
	{
		/* how many nodes layer 0 reaches from the entry point */
		uint8_t    *seen = calloc(n, 1);
		uint32_t   *queue = malloc(sizeof(uint32_t) * n);
		int			head = 0,
					tail = 0;

		queue[tail++] = g.entry;
		seen[g.entry] = 1;
		while (head < tail)
		{
			int			cnt;
			ShnswRef   *nb = shnsw_build_neighbors(&g, queue[head++], 0, &cnt);

			for (int j = 0; j < cnt; j++)
				if (!seen[nb[j]])
				{
					seen[nb[j]] = 1;
					queue[tail++] = nb[j];
				}
		}
		reachable = tail;
		free(seen);
		free(queue);
	}

	/* lay the nodes out in layout order, as a build does */
	memset(&mi, 0, sizeof(mi));
	mi.m = m;
	mi.dim = dim;
	mi.node_size = shnsw_node_size(m, dim);
	mi.per_page = 8;
	mi.slot_bits = 3;
	mi.g = &g;
	mi.nodes = calloc(n, mi.node_size);
	mi.pos_of = malloc(sizeof(uint32_t) * n);
	mi.node_at = malloc(sizeof(uint32_t) * n);
	for (int p = 0; p < n; p++)
	{
		mi.pos_of[order[p]] = p;
		mi.node_at[p] = order[p];
	}
	for (int p = 0; p < n; p++)
	{
		uint32_t	node = order[p];
		ShnswNodeHeader *h = (ShnswNodeHeader *) (mi.nodes + mi.node_size * p);
		int			cnt;
		ShnswRef   *nb = shnsw_build_neighbors(&g, node, 0, &cnt);

		h->tid_blk_hi = (uint16_t) (node >> 16);
		h->tid_blk_lo = (uint16_t) node;
		h->level = g.levels[node];
		h->upper_blk_hi = (uint16_t) (p >> 16);
		h->upper_blk_lo = (uint16_t) p;
		h->nneighbors = (uint16_t) cnt;
		for (int j = 0; j < cnt; j++)
			shnsw_node_neighbors(h)[j] = mem_ref(&mi, mi.pos_of[nb[j]]);
		memcpy(shnsw_node_code(h, m), codes + (size_t) node * dim, dim);
	}
	ops.ctx = &mi;
	ops.read_nodes = mem_read_nodes;
	ops.read_upper = mem_read_upper;
	ops.prefetch = NULL;

	for (int qi = 0; qi < nq; qi++)
	{
		const float *q = x + (size_t) (n + qi) * dim;
		float		qsb[2048],
					wb[2048];
		Sq8Query	sq = {.dim = dim,.qs = qsb,.w = wb};
		ShnswSearch s;
		ShnswRef	start;
		uint32_t	out[64];
		int			nout;
		float		best[10];
		int			bestid[10];
		float		got[64];
		int			gotid[64];

		/* exact top k */
		for (int j = 0; j < k; j++)
			best[j] = INFINITY, bestid[j] = -1;
		for (int i = 0; i < n; i++)
		{
			float		d = shnsw_float_distance(metric, q, x + (size_t) i * dim, dim);

			if (d < best[k - 1])
			{
				int			j = k - 1;

				while (j > 0 && best[j - 1] > d)
				{
					best[j] = best[j - 1];
					bestid[j] = bestid[j - 1];
					j--;
				}
				best[j] = d;
				bestid[j] = i;
			}
		}
		sq8_prepare_query(&sq, metric, q, lo, scale);
		shnsw_search_init(&s, &sq, &ops, m, 0);
		start = shnsw_search_descend(&s, mem_ref(&mi, mi.pos_of[g.entry]), g.max_level, 0);
		nout = shnsw_search_next(&s, start, ef, out);
		/* re-rank exactly, as the scan does */
		for (int j = 0; j < nout; j++)
		{
			int			node = (int) s.cands[out[j]].tid_blk;

			gotid[j] = node;
			got[j] = shnsw_float_distance(metric, q, x + (size_t) node * dim, dim);
		}
		for (int j = 0; j < k && j < nout; j++)
			for (int t = j + 1; t < nout; t++)
				if (got[t] < got[j])
				{
					float		td = got[t];
					int			ti = gotid[t];

					got[t] = got[j];
					gotid[t] = gotid[j];
					got[j] = td;
					gotid[j] = ti;
				}
		for (int j = 0; j < k && j < nout; j++)
			for (int t = 0; t < k; t++)
				if (gotid[j] == bestid[t])
					hits++;

		/* read-ahead hints never change what a search returns */
		if (qi == 1)
		{
			ShnswPageOps ops2 = ops;
			ShnswSearch s2;
			uint32_t	out2[64];
			int			n2;
			bool		same;

			ops2.prefetch = mem_prefetch;
			prefetch_known = prefetch_spec = 0;
			shnsw_search_init(&s2, &sq, &ops2, m, 0);
			n2 = shnsw_search_next(&s2, shnsw_search_descend(&s2, mem_ref(&mi, mi.pos_of[g.entry]),
															 g.max_level, 0), ef, out2);
			same = n2 == nout;
			for (int j = 0; same && j < n2; j++)
				same = s2.cands[out2[j]].ref == s.cands[out[j]].ref;
			CHECK(same, "prefetch changed the results");
			CHECK(prefetch_known > 0 && prefetch_spec > 0, "prefetch hints: %d known, %d speculative",
				  prefetch_known, prefetch_spec);
			shnsw_search_free(&s2);
		}

		/* the iterative continuation returns new nodes only */
		if (qi == 0)
		{
			uint32_t	out2[64];
			int			n2 = shnsw_search_next(&s, start, ef, out2);
			int			dup = 0;

			for (int a = 0; a < n2; a++)
				for (int b = 0; b < nout; b++)
					if (s.cands[out2[a]].ref == s.cands[out[b]].ref)
						dup++;
			CHECK(n2 > 0 && dup == 0, "second round: %d new, %d repeated", n2, dup);
		}
		shnsw_search_free(&s);
	}
	{
		double		rec = hits / (nq * k);

		printf("  recall@10 metric=%d n=%d dim=%d m=%d codes=%d: %.3f (reachable %d)\n",
			   metric, n, dim, m, use_codes, rec, reachable);
		CHECK(rec >= 0.95, "recall %.3f below 0.95", rec);
	}

	/* a search whose budget runs out stops */
	{
		float		qsb[2048],
					wb[2048];
		Sq8Query	sq = {.dim = dim,.qs = qsb,.w = wb};
		ShnswSearch s;
		uint32_t   *out = malloc(sizeof(uint32_t) * 100);
		int			total = 0,
					got;
		ShnswRef	start;

		sq8_prepare_query(&sq, metric, x + (size_t) n * dim, lo, scale);
		shnsw_search_init(&s, &sq, &ops, m, 300);
		start = shnsw_search_descend(&s, mem_ref(&mi, mi.pos_of[g.entry]), g.max_level, 0);
		while ((got = shnsw_search_next(&s, start, 100, out)) > 0)
			total += got;
		CHECK(total > 0 && s.ncands <= (uint32_t) (300 + 2 * m + 1), "budget: %d results, %u seen",
			  total, s.ncands);
		shnsw_search_free(&s);
		free(out);
	}

	/* without a budget, continuation eventually emits every node once */
	if (n <= 3000)
	{
		float		qsb[2048],
					wb[2048];
		Sq8Query	sq = {.dim = dim,.qs = qsb,.w = wb};
		ShnswSearch s;
		uint32_t   *out = malloc(sizeof(uint32_t) * 100);
		int			total = 0,
					got;
		ShnswRef	start;

		sq8_prepare_query(&sq, metric, x + (size_t) n * dim, lo, scale);
		shnsw_search_init(&s, &sq, &ops, m, 0);
		start = shnsw_search_descend(&s, mem_ref(&mi, mi.pos_of[g.entry]), g.max_level, 0);
		while ((got = shnsw_search_next(&s, start, 100, out)) > 0)
			total += got;
		CHECK(total == reachable, "iterative scan reached %d of %d reachable nodes (%d in all)",
			  total, reachable, n);
		shnsw_search_free(&s);
		free(out);
	}

	shnsw_build_free(&g);
	free(mi.nodes);
	free(mi.pos_of);
	free(mi.node_at);
	free(order);
	free(x);
	free(mins);
	free(maxs);
	free(lo);
	free(scale);
	free(codes);
}

/* Run a hit/miss pattern (string of 'h'/'m', repeated) through a controller. */
static int
la_run(int target, int max, int window, const char *pattern, int reps)
{
	ShnswLookahead la;
	size_t		len = strlen(pattern);

	shnsw_la_init(&la, target, max, window);
	for (int r = 0; r < reps; r++)
		for (size_t i = 0; i < len; i++)
			shnsw_la_record(&la, pattern[i] == 'm');
	return shnsw_la_distance(&la);
}

/* The classic rule: double on a miss, decrement on a hit. */
static int
classic_run(int max, const char *pattern, int reps)
{
	int			d = 1;
	size_t		len = strlen(pattern);

	for (int r = 0; r < reps; r++)
		for (size_t i = 0; i < len; i++)
		{
			if (pattern[i] == 'm')
				d = d * 2 > max ? max : d * 2;
			else if (d > 1)
				d--;
		}
	return d;
}

static void
test_lookahead(void)
{
	int			d;

	d = la_run(16, 64, 32, "h", 1000);
	CHECK(d == 1, "all hits: distance %d, want 1", d);
	{
		ShnswLookahead la;

		shnsw_la_init(&la, 16, 64, 32);
		CHECK(shnsw_la_all_hits(&la), "a new scan starts on the fast path");
		shnsw_la_record(&la, true);
		CHECK(!shnsw_la_all_hits(&la), "one miss leaves the fast path");
		for (int i = 0; i < 200; i++)
			shnsw_la_record(&la, false);
		CHECK(shnsw_la_all_hits(&la), "a window of hits returns to it");
	}
	d = la_run(16, 64, 32, "m", 1000);
	CHECK(d == 16, "all misses: distance %d, want target 16", d);
	d = la_run(16, 64, 32, "hm", 500);
	CHECK(d >= 28 && d <= 36, "50/50: distance %d, want about 2 * target", d);
	CHECK(classic_run(64, "hm", 500) <= 2, "the classic rule collapses on 50/50: %d",
		  classic_run(64, "hm", 500));
	d = la_run(16, 128, 32, "hhhhm", 200);
	CHECK(d >= 64 && d <= 100, "80/20: distance %d, want about target / 0.2", d);
	d = la_run(16, 64, 32, "hhhhm", 200);
	CHECK(d == 64, "80/20 capped: distance %d, want the cap 64", d);
	d = la_run(0, 64, 32, "hm", 100);
	CHECK(d == 0, "effective_io_concurrency 0: distance %d", d);
	d = la_run(16, 0, 32, "m", 100);
	CHECK(d == 0, "no pins to spare: distance %d", d);
	{
		/* a burst of misses, then hits: read-ahead stays deep for a while */
		ShnswLookahead la;

		shnsw_la_init(&la, 16, 64, 32);
		for (int i = 0; i < 100; i++)
			shnsw_la_record(&la, true);
		for (int i = 0; i < 50; i++)
			shnsw_la_record(&la, false);
		CHECK(shnsw_la_distance(&la) >= 16, "after a burst: distance %d", shnsw_la_distance(&la));
		for (int i = 0; i < 5000; i++)
			shnsw_la_record(&la, false);
		CHECK(shnsw_la_distance(&la) == 1, "long after a burst: distance %d", shnsw_la_distance(&la));
		shnsw_la_sample(&la);
		CHECK(la.samples == 1 && la.hist[shnsw_la_bucket(1)] == 1, "histogram");
	}
	CHECK(shnsw_la_bucket(0) == 0 && shnsw_la_bucket(1) == 1 && shnsw_la_bucket(3) == 2 &&
		  shnsw_la_bucket(4) == 3 && shnsw_la_bucket(1000) == SHNSW_LA_HIST_BUCKETS - 1,
		  "bucket boundaries");
}

int
main(void)
{
	printf("SIMD level: %d\n", shnsw_kernels_init(SHNSW_SIMD_AVX512));
	test_kernels();
	test_sq8_clamp_and_half();
	test_heap_visited();
	test_lookahead();
	test_graph_search(SHNSW_METRIC_L2, 3000, 32, 16, 64, false);
	test_graph_search(SHNSW_METRIC_L2, 3000, 32, 8, 64, true);
	test_graph_search(SHNSW_METRIC_COSINE, 2000, 64, 16, 64, false);
	test_graph_search(SHNSW_METRIC_IP, 2000, 16, 16, 64, false);
	test_graph_search(SHNSW_METRIC_L2, 20000, 24, 16, 64, false);
	printf("%d passed, %d failed\n", npassed, nfailed);
	return nfailed == 0 ? 0 : 1;
}
