/*-------------------------------------------------------------------------
 *
 * kernels_l1.c
 *	  L1 distance kernels, portable and (on x86-64) AVX2 and AVX-512.
 *
 * The same shapes as kernels.c's L2 kernels, with |d| where they have d^2:
 * several accumulators in the SIMD versions (results may differ from the
 * portable version in the last bits, which only navigation sees), and a
 * batch kernel that forms each code's sum exactly as the one-code kernel
 * of its level does. AVX2 takes the absolute value by clearing the sign
 * bit; AVX-512 has an instruction for it.
 *
 *-------------------------------------------------------------------------
 */
#include <math.h>
#include <string.h>

#include "kernels_l1.h"



/* ---------- portable ---------- */

static float
l1_f32_portable(const float *a, const float *b, int dim)
{
	float		s = 0.0f;

	for (int i = 0; i < dim; i++)
		s += fabsf(a[i] - b[i]);
	return s;
}

static float
l1_f32_f16_portable(const float *a, const uint16_t *b, int dim)
{
	float		s = 0.0f;

	for (int i = 0; i < dim; i++)
		s += fabsf(a[i] - shnsw_half_to_float(b[i]));
	return s;
}

static float
sq8_l1_portable(const float *qs, const float *w, const uint8_t *code, int dim)
{
	float		s = 0.0f;

	for (int i = 0; i < dim; i++)
		s += w[i] * fabsf(qs[i] - (float) code[i]);
	return s;
}

static void
sq8_l1_batch_portable(const float *qs, const float *w, const uint8_t *const *codes,
					  int n, int dim, float *out)
{
	for (int j = 0; j < n; j++)
		out[j] = sq8_l1_portable(qs, w, codes[j], dim);
}

#ifdef SHNSW_X86_SIMD

/* ---------- AVX2 + FMA (+ F16C for halves) ---------- */

/* |a - b| lane by lane: the difference with its sign bit cleared */
__attribute__((target("avx2,fma")))
static inline __m256
absdiff256(__m256 a, __m256 b)
{
	return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(a, b));
}

