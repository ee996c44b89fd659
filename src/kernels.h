/*-------------------------------------------------------------------------
 *
 * kernels.h
 *	  Pure distance kernels and the SQ8 scalar quantizer.
 *
 * Nothing here depends on PostgreSQL: the unit tests in test/unit link
 * these files into a plain C program. Kernels exist in a portable version
 * and, on x86-64, in AVX2+FMA and AVX-512 versions chosen at run time by
 * shnsw_kernels_init().
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_KERNELS_H
#define STREAMHNSW_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "format.h"
#include "kernels_bit.h"
#include "kernels_l1.h"
#include "simd.h"

/* The SIMD features of this CPU (and saved by the OS) the kernels can use. */
typedef struct ShnswCpuFeatures
{
	bool		sse42;
	bool		avx2;
	bool		fma;
	bool		f16c;
	bool		avx512f;
} ShnswCpuFeatures;

/* Detected on the first call, then remembered (all false off x86-64). */
extern const ShnswCpuFeatures *shnsw_cpu_features(void);

/* Pick the best implementation for this CPU; idempotent. max caps it. */
extern ShnswSimdLevel shnsw_kernels_init(ShnswSimdLevel max);

/* Float kernels (build-time graph construction). */
extern float (*shnsw_l2sq_f32) (const float *a, const float *b, int dim);
extern float (*shnsw_dot_f32) (const float *a, const float *b, int dim);

/* IEEE half (as stored by pgvector's halfvec) to float: shnsw_half_to_float (simd.h). */
extern void shnsw_halves_to_floats(const uint16_t *h, float *out, int dim);

/*
 * Half-precision navigation vectors: a build may link on IEEE binary16
 * copies of its float vectors (buildgraph.c, shnsw_build_init_halves), half the
 * memory traffic of floats. A vector is multiplied by a power of two
 * (shnsw_half_scale) before it is rounded, so that the largest value of
 * the data set sits well inside binary16's range; distances between scaled
 * vectors are the float distances times the square of that power, which
 * keeps their order. The rounding is IEEE round-to-nearest-even at every
 * level (F16C and AVX-512 convert as the portable code does).
 */
extern uint16_t shnsw_float_to_half(float f);
extern float shnsw_half_scale(const float *mins, const float *maxs, int dim);
extern void (*shnsw_floats_to_halves) (const float *v, float scale, uint16_t *out, int dim);
extern void (*shnsw_halves_to_floats_nav) (const uint16_t *h, float *out, int dim);

/* Distances from a float vector a to a half vector b. */
extern float (*shnsw_l2sq_f32_f16) (const float *a, const uint16_t *b, int dim);
extern float (*shnsw_dot_f32_f16) (const float *a, const uint16_t *b, int dim);

/*
 * Navigation distances for a metric (smaller is closer): L2 squared, L1,
 * else the negative inner product; between two float vectors, and from a
 * float vector a to a half vector b. Bit vectors never come here: their
 * graphs are built on their codes (sq8_distance).
 */
static inline float
shnsw_float_distance(ShnswMetric metric, const float *a, const float *b, int dim)
{
	return metric == SHNSW_METRIC_L2 ? shnsw_l2sq_f32(a, b, dim) :
		metric == SHNSW_METRIC_L1 ? shnsw_l1_f32(a, b, dim) : -shnsw_dot_f32(a, b, dim);
}

static inline float
shnsw_half_distance(ShnswMetric metric, const float *a, const uint16_t *b, int dim)
{
	return metric == SHNSW_METRIC_L2 ? shnsw_l2sq_f32_f16(a, b, dim) :
		metric == SHNSW_METRIC_L1 ? shnsw_l1_f32_f16(a, b, dim) : -shnsw_dot_f32_f16(a, b, dim);
}

/* Scale v to unit length in place; returns false (and leaves v) if its norm is 0. */
extern bool shnsw_normalize(float *v, int dim);

/*
 * SQ8: per-dimension lo and scale; code c in 0..255 stands for lo + c * scale.
 * Values outside the trained range are clamped to 0 or 255.
 */
/* the step of a dimension that never varied, relative to its value */
#define SQ8_CONST_STEP	(1.0f / 1048576.0f)

extern void sq8_train_init(float *mins, float *maxs, int dim);
extern void sq8_train_add(float *mins, float *maxs, const float *v, int dim);
extern void sq8_train_finish(const float *mins, const float *maxs,
							 float *lo, float *scale, int dim);
/* The identity (lo 0, scale 1) of bit indexes: a byte's code is the byte. */
extern void sq8_train_identity(float *lo, float *scale, int dim);
extern void sq8_encode(const float *lo, const float *scale, const float *v,
					   uint8_t *code, int dim);
