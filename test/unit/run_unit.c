/*
 * run_unit.c
 *	  Unit tests of streamhnsw's pure code (kernels, SQ8, heaps, visited set,
 *	  graph construction and the disk search), without a server.
 *
 * The disk search runs over "pages" held in plain memory through the same
 * ShnswNodeSource interface the server implements over shared buffers.
 * Prints "N passed, N failed" and exits non-zero on any failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buildgraph.h"
#include "codebound.h"
#include "kernels.h"
#include "kernels_sparse.h"
#include "layout.h"
#include "lookahead.h"
#include "neighbors_select.h"
#include "pqueue.h"
#include "reachability.h"
#include "search.h"
#include "visited.h"

/* host.h: the server checks for a cancel here; the tests count the calls. */
static long ninterrupt_checks;

void
shnsw_check_interrupts(void)
{
	ninterrupt_checks++;
}

static int	npassed,
			nfailed;

/* nodecheck_test.c */
extern int	test_nodecheck(int *passed);

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
						dot = 0,
						l1 = 0;
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
				l1 += fabs((double) a[i] - b[i]);
			}
			CHECK(fabs(shnsw_l2sq_f32(a, b, dim) - l2) <= 1e-4 * (1 + l2),
				  "l2 level %d dim %d", got, dim);
			CHECK(fabs(shnsw_l1_f32(a, b, dim) - l1) <= 1e-5 * (1 + l1) &&
				  shnsw_float_distance(SHNSW_METRIC_L1, a, b, dim) == shnsw_l1_f32(a, b, dim),
				  "l1 level %d dim %d: %g vs %g", got, dim, shnsw_l1_f32(a, b, dim), l1);
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
				sq8_prepare_query(&sq, SHNSW_METRIC_L1, a, lo, scale);
				ref = 0;
				for (int i = 0; i < dim; i++)
					ref += fabs((double) a[i] - dec[i]);
				CHECK(fabs(sq8_distance(&sq, code) - ref) <= 1e-4 * (1 + ref),
					  "sq8 l1 level %d dim %d: %f vs %f", got, dim, sq8_distance(&sq, code), ref);
				/* a code as the query: the L1 distance between the decoded vectors */
				{
					uint8_t		acode[1024];
					float		adec[1024];

					sq8_encode(lo, scale, a, acode, dim);
					sq8_decode(lo, scale, acode, adec, dim);
					sq8_prepare_code(&sq, SHNSW_METRIC_L1, acode, lo, scale);
					ref = 0;
					for (int i = 0; i < dim; i++)
						ref += fabs((double) adec[i] - dec[i]);
					CHECK(fabs(sq8_distance(&sq, code) - ref) <= 1e-4 * (1 + ref),
						  "sq8 l1 code query level %d dim %d: %f vs %f", got, dim,
						  sq8_distance(&sq, code), ref);
				}
			}
			free(a);
			free(b);
		}
	}
	shnsw_kernels_init(SHNSW_SIMD_AVX512);
}

/*
 * The batch kernels give, at every level, bit-for-bit the one-code kernel's
 * distance for every code of the batch, whatever the batch size (the
 * four-at-a-time body and the remainder), the dimension (16- and 8-wide
 * chunks and the scalar tail) and the stride between codes.
 */
/* bit vectors: the popcount kernels, sq8_distance on identity codes, bounds */
static double
bit_reference(ShnswMetric metric, const uint8_t *a, const uint8_t *b, int nbytes)
{
	int			both = 0,
				either = 0,
				differ = 0;

	for (int i = 0; i < nbytes * 8; i++)
	{
		int			x = (a[i / 8] >> (7 - i % 8)) & 1,
					y = (b[i / 8] >> (7 - i % 8)) & 1;

		both += x & y;
		either += x | y;
		differ += x ^ y;
	}
	if (metric == SHNSW_METRIC_HAMMING)
		return differ;
	return both == 0 ? 1.0 : 1.0 - (double) both / either;
}

static void
test_bit_kernels(void)
{
	int			sizes[] = {1, 3, 8, 15, 16, 17, 100, 1000, SHNSW_BIT_MAX_BYTES};
	uint64_t	saved_rng = rng_state;	/* the later tests' data stay theirs */

	for (int level = SHNSW_SIMD_PORTABLE; level <= SHNSW_SIMD_AVX512; level++)
	{
		ShnswSimdLevel got = shnsw_kernels_init((ShnswSimdLevel) level);

		for (size_t t = 0; t < sizeof(sizes) / sizeof(sizes[0]); t++)
		{
			int			n = sizes[t];
			uint8_t    *a = malloc(n),
					   *b = malloc(n),
					   *zero = calloc(n, 1);
			float	   *nav = malloc(sizeof(float) * n),
					   *lo = malloc(sizeof(float) * n),
					   *scale = malloc(sizeof(float) * n),
					   *qs = malloc(sizeof(float) * n),
					   *w = malloc(sizeof(float) * n);
			const uint8_t *codes[2];
			float		batch[2];

			for (int i = 0; i < n; i++)
			{
				a[i] = (uint8_t) (urand() * 256);
				/* sparse b: Jaccard far from 0 and 1 */
				b[i] = (uint8_t) (urand() * 256) & (uint8_t) (urand() * 256);
				nav[i] = (float) a[i];
			}
			sq8_train_identity(lo, scale, n);
			for (int m = SHNSW_METRIC_HAMMING; m <= SHNSW_METRIC_JACCARD; m++)
			{
				ShnswMetric metric = (ShnswMetric) m;
				Sq8Query	sq = {n, metric, 0.0f, qs, w, NULL};
				ShnswCodeBound cb;
				double		ref = bit_reference(metric, a, b, n);
				float		d;
				uint8_t		code[SHNSW_BIT_MAX_BYTES];

				sq8_encode(lo, scale, nav, code, n);
				CHECK(memcmp(code, a, n) == 0, "bit identity code level %d size %d", got, n);
				sq8_prepare_query(&sq, metric, nav, lo, scale);
				d = sq8_distance(&sq, b);
				CHECK(fabs(d - ref) <= 1e-7 * (1 + ref),
					  "bit metric %d level %d size %d: %f vs %f", m, got, n, d, ref);
				codes[0] = b;
				codes[1] = zero;
				sq8_distances_at(&sq, codes, 2, batch);
				CHECK(batch[0] == d && batch[1] == sq8_distance(&sq, zero),
					  "bit batch metric %d level %d size %d", m, got, n);
				CHECK(metric == SHNSW_METRIC_HAMMING ||
					  (sq8_distance(&sq, zero) == 1.0f &&
					   shnsw_bit_jaccard(zero, 0, zero, n) == 1.0f),
					  "jaccard of a zero vector level %d size %d", got, n);
				shnsw_codebound_prepare(&cb, metric, false, nav, lo, scale, n, -1.0);
				shnsw_codebound_set_residual(&cb, 0.0);
				CHECK(shnsw_codebound_lower(&cb, d) <= ref && shnsw_codebound_upper(&cb, d) >= ref &&
					  shnsw_codebound_code(&cb, b) <= ref &&
					  !shnsw_code_at_edge(metric, b, n) &&
					  shnsw_code_residual(metric, lo, scale, nav, a, n) == 0.0 &&
					  (metric == SHNSW_METRIC_JACCARD || shnsw_codebound_lower(&cb, d) == ref),
					  "bit bounds metric %d level %d size %d", m, got, n);
				sq8_prepare_code(&sq, metric, a, lo, scale);
				CHECK(sq8_distance(&sq, b) == d, "bit code query metric %d size %d", m, n);
			}
			free(a), free(b), free(zero), free(nav), free(lo), free(scale), free(qs), free(w);
		}
	}
	shnsw_kernels_init(SHNSW_SIMD_AVX512);
	rng_state = saved_rng;
}

/*
 * The sparse sketch (kernels_sparse.h): the value itself up to its
 * navigation dimensions; beyond, each element in one bucket with a sign,
 * so that sketches add as the values do, hashing spreads indices evenly,
 * and inner products are kept on average (E[s(x).s(y)] = x.y). A sketched
 * bound bounds nothing.
 */
static void
test_sparse_sketch(void)
{
	enum {D = SHNSW_SPARSE_SKETCH_DIMS, NNZ = 100};
	static float out[D], out2[D], sum[D];
	int32_t		idx[NNZ],
				idx2[NNZ];
	float		val[NNZ],
				val2[NNZ];
	int			load[D] = {0};
	int			maxload = 0,
				negative = 0,
				ntrial = 400;
	double		bias = 0.0,
				spread = 0.0;
	ShnswCodeBound cb;
	float		lo[4] = {0},
				scale[4] = {1, 1, 1, 1};

	/* few dimensions: the dense value */
	idx[0] = 1, idx[1] = 5, val[0] = 2.5f, val[1] = -1.0f;
	shnsw_sparse_sketch(idx, val, 2, 6, out, 6);
	CHECK(out[0] == 0 && out[1] == 2.5f && out[5] == -1.0f && out[2] == 0 && out[3] == 0 &&
		  out[4] == 0, "sparse sketch of few dimensions is the value");

	/* one element: one bucket, its value with a sign */
	for (uint32_t at = 0; at < 16 * D; at++)
	{
		uint64_t	h = shnsw_sparse_hash(at);

		load[(uint32_t) h % D]++;
		negative += (int) (h >> 63);
	}
	for (int b = 0; b < D; b++)
		maxload = load[b] > maxload ? load[b] : maxload;
	CHECK(maxload <= 48 && abs(negative - 8 * D) < 4 * (int) sqrt(16.0 * D),
		  "sparse hash spreads: max load %d of 16 a bucket, %d of %d negative",
		  maxload, negative, 16 * D);
	idx[0] = 123456, val[0] = 3.0f;
	shnsw_sparse_sketch(idx, val, 1, 1000000, out, D);
	{
		int			nz = 0;

		for (int b = 0; b < D; b++)
			nz += out[b] != 0.0f && fabsf(out[b]) == 3.0f;
		CHECK(nz == 1, "sparse sketch of one element: one bucket of its magnitude");
	}

	/* additive, deterministic, and inner products kept on average */
	for (int t = 0; t < ntrial; t++)
	{
		double		exact = 0.0,
					est = 0.0;

		for (int i = 0; i < NNZ; i++)
		{
			idx[i] = t * 2 * 10007 * NNZ + i * 10007;
			val[i] = (float) (urand() + 0.1);
			/* half the indices shared, in the same order */
			idx2[i] = i % 2 == 0 ? idx[i] : idx[i] + 5003;
			val2[i] = (float) (urand() + 0.1);
			if (i % 2 == 0)
				exact += (double) val[i] * val2[i];
		}
		shnsw_sparse_sketch(idx, val, NNZ, 2000000000, out, D);
		shnsw_sparse_sketch(idx2, val2, NNZ, 2000000000, out2, D);
		for (int b = 0; b < D; b++)
			est += (double) out[b] * out2[b];
		bias += (est - exact) / ntrial;
		spread += (est - exact) * (est - exact) / ntrial;
		if (t == 0)
		{
			shnsw_sparse_sketch(idx, val, NNZ / 2, 2000000000, sum, D);
			shnsw_sparse_sketch(idx + NNZ / 2, val + NNZ / 2, NNZ - NNZ / 2, 2000000000, out2, D);
			for (int b = 0; b < D; b++)
				sum[b] += out2[b];
			shnsw_sparse_sketch(idx, val, NNZ, 2000000000, out2, D);
			CHECK(memcmp(out, out2, sizeof(out)) == 0, "sparse sketch is deterministic");
			for (int b = 0; b < D; b++)
				CHECK(fabsf(sum[b] - out[b]) <= 1e-6f, "sparse sketch adds up, bucket %d", b);
		}
	}
	/* the estimate's spread is about |x||y| / sqrt(D): about 0.7 here */
	CHECK(fabs(bias) < 4 * sqrt(spread / ntrial) && sqrt(spread) < 2.0,
		  "sparse sketch keeps inner products: bias %.4f, spread %.4f", bias, sqrt(spread));

	/* a sketch's code distances bound nothing */
	shnsw_codebound_prepare(&cb, SHNSW_METRIC_L2, false, scale, lo, scale, 4, 0.0);
	cb.sketched = true;
	CHECK(isinf(shnsw_codebound_lower(&cb, 1.0)) && shnsw_codebound_lower(&cb, 1.0) < 0 &&
		  isinf(shnsw_codebound_upper(&cb, 1.0)) && shnsw_codebound_upper(&cb, 1.0) > 0 &&
		  isinf(shnsw_codebound_code(&cb, (const uint8_t *) "\1\2\3\4")),
		  "a sketched bound bounds nothing");
}