__attribute__((target("avx2,fma")))
static float
l1_f32_avx2(const float *a, const float *b, int dim)
{
	__m256		s0 = _mm256_setzero_ps(),
				s1 = _mm256_setzero_ps();
	int			i = 0;
	float		s;

	for (; i + 16 <= dim; i += 16)
	{
		s0 = _mm256_add_ps(s0, absdiff256(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
		s1 = _mm256_add_ps(s1, absdiff256(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8)));
	}
	for (; i + 8 <= dim; i += 8)
		s0 = _mm256_add_ps(s0, absdiff256(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
	s = hsum256(_mm256_add_ps(s0, s1));
	for (; i < dim; i++)
		s += fabsf(a[i] - b[i]);
	return s;
}

__attribute__((target("avx2,fma,f16c")))
static float
l1_f32_f16_avx2(const float *a, const uint16_t *b, int dim)
{
	__m256		s0 = _mm256_setzero_ps(),
				s1 = _mm256_setzero_ps();
	int			i = 0;
	float		s;

	for (; i + 16 <= dim; i += 16)
	{
		s0 = _mm256_add_ps(s0, absdiff256(_mm256_loadu_ps(a + i), load_half8_avx2(b + i)));
		s1 = _mm256_add_ps(s1, absdiff256(_mm256_loadu_ps(a + i + 8), load_half8_avx2(b + i + 8)));
	}
	for (; i + 8 <= dim; i += 8)
		s0 = _mm256_add_ps(s0, absdiff256(_mm256_loadu_ps(a + i), load_half8_avx2(b + i)));
	s = hsum256(_mm256_add_ps(s0, s1));
	for (; i < dim; i++)
		s += fabsf(a[i] - shnsw_half_to_float(b[i]));
	return s;
}

__attribute__((target("avx2,fma")))
static float
sq8_l1_avx2(const float *qs, const float *w, const uint8_t *code, int dim)
{
	__m256		s0 = _mm256_setzero_ps(),
				s1 = _mm256_setzero_ps();
	int			i = 0;
	float		s;

	for (; i + 16 <= dim; i += 16)
	{
		s0 = _mm256_fmadd_ps(absdiff256(_mm256_loadu_ps(qs + i), load_code8_avx2(code + i)),
							 _mm256_loadu_ps(w + i), s0);
		s1 = _mm256_fmadd_ps(absdiff256(_mm256_loadu_ps(qs + i + 8), load_code8_avx2(code + i + 8)),
							 _mm256_loadu_ps(w + i + 8), s1);
	}
	for (; i + 8 <= dim; i += 8)
		s0 = _mm256_fmadd_ps(absdiff256(_mm256_loadu_ps(qs + i), load_code8_avx2(code + i)),
							 _mm256_loadu_ps(w + i), s0);
	s = hsum256(_mm256_add_ps(s0, s1));
	for (; i < dim; i++)
		s += w[i] * fabsf(qs[i] - (float) code[i]);
	return s;
}

/* Four codes per pass, as kernels.c's batch kernels (unrolled by pragma). */
__attribute__((target("avx2,fma")))
static void
sq8_l1_batch_avx2(const float *qs, const float *w, const uint8_t *const *codes,
				  int n, int dim, float *out)
{
	int			j = 0;

	for (; j + 4 <= n; j += 4)
	{
		const uint8_t *c[4];
		__m256		s0[4],
					s1[4];
		int			i = 0;

#pragma GCC unroll 4
		for (int k = 0; k < 4; k++)
		{
			c[k] = codes[j + k];
			s0[k] = _mm256_setzero_ps();
			s1[k] = _mm256_setzero_ps();
		}
		for (; i + 16 <= dim; i += 16)
		{
			__m256		q0 = _mm256_loadu_ps(qs + i),
						q1 = _mm256_loadu_ps(qs + i + 8),
						w0 = _mm256_loadu_ps(w + i),
						w1 = _mm256_loadu_ps(w + i + 8);

#pragma GCC unroll 4
			for (int k = 0; k < 4; k++)
			{
				s0[k] = _mm256_fmadd_ps(absdiff256(q0, load_code8_avx2(c[k] + i)), w0, s0[k]);
				s1[k] = _mm256_fmadd_ps(absdiff256(q1, load_code8_avx2(c[k] + i + 8)), w1, s1[k]);
			}
		}
		for (; i + 8 <= dim; i += 8)
		{
			__m256		q0 = _mm256_loadu_ps(qs + i),
						w0 = _mm256_loadu_ps(w + i);

#pragma GCC unroll 4
			for (int k = 0; k < 4; k++)
				s0[k] = _mm256_fmadd_ps(absdiff256(q0, load_code8_avx2(c[k] + i)), w0, s0[k]);
		}
#pragma GCC unroll 4
		for (int k = 0; k < 4; k++)
		{
			float		s = hsum256(_mm256_add_ps(s0[k], s1[k]));

			for (int t = i; t < dim; t++)
				s += w[t] * fabsf(qs[t] - (float) c[k][t]);
			out[j + k] = s;
		}
	}
	for (; j < n; j++)
		out[j] = sq8_l1_avx2(qs, w, codes[j], dim);
}

/* ---------- AVX-512 ---------- */

__attribute__((target("avx512f")))
static float
l1_f32_avx512(const float *a, const float *b, int dim)
{
	__m512		s0 = _mm512_setzero_ps();
	int			i = 0;

	for (; i + 16 <= dim; i += 16)
		s0 = _mm512_add_ps(s0, _mm512_abs_ps(_mm512_sub_ps(_mm512_loadu_ps(a + i),
														   _mm512_loadu_ps(b + i))));
	if (i < dim)
	{
		__mmask16	m = (__mmask16) ((1u << (dim - i)) - 1);

		s0 = _mm512_add_ps(s0, _mm512_abs_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, a + i),
														   _mm512_maskz_loadu_ps(m, b + i))));
	}
	return _mm512_reduce_add_ps(s0);
}

__attribute__((target("avx512f")))
static float
l1_f32_f16_avx512(const float *a, const uint16_t *b, int dim)
{
	__m512		s0 = _mm512_setzero_ps(),
				s1 = _mm512_setzero_ps();
	int			i = 0;

	for (; i + 32 <= dim; i += 32)
	{
		s0 = _mm512_add_ps(s0, _mm512_abs_ps(_mm512_sub_ps(_mm512_loadu_ps(a + i),
														   load_half16_avx512(b + i))));
		s1 = _mm512_add_ps(s1, _mm512_abs_ps(_mm512_sub_ps(_mm512_loadu_ps(a + i + 16),
														   load_half16_avx512(b + i + 16))));
	}
	for (; i + 16 <= dim; i += 16)
		s0 = _mm512_add_ps(s0, _mm512_abs_ps(_mm512_sub_ps(_mm512_loadu_ps(a + i),
														   load_half16_avx512(b + i))));
	if (i < dim)
	{
		__mmask16	m = (__mmask16) ((1u << (dim - i)) - 1);
		uint16_t	pad[16] = {0};

		memcpy(pad, b + i, sizeof(uint16_t) * (dim - i));
		s1 = _mm512_add_ps(s1, _mm512_abs_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, a + i),
														   load_half16_avx512(pad))));
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