extern void sq8_decode(const float *lo, const float *scale, const uint8_t *code,
					   float *out, int dim);

/*
 * A query prepared for distances to SQ8 codes. For L2:
 *	 d = sum w[i] * (qs[i] - c[i])^2,  qs = (q - lo) / scale,  w = scale^2
 * For L1 (kernels_l1.h):
 *	 d = sum w[i] * |qs[i] - c[i]|,  qs = (q - lo) / scale,  w = scale
 * For IP and cosine (q normalized for cosine):
 *	 d = -(bias + sum qs[i] * c[i]),  qs = q * scale,  bias = sum q * lo
 * For Hamming and Jaccard (kernels_bit.h), whose codes are the bit vector's
 * bytes: qb, the query's bytes (in qs's memory), and bias, its bits set;
 * d is the exact distance.
 */
typedef struct Sq8Query
{
	int			dim;
	ShnswMetric metric;
	float		bias;
	float	   *qs;				/* dim floats, caller-allocated */
	float	   *w;				/* dim floats, caller-allocated (L2, L1) */
	uint8_t    *qb;				/* Hamming, Jaccard: the query's bytes */
} Sq8Query;

extern void sq8_prepare_query(Sq8Query *sq, ShnswMetric metric, const float *q,
							  const float *lo, const float *scale);
/*
 * The same for a query that is itself a code (neighbour selection on codes):
 * no decoding, no division.
 */
extern void sq8_prepare_code(Sq8Query *sq, ShnswMetric metric, const uint8_t *code,
							 const float *lo, const float *scale);
extern float (*sq8_l2_kernel) (const float *qs, const float *w, const uint8_t *code, int dim);
extern float (*sq8_dot_kernel) (const float *qs, const uint8_t *code, int dim);

static inline float
sq8_distance(const Sq8Query *sq, const uint8_t *code)
{
	if (sq->metric == SHNSW_METRIC_L2)
		return sq8_l2_kernel(sq->qs, sq->w, code, sq->dim);
	if (sq->metric == SHNSW_METRIC_L1)
		return sq8_l1_kernel(sq->qs, sq->w, code, sq->dim);
	if (sq->metric == SHNSW_METRIC_HAMMING)
		return (float) shnsw_bit_xor_count(sq->qb, code, sq->dim);
	if (sq->metric == SHNSW_METRIC_JACCARD)
		return shnsw_bit_jaccard(sq->qb, (uint32_t) sq->bias, code, sq->dim);
	return -(sq->bias + sq8_dot_kernel(sq->qs, code, sq->dim));
}

/*
 * Batch kernels: out[j] = the kernel's value for the code at codes[j], j <
 * n; each bit-for-bit the one-code kernel's value (several codes share
 * each load of the query). The codes are wherever their records are: the
 * search over the shared cache reads them there, without a copy.
 */
extern void (*sq8_l2_batch_kernel) (const float *qs, const float *w,
									const uint8_t *const *codes, int n, int dim,
									float *out);
extern void (*sq8_dot_batch_kernel) (const float *qs, const uint8_t *const *codes, int n,
									 int dim, float *out);

/* sq8_distance of the n codes at codes[0..n-1], into out: bit-for-bit equal. */
static inline void
sq8_distances_at(const Sq8Query *sq, const uint8_t *const *codes, int n, float *out)
{
	if (sq->metric == SHNSW_METRIC_L2)
		sq8_l2_batch_kernel(sq->qs, sq->w, codes, n, sq->dim, out);
	else if (sq->metric == SHNSW_METRIC_L1)
		sq8_l1_batch_kernel(sq->qs, sq->w, codes, n, sq->dim, out);
	else if (shnsw_metric_is_bit(sq->metric))
	{
		for (int j = 0; j < n; j++)
			out[j] = sq8_distance(sq, codes[j]);
	}
	else
	{
		sq8_dot_batch_kernel(sq->qs, codes, n, sq->dim, out);
		for (int j = 0; j < n; j++)
			out[j] = -(sq->bias + out[j]);
	}
}

/* The same for n codes stride bytes apart. */
static inline void
sq8_distances(const Sq8Query *sq, const uint8_t *codes, int stride, int n, float *out)
{
	const uint8_t *at[16];

	for (int j = 0; j < n; j += 16)
	{
		int			nb = n - j < 16 ? n - j : 16;

		for (int k = 0; k < nb; k++)
			at[k] = codes + (size_t) (j + k) * stride;
		sq8_distances_at(sq, at, nb, out + j);
	}
}

#endif							/* STREAMHNSW_KERNELS_H */