static void
test_batch_kernels(void)
{
	int			dims[] = {1, 7, 8, 15, 16, 17, 24, 50, 384, 769};

	for (int level = SHNSW_SIMD_PORTABLE; level <= SHNSW_SIMD_AVX512; level++)
	{
		ShnswSimdLevel got = shnsw_kernels_init((ShnswSimdLevel) level);

		for (size_t t = 0; t < sizeof(dims) / sizeof(dims[0]); t++)
		{
			int			dim = dims[t];
			int			stride = dim + (int) (t % 3) * 5;
			float		qv[1024],
						lo[1024],
						scale[1024];
			float		qs[1024],
						w[1024],
						out[12];
			uint8_t    *codes = malloc((size_t) 12 * stride + 16);
			Sq8Query	sq = {.dim = dim,.qs = qs,.w = w};

			for (int i = 0; i < dim; i++)
			{
				qv[i] = (float) nrand();
				lo[i] = -2.0f + 0.1f * (float) urand();
				scale[i] = (4.0f + (float) urand()) / 255.0f;
			}
			for (int i = 0; i < 12 * stride; i++)
				codes[i] = (uint8_t) (urand() * 256);
			for (int metric = 0; metric < 3; metric++)
			{
				sq8_prepare_query(&sq, metric == 0 ? SHNSW_METRIC_L2 :
								  metric == 1 ? SHNSW_METRIC_IP : SHNSW_METRIC_L1,
								  qv, lo, scale);
				for (int n = 0; n <= 12; n++)
				{
					int			bad = -1;

					for (int j = 0; j < 12; j++)
						out[j] = -12345.0f;
					sq8_distances(&sq, codes, stride, n, out);
					for (int j = 0; j < n && bad < 0; j++)
						if (memcmp(&out[j], &(float) {sq8_distance(&sq, codes + (size_t) j * stride)},
								   sizeof(float)) != 0)
							bad = j;
					CHECK(bad < 0, "batch level %d metric %d dim %d n %d: code %d differs",
						  got, metric, dim, n, bad);
					CHECK(n == 12 || out[n] == -12345.0f,
						  "batch level %d dim %d n %d wrote past n", got, dim, n);
				}
			}
			free(codes);
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

/* shnsw_half_scale for the rows of x (n x dim). */
static float
half_scale_of(const float *x, int n, int dim)
{
	float		top = 0.0f;

	for (size_t i = 0; i < (size_t) n * dim; i++)
		if (fabsf(x[i]) > top)
			top = fabsf(x[i]);
	return shnsw_half_scale(&top, &top, 1);
}

/*
 * Floats to IEEE halves: round to nearest, ties to even, subnormals,
 * overflow to infinity, NaN, as F16C converts; every finite half goes
 * back to itself through a float; the SIMD conversions give the portable
 * one's bits at every level, whatever the dimension (SIMD body and tail).
 */
static void
test_half_conversion(void)
{
	struct
	{
		float		f;
		uint16_t	h;
	}			cases[] = {
		{0.0f, 0x0000}, {-0.0f, 0x8000}, {1.0f, 0x3C00}, {-2.0f, 0xC000},
		{65504.0f, 0x7BFF}, {65519.99f, 0x7BFF}, {65520.0f, 0x7C00}, {1e10f, 0x7C00},
		{-1e10f, 0xFC00}, {INFINITY, 0x7C00}, {-INFINITY, 0xFC00},
		{0x1p-14f, 0x0400}, {0x1p-24f, 0x0001}, {0x1p-25f, 0x0000},
		{0x1.8p-25f, 0x0001}, {0x1.8p-24f, 0x0002}, {0x1.4p-24f, 0x0001},
		{0x1.ff8p-15f, 0x03FF}, {0x1.ffcp-15f, 0x0400}, {0x1.ffap-15f, 0x03FF},
		{0x1.ffep-15f, 0x0400}, {1e-30f, 0x0000},
		{1.0f + 0x1p-11f, 0x3C00}, {1.0f + 0x3p-11f, 0x3C02}, {1.0f + 0x1.8p-11f, 0x3C01},
		{0.1f, 0x2E66}, {3.14159265f, 0x4248},
	};
	int			bad = 0,
				roundtrip = 0;

	for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++)
		CHECK(shnsw_float_to_half(cases[t].f) == cases[t].h, "half of %a: %04x, want %04x",
			  cases[t].f, shnsw_float_to_half(cases[t].f), cases[t].h);
	CHECK((shnsw_float_to_half(NAN) & 0x7E00) == 0x7E00, "half of NaN is a quiet NaN");
	for (uint32_t h = 0; h < 0x10000; h++)
	{
		if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0)
			continue;			/* NaN */
		roundtrip += shnsw_float_to_half(shnsw_half_to_float((uint16_t) h)) != h;
	}
	CHECK(roundtrip == 0, "%d halves do not go back to themselves through a float", roundtrip);

	/* the power-of-two scale brings the largest magnitude into [2^13, 2^14) */
	{
		float		mins[3] = {-3.0f, 0.5f, -1e-3f},
					maxs[3] = {2.0f, 70000.0f, 1e-3f},
					z[1] = {0.0f};
		float		sc = shnsw_half_scale(mins, maxs, 3);
		float		tiny = 1e-9f,
					big = 1e30f;

		CHECK(70000.0f * sc >= 8192.0f && 70000.0f * sc < 16384.0f, "scale %a", sc);
		CHECK(shnsw_half_scale(mins, maxs, 1) * 3.0f >= 8192.0f, "scale of 3");
		CHECK(shnsw_half_scale(z, z, 1) == 1.0f, "scale of zeros");
		CHECK(tiny * shnsw_half_scale(&tiny, &tiny, 1) >= 8192.0f, "scale of tiny values");
		CHECK(big * shnsw_half_scale(&big, &big, 1) < 16384.0f, "scale of huge values");
		sc = shnsw_half_scale(mins, maxs, 3);
		CHECK(frexpf(sc, &(int) {0}) == 0.5f, "scale %a is a power of two", sc);
	}

	for (int level = SHNSW_SIMD_PORTABLE; level <= SHNSW_SIMD_AVX512; level++)
	{
		ShnswSimdLevel got = shnsw_kernels_init((ShnswSimdLevel) level);
		int			dims[] = {1, 7, 8, 15, 16, 17, 31, 33, 50, 384, 769};

		for (size_t t = 0; t < sizeof(dims) / sizeof(dims[0]); t++)
		{
			int			dim = dims[t];
			float		v[1024],
						back[1024];
			uint16_t	h[1024 + 8],
						want[1024];
			float		sc = (t % 2) ? 1.0f : 0x1p10f;

			/* normal, subnormal, overflowing and tied values */
			for (int i = 0; i < dim; i++)
			{
				switch (i % 5)
				{
					case 0:
						v[i] = (float) nrand();
						break;
					case 1:
						v[i] = (float) nrand() * 1e-6f;
						break;
					case 2:
						v[i] = (float) nrand() * 1e5f;
						break;
					case 3:
						v[i] = 1.0f + 0x1p-11f * (float) (i % 4);
						break;
					default:
						v[i] = (float) nrand() * 1e-9f;
						break;
				}
				want[i] = shnsw_float_to_half(v[i] * sc);
			}
			h[dim] = 0xABCD;
			shnsw_floats_to_halves(v, sc, h, dim);
			bad = 0;
			for (int i = 0; i < dim; i++)
				bad += h[i] != want[i];
			CHECK(bad == 0 && h[dim] == 0xABCD, "floats to halves level %d dim %d: %d differ",
				  got, dim, bad);
			back[dim] = -1.0f;
			shnsw_halves_to_floats_nav(h, back, dim);
			bad = 0;
			for (int i = 0; i < dim; i++)
				bad += memcmp(&back[i], &(float) {shnsw_half_to_float(h[i])}, sizeof(float)) != 0;
			CHECK(bad == 0 && back[dim] == -1.0f, "halves to floats level %d dim %d: %d differ",
				  got, dim, bad);
		}
	}
	shnsw_kernels_init(SHNSW_SIMD_AVX512);
}

/*
 * Float-to-half distances at every level: the distance between the float
 * vector and the half vector's value, within float rounding, for every
 * dimension (SIMD bodies and tails); and the same at every level within
 * that rounding.
 */
static void
test_half_kernels(void)
{
	int			dims[] = {1, 3, 7, 8, 15, 16, 17, 31, 32, 33, 50, 100, 384, 769};

	for (int level = SHNSW_SIMD_PORTABLE; level <= SHNSW_SIMD_AVX512; level++)
	{
		ShnswSimdLevel got = shnsw_kernels_init((ShnswSimdLevel) level);

		for (size_t t = 0; t < sizeof(dims) / sizeof(dims[0]); t++)
		{
			int			dim = dims[t];
			float	   *a = make_data(1, dim, 1),
					   *b = make_data(1, dim, 1);
			uint16_t	hb[1024];
			double		l2 = 0,
						dot = 0,
						norm = 0,
						l1 = 0;

			for (int i = 0; i < dim; i++)
				hb[i] = shnsw_float_to_half(b[i]);
			for (int i = 0; i < dim; i++)
			{
				double		bi = shnsw_half_to_float(hb[i]);

				l2 += ((double) a[i] - bi) * ((double) a[i] - bi);
				dot += (double) a[i] * bi;
				norm += fabs((double) a[i] * bi);
				l1 += fabs((double) a[i] - bi);
			}
			CHECK(fabs(shnsw_l1_f32_f16(a, hb, dim) - l1) <= 1e-5 * (1 + l1) &&
				  shnsw_half_distance(SHNSW_METRIC_L1, a, hb, dim) == shnsw_l1_f32_f16(a, hb, dim),
				  "half l1 level %d dim %d: %g vs %g", got, dim, shnsw_l1_f32_f16(a, hb, dim), l1);
			CHECK(fabs(shnsw_l2sq_f32_f16(a, hb, dim) - l2) <= 1e-5 * (1 + l2),
				  "half l2 level %d dim %d: %g vs %g", got, dim, shnsw_l2sq_f32_f16(a, hb, dim), l2);
			CHECK(fabs(shnsw_dot_f32_f16(a, hb, dim) - dot) <= 1e-5 * (1 + norm),
				  "half dot level %d dim %d: %g vs %g", got, dim, shnsw_dot_f32_f16(a, hb, dim), dot);
			CHECK(shnsw_half_distance(SHNSW_METRIC_IP, a, hb, dim) == -shnsw_dot_f32_f16(a, hb, dim) &&
				  shnsw_half_distance(SHNSW_METRIC_L2, a, hb, dim) == shnsw_l2sq_f32_f16(a, hb, dim),
				  "half distance level %d dim %d", got, dim);
			/* and the halves are the floats to within their rounding */
			{
				double		fl2 = shnsw_l2sq_f32(a, b, dim);

				CHECK(fabs(fl2 - l2) <= 1e-3 * (1 + fl2), "half l2 %g far from float l2 %g (dim %d)",
					  l2, fl2, dim);
			}
			free(a);
			free(b);
		}
	}
	shnsw_kernels_init(SHNSW_SIMD_AVX512);
}

/*
 * Recall@10 of a greedy layer-0 search of width ef over g, on exact float
 * distances to x (n rows), for nq queries q (the graph's quality, whatever
 * it linked on).
 */
static double
graph_recall(ShnswBuildGraph *g, ShnswMetric metric, const float *x, int n, const float *q,
			 int nq, int dim, int ef)
{
	int			k = 10;
	double		hits = 0;
	uint8_t    *seen = malloc(n);
	uint32_t   *res = malloc(sizeof(uint32_t) * ef);

	for (int qi = 0; qi < nq; qi++)
	{
		const float *qv = q + (size_t) qi * dim;
		ShnswHeap	C,
					W;
		uint32_t	ep = g->entry;
		float		epd = shnsw_float_distance(metric, qv, x + (size_t) ep * dim, dim);
		int			best[10];
		float		bestd[10];
		int			nres;

		memset(seen, 0, n);
		for (int l = g->max_level; l > 0; l--)
		{
			bool		changed = true;

			while (changed)
			{
				int			cnt;
				ShnswRef   *nb = shnsw_build_neighbors(g, ep, l, &cnt);

				changed = false;
				for (int j = 0; j < cnt; j++)
				{
					float		d = shnsw_float_distance(metric, qv, x + (size_t) nb[j] * dim, dim);

					if (d < epd)
						epd = d, ep = nb[j], changed = true;
				}
			}
		}
		shnsw_heap_init(&C, 64, false);
		shnsw_heap_init(&W, 64, true);
		shnsw_heap_push(&C, epd, ep);
		shnsw_heap_push(&W, epd, ep);
		seen[ep] = 1;
		while (C.n > 0)
		{
			ShnswPair	c = shnsw_heap_pop(&C);
			int			cnt;
			ShnswRef   *nb;

			if (W.n >= ef && c.d > shnsw_heap_top(&W).d)
				break;
			nb = shnsw_build_neighbors(g, c.id, 0, &cnt);
			for (int j = 0; j < cnt; j++)
			{
				float		d;

				if (seen[nb[j]])
					continue;
				seen[nb[j]] = 1;
				d = shnsw_float_distance(metric, qv, x + (size_t) nb[j] * dim, dim);
				if (W.n < ef || d < shnsw_heap_top(&W).d)
				{
					shnsw_heap_push(&C, d, nb[j]);
					shnsw_heap_push(&W, d, nb[j]);
					if (W.n > ef)
						shnsw_heap_pop(&W);
				}
			}
		}
		nres = W.n;
		for (int j = nres - 1; j >= 0; j--)
			res[j] = shnsw_heap_pop(&W).id;
		shnsw_heap_free(&C);
		shnsw_heap_free(&W);

		/* the exact top k */
		for (int j = 0; j < k; j++)
			bestd[j] = INFINITY, best[j] = -1;
		for (int i = 0; i < n; i++)
		{
			float		d = shnsw_float_distance(metric, qv, x + (size_t) i * dim, dim);
			int			j = k - 1;

			if (d >= bestd[k - 1])
				continue;
			while (j > 0 && bestd[j - 1] > d)
			{
				bestd[j] = bestd[j - 1];
				best[j] = best[j - 1];
				j--;
			}
			bestd[j] = d;
			best[j] = i;
		}
		for (int j = 0; j < k && j < nres; j++)
			for (int t = 0; t < k; t++)
				hits += (int) res[j] == best[t];
	}
	free(seen);
	free(res);
	return hits / ((double) nq * k);
}

/*
 * A graph linked on halves is as good as one linked on floats (recall@10
 * of an exact search at ef 10 over each, on the same rows and levels),
 * also where the values lie far outside binary16's range (scaled by 1e6
 * under L2: the scale brings them in) or deep in its subnormals (1e-7).
 */
static void
test_halves_graph_quality(void)
{
	struct
	{
		ShnswMetric metric;
		int			dim;
		float		mult;
	}			cases[] = {
		{SHNSW_METRIC_COSINE, 96, 1.0f}, {SHNSW_METRIC_L2, 64, 1e6f},
		{SHNSW_METRIC_L2, 64, 1e-7f}, {SHNSW_METRIC_IP, 64, 1e5f},
	};
	int			n = 4000,
				nq = 100;

	for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++)
	{
		int			dim = cases[t].dim;
		ShnswMetric metric = cases[t].metric;
		float	   *x = make_data(n + nq, dim, 40);
		ShnswBuildGraph gf,
					gh;
		double		rf,
					rh;

		for (size_t i = 0; i < (size_t) (n + nq) * dim; i++)
			x[i] *= cases[t].mult;
		if (metric == SHNSW_METRIC_COSINE)
			for (int i = 0; i < n + nq; i++)
				shnsw_normalize(x + (size_t) i * dim, dim);
		shnsw_build_init(&gf, dim, 8, 40, metric, n, false, NULL, NULL, 11, NULL);
		shnsw_build_init_halves(&gh, dim, 8, 40, metric, n, 11, NULL,
								half_scale_of(x, n, dim));
		for (int i = 0; i < n; i++)
		{
			shnsw_build_link(&gf, shnsw_build_add_vector(&gf, x + (size_t) i * dim));
			shnsw_build_link(&gh, shnsw_build_add_vector(&gh, x + (size_t) i * dim));
		}
		rf = graph_recall(&gf, metric, x, n, x + (size_t) n * dim, nq, dim, 10);
		rh = graph_recall(&gh, metric, x, n, x + (size_t) n * dim, nq, dim, 10);
		printf("  graph on floats / halves, metric=%d dim=%d values x %g: recall@10 at ef 10 %.3f / %.3f\n",
			   metric, dim, cases[t].mult, rf, rh);
		CHECK(rf >= 0.8 && rh >= rf - 0.02, "halves graph recall %.3f, floats %.3f", rh, rf);
		shnsw_build_free(&gf);
		shnsw_build_free(&gh);
		free(x);
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

	/* the k nearest, in order, against a full sort; ties broken by id */
	for (int n = 0; n <= 700; n += 37)
		for (int k = 0; k <= 70; k += 7)
		{
			ShnswPair  *a = malloc(sizeof(ShnswPair) * (n + 1));
			ShnswPair  *b = malloc(sizeof(ShnswPair) * (n + 1));
			int			got;

			for (int i = 0; i < n; i++)
			{
				a[i].d = (float) (int) (urand() * (n % 2 ? 20 : 1e6));	/* ties when odd */
				a[i].id = (uint32_t) i;
			}
			memcpy(b, a, sizeof(ShnswPair) * n);
			shnsw_heap_init(&h, n, false);
			for (int i = 0; i < n; i++)
				shnsw_heap_push(&h, b[i].d, b[i].id);
			for (int i = 0; i < n; i++)
				b[i] = shnsw_heap_pop(&h);
			shnsw_heap_free(&h);
			got = shnsw_pairs_nearest(a, n, k);
			CHECK(got == (k < n ? k : n), "pairs_nearest count n %d k %d: %d", n, k, got);
			for (int i = 0; i < got; i++)
				CHECK(a[i].d == b[i].d && a[i].id == b[i].id,
					  "pairs_nearest n %d k %d at %d: %g/%u, want %g/%u",
					  n, k, i, a[i].d, a[i].id, b[i].d, b[i].id);
			free(a);
			free(b);
		}

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

/*
 * read_nodes_held over a memory index, as a source that reads racily
 * does it: every third record is first given to fn torn (a scrambled copy,
 * its code included, flushed as a batch with its neighbours) and then
 * again, on its own, as it is; the last call must win.
 */
static void
mem_read_nodes_held(void *ctx, const ShnswRef *refs, int n, ShnswNodeFn fn,
					ShnswFlushFn flush, void *arg)
{
	MemIndex   *mi = ctx;
	char		torn[SHNSW_HELD_BATCH][4096];
	int			redo[SHNSW_HELD_BATCH];
	int			nheld = 0,
				nredo = 0;

	for (int i = 0; i <= n; i++)
	{
		if (i < n)
		{
			const char *rec = mi->nodes + mi->node_size * mem_pos(mi, refs[i]);

			mi->reads++;
			if (i % 3 == 1 && mi->node_size <= sizeof(torn[0]))
			{
				for (size_t b = 0; b < mi->node_size; b++)
					torn[nheld][b] = (char) (rec[b] ^ (char) (0x5a + b));
				((ShnswNodeHeader *) torn[nheld])->nneighbors = 0;	/* a torn count */
				fn(arg, i, (const ShnswNodeHeader *) torn[nheld]);
				redo[nredo++] = i;
			}
			else
				fn(arg, i, (const ShnswNodeHeader *) rec);
			nheld++;
		}
		if (nheld == SHNSW_HELD_BATCH || (i == n && nheld > 0))
		{
			flush(arg);
			for (int r = 0; r < nredo; r++)
			{
				fn(arg, redo[r], (const ShnswNodeHeader *) (mi->nodes + mi->node_size *
															mem_pos(mi, refs[redo[r]])));
				flush(arg);
			}
			nheld = nredo = 0;
		}
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

/*
 * How many nodes a breadth-first walk of layer 0 from the entry point
 * reaches; if reached is not NULL, marks them in it (n bytes, zeroed).
 */
static int
graph_reach(const ShnswBuildGraph *g, uint8_t *reached)
{
	uint8_t    *seen = reached ? reached : calloc(g->n, 1);
	uint32_t   *queue = malloc(sizeof(uint32_t) * g->n);
	int			head = 0,
				tail = 0;

	queue[tail++] = g->entry;
	seen[g->entry] = 1;
	while (head < tail)
	{
		int			cnt;
		ShnswRef   *nb = shnsw_build_neighbors(g, queue[head++], 0, &cnt);

		for (int j = 0; j < cnt; j++)
			if (!seen[nb[j]])
			{
				seen[nb[j]] = 1;
				queue[tail++] = nb[j];
			}
	}
	if (!reached)
		free(seen);
	free(queue);
	return tail;
}

/* Nodes other than the entry point that no layer-0 list names. */
static int
graph_orphans(const ShnswBuildGraph *g)
{
	uint32_t   *indeg = calloc(g->n, sizeof(uint32_t));
	int			orphans = 0;

	for (uint32_t i = 0; i < g->n; i++)
	{
		int			cnt;
		ShnswRef   *nb = shnsw_build_neighbors(g, i, 0, &cnt);

		for (int j = 0; j < cnt; j++)
			indeg[nb[j]]++;
	}
	for (uint32_t i = 0; i < g->n; i++)
		if (indeg[i] == 0 && i != g->entry)
			orphans++;
	free(indeg);
	return orphans;
}

/* Whether every layer-0 list is within 2m and names distinct other nodes. */
static bool
graph_lists_ok(const ShnswBuildGraph *g)
{
	for (uint32_t i = 0; i < g->n; i++)
	{
		int			cnt;
		ShnswRef   *nb = shnsw_build_neighbors(g, i, 0, &cnt);

		if (cnt > 2 * g->m)
			return false;
		for (int j = 0; j < cnt; j++)
		{
			if (nb[j] >= g->n || nb[j] == i)
				return false;
			for (int k = 0; k < j; k++)
				if (nb[k] == nb[j])
					return false;
		}
	}
	return true;
}

/* Lay graph g's nodes out in order (as a build does) as records holding codes. */
static void
mem_index_init(MemIndex *mi, ShnswBuildGraph *g, const uint32_t *order, const uint8_t *codes)
{
	int			n = (int) g->n,
				m = g->m,
				dim = g->dim;

	memset(mi, 0, sizeof(*mi));
	mi->m = m;
	mi->dim = dim;
	mi->node_size = shnsw_node_size(m, dim);
	mi->per_page = 8;
	mi->slot_bits = 3;
	mi->g = g;
	mi->nodes = calloc(n, mi->node_size);
	mi->pos_of = malloc(sizeof(uint32_t) * n);
	mi->node_at = malloc(sizeof(uint32_t) * n);
	for (int p = 0; p < n; p++)
	{
		mi->pos_of[order[p]] = p;
		mi->node_at[p] = order[p];
	}
	for (int p = 0; p < n; p++)
	{
		uint32_t	node = order[p];
		ShnswNodeHeader *h = (ShnswNodeHeader *) (mi->nodes + mi->node_size * p);
		int			cnt;
		ShnswRef   *nb = shnsw_build_neighbors(g, node, 0, &cnt);

		h->tid_blk_hi = (uint16_t) (node >> 16);
		h->tid_blk_lo = (uint16_t) node;
		h->level = g->levels[node];
		h->upper_blk_hi = (uint16_t) (p >> 16);
		h->upper_blk_lo = (uint16_t) p;
		h->nneighbors = (uint16_t) cnt;
		for (int j = 0; j < cnt; j++)
			shnsw_node_neighbors(h)[j] = mem_ref(mi, mi->pos_of[nb[j]]);
		memcpy(shnsw_node_code(h, m), codes + (size_t) node * dim, dim);
	}
}

/* Page operations over a memory index (no read-ahead hints). */
static ShnswNodeSource
mem_ops(MemIndex *mi)
{
	ShnswNodeSource ops;

	ops.ctx = mi;
	ops.read_nodes = mem_read_nodes;
	ops.read_nodes_held = NULL;
	ops.read_upper = mem_read_upper;
	ops.prefetch = NULL;
	ops.speculative = false;
	ops.reread_cheap = false;
	ops.page_records = NULL;
	return ops;
}

static void
mem_index_free(MemIndex *mi)
{
	free(mi->nodes);
	free(mi->pos_of);
	free(mi->node_at);
}

/* SQ8 parameters trained on test data, and its codes. */
typedef struct Sq8Data
{
	float	   *lo;
	float	   *scale;
	uint8_t    *codes;			/* n * dim bytes */
} Sq8Data;

/*
 * Normalize the first nnorm rows of x for cosine, train SQ8 on the first n
 * and encode them; free the result with sq8_data_free.
 */
static Sq8Data
prepare_data(ShnswMetric metric, float *x, int nnorm, int n, int dim)
{
	Sq8Data		d;
	float	   *mins = malloc(sizeof(float) * dim),
			   *maxs = malloc(sizeof(float) * dim);

	d.lo = malloc(sizeof(float) * dim);
	d.scale = malloc(sizeof(float) * dim);
	d.codes = malloc((size_t) n * dim);
	if (metric == SHNSW_METRIC_COSINE)
		for (int i = 0; i < nnorm; i++)
			shnsw_normalize(x + (size_t) i * dim, dim);
	sq8_train_init(mins, maxs, dim);
	for (int i = 0; i < n; i++)
		sq8_train_add(mins, maxs, x + (size_t) i * dim, dim);
	sq8_train_finish(mins, maxs, d.lo, d.scale, dim);
	for (int i = 0; i < n; i++)
		sq8_encode(d.lo, d.scale, x + (size_t) i * dim, d.codes + (size_t) i * dim, dim);
	free(mins);
	free(maxs);
	return d;
}

static void
sq8_data_free(Sq8Data *d)
{
	free(d->lo);
	free(d->scale);
	free(d->codes);
}

/* What test_graph_search builds its graph on. */
#define ON_FLOATS	0
#define ON_CODES	1
#define ON_HALVES	2

static int
float_cmp(const void *a, const void *b)
{
	float		x = *(const float *) a,
				y = *(const float *) b;

	return (x > y) - (x < y);
}

static void
test_graph_search(ShnswMetric metric, int n, int dim, int m, int efc, int on)
{
	bool		use_codes = on == ON_CODES;
	int			nq = 50,
				k = 10,
				ef = 40;
	float	   *x = make_data(n + nq, dim, 30);
	Sq8Data		sd;
	const float *lo,
			   *scale;
	const uint8_t *codes;
	ShnswBuildGraph g;
	MemIndex	mi;
	uint32_t   *order = malloc(sizeof(uint32_t) * n);
	ShnswNodeSource ops;
	double		hits = 0;
	int			connected;
	int			reachable,
				unreachable;
	uint32_t	repaired;

	sd = prepare_data(metric, x, n + nq, n, dim);
	lo = sd.lo;
	scale = sd.scale;
	codes = sd.codes;

	if (on == ON_HALVES)
		shnsw_build_init_halves(&g, dim, m, efc, metric, n, 42, NULL,
								half_scale_of(x, n, dim));
	else
		shnsw_build_init(&g, dim, m, efc, metric, n, use_codes, lo, scale, 42, NULL);
	for (int i = 0; i < n; i++)
	{
		uint32_t	id = use_codes ? shnsw_build_add_code(&g, codes + (size_t) i * dim)
			: shnsw_build_add_vector(&g, x + (size_t) i * dim);

		shnsw_build_link(&g, id);
	}
	/* as a build does: make every node reachable, then lay the graph out */
	unreachable = n - graph_reach(&g, NULL);
	repaired = shnsw_build_ensure_reachable(&g);
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
	reachable = graph_reach(&g, NULL);
	CHECK(reachable == n, "after the repair layer 0 reaches %d of %d nodes", reachable, n);

	mem_index_init(&mi, &g, order, codes);
	ops = mem_ops(&mi);

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
			ShnswNodeSource ops2 = ops;
			ShnswSearch s2;
			uint32_t	out2[64];
			int			n2;
			bool		same;

			ops2.prefetch = mem_prefetch;
			ops2.speculative = true;
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

			/*
			 * nor does reading each neighbour list at expansion (the shared
			 * image's way) instead of keeping every list seen
			 */
			ops2 = ops;
			ops2.reread_cheap = true;
			shnsw_search_init(&s2, &sq, &ops2, m, 0);
			n2 = shnsw_search_next(&s2, shnsw_search_descend(&s2, mem_ref(&mi, mi.pos_of[g.entry]),
															 g.max_level, 0), ef, out2);
			same = n2 == nout && s2.nexpanded == s.nexpanded && s2.nnbrs == 0;
			for (int j = 0; same && j < n2; j++)
				same = s2.cands[out2[j]].ref == s.cands[out[j]].ref;
			CHECK(same, "neighbour lists read at expansion changed the results "
				  "(%d of %d, %llu expansions of %llu, %u kept)", n2, nout,
				  (unsigned long long) s2.nexpanded, (unsigned long long) s.nexpanded,
				  s2.nnbrs);
			shnsw_search_free(&s2);

			/*
			 * nor does reading codes where the source holds them, racy
			 * reads included (the shared image's way): same nodes, same
			 * navigation distances to the bit
			 */
			ops2.read_nodes_held = mem_read_nodes_held;
			shnsw_search_init(&s2, &sq, &ops2, m, 0);
			n2 = shnsw_search_next(&s2, shnsw_search_descend(&s2, mem_ref(&mi, mi.pos_of[g.entry]),
															 g.max_level, 0), ef, out2);
			same = n2 == nout && s2.nexpanded == s.nexpanded && s2.ncands == s.ncands;
			for (int j = 0; same && j < n2; j++)
				same = s2.cands[out2[j]].ref == s.cands[out[j]].ref &&
					memcmp(&s2.cands[out2[j]].d, &s.cands[out[j]].d, sizeof(float)) == 0;
			CHECK(same, "codes read in place (held) changed the results "
				  "(%d of %d, %llu expansions of %llu)", n2, nout,
				  (unsigned long long) s2.nexpanded, (unsigned long long) s.nexpanded);
			shnsw_search_free(&s2);
		}

		/* a search told to look for a node it returns stops early, having seen it */
		if (qi == 2 && nout > 0)
		{
			ShnswSearch s3;
			uint32_t	out3[64];
			ShnswRef	want = s.cands[out[nout - 1]].ref;	/* nearest */

			shnsw_search_init(&s3, &sq, &ops, m, 0);
			shnsw_search_set_target(&s3, want);
			CHECK(!s3.target_seen, "target seen before the search");
			shnsw_search_next(&s3, shnsw_search_descend(&s3, mem_ref(&mi, mi.pos_of[g.entry]),
														g.max_level, 0), ef, out3);
			CHECK(s3.target_seen && s3.nexpanded <= s.nexpanded,
				  "target search: seen %d, %llu expansions (full search %llu)",
				  (int) s3.target_seen, (unsigned long long) s3.nexpanded,
				  (unsigned long long) s.nexpanded);
			shnsw_search_free(&s3);
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

		printf("  recall@10 metric=%d n=%d dim=%d m=%d on=%s: %.3f"
			   " (%d unreachable before the repair, %u links added)\n",
			   metric, n, dim, m, on == ON_CODES ? "codes" : on == ON_HALVES ? "halves" : "floats",
			   rec, unreachable, repaired);
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
		/* past the budget every node seen on layer 0 is still emitted, once */
		{
			int			emitted = 0;

			for (uint32_t i = 0; i < s.ncands; i++)
				emitted += (s.cands[i].state & SHNSW_CAND_EMITTED) != 0;
			CHECK(s.budget_spent && emitted == total && total >= 300 - 2 * m * 8,
				  "budget drain: %d emitted, %d returned, %u seen", emitted, total, s.ncands);
		}
		shnsw_search_free(&s);
		free(out);
	}

	/*
	 * The frontier is a lower bound on the navigation distance of every node
	 * seen but not emitted or not expanded; taken nodes come out nearest
	 * first and the next round expands them.
	 */
	{
		float		qsb[2048],
					wb[2048];
		Sq8Query	sq = {.dim = dim,.qs = qsb,.w = wb};
		ShnswSearch s;
		uint32_t   *out = malloc(sizeof(uint32_t) * 64);
		ShnswRef	start;
		int			bad = 0,
					takes_out_of_order = 0,
					taken_unexpanded = 0;
		int64_t		took[8];
		uint32_t	base;

		sq8_prepare_query(&sq, metric, x + (size_t) n * dim, lo, scale);
		shnsw_search_init(&s, &sq, &ops, m, 0);
		start = shnsw_search_descend(&s, mem_ref(&mi, mi.pos_of[g.entry]), g.max_level, 0);
		base = s.ncands;
		for (int round = 0; round < 6 && shnsw_search_next(&s, start, 20, out) > 0; round++)
		{
			float		f = shnsw_search_frontier(&s);
			float		prev = -INFINITY;

			/*
			 * Layer-0 nodes only (the descent's come first and are in no
			 * heap); an emitted node left unexpanded is the caller's to
			 * bound (it knows its exact distance).
			 */
			for (uint32_t i = base; i < s.ncands; i++)
			{
				const ShnswCand *c = &s.cands[i];

				if (!(c->state & SHNSW_CAND_EMITTED) && c->d < f)
					bad++;
			}
			for (int t = 0; t < 8; t++)
			{
				took[t] = shnsw_search_take(&s);
				if (took[t] < 0)
					break;
				takes_out_of_order += s.cands[took[t]].d < prev;
				prev = s.cands[took[t]].d;
			}
			if (shnsw_search_next(&s, start, 20, out) == 0)
				break;
			for (int t = 0; t < 8 && took[t] >= 0; t++)
				taken_unexpanded += !(s.cands[took[t]].state & SHNSW_CAND_EXPANDED);
		}
		CHECK(bad == 0 && takes_out_of_order == 0 && taken_unexpanded == 0,
			  "frontier: %d nodes below it, %d takes out of order, %d taken nodes left unexpanded",
			  bad, takes_out_of_order, taken_unexpanded);
		shnsw_search_free(&s);
		free(out);
	}

	/*
	 * Widening the first round to twice its width (shnsw_search_widen)
	 * finds new rows only, gives the middle of all of them, finds about
	 * what one search of that width finds, and leaves the frontier a lower
	 * bound; later rounds still emit every node once.
	 */
	{
		float		qsb[2048],
					wb[2048];
		Sq8Query	sq = {.dim = dim,.qs = qsb,.w = wb};
		uint32_t   *out = malloc(sizeof(uint32_t) * 400);
		float	   *ds = malloc(sizeof(float) * 400);
		int			nq = 20,
					twice = 0,
					bad_median = 0,
					below = 0,
					common = 0,
					wanted = 0,
					unreached = 0,
					starved = 0;

		for (int q = 0; q < nq; q++)
		{
			ShnswSearch s,
						f;
			ShnswRef	start;
			int			n1,
						n2,
						nf,
						nd = 0,
						ntaken = 0,
						total;
			uint32_t	base;
			float		median,
						fr;
			const float *qv = x + (size_t) ((q * 7919) % n) * dim;

			sq8_prepare_query(&sq, metric, qv, lo, scale);
			shnsw_search_init(&s, &sq, &ops, m, 0);
			start = shnsw_search_descend(&s, mem_ref(&mi, mi.pos_of[g.entry]), g.max_level, 0);
			base = s.ncands;
			n1 = shnsw_search_next(&s, start, 20, out);
			if (q % 2)
			{
				/*
				 * the caller took parked nodes one at a time first: more
				 * emitted rows than W holds; new rows must still come
				 */
				while (ntaken < 40 && shnsw_search_take(&s) >= 0)
					ntaken++;
				n2 = shnsw_search_widen(&s, 40, out + n1, &median);
				starved += n2 == 0;
				total = n1 + ntaken + n2;
				goto later;
			}
			n2 = shnsw_search_widen(&s, 40, out + n1, &median);
			for (int i = 0; i < n1 + n2; i++)
			{
				for (int j = 0; j < i; j++)
					twice += out[i] == out[j];
				ds[nd++] = s.cands[out[i]].d;
			}
			qsort(ds, nd, sizeof(float), float_cmp);
			bad_median += nd == 0 || ds[(nd - 1) / 2] != median;
			fr = shnsw_search_frontier(&s);
			for (uint32_t i = base; i < s.ncands; i++)
				below += !(s.cands[i].state & SHNSW_CAND_EMITTED) && s.cands[i].d < fr;

			/* a fresh search of the doubled width */
			sq8_prepare_query(&sq, metric, qv, lo, scale);
			shnsw_search_init(&f, &sq, &ops, m, 0);
			nf = shnsw_search_next(&f, shnsw_search_descend(&f, mem_ref(&mi, mi.pos_of[g.entry]),
															g.max_level, 0), 40, out + 200);
			for (int i = 0; i < nf; i++)
				for (int j = 0; j < n1 + n2; j++)
					common += f.cands[out[200 + i]].ref == s.cands[out[j]].ref;
			wanted += nf;
			shnsw_search_free(&f);

			/* later rounds continue from the widened one */
			total = n1 + n2;
	later:
			if (n <= 3000)
			{
				int			got;

				while ((got = shnsw_search_next(&s, start, 100, out)) > 0)
					total += got;
				unreached += total != reachable;
			}
			shnsw_search_free(&s);
		}
		CHECK(twice == 0 && bad_median == 0 && below == 0 && unreached == 0 && starved == 0,
			  "widen: %d rows twice, %d wrong medians, %d nodes below the frontier, "
			  "%d searches that did not emit every reachable node, %d widenings after takes "
			  "that found nothing", twice, bad_median, below, unreached, starved);
		printf("  widen (metric %d, %d x %d): %d of the %d rows of searches twice as wide\n",
			   metric, n, dim, common, wanted);
		CHECK(common >= 0.9 * wanted, "widen: %d of the %d rows of a search twice as wide",
			  common, wanted);
		free(ds);
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
	mem_index_free(&mi);
	free(order);
	free(x);
	sq8_data_free(&sd);
}

/*
 * Build a graph on x (n x dim, seeded) and link its nodes; with repair,
 * then make every node reachable, returning the links added in *added.
 */
static void
build_graph(ShnswBuildGraph *g, ShnswMetric metric, const float *x, const uint8_t *codes,
			int n, int dim, int m, int efc, bool use_codes, const float *lo,
			const float *scale, bool repair, uint32_t *added)
{
	shnsw_build_init(g, dim, m, efc, metric, n, use_codes, lo, scale, 7, NULL);
	for (int i = 0; i < n; i++)
	{
		uint32_t	id = use_codes ? shnsw_build_add_code(g, codes + (size_t) i * dim)
			: shnsw_build_add_vector(g, x + (size_t) i * dim);

		shnsw_build_link(g, id);
	}
	if (repair)
		*added = shnsw_build_ensure_reachable(g);
}

/*
 * The concurrent-build interface (ShnswBuildSync), driven by one thread:
 * the locks count how many node locks are held (never more than one) and
 * that each unlock matches a lock.
 */
typedef struct UnitSync
{
	int			held;
	int			max_held;
	int			bad;
	int			entry_held;
	uint32_t	claims;
	uint32_t	nstale;
} UnitSync;

static void
unit_lock_node(void *arg, uint32_t i, bool exclusive)
{
	UnitSync   *u = arg;

	(void) i;
	(void) exclusive;
	if (++u->held > u->max_held)
		u->max_held = u->held;
}

static void
unit_unlock_node(void *arg, uint32_t i)
{
	UnitSync   *u = arg;

	(void) i;
	if (--u->held < 0)
		u->bad++;
}

static void
unit_lock_entry(void *arg, bool exclusive)
{
	(void) exclusive;
	((UnitSync *) arg)->entry_held++;
}

static void
unit_unlock_entry(void *arg)
{
	if (--((UnitSync *) arg)->entry_held < 0)
		((UnitSync *) arg)->bad++;
}

static uint32_t
unit_progress(void *arg)
{
	return ((UnitSync *) arg)->claims;
}

static void
unit_mark_stale(void *arg, uint32_t i)
{
	(void) i;
	((UnitSync *) arg)->nstale++;
}

/*
 * A graph attached to caller arrays (shnsw_build_attach, as a parallel
 * build's processes do; on halves, shnsw_build_attach_halves) and linked in
 * node order through the sync hooks is the serial build's, list for list;
 * linking nodes again (shnsw_build_relink) keeps every list valid: no
 * self-link, no duplicate, within its capacity.
 */
static void
test_build_attach(bool halves)
{
	int			n = halves ? 2000 : 3000,
				dim = halves ? 24 : 16,
				m = 8,
				efc = 40;
	float	   *x = make_data(n, dim, 20);
	float		sc = halves ? half_scale_of(x, n, dim) : 0.0f;
	uint16_t   *rows = halves ? malloc(sizeof(uint16_t) * n * dim) : NULL;
	ShnswBuildGraph g1,
				g2;
	uint8_t    *levels = malloc(n);
	ShnswRef   *nbr0 = malloc(sizeof(ShnswRef) * n * 2 * m);
	uint16_t   *cnt0 = calloc(n, sizeof(uint16_t));
	float	   *dist0 = malloc(sizeof(float) * n * 2 * m);
	uint8_t    *pruned0 = malloc(n * 2 * m);
	float	   *vecs = malloc(sizeof(float) * n * dim);
	uint32_t   *pool;
	uint32_t	entry = 0;
	int32_t		max_level;
	UnitSync	u = {0};
	ShnswBuildSync sync = {&u, unit_lock_node, unit_unlock_node, unit_lock_entry,
	unit_unlock_entry, &entry, &max_level, unit_progress, unit_mark_stale, 1000000};
	int			diff = 0,
				invalid = 0;

	if (halves)
	{
		shnsw_build_init_halves(&g1, dim, m, efc, SHNSW_METRIC_L2, n, 7, NULL, sc);
		for (int i = 0; i < n; i++)
			shnsw_build_link(&g1, shnsw_build_add_vector(&g1, x + (size_t) i * dim));
	}
	else
		build_graph(&g1, SHNSW_METRIC_L2, x, NULL, n, dim, m, efc, false, NULL, NULL, false,
					NULL);
	shnsw_build_draw_levels(levels, n, m, 7);
	pool = calloc(shnsw_build_upper_words(levels, n, m) + 1, sizeof(uint32_t));
	if (halves)
		shnsw_floats_to_halves(x, sc, rows, n * dim);
	else
		memcpy(vecs, x, sizeof(float) * n * dim);
	shnsw_build_attach(&g2, dim, m, efc, SHNSW_METRIC_L2, n, false, NULL, NULL,
					   halves ? NULL : vecs, NULL, levels, nbr0, cnt0, dist0, pruned0, pool);
	if (halves)
		shnsw_build_attach_halves(&g2, rows, sc);
	max_level = levels[0];
	g2.sync = &sync;
	for (uint32_t i = 1; i < (uint32_t) n; i++)
	{
		u.claims++;
		shnsw_build_link(&g2, i);
	}
	g2.sync = NULL;
	g2.entry = entry;
	g2.max_level = max_level;
	CHECK(u.max_held == 1 && u.held == 0 && u.entry_held == 0 && u.bad == 0 && u.nstale == 0,
		  "attach: locks held at most %d at once, %d left, entry %d, %d bad, %u stale",
		  u.max_held, u.held, u.entry_held, u.bad, u.nstale);
	CHECK(g1.entry == g2.entry && g1.max_level == g2.max_level, "attach: entry point %u/%u",
		  g1.entry, g2.entry);
	for (uint32_t i = 0; i < (uint32_t) n; i++)
	{
		CHECK(g1.levels[i] == g2.levels[i], "attach: level of node %u", i);
		for (int l = 0; l <= g1.levels[i] && l <= g1.max_level; l++)
		{
			int			c1,
						c2;
			ShnswRef   *a = shnsw_build_neighbors(&g1, i, l, &c1);
			ShnswRef   *b = shnsw_build_neighbors(&g2, i, l, &c2);

			diff += c1 != c2 || memcmp(a, b, sizeof(ShnswRef) * c1) != 0;
		}
	}
	CHECK(diff == 0, "attach: %d lists differ from the serial build's", diff);

	for (uint32_t i = 0; i < (uint32_t) n; i += 7)
		shnsw_build_relink(&g2, i);
	for (uint32_t i = 0; i < (uint32_t) n; i++)
	{
		for (int l = 0; l <= g2.levels[i] && l <= g2.max_level; l++)
		{
			int			c;
			ShnswRef   *a = shnsw_build_neighbors(&g2, i, l, &c);

			invalid += c > (l == 0 ? 2 * m : m);
			for (int k = 0; k < c; k++)
			{
				invalid += a[k] == i || a[k] >= (uint32_t) n;
				for (int j = 0; j < k; j++)
					invalid += a[j] == a[k];
			}
		}
	}
	CHECK(invalid == 0, "relink: %d invalid list entries", invalid);

	shnsw_build_free(&g1);
	shnsw_build_free(&g2);
	free(levels);
	free(nbr0);
	free(cnt0);
	free(dist0);
	free(pruned0);
	free(vecs);
	if (rows)
		free(rows);
	free(pool);
	free(x);
}

/*
 * For each node, whether an ordered search for its own vector returns it
 * (found[i]): the first round of width ef, then continuation rounds until
 * the node shows up or 4 * ef nodes were returned (room for exact copies).
 * Returns how many nodes it does not return.
 */
static int
self_search(ShnswBuildGraph *g, ShnswMetric metric, const float *x, const uint8_t *codes,
			const float *lo, const float *scale, int ef, uint8_t *found)
{
	int			n = (int) g->n,
				dim = g->dim;
	uint32_t   *order = malloc(sizeof(uint32_t) * n);
	uint32_t   *out = malloc(sizeof(uint32_t) * ef);
	float	   *qsb = malloc(sizeof(float) * dim),
			   *wb = malloc(sizeof(float) * dim);
	MemIndex	mi;
	ShnswNodeSource ops;
	int			misses = 0;

	shnsw_build_layout_order(g, order);
	mem_index_init(&mi, g, order, codes);
	ops = mem_ops(&mi);
	for (int i = 0; i < n; i++)
	{
		Sq8Query	sq = {.dim = dim,.qs = qsb,.w = wb};
		ShnswSearch s;
		ShnswRef	start;
		int			total = 0,
					got;

		found[i] = 0;
		sq8_prepare_query(&sq, metric, x + (size_t) i * dim, lo, scale);
		shnsw_search_init(&s, &sq, &ops, g->m, 0);
		start = shnsw_search_descend(&s, mem_ref(&mi, mi.pos_of[g->entry]), g->max_level, 0);
		while (!found[i] && total < 4 * ef && (got = shnsw_search_next(&s, start, ef, out)) > 0)
		{
			for (int j = 0; j < got; j++)
				if (s.cands[out[j]].tid_blk == (uint32_t) i)
					found[i] = 1;
			total += got;
		}
		misses += !found[i];
		shnsw_search_free(&s);
	}
	mem_index_free(&mi);
	free(order);
	free(out);
	free(qsb);
	free(wb);
	return misses;
}

/* What a reachability case expects of searches for each node's own vector. */
typedef enum SelfSearch
{
	SELF_ALL,					/* every node is found */
	SELF_REPAIRED,				/* every node that was unreachable is found
								 * (IP: a vector is not its own nearest) */
	SELF_FEWER					/* fewer misses than before (degenerate
								 * graphs: m = 2, many exact copies) */
} SelfSearch;

/*
 * shnsw_build_ensure_reachable on built graphs: before it, some nodes may be
 * unreachable (want_unreached > 0: the data is chosen so that some are; < 0:
 * cases that left nodes unreachable before lists kept their pruned
 * connections, and must not any more; 0: either); after
 * it, a walk from the entry point reaches every node, every node but the
 * entry has an incoming link, lists stay within 2m, the repair is
 * deterministic and idempotent, and searches for the nodes' own vectors
 * (ef 64) find them as `self` says.
 */
static void
test_reachability(const char *what, ShnswMetric metric, float *x, int n, int dim, int m,
				  int efc, bool use_codes, int want_unreached, SelfSearch self)
{
	Sq8Data		sd;
	const float *lo,
			   *scale;
	const uint8_t *codes;
	uint8_t    *found_before = malloc(n),
			   *found_after = malloc(n),
			   *reached_before = calloc(n, 1);
	ShnswBuildGraph g,
				g2;
	int			before,
				orphans,
				after,
				misses_before,
				misses_after,
				repaired_missed = 0,
				lost = 0;
	uint32_t	added = 0,
				added2 = 0;
	bool		same;

	sd = prepare_data(metric, x, n, n, dim);
	lo = sd.lo;
	scale = sd.scale;
	codes = sd.codes;

	build_graph(&g, metric, x, codes, n, dim, m, efc, use_codes, lo, scale, false, NULL);
	before = graph_reach(&g, reached_before);
	orphans = graph_orphans(&g);
	misses_before = self_search(&g, metric, x, codes, lo, scale, 64, found_before);
	if (want_unreached > 0)
		CHECK(before < n && orphans > 0 && misses_before > 0,
			  "%s: the data should leave nodes unreachable (reached %d of %d, %d orphans)",
			  what, before, n, orphans);
	else if (want_unreached < 0)
		CHECK(before == n && orphans == 0,
			  "%s: lists kept full should leave every node reachable (reached %d of %d,"
			  " %d orphans)", what, before, n, orphans);

	added = shnsw_build_ensure_reachable(&g);
	after = graph_reach(&g, NULL);
	CHECK(after == n, "%s: reached %d of %d after the repair", what, after, n);
	CHECK(before == n ? added == 0 : added >= 1 && added <= (uint32_t) (n - before),
		  "%s: %u links for %d unreachable nodes", what, added, n - before);
	CHECK(graph_orphans(&g) == 0, "%s: nodes without an incoming link remain", what);
	CHECK(graph_lists_ok(&g), "%s: a list is over 2m or names a node twice or itself", what);
	CHECK(shnsw_build_ensure_reachable(&g) == 0, "%s: a second repair added links", what);

	/* the same build repaired again gives the same lists */
	build_graph(&g2, metric, x, codes, n, dim, m, efc, use_codes, lo, scale, true, &added2);
	same = added2 == added && g2.entry == g.entry;
	for (int i = 0; same && i < n; i++)
		same = g2.cnt0[i] == g.cnt0[i] &&
			memcmp(g2.nbr0 + (size_t) i * 2 * m, g.nbr0 + (size_t) i * 2 * m,
				   sizeof(ShnswRef) * g.cnt0[i]) == 0;
	CHECK(same, "%s: the repair is not deterministic", what);
	shnsw_build_free(&g2);

	misses_after = self_search(&g, metric, x, codes, lo, scale, 64, found_after);
	for (int i = 0; i < n; i++)
	{
		if (!reached_before[i] && !found_after[i])
			repaired_missed++;
		if (found_before[i] && !found_after[i])
			lost++;
	}
	if (self == SELF_ALL)
		CHECK(misses_after == 0, "%s: %d nodes not found by a search for their own vector",
			  what, misses_after);
	else if (self == SELF_REPAIRED)
		CHECK(repaired_missed == 0, "%s: %d repaired nodes not found by a search for their"
			  " own vector", what, repaired_missed);
	else
		CHECK(misses_after < misses_before, "%s: searches for own vectors miss %d nodes,"
			  " %d before the repair", what, misses_after, misses_before);
	printf("  reachability %s: %d of %d unreachable (%d without incoming link), %u links added;"
		   " self-search misses %d -> %d (%d of them repaired, %d found before)\n",
		   what, n - before, n, orphans, added, misses_before, misses_after,
		   repaired_missed, lost);

	shnsw_build_free(&g);
	sq8_data_free(&sd);
	free(found_before);
	free(found_after);
	free(reached_before);
}

/* n points: copies of n / copies random centres plus noise (0: exact copies). */
static float *
make_copies(int n, int dim, int copies, float noise)
{
	int			nc = (n + copies - 1) / copies;
	float	   *centers = make_data(nc, dim, 1);
	float	   *x = malloc(sizeof(float) * n * dim);

	for (int i = 0; i < n; i++)
		for (int j = 0; j < dim; j++)
			x[i * dim + j] = centers[(i % nc) * dim + j] + noise * (float) nrand();
	free(centers);
	return x;
}

/*
 * Hand-made graphs (m = 2, all on layer 0, entry node 9): A = nodes 0..9 at
 * x = 0..9, each linked to the four nearest of a window of five (full
 * lists, nearest first); nodes from 10 on sit far away at x = 100 + i - 10.
 * A walk from 9 adopts 8, 7, 6 and 5 as 9's tree children, so 9's list is
 * all tree links and must never lose an entry.
 */
static void
reach_line_graph(ShnswBuildGraph *g, int n)
{
	shnsw_build_init(g, 2, 2, 16, SHNSW_METRIC_L2, n, false, NULL, NULL, 1, NULL);
	for (int i = 0; i < n; i++)
	{
		float		v[2] = {i < 10 ? (float) i : 100.0f + (float) (i - 10), 0.0f};

		shnsw_build_add_vector(g, v);
		g->levels[i] = 0;
	}
	for (int i = 0; i < 10; i++)
	{
		int			lo = i < 2 ? 0 : i > 7 ? 5 : i - 2,
					cnt;
		ShnswRef   *nb = shnsw_build_neighbors(g, i, 0, &cnt);

		cnt = 0;
		for (int off = 1; off <= 4; off++)
			for (int sgn = -1; sgn <= 1; sgn += 2)
			{
				int			j = i + sgn * off;

				if (j >= lo && j <= lo + 4 && cnt < 4)
					nb[cnt++] = (ShnswRef) j;
			}
		g->cnt0[i] = (uint16_t) cnt;
	}
	g->entry = 9;
	g->max_level = 0;
}

/* Whether node i's layer-0 list is exactly want[0..3]. */
static bool
reach_list_is(const ShnswBuildGraph *g, uint32_t i, const ShnswRef *want)
{
	int			cnt;
	ShnswRef   *nb = shnsw_build_neighbors(g, i, 0, &cnt);

	return cnt == 4 && memcmp(nb, want, sizeof(ShnswRef) * 4) == 0;
}

static void
test_reachability_hand_made(void)
{
	ShnswBuildGraph g;
	ShnswRef   *nb;
	int			cnt;
	uint32_t	added;
	const ShnswRef list9[4] = {8, 7, 6, 5};

	/*
	 * B = nodes 10..19, a ring no walk from A enters: B's own lists name
	 * no reached node, so the repair searches; 9 cannot give up a slot, so
	 * 8 links B's node 10 over its farthest neighbour, 5 (still linked from
	 * 9). One link reaches all of B.
	 */
	{
		const ShnswRef list8[4] = {7, 9, 6, 10};

		reach_line_graph(&g, 20);
		for (int i = 10; i < 20; i++)
		{
			nb = shnsw_build_neighbors(&g, i, 0, &cnt);
			nb[0] = (ShnswRef) (i == 19 ? 10 : i + 1);
			nb[1] = (ShnswRef) (i == 10 ? 19 : i - 1);
			g.cnt0[i] = 2;
		}
		CHECK(graph_reach(&g, NULL) == 10 && graph_lists_ok(&g), "component: reached %d",
			  graph_reach(&g, NULL));
		added = shnsw_build_ensure_reachable(&g);
		CHECK(added == 1, "component: %u links added, want 1", added);
		CHECK(graph_reach(&g, NULL) == 20 && graph_lists_ok(&g), "component: reached %d of 20",
			  graph_reach(&g, NULL));
		CHECK(reach_list_is(&g, 9, list9), "component: the entry's tree links changed");
		CHECK(reach_list_is(&g, 8, list8), "component: node 8 should link node 10 over 5");
		shnsw_build_free(&g);
	}

	/*
	 * Nodes 10 and 11 have no incoming link; their own full lists name
	 * 9, 8, 7, 6. 9 cannot take a link and 8 gives up one entry (5) for
	 * node 10; for node 11, 8 has given up its one, so 7 takes it, over its
	 * farthest neighbour (5 and 9 tie; the higher number goes).
	 */
	{
		const ShnswRef list8[4] = {7, 9, 6, 10},
					list7[4] = {6, 8, 5, 11};

		reach_line_graph(&g, 12);
		for (int i = 10; i < 12; i++)
		{
			nb = shnsw_build_neighbors(&g, i, 0, &cnt);
			nb[0] = 9;
			nb[1] = 8;
			nb[2] = 7;
			nb[3] = 6;
			g.cnt0[i] = 4;
		}
		CHECK(graph_reach(&g, NULL) == 10 && graph_orphans(&g) == 2, "orphans: reached %d",
			  graph_reach(&g, NULL));
		added = shnsw_build_ensure_reachable(&g);
		CHECK(added == 2, "orphans: %u links added, want 2", added);
		CHECK(graph_reach(&g, NULL) == 12 && graph_lists_ok(&g), "orphans: reached %d of 12",
			  graph_reach(&g, NULL));
		CHECK(reach_list_is(&g, 9, list9), "orphans: the entry's tree links changed");
		CHECK(reach_list_is(&g, 8, list8), "orphans: node 8 should link node 10 over 5");
		CHECK(reach_list_is(&g, 7, list7), "orphans: node 7 should link node 11 over 9");
		shnsw_build_free(&g);
	}
}

static void
test_reachability_cases(void)
{
	float	   *x;

	test_reachability_hand_made();
	rng_state = 777;
	/* the reported case: 5000 x 16 random l2 vectors, m = 8 */
	x = make_data(5000, 16, 5000);
	test_reachability("l2 random m=8", SHNSW_METRIC_L2, x, 5000, 16, 8, 64, false, -1, SELF_ALL);
	free(x);
	x = make_data(3000, 8, 40);
	test_reachability("l2 clustered m=3 codes", SHNSW_METRIC_L2, x, 3000, 8, 3, 32, true, true,
					  SELF_ALL);
	test_reachability("l2 clustered m=2", SHNSW_METRIC_L2, x, 3000, 8, 2, 32, false, true,
					  SELF_FEWER);
	free(x);
	x = make_copies(2000, 8, 6, 0.001f);
	test_reachability("l2 near copies m=4", SHNSW_METRIC_L2, x, 2000, 8, 4, 40, false, -1,
					  SELF_ALL);
	free(x);
	x = make_copies(2000, 8, 6, 0.0f);
	test_reachability("l2 exact copies m=4", SHNSW_METRIC_L2, x, 2000, 8, 4, 40, false, true,
					  SELF_FEWER);
	free(x);
	x = make_data(2000, 16, 30);
	test_reachability("ip clustered m=16", SHNSW_METRIC_IP, x, 2000, 16, 16, 64, false, true,
					  SELF_REPAIRED);
	free(x);
	x = make_data(2000, 16, 30);
	test_reachability("cosine clustered m=4", SHNSW_METRIC_COSINE, x, 2000, 16, 4, 40, false,
					  0, SELF_REPAIRED);
	free(x);
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

/*
 * Loops that depend on the data call the host's interrupt hook, and a
 * corrupt graph (every list naming one node, a cycle, an entry level far
 * above the entry node's) makes the disk search end, not spin.
 */
static void
test_search_bounds(void)
{
	int			n = 400,
				dim = 8,
				m = 4;
	float	   *x = make_data(n + 1, dim, 5);
	Sq8Data		sd;
	const float *lo,
			   *scale;
	const uint8_t *codes;
	uint32_t   *order = malloc(sizeof(uint32_t) * n);
	ShnswBuildGraph g;
	MemIndex	mi;
	ShnswNodeSource ops;
	float		qsb[64],
				wb[64];
	Sq8Query	sq = {.dim = dim,.qs = qsb,.w = wb};
	ShnswSearch s;
	uint32_t	out[64];
	int			nout,
				total;
	long		before;

	sd = prepare_data(SHNSW_METRIC_L2, x, n + 1, n, dim);
	lo = sd.lo;
	scale = sd.scale;
	codes = sd.codes;
	shnsw_build_init(&g, dim, m, 16, SHNSW_METRIC_L2, n, false, lo, scale, 7, NULL);
	before = ninterrupt_checks;
	for (int i = 0; i < n; i++)
		shnsw_build_link(&g, shnsw_build_add_vector(&g, x + (size_t) i * dim));
	CHECK(ninterrupt_checks - before >= n - 1, "build checks for interrupts (%ld calls for %d nodes)",
		  ninterrupt_checks - before, n);
	before = ninterrupt_checks;
	shnsw_build_ensure_reachable(&g);
	CHECK(ninterrupt_checks - before >= n, "reachability pass checks for interrupts");
	shnsw_build_layout_order(&g, order);
	mem_index_init(&mi, &g, order, codes);
	ops = mem_ops(&mi);
	sq8_prepare_query(&sq, SHNSW_METRIC_L2, x + (size_t) n * dim, lo, scale);

	/* a sound graph: one check per expansion at least */
	before = ninterrupt_checks;
	shnsw_search_init(&s, &sq, &ops, m, 0);
	nout = shnsw_search_next(&s, shnsw_search_descend(&s, mem_ref(&mi, 0), g.max_level, 0), 20, out);
	CHECK(nout == 20 && ninterrupt_checks - before >= (long) s.nexpanded,
		  "search checks for interrupts (%ld calls, %llu expansions)",
		  ninterrupt_checks - before, (unsigned long long) s.nexpanded);
	shnsw_search_free(&s);

	/* an entry level far above the entry node's own: no count-down from it */
	before = ninterrupt_checks;
	shnsw_search_init(&s, &sq, &ops, m, 0);
	shnsw_search_descend(&s, mem_ref(&mi, 0), 1 << 30, 0);
	CHECK(ninterrupt_checks - before < 10000, "descent from a corrupt entry level is bounded (%ld steps)",
		  ninterrupt_checks - before);
	shnsw_search_free(&s);

	/* every layer-0 list names node 1 (and node 1 names itself) */
	for (int p = 0; p < n; p++)
	{
		ShnswNodeHeader *h = (ShnswNodeHeader *) (mi.nodes + mi.node_size * p);

		h->level = 0;
		for (int j = 0; j < h->nneighbors; j++)
			shnsw_node_neighbors(h)[j] = mem_ref(&mi, 1);
	}
	shnsw_search_init(&s, &sq, &ops, m, 0);
	total = 0;
	while ((nout = shnsw_search_next(&s, mem_ref(&mi, 0), 10, out)) > 0 && total < 10 * n)
		total += nout;
	CHECK(total <= 2 && s.exhausted, "search over lists that all name one node ends (%d rows)", total);
	shnsw_search_free(&s);

	/* a cycle: node p links only to p + 1, the last back to the first */
	for (int p = 0; p < n; p++)
	{
		ShnswNodeHeader *h = (ShnswNodeHeader *) (mi.nodes + mi.node_size * p);

		h->nneighbors = 1;
		shnsw_node_neighbors(h)[0] = mem_ref(&mi, (p + 1) % n);
	}
	shnsw_search_init(&s, &sq, &ops, m, 0);
	total = 0;
	while ((nout = shnsw_search_next(&s, mem_ref(&mi, 0), 10, out)) > 0 && total < 10 * n)
		total += nout;
	CHECK(total == n && s.exhausted, "search around a cycle visits each node once (%d rows of %d)",
		  total, n);
	shnsw_search_free(&s);

	mem_index_free(&mi);
	shnsw_build_free(&g);
	free(x);
	sq8_data_free(&sd);
	free(order);
}

/*
 * Distinct pages among the layer-0 neighbours of a node, averaged over all
 * nodes, when nodes are placed per_page to a page in `order`: the pages an
 * expansion reads on a cold index (its unvisited neighbours are a subset).
 */
static double
layout_pages_per_list(ShnswBuildGraph *g, const uint32_t *order, int per_page)
{
	uint32_t   *page = malloc(sizeof(uint32_t) * g->n);
	double		total = 0;

	for (uint32_t p = 0; p < g->n; p++)
		page[order[p]] = p / per_page;
	for (uint32_t i = 0; i < g->n; i++)
	{
		int			cnt;
		ShnswRef   *nb = shnsw_build_neighbors(g, i, 0, &cnt);
		uint32_t	seen[2 * SHNSW_MAX_M];
		int			ns = 0;

		for (int k = 0; k < cnt; k++)
		{
			int			j = 0;

			while (j < ns && seen[j] != page[nb[k]])
				j++;
			if (j == ns)
				seen[ns++] = page[nb[k]];
		}
		total += ns;
	}
	free(page);
	return total / g->n;
}

/*
 * The page-by-page layout (shnsw_build_layout_pages) is a permutation and
 * puts a node's neighbours on fewer pages than breadth-first order, on
 * clustered and on scattered (uniform) data, by at least the factor given
 * (1 - max_ratio); prints both.
 */
static void
test_layout_locality(const char *what, int n, int dim, int nc, int per_page, double max_ratio)
{
	float	   *x = nc > 0 ? make_data(n, dim, nc) : malloc(sizeof(float) * n * dim);
	ShnswBuildGraph g;
	uint32_t   *bfs = malloc(sizeof(uint32_t) * n);
	uint32_t   *pages = malloc(sizeof(uint32_t) * n);
	uint8_t    *seen = calloc(n, 1);
	int			perm = 1;
	double		pb,
				pp;

	if (nc == 0)
		for (int i = 0; i < n * dim; i++)
			x[i] = (float) urand();
	shnsw_build_init(&g, dim, 16, 64, SHNSW_METRIC_L2, n, false, NULL, NULL, 7, NULL);
	for (int i = 0; i < n; i++)
		shnsw_build_link(&g, shnsw_build_add_vector(&g, x + (size_t) i * dim));
	shnsw_build_ensure_reachable(&g);
	shnsw_build_layout_pages(&g, per_page, pages, bfs);	/* bfs: its scratch */
	shnsw_build_layout_order(&g, bfs);
	for (int i = 0; i < n; i++)
	{
		if (seen[pages[i]])
			perm = 0;
		seen[pages[i]] = 1;
	}
	CHECK(perm, "%s: page layout is a permutation", what);
	CHECK(pages[0] == g.entry, "%s: page layout starts at the entry point", what);
	{
		int			banded = 1;

		/* level by level, highest first: a descent's nodes lead */
		for (int i = 1; i < n; i++)
			if (g.levels[pages[i]] > g.levels[pages[i - 1]])
				banded = 0;
		CHECK(banded, "%s: page layout places nodes by level, highest first", what);
	}
	pb = layout_pages_per_list(&g, bfs, per_page);
	pp = layout_pages_per_list(&g, pages, per_page);
	printf("  layout %s (%d x %d, %d per page): pages per neighbour list: breadth-first %.2f, "
		   "co-location %.2f\n", what, n, dim, per_page, pb, pp);
	CHECK(pp < max_ratio * pb, "%s: page layout %.2f pages per list, breadth-first %.2f",
		  what, pp, pb);
	shnsw_build_free(&g);
	free(x);
	free(bfs);
	free(pages);
	free(seen);
}


/* qsort comparator of doubles */
static int
dbl_cmp(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return (x > y) - (x < y);
}

/* pgvector's exact distances, computed as it does (float sums) */
static double
pgv_distance(ShnswMetric metric, const float *a, const float *b, int dim)
{
	float		s = 0,
				na = 0,
				nb = 0;
	double		sim;

	for (int i = 0; i < dim; i++)
	{
		if (metric == SHNSW_METRIC_L2)
		{
			float		diff = a[i] - b[i];

			s += diff * diff;
		}
		else if (metric == SHNSW_METRIC_L1)
			s += fabsf(a[i] - b[i]);
		else
		{
			s += a[i] * b[i];
			na += a[i] * a[i];
			nb += b[i] * b[i];
		}
	}
	if (metric == SHNSW_METRIC_L2)
		return sqrt((double) s);
	if (metric == SHNSW_METRIC_L1)
		return (double) s;
	if (metric == SHNSW_METRIC_IP)
		return (double) -s;
	sim = (double) s / sqrt((double) na * (double) nb);
	if (sim > 1)
		sim = 1;
	if (sim < -1)
		sim = -1;
	return 1 - sim;
}

/*
 * The data of a bound test: nrows rows of dim values (raw) and their
 * navigation form (nav: normalized for cosine), SQ8 trained on the first
 * ntrain, and one query at a time (q, its navigation form qn, prepared as
 * sq).
 */
typedef struct BoundRows
{
	int			dim;
	float	   *raw,
			   *nav,
			   *lo,
			   *scale,
			   *q,
			   *qn,
			   *qs,
			   *w;
	Sq8Query	sq;
} BoundRows;

static void
bound_rows_alloc(BoundRows *b, int nrows, int dim)
{
	b->dim = dim;
	b->raw = malloc(sizeof(float) * (size_t) nrows * dim);
	b->nav = malloc(sizeof(float) * (size_t) nrows * dim);
	b->lo = malloc(sizeof(float) * dim);
	b->scale = malloc(sizeof(float) * dim);
	b->q = malloc(sizeof(float) * dim);
	b->qn = malloc(sizeof(float) * dim);
	b->qs = malloc(sizeof(float) * dim);
	b->w = malloc(sizeof(float) * dim);
}

/* nav from raw (all nrows), then SQ8 trained on the first ntrain */
static void
bound_rows_train(BoundRows *b, ShnswMetric metric, int nrows, int ntrain)
{
	int			dim = b->dim;
	float	   *mins = malloc(sizeof(float) * dim),
			   *maxs = malloc(sizeof(float) * dim);

	memcpy(b->nav, b->raw, sizeof(float) * (size_t) nrows * dim);
	if (metric == SHNSW_METRIC_COSINE)
		for (int i = 0; i < nrows; i++)
			shnsw_normalize(b->nav + (size_t) i * dim, dim);
	sq8_train_init(mins, maxs, dim);
	for (int i = 0; i < ntrain; i++)
		sq8_train_add(mins, maxs, b->nav + (size_t) i * dim, dim);
	sq8_train_finish(mins, maxs, b->lo, b->scale, dim);
	free(mins);
	free(maxs);
}

/* query t: around shift, three times as spread every third one; b->sq prepared */
static void
bound_rows_query(BoundRows *b, ShnswMetric metric, double shift, double spread, int t)
{
	int			dim = b->dim;

	for (int j = 0; j < dim; j++)
		b->q[j] = (float) (shift + spread * nrand() * (t % 3 == 0 ? 3 : 1));
	memcpy(b->qn, b->q, sizeof(float) * dim);
	if (metric == SHNSW_METRIC_COSINE)
		shnsw_normalize(b->qn, dim);
	b->sq = (Sq8Query) {.dim = dim,.qs = b->qs,.w = b->w};
	sq8_prepare_query(&b->sq, shnsw_code_metric(metric), b->qn, b->lo, b->scale);
}

static void
bound_rows_free(BoundRows *b)
{
	free(b->raw);
	free(b->nav);
	free(b->lo);
	free(b->scale);
	free(b->q);
	free(b->qn);
	free(b->qs);
	free(b->w);
}

/*
 * The emit bound (codebound.c, shnsw_codebound_lower and
 * shnsw_codebound_code) on random data: for every metric, several
 * dimensions and value scales, the bound from a row's navigation distance
 * never exceeds its exact distance as pgvector computes it, nor does the
 * box bound of its code; rows clamped into the trained range (values far
 * outside it) break the first and never the second. The bounds are not
 * vacuous: on rows inside the range, the median gap to the exact distance
 * is a small part of the distance's spread.
 */
static void
test_emit_bounds(void)
{
	ShnswMetric metrics[] = {SHNSW_METRIC_L2, SHNSW_METRIC_COSINE, SHNSW_METRIC_IP,
	SHNSW_METRIC_L1};
	int			dims[] = {3, 16, 128, 384};
	const char *names[] = {"l2", "cosine", "ip", "l1"};
	long		clamped_total = 0;
	uint64_t	saved = 0;

	for (int mi = 0; mi < 4; mi++)
	{
		/* L1 last, and the tests after see the data generator as before it */
		if (mi == 3)
			saved = rng_state;
		for (int di = 0; di < 4; di++)
		{
			ShnswMetric metric = metrics[mi];
			int			dim = dims[di];
			int			n = 2000,
						nq = 20,
						nout = 200;
			double		shift = urand() * 4 - 2,
						spread = 0.01 + urand() * 3;
			BoundRows	br;
			float	   *raw,
					   *nav,
					   *lo,
					   *scale,
					   *q,
					   *qn;
			uint8_t    *code = malloc(dim);
			double		res_in = 0.0,
						res_all = 0.0;
			long		viol = 0,
						res_viol = 0,
						res_looser = 0,
						box_viol = 0,
						clamped_viol = 0,
						box_looser = 0,
						typ_viol = 0,
						typ_tighter = 0,
						checked = 0;
			double	   *gaps = malloc(sizeof(double) * n * nq),
					   *ex = malloc(sizeof(double) * n * nq);
			int			ngap = 0;

			bound_rows_alloc(&br, n + nout, dim);
			raw = br.raw;
			nav = br.nav;
			lo = br.lo;
			scale = br.scale;
			q = br.q;
			qn = br.qn;

			/* rows: uneven per-dimension scales; the last nout far outside */
			for (int i = 0; i < n + nout; i++)
				for (int j = 0; j < dim; j++)
				{
					double		v = shift + spread * (j % 7 + 1) / 4.0 * nrand();

					if (i >= n)
						v = v * 3 + (urand() < 0.5 ? -1 : 1) * 4 * spread;
					raw[(size_t) i * dim + j] = (float) v;
				}
			bound_rows_train(&br, metric, n + nout, n);
			/* the largest residual of the rows in range, and of all (clamped too) */
			for (int i = 0; i < n + nout; i++)
			{
				double		r;

				sq8_encode(lo, scale, nav + (size_t) i * dim, code, dim);
				r = shnsw_code_residual(metric, lo, scale, nav + (size_t) i * dim, code, dim);
				if (i < n)
					res_in = fmax(res_in, r);
				res_all = fmax(res_all, r);
			}

			for (int t = 0; t < nq; t++)
			{
				ShnswCodeBound b,
							b_in,
							b_all,
							b_typ;

				bound_rows_query(&br, metric, shift, spread, t);
				shnsw_codebound_prepare(&b, metric, false, qn, lo, scale, dim, -1.0);
				shnsw_codebound_prepare(&b_in, metric, false, qn, lo, scale, dim, res_in);
				shnsw_codebound_prepare(&b_all, metric, false, qn, lo, scale, dim, res_all);
				{
					/* a residual set afterwards: the same bound to the bit */
					ShnswCodeBound b_set = b;

					shnsw_codebound_set_residual(&b_set, res_in);
					CHECK(memcmp(&b_set.err_abs, &b_in.err_abs, sizeof(double)) == 0 &&
						  memcmp(&b_set.err_typ, &b_in.err_typ, sizeof(double)) == 0,
						  "bound %d-d: residual set afterwards %.17g, prepared with it %.17g",
						  dim, b_set.err_abs, b_in.err_abs);
				}
				b_typ = b;
				b_typ.err_abs = b.err_typ;
				typ_tighter += b.err_typ < 0.5 * b.err_abs;
				for (int i = 0; i < n + nout; i++)
				{
					double		d,
								lb,
								box,
								est;

					sq8_encode(lo, scale, nav + (size_t) i * dim, code, dim);
					d = pgv_distance(metric, q, raw + (size_t) i * dim, dim);
					est = sq8_distance(&br.sq, code);
					lb = shnsw_codebound_lower(&b, est);
					/* the largest residual bounds every row it covers, both ways */
					res_viol += shnsw_codebound_lower(&b_all, est) > d ||
						shnsw_codebound_upper(&b_all, est) < d;
					if (i < n)
					{
						res_viol += shnsw_codebound_lower(&b_in, est) > d ||
							shnsw_codebound_upper(&b_in, est) < d;
						res_looser += shnsw_codebound_lower(&b_in, est) < lb - 1e-9 * (1 + fabs(lb));
					}
					box = shnsw_codebound_code(&b, code);
					checked++;
					box_viol += box > d;
					if (i < n)
					{
						viol += lb > d;
						typ_viol += shnsw_codebound_lower(&b_typ, est) > d;
						/*
						 * inside the range the box is the tighter bound
						 * (L2: |(|a| - e)+| >= |a| - |e|); under inner
						 * product both are one sum, up to est's float
						 * rounding
						 */
						if (!shnsw_code_at_edge(metric, code, dim) && metric != SHNSW_METRIC_IP)
							box_looser += box < lb - 1e-5 * (1 + fabs(lb));
						gaps[ngap] = d - lb;
						ex[ngap++] = d;
					}
					else
						clamped_viol += lb > d;
				}
			}
			qsort(gaps, ngap, sizeof(double), dbl_cmp);
			qsort(ex, ngap, sizeof(double), dbl_cmp);
			printf("  bound %s %d-d: median gap %.4g, exact distances %.4g..%.4g; clamped rows "
				   "past the navigation bound %ld of %ld\n", names[mi], dim, gaps[ngap / 2],
				   ex[ngap / 10], ex[ngap * 9 / 10], clamped_viol, (long) nout * nq);
			CHECK(viol == 0, "bound %s %d-d: navigation bound above the exact distance %ld times",
				  names[mi], dim, viol);

			/*
			 * The typical error (6 standard deviations of the rounding, a
			 * premise: scan.c's first round) held for every row inside the
			 * range here too, and in 384 dimensions it is under half the
			 * worst case even with these scales, 7x apart (it takes the
			 * largest step for every direction).
			 */
			CHECK(typ_viol == 0, "bound %s %d-d: typical-error bound above the exact distance "
				  "%ld times", names[mi], dim, typ_viol);
			CHECK(dim < 384 || typ_tighter == nq, "bound %s %d-d: typical error not under half "
				  "the worst case (%ld of %d queries)", names[mi], dim, typ_tighter, nq);
			CHECK(res_viol == 0, "bound %s %d-d: residual bounds (%.4g in range, %.4g with clamped "
				  "rows) wrong %ld times", names[mi], dim, res_in, res_all, res_viol);
			if (metric != SHNSW_METRIC_IP)
				CHECK(res_looser == 0, "bound %s %d-d: the in-range residual bound looser than the "
					  "worst case %ld times", names[mi], dim, res_looser);
			CHECK(box_viol == 0, "bound %s %d-d: box bound above the exact distance %ld of %ld",
				  names[mi], dim, box_viol, checked);
			CHECK(box_looser == 0, "bound %s %d-d: box bound looser than the navigation bound %ld times",
				  names[mi], dim, box_looser);
			CHECK(gaps[ngap / 2] < (ex[ngap * 9 / 10] - ex[ngap / 10]) / 2,
				  "bound %s %d-d: median gap %g not small against the spread %g", names[mi], dim,
				  gaps[ngap / 2], ex[ngap * 9 / 10] - ex[ngap / 10]);
			clamped_total += clamped_viol;
			bound_rows_free(&br);
			free(code);
			free(gaps);
			free(ex);
		}
	}
	rng_state = saved;
	CHECK(clamped_total > 0, "clamped rows pass the navigation bound (the box bound is needed)");
}

/*
 * Clamped values (codebound.c, shnsw_code_excess, shnsw_clamp_flags and
 * shnsw_clamp_distance; scan.c bounds flagged nodes with them): rows
 * inside the trained range have no excess and no flag; a row outside has
 * the distance from its value to the cells its code stands for as excess,
 * and a class whose limit is the least one at least that excess. A
 * flagged row's navigation distance taken its class's slack nearer gives
 * a bound no higher than its exact distance, with the worst case of a
 * value inside its cells (a proof) and with the typical error (the
 * premise scan.c's first round uses), where the plain navigation bound
 * fails for some; the class's slack is tighter than the largest one.
 */
static void
test_clamp_bounds(void)
{
	ShnswMetric metrics[] = {SHNSW_METRIC_L2, SHNSW_METRIC_COSINE, SHNSW_METRIC_IP,
	SHNSW_METRIC_L1};
	int			dims[] = {16, 128, 384};
	const char *names[] = {"l2", "cosine", "ip", "l1"};
	long		plain_total = 0;
	uint64_t	saved = 0;

	for (int mi = 0; mi < 4; mi++)
	{
		/* L1 last, and the tests after see the data generator as before it */
		if (mi == 3)
			saved = rng_state;
		for (int di = 0; di < 3; di++)
		{
			ShnswMetric metric = metrics[mi];
			int			dim = dims[di];
			int			n = 1000,
						nout = 300,
						nq = 10;
			double		shift = urand() * 2 - 1,
						spread = 0.05 + urand();
			BoundRows	br;
			float	   *raw,
					   *nav,
					   *lo,
					   *scale;
			uint8_t    *code = malloc((size_t) (n + nout) * dim);
			double	   *excess = malloc(sizeof(double) * (n + nout));
			uint8_t    *flags = malloc(n + nout);
			double		unit,
						max_excess = 0.0;
			long		inside_flagged = 0,
						excess_wrong = 0,
						class_wrong = 0,
						flagged = 0,
						proof_viol = 0,
						typ_viol = 0,
						plain_viol = 0,
						tighter = 0,
						pairs = 0;

			/*
			 * rows: the last nout outside the range, half of them in one
			 * dimension, three to four standard deviations out (the
			 * inserts that fall just outside), half far out everywhere
			 */
			bound_rows_alloc(&br, n + nout, dim);
			raw = br.raw;
			nav = br.nav;
			lo = br.lo;
			scale = br.scale;
			for (int i = 0; i < n + nout; i++)
				for (int j = 0; j < dim; j++)
				{
					double		v = shift + spread * (j % 5 + 1) / 3.0 * nrand();

					if (i >= n && i % 2 == 0 && j == (i / 2) % dim)
						v += (urand() < 0.5 ? -1 : 1) * spread * (j % 5 + 1) / 3.0 * (3 + urand());
					else if (i >= n && i % 2 == 1)
						v = v * 3 + (urand() < 0.5 ? -1 : 1) * 3 * spread;
					raw[(size_t) i * dim + j] = (float) v;
				}
			bound_rows_train(&br, metric, n + nout, n);
			unit = shnsw_clamp_unit(metric, scale, dim);

			for (int i = 0; i < n + nout; i++)
			{
				const float *v = nav + (size_t) i * dim;
				uint8_t    *c = code + (size_t) i * dim;
				double		box = 0.0;
				int			k;

				sq8_encode(lo, scale, v, c, dim);
				excess[i] = shnsw_code_excess(metric, lo, scale, v, c, dim);
				flags[i] = shnsw_clamp_flags(excess[i], unit);
				/* the distance to the range widened by half a step */
				for (int j = 0; j < dim; j++)
				{
					double		a = (double) lo[j] - scale[j] / 2.0,
								b = (double) lo[j] + 255.5 * scale[j],
								g = v[j] < a ? a - v[j] : v[j] > b ? v[j] - b : 0.0;

					box += metric == SHNSW_METRIC_L1 ? g : g * g;
				}
				if (metric != SHNSW_METRIC_L1)
					box = sqrt(box);
				if (i < n)
				{
					inside_flagged += excess[i] != 0.0 || flags[i] != 0;
					continue;
				}
				excess_wrong += fabs(excess[i] - box) > 1e-5 * (box + unit);
				if (!(flags[i] & SHNSW_NODE_CLAMPED))
				{
					excess_wrong += box > 1e-5 * unit;
					continue;
				}
				flagged++;
				max_excess = fmax(max_excess, excess[i]);
				k = shnsw_node_clamp_class(flags[i]);
				if (k == 0)
					class_wrong += !(excess[i] > shnsw_clamp_class_limit(SHNSW_NODE_CLAMP_CLASSES - 1, unit));
				else
					class_wrong += shnsw_clamp_class_limit(k, unit) < excess[i] ||
						(k > 1 && shnsw_clamp_class_limit(k - 1, unit) >= excess[i] * (1 + 1e-5));
			}

			for (int t = 0; t < nq; t++)
			{
				ShnswMetric nm = shnsw_code_metric(metric);
				const float *qn = br.qn;
				ShnswCodeBound b,
							b_typ;
				double		factor = 1.0;

				bound_rows_query(&br, metric, shift, spread, t);
				shnsw_codebound_prepare(&b, metric, false, qn, lo, scale, dim, -1.0);
				b_typ = b;
				b_typ.err_abs = b.err_typ;
				if (metric == SHNSW_METRIC_IP)
					factor = b.qnorm * (1 + 1e-6);
				factor *= 1 + 1e-4;	/* as scan.c: room for the relative terms */
				for (int i = n; i < n + nout; i++)
				{
					int			k = shnsw_node_clamp_class(flags[i]);
					double		d,
								est,
								slack,
								max_slack = max_excess * factor;

					if (!(flags[i] & SHNSW_NODE_CLAMPED))
						continue;
					slack = k == 0 ? max_slack :
						fmin(shnsw_clamp_class_limit(k, unit) * factor, max_slack);
					d = pgv_distance(metric, br.q, raw + (size_t) i * dim, dim);
					est = sq8_distance(&br.sq, code + (size_t) i * dim);
					pairs++;
					proof_viol +=
						shnsw_codebound_lower(&b, shnsw_clamp_distance(nm, est, slack)) > d;
					typ_viol +=
						shnsw_codebound_lower(&b_typ, shnsw_clamp_distance(nm, est, slack)) > d;
					plain_viol += shnsw_codebound_lower(&b_typ, est) > d;
					tighter += slack < 0.5 * max_slack;
				}
			}
			printf("  clamp %s %d-d: %ld of %d rows outside flagged, excess up to %.3g units; "
				   "typical bound without the slack above the exact distance %ld of %ld\n",
				   names[mi], dim, flagged, nout, max_excess / unit, plain_viol, pairs);
			CHECK(inside_flagged == 0, "clamp %s %d-d: %ld rows inside the range have an excess",
				  names[mi], dim, inside_flagged);
			CHECK(flagged > nout / 10, "clamp %s %d-d: only %ld of %d rows outside flagged",
				  names[mi], dim, flagged, nout);
			CHECK(excess_wrong == 0, "clamp %s %d-d: excess not the distance to the cells %ld times",
				  names[mi], dim, excess_wrong);
			CHECK(class_wrong == 0, "clamp %s %d-d: class not the least that holds the excess "
				  "%ld times", names[mi], dim, class_wrong);
			CHECK(proof_viol == 0 && typ_viol == 0, "clamp %s %d-d: slack bound above the exact "
				  "distance %ld (worst case) / %ld (typical) of %ld", names[mi], dim, proof_viol,
				  typ_viol, pairs);
			CHECK(tighter > 0, "clamp %s %d-d: no class slack under half the largest",
				  names[mi], dim);
			plain_total += plain_viol;
			bound_rows_free(&br);
			free(code);
			free(excess);
			free(flags);
		}
	}
	rng_state = saved;
	CHECK(plain_total > 0, "clamped rows pass the typical bound without their slack (it is needed)");
}

/* qsort order of (distance, position) pairs, nearest first */
static int
dist_pos_cmp(const void *a, const void *b)
{
	const float *x = a,
			   *y = b;

	return x[0] < y[0] ? -1 : x[0] > y[0];
}

typedef struct CosSelArg
{
	const uint8_t *codes;
	const float *scale;
	int			dim;
} CosSelArg;

/* squared L2 between the vectors two codes stand for */
static float
cos_sel_l2(void *arg, int a, int b)
{
	CosSelArg  *c = arg;
	float		s = 0;

	for (int i = 0; i < c->dim; i++)
	{
		float		t = ((float) c->codes[a * c->dim + i] - c->codes[b * c->dim + i]) * c->scale[i];

		s += t * t;
	}
	return s;
}

/*
 * Inserts under cosine choose neighbours on the L2 form of the codes
 * (shnsw_code_metric): near neighbours of a unit query, whose code-to-code
 * distances the inner-product form gets wrong by amounts that scale with
 * |q| rather than |x - q|. shnsw_select_by_codes on cosine must keep what
 * the heuristic keeps on squared L2 between the decoded vectors.
 */
static void
test_select_by_codes_cosine(void)
{
	enum
	{
	DIM = 24, N = 48, MAX = 8
	};
	uint64_t	saved = rng_state;
	float		lo[DIM],
				scale[DIM],
				q[DIM],
				x[DIM],
				dq[N],
				pairs[N][2],
				scratch[(1 + MAX) * DIM];
	uint8_t		raw[N * DIM],
				codes[N * DIM];
	int			same = 0,
				trials = 40;

	CHECK(shnsw_code_metric(SHNSW_METRIC_COSINE) == SHNSW_METRIC_L2 &&
		  shnsw_code_metric(SHNSW_METRIC_IP) == SHNSW_METRIC_IP &&
		  shnsw_code_metric(SHNSW_METRIC_L2) == SHNSW_METRIC_L2 &&
		  shnsw_code_metric(SHNSW_METRIC_L1) == SHNSW_METRIC_L1, "code metric per index metric");
	rng_state = 1414;
	for (int i = 0; i < DIM; i++)
	{
		lo[i] = -1.0f;
		scale[i] = 2.0f / 255.0f;
	}
	for (int t = 0; t < trials; t++)
	{
		int			sel[MAX],
					want[MAX],
					nsel,
					nwant,
					fill = t % 2 ? MAX : 0;
		CosSelArg	arg = {codes, scale, DIM};

		for (int i = 0; i < DIM; i++)
			q[i] = (float) nrand();
		shnsw_normalize(q, DIM);
		for (int k = 0; k < N; k++)
		{
			float		d = 0;

			for (int i = 0; i < DIM; i++)
				x[i] = q[i] + 0.25f * (float) nrand();
			shnsw_normalize(x, DIM);
			sq8_encode(lo, scale, x, raw + k * DIM, DIM);
			sq8_decode(lo, scale, raw + k * DIM, x, DIM);
			for (int i = 0; i < DIM; i++)
				d += (q[i] - x[i]) * (q[i] - x[i]);
			pairs[k][0] = d;
			pairs[k][1] = (float) k;
		}
		qsort(pairs, N, sizeof(pairs[0]), dist_pos_cmp);
		for (int k = 0; k < N; k++)
		{
			dq[k] = pairs[k][0];
			memcpy(codes + k * DIM, raw + (int) pairs[k][1] * DIM, DIM);
		}
		nsel = shnsw_select_by_codes(dq, codes, N, MAX, fill, DIM, SHNSW_METRIC_COSINE, lo, scale,
									 scratch, sel, NULL);
		nwant = shnsw_select_heuristic(dq, N, MAX, fill, cos_sel_l2, &arg, want, NULL, NULL);
		same += nsel == nwant && memcmp(sel, want, sizeof(int) * nsel) == 0;
	}
	CHECK(same == trials, "cosine selection on codes is the L2 heuristic's: %d of %d", same,
		  trials);
	rng_state = saved;
}

/*
 * shnsw_codes_lie_apart: neighbours that lie together, away from the new
 * node (an insert searched into another cluster), against neighbours
 * around it; never under inner product; fewer than two neighbours never.
 */
static void
test_codes_lie_apart(void)
{
	enum
	{
	DIM = 16, N = 8
	};
	float		lo[DIM],
				scale[DIM],
				x[DIM],
				d[N],
				scratch[3 * DIM];
	uint8_t		codes[N * DIM];

	for (int i = 0; i < DIM; i++)
	{
		lo[i] = -4.0f;
		scale[i] = 8.0f / 255.0f;
	}
	/* a cluster around 1.0 in every dimension, 0.1 apart */
	for (int k = 0; k < N; k++)
	{
		for (int i = 0; i < DIM; i++)
			x[i] = 1.0f + (i == k ? 0.1f : 0.0f);
		sq8_encode(lo, scale, x, codes + k * DIM, DIM);
	}
	/* squared L2 between neighbours about 0.02: 1.0 is far, 0.05 is not */
	d[0] = 1.0f;
	CHECK(shnsw_codes_lie_apart(d, codes, N, DIM, SHNSW_METRIC_L2, lo, scale, scratch),
		  "neighbours together, far from the node");
	CHECK(shnsw_codes_lie_apart(d, codes, N, DIM, SHNSW_METRIC_COSINE, lo, scale, scratch),
		  "cosine is judged on squared L2");
	d[0] = 0.05f;
	CHECK(!shnsw_codes_lie_apart(d, codes, N, DIM, SHNSW_METRIC_L2, lo, scale, scratch),
		  "the node among its neighbours");
	d[0] = 1.0f;
	CHECK(!shnsw_codes_lie_apart(d, codes, N, DIM, SHNSW_METRIC_IP, lo, scale, scratch),
		  "never under inner product");
	CHECK(!shnsw_codes_lie_apart(d, codes, 1, DIM, SHNSW_METRIC_L2, lo, scale, scratch),
		  "one neighbour is no scale");
	/* copies of the nearest are no scale: the nearest other vector is */
	memcpy(codes + DIM, codes, DIM);
	d[0] = 0.05f;
	CHECK(!shnsw_codes_lie_apart(d, codes, N, DIM, SHNSW_METRIC_L2, lo, scale, scratch),
		  "a copy among the neighbours does not make the node far");
	for (int k = 1; k < N; k++)
		memcpy(codes + k * DIM, codes, DIM);
	CHECK(!shnsw_codes_lie_apart(d, codes, N, DIM, SHNSW_METRIC_L2, lo, scale, scratch),
		  "neighbours that are all copies are never far");
}

int
main(void)
{
	printf("SIMD level: %d\n", shnsw_kernels_init(SHNSW_SIMD_AVX512));
	test_kernels();
	test_bit_kernels();
	test_sparse_sketch();
	test_batch_kernels();
	test_sq8_clamp_and_half();
	test_heap_visited();
	test_lookahead();
	test_half_conversion();
	test_half_kernels();
	test_graph_search(SHNSW_METRIC_L2, 3000, 32, 16, 64, ON_FLOATS);
	test_graph_search(SHNSW_METRIC_L2, 3000, 32, 8, 64, ON_CODES);
	test_graph_search(SHNSW_METRIC_COSINE, 2000, 64, 16, 64, ON_FLOATS);
	test_graph_search(SHNSW_METRIC_IP, 2000, 16, 16, 64, ON_FLOATS);
	test_graph_search(SHNSW_METRIC_L2, 20000, 24, 16, 64, ON_FLOATS);
	test_graph_search(SHNSW_METRIC_L2, 3000, 32, 16, 64, ON_HALVES);
	test_graph_search(SHNSW_METRIC_COSINE, 2000, 64, 16, 64, ON_HALVES);
	test_graph_search(SHNSW_METRIC_IP, 2000, 16, 16, 64, ON_HALVES);
	test_halves_graph_quality();
	test_reachability_cases();
	test_search_bounds();
	test_emit_bounds();
	test_clamp_bounds();
	test_select_by_codes_cosine();
	test_codes_lie_apart();
	{
		int			passed = 0;

		nfailed += test_nodecheck(&passed);
		npassed += passed;
	}
	/* the page-greedy layout before co-location: 0.877 and 0.958 */
	test_layout_locality("clustered", 20000, 32, 50, 15, 0.85);
	test_layout_locality("uniform", 20000, 32, 0, 15, 0.94);
	/* last: they draw from the data generator */
	test_build_attach(true);
	test_build_attach(false);
	/* L1 navigation on floats, codes and halves (after the rest: it draws data too) */
	test_graph_search(SHNSW_METRIC_L1, 3000, 32, 16, 64, ON_FLOATS);
	test_graph_search(SHNSW_METRIC_L1, 3000, 32, 8, 64, ON_CODES);
	test_graph_search(SHNSW_METRIC_L1, 3000, 32, 16, 64, ON_HALVES);
	printf("%d passed, %d failed\n", npassed, nfailed);
	return nfailed == 0 ? 0 : 1;
}