__attribute__((target("avx512f")))
static float
sq8_l1_avx512(const float *qs, const float *w, const uint8_t *code, int dim)
{
	__m512		s0 = _mm512_setzero_ps();
	int			i = 0;
	float		s;

	for (; i + 16 <= dim; i += 16)
		s0 = _mm512_fmadd_ps(_mm512_abs_ps(_mm512_sub_ps(_mm512_loadu_ps(qs + i),
														 load_code16_avx512(code + i))),
							 _mm512_loadu_ps(w + i), s0);
	s = _mm512_reduce_add_ps(s0);
	for (; i < dim; i++)
		s += w[i] * fabsf(qs[i] - (float) code[i]);
	return s;
}

__attribute__((target("avx512f")))
static void
sq8_l1_batch_avx512(const float *qs, const float *w, const uint8_t *const *codes,
					int n, int dim, float *out)
{
	int			j = 0;

	for (; j + 4 <= n; j += 4)
	{
		const uint8_t *c[4];
		__m512		s0[4];
		int			i = 0;

#pragma GCC unroll 4
		for (int k = 0; k < 4; k++)
		{
			c[k] = codes[j + k];
			s0[k] = _mm512_setzero_ps();
		}
		for (; i + 16 <= dim; i += 16)
		{
			__m512		q = _mm512_loadu_ps(qs + i),
						wi = _mm512_loadu_ps(w + i);

#pragma GCC unroll 4
			for (int k = 0; k < 4; k++)
				s0[k] = _mm512_fmadd_ps(_mm512_abs_ps(_mm512_sub_ps(q, load_code16_avx512(c[k] + i))),
										wi, s0[k]);
		}
#pragma GCC unroll 4
		for (int k = 0; k < 4; k++)
		{
			float		s = _mm512_reduce_add_ps(s0[k]);

			for (int t = i; t < dim; t++)
				s += w[t] * fabsf(qs[t] - (float) c[k][t]);
			out[j + k] = s;
		}
	}
	for (; j < n; j++)
		out[j] = sq8_l1_avx512(qs, w, codes[j], dim);
}
#endif							/* SHNSW_X86_SIMD */

/* ---------- dispatch ---------- */

float		(*shnsw_l1_f32) (const float *a, const float *b, int dim) = l1_f32_portable;
float		(*shnsw_l1_f32_f16) (const float *a, const uint16_t *b, int dim) = l1_f32_f16_portable;
float		(*sq8_l1_kernel) (const float *qs, const float *w, const uint8_t *code,
							  int dim) = sq8_l1_portable;
void		(*sq8_l1_batch_kernel) (const float *qs, const float *w, const uint8_t *const *codes,
									int n, int dim, float *out) = sq8_l1_batch_portable;

void
shnsw_kernels_l1_init(ShnswSimdLevel level, bool f16c)
{
	shnsw_l1_f32 = l1_f32_portable;
	shnsw_l1_f32_f16 = l1_f32_f16_portable;
	sq8_l1_kernel = sq8_l1_portable;
	sq8_l1_batch_kernel = sq8_l1_batch_portable;
#ifdef SHNSW_X86_SIMD
	if (level == SHNSW_SIMD_AVX2)
	{
		shnsw_l1_f32 = l1_f32_avx2;
		sq8_l1_kernel = sq8_l1_avx2;
		sq8_l1_batch_kernel = sq8_l1_batch_avx2;
		if (f16c)
			shnsw_l1_f32_f16 = l1_f32_f16_avx2;
	}
	else if (level == SHNSW_SIMD_AVX512)
	{
		shnsw_l1_f32 = l1_f32_avx512;
		shnsw_l1_f32_f16 = l1_f32_f16_avx512;
		sq8_l1_kernel = sq8_l1_avx512;
		sq8_l1_batch_kernel = sq8_l1_batch_avx512;
	}
#else
	(void) level;
	(void) f16c;
#endif
}
