/*-------------------------------------------------------------------------
 *
 * kernels.c
 *	  Distance kernels and the SQ8 quantizer, with run-time SIMD dispatch.
 *
 * Each kernel has a portable C version; on x86-64 with GCC or Clang the
 * AVX2+FMA and AVX-512 versions are compiled with target attributes, so the
 * library runs on any x86-64 and uses the widest unit the CPU has.
 * Float sums in the SIMD versions use several accumulators: results may
 * differ from the portable version in the last bits, which only navigation
 * sees (exact re-ranking calls the operator's own function).
 *
 *-------------------------------------------------------------------------
 */
#include <math.h>
#include <string.h>

#include "kernels.h"

#include "simd.h"

#ifdef SHNSW_X86_SIMD
#include <cpuid.h>
#endif

/* ---------- portable kernels ---------- */

static float
l2sq_f32_portable(const float *a, const float *b, int dim)
{
	float		s = 0.0f;

	for (int i = 0; i < dim; i++)
	{
		float		d = a[i] - b[i];

		s += d * d;
	}
	return s;
}

static float
dot_f32_portable(const float *a, const float *b, int dim)
{
	float		s = 0.0f;

	for (int i = 0; i < dim; i++)
		s += a[i] * b[i];
	return s;
}

static float
sq8_l2_portable(const float *qs, const float *w, const uint8_t *code, int dim)
{
	float		s = 0.0f;

	for (int i = 0; i < dim; i++)
	{
		float		d = qs[i] - (float) code[i];

		s += w[i] * d * d;
	}
	return s;
}

static float
sq8_dot_portable(const float *qs, const uint8_t *code, int dim)
{
	float		s = 0.0f;

	for (int i = 0; i < dim; i++)
		s += qs[i] * (float) code[i];
	return s;
}

/*
 * Batch kernels: the distances of n codes, each at its own address, to one
 * query. Each code's sum is formed exactly as the one-code kernel of the
 * same level forms it (same accumulators, same order), so a distance is
 * bit-for-bit the same whichever is used.
 */
static void
sq8_l2_batch_portable(const float *qs, const float *w, const uint8_t *const *codes,
					  int n, int dim, float *out)
{
	for (int j = 0; j < n; j++)
		out[j] = sq8_l2_portable(qs, w, codes[j], dim);
}

static void
sq8_dot_batch_portable(const float *qs, const uint8_t *const *codes, int n, int dim,
					   float *out)
{
	for (int j = 0; j < n; j++)
		out[j] = sq8_dot_portable(qs, codes[j], dim);
}

/*
 * Half-precision navigation vectors (kernels.h): the conversions and the
 * float-to-half distances. The portable conversion is the hardware's
 * (IEEE round-to-nearest-even, subnormals kept, overflow to infinity).
 */
static void
floats_to_halves_portable(const float *v, float scale, uint16_t *out, int dim)
{
	for (int i = 0; i < dim; i++)
		out[i] = shnsw_float_to_half(v[i] * scale);
}

static void
halves_to_floats_portable(const uint16_t *h, float *out, int dim)
{
	for (int i = 0; i < dim; i++)
		out[i] = shnsw_half_to_float(h[i]);
}

static float
l2sq_f32_f16_portable(const float *a, const uint16_t *b, int dim)
{
	float		s = 0.0f;

	for (int i = 0; i < dim; i++)
	{
		float		d = a[i] - shnsw_half_to_float(b[i]);

		s += d * d;
	}
	return s;
}

static float
dot_f32_f16_portable(const float *a, const uint16_t *b, int dim)
{
	float		s = 0.0f;

	for (int i = 0; i < dim; i++)
		s += a[i] * shnsw_half_to_float(b[i]);
	return s;
}

/* ---------- AVX2 + FMA kernels ---------- */

#ifdef SHNSW_X86_SIMD

__attribute__((target("avx2,fma")))
static float
l2sq_f32_avx2(const float *a, const float *b, int dim)
{
	__m256		s0 = _mm256_setzero_ps(),
				s1 = _mm256_setzero_ps();
	int			i = 0;
	float		s;

	for (; i + 16 <= dim; i += 16)
	{
		__m256		d0 = _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
		__m256		d1 = _mm256_sub_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));

		s0 = _mm256_fmadd_ps(d0, d0, s0);
		s1 = _mm256_fmadd_ps(d1, d1, s1);
	}
	for (; i + 8 <= dim; i += 8)
	{
		__m256		d0 = _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));

		s0 = _mm256_fmadd_ps(d0, d0, s0);
	}
	s = hsum256(_mm256_add_ps(s0, s1));
	for (; i < dim; i++)
	{
		float		d = a[i] - b[i];

		s += d * d;
	}
	return s;
}

__attribute__((target("avx2,fma")))
static float
dot_f32_avx2(const float *a, const float *b, int dim)
{
	__m256		s0 = _mm256_setzero_ps(),
				s1 = _mm256_setzero_ps();
	int			i = 0;
	float		s;

	for (; i + 16 <= dim; i += 16)
	{
		s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
		s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
	}
	for (; i + 8 <= dim; i += 8)
		s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
	s = hsum256(_mm256_add_ps(s0, s1));
	for (; i < dim; i++)
		s += a[i] * b[i];
	return s;
}

__attribute__((target("avx2,fma")))
static float
sq8_l2_avx2(const float *qs, const float *w, const uint8_t *code, int dim)
{
	__m256		s0 = _mm256_setzero_ps(),
				s1 = _mm256_setzero_ps();
	int			i = 0;
	float		s;

	for (; i + 16 <= dim; i += 16)
	{
		__m256		d0 = _mm256_sub_ps(_mm256_loadu_ps(qs + i), load_code8_avx2(code + i));
		__m256		d1 = _mm256_sub_ps(_mm256_loadu_ps(qs + i + 8), load_code8_avx2(code + i + 8));

		s0 = _mm256_fmadd_ps(_mm256_mul_ps(d0, d0), _mm256_loadu_ps(w + i), s0);
		s1 = _mm256_fmadd_ps(_mm256_mul_ps(d1, d1), _mm256_loadu_ps(w + i + 8), s1);
	}
	for (; i + 8 <= dim; i += 8)
	{
		__m256		d0 = _mm256_sub_ps(_mm256_loadu_ps(qs + i), load_code8_avx2(code + i));

		s0 = _mm256_fmadd_ps(_mm256_mul_ps(d0, d0), _mm256_loadu_ps(w + i), s0);
	}
	s = hsum256(_mm256_add_ps(s0, s1));
	for (; i < dim; i++)
	{
		float		d = qs[i] - (float) code[i];

		s += w[i] * d * d;
	}
	return s;
}

__attribute__((target("avx2,fma")))
static float
sq8_dot_avx2(const float *qs, const uint8_t *code, int dim)
{
	__m256		s0 = _mm256_setzero_ps(),
				s1 = _mm256_setzero_ps();
	int			i = 0;
	float		s;

	for (; i + 16 <= dim; i += 16)
	{
		s0 = _mm256_fmadd_ps(_mm256_loadu_ps(qs + i), load_code8_avx2(code + i), s0);
		s1 = _mm256_fmadd_ps(_mm256_loadu_ps(qs + i + 8), load_code8_avx2(code + i + 8), s1);
	}
	for (; i + 8 <= dim; i += 8)
		s0 = _mm256_fmadd_ps(_mm256_loadu_ps(qs + i), load_code8_avx2(code + i), s0);
	s = hsum256(_mm256_add_ps(s0, s1));
	for (; i < dim; i++)
		s += qs[i] * (float) code[i];
	return s;
}

/*
 * Four codes per pass: each chunk of the query (and weights) is loaded
 * once for the four; the remaining codes one at a time. The loops over
 * the four are unrolled by pragma (GCC 12 at -O2 does not unroll them):
 * otherwise the four sums live in an array on the stack, and every FMA
 * waits on a store and a load of its sum (perf: 46% of the AVX-512
 * kernel's samples on that store). Unrolled, the sums stay in registers;
 * the arithmetic, and so every result, is unchanged.
 */
__attribute__((target("avx2,fma")))
static void
sq8_l2_batch_avx2(const float *qs, const float *w, const uint8_t *const *codes,
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
				__m256		d0 = _mm256_sub_ps(q0, load_code8_avx2(c[k] + i));
				__m256		d1 = _mm256_sub_ps(q1, load_code8_avx2(c[k] + i + 8));

				s0[k] = _mm256_fmadd_ps(_mm256_mul_ps(d0, d0), w0, s0[k]);
				s1[k] = _mm256_fmadd_ps(_mm256_mul_ps(d1, d1), w1, s1[k]);
			}
		}
		for (; i + 8 <= dim; i += 8)
		{
			__m256		q0 = _mm256_loadu_ps(qs + i),
						w0 = _mm256_loadu_ps(w + i);

#pragma GCC unroll 4
			for (int k = 0; k < 4; k++)
			{
				__m256		d0 = _mm256_sub_ps(q0, load_code8_avx2(c[k] + i));

				s0[k] = _mm256_fmadd_ps(_mm256_mul_ps(d0, d0), w0, s0[k]);
			}
		}
#pragma GCC unroll 4
		for (int k = 0; k < 4; k++)
		{
			float		s = hsum256(_mm256_add_ps(s0[k], s1[k]));

			for (int t = i; t < dim; t++)
			{
				float		d = qs[t] - (float) c[k][t];

				s += w[t] * d * d;
			}
			out[j + k] = s;
		}
	}
	for (; j < n; j++)
		out[j] = sq8_l2_avx2(qs, w, codes[j], dim);
}

__attribute__((target("avx2,fma")))
static void
sq8_dot_batch_avx2(const float *qs, const uint8_t *const *codes, int n, int dim,
				   float *out)
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
						q1 = _mm256_loadu_ps(qs + i + 8);

#pragma GCC unroll 4
			for (int k = 0; k < 4; k++)
			{
				s0[k] = _mm256_fmadd_ps(q0, load_code8_avx2(c[k] + i), s0[k]);
				s1[k] = _mm256_fmadd_ps(q1, load_code8_avx2(c[k] + i + 8), s1[k]);
			}
		}
		for (; i + 8 <= dim; i += 8)
		{
			__m256		q0 = _mm256_loadu_ps(qs + i);

#pragma GCC unroll 4
			for (int k = 0; k < 4; k++)
				s0[k] = _mm256_fmadd_ps(q0, load_code8_avx2(c[k] + i), s0[k]);
		}
#pragma GCC unroll 4
		for (int k = 0; k < 4; k++)
		{
			float		s = hsum256(_mm256_add_ps(s0[k], s1[k]));

			for (int t = i; t < dim; t++)
				s += qs[t] * (float) c[k][t];
			out[j + k] = s;
		}
	}
	for (; j < n; j++)
		out[j] = sq8_dot_avx2(qs, codes[j], dim);
}

/*
 * Half vectors, AVX2 + F16C (every AVX2 CPU has F16C, but it is checked
 * on its own): eight halves widened to floats per load.
 */
#define SHNSW_F16_ROUND (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

__attribute__((target("avx2,fma,f16c")))
static void
floats_to_halves_avx2(const float *v, float scale, uint16_t *out, int dim)
{
	__m256		s = _mm256_set1_ps(scale);
	int			i = 0;

	for (; i + 8 <= dim; i += 8)
		_mm_storeu_si128((__m128i *) (out + i),
						 _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(v + i), s),
										 SHNSW_F16_ROUND));
	for (; i < dim; i++)
		out[i] = shnsw_float_to_half(v[i] * scale);
}

__attribute__((target("avx2,fma,f16c")))
static void
halves_to_floats_avx2(const uint16_t *h, float *out, int dim)
{
	int			i = 0;

	for (; i + 8 <= dim; i += 8)
		_mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (h + i))));
	for (; i < dim; i++)
		out[i] = shnsw_half_to_float(h[i]);
}

__attribute__((target("avx2,fma,f16c")))
static float
l2sq_f32_f16_avx2(const float *a, const uint16_t *b, int dim)
{
	__m256		s0 = _mm256_setzero_ps(),
				s1 = _mm256_setzero_ps();
	int			i = 0;
	float		s;

	for (; i + 16 <= dim; i += 16)
	{
		__m256		d0 = _mm256_sub_ps(_mm256_loadu_ps(a + i), load_half8_avx2(b + i));
		__m256		d1 = _mm256_sub_ps(_mm256_loadu_ps(a + i + 8), load_half8_avx2(b + i + 8));

		s0 = _mm256_fmadd_ps(d0, d0, s0);
		s1 = _mm256_fmadd_ps(d1, d1, s1);
	}
	for (; i + 8 <= dim; i += 8)
	{
		__m256		d0 = _mm256_sub_ps(_mm256_loadu_ps(a + i), load_half8_avx2(b + i));

		s0 = _mm256_fmadd_ps(d0, d0, s0);
	}
	s = hsum256(_mm256_add_ps(s0, s1));
	for (; i < dim; i++)
	{
		float		d = a[i] - shnsw_half_to_float(b[i]);

		s += d * d;
	}
	return s;
}

__attribute__((target("avx2,fma,f16c")))
static float
dot_f32_f16_avx2(const float *a, const uint16_t *b, int dim)
{
	__m256		s0 = _mm256_setzero_ps(),
				s1 = _mm256_setzero_ps();
	int			i = 0;
	float		s;

	for (; i + 16 <= dim; i += 16)
	{
		s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load_half8_avx2(b + i), s0);
		s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), load_half8_avx2(b + i + 8), s1);
	}
	for (; i + 8 <= dim; i += 8)
		s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load_half8_avx2(b + i), s0);
	s = hsum256(_mm256_add_ps(s0, s1));
	for (; i < dim; i++)
		s += a[i] * shnsw_half_to_float(b[i]);
	return s;
}

/* ---------- AVX-512 kernels ---------- */

__attribute__((target("avx512f")))
static float
l2sq_f32_avx512(const float *a, const float *b, int dim)
{
	__m512		s0 = _mm512_setzero_ps();
	int			i = 0;

	for (; i + 16 <= dim; i += 16)
	{
		__m512		d = _mm512_sub_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));

		s0 = _mm512_fmadd_ps(d, d, s0);
	}
	if (i < dim)
	{
		__mmask16	m = (__mmask16) ((1u << (dim - i)) - 1);
		__m512		d = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, a + i),
									  _mm512_maskz_loadu_ps(m, b + i));

		s0 = _mm512_fmadd_ps(d, d, s0);
	}
	return _mm512_reduce_add_ps(s0);
}

__attribute__((target("avx512f")))
static float
dot_f32_avx512(const float *a, const float *b, int dim)
{
	__m512		s0 = _mm512_setzero_ps();
	int			i = 0;

	for (; i + 16 <= dim; i += 16)
		s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
	if (i < dim)
	{
		__mmask16	m = (__mmask16) ((1u << (dim - i)) - 1);

		s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i),
							 _mm512_maskz_loadu_ps(m, b + i), s0);
	}
	return _mm512_reduce_add_ps(s0);
}

__attribute__((target("avx512f")))
static float
sq8_l2_avx512(const float *qs, const float *w, const uint8_t *code, int dim)
{
	__m512		s0 = _mm512_setzero_ps();
	int			i = 0;
	float		s;

	for (; i + 16 <= dim; i += 16)
	{
		__m512		d = _mm512_sub_ps(_mm512_loadu_ps(qs + i), load_code16_avx512(code + i));

		s0 = _mm512_fmadd_ps(_mm512_mul_ps(d, d), _mm512_loadu_ps(w + i), s0);
	}
	s = _mm512_reduce_add_ps(s0);
	for (; i < dim; i++)
	{
		float		d = qs[i] - (float) code[i];

		s += w[i] * d * d;
	}
	return s;
}

__attribute__((target("avx512f")))
static float
sq8_dot_avx512(const float *qs, const uint8_t *code, int dim)
{
	__m512		s0 = _mm512_setzero_ps();
	int			i = 0;
	float		s;

	for (; i + 16 <= dim; i += 16)
		s0 = _mm512_fmadd_ps(_mm512_loadu_ps(qs + i), load_code16_avx512(code + i), s0);
	s = _mm512_reduce_add_ps(s0);
	for (; i < dim; i++)
		s += qs[i] * (float) code[i];
	return s;
}
__attribute__((target("avx512f")))
static void
sq8_l2_batch_avx512(const float *qs, const float *w, const uint8_t *const *codes,
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
			{
				__m512		d = _mm512_sub_ps(q, load_code16_avx512(c[k] + i));

				s0[k] = _mm512_fmadd_ps(_mm512_mul_ps(d, d), wi, s0[k]);
			}
		}
#pragma GCC unroll 4
		for (int k = 0; k < 4; k++)
		{
			float		s = _mm512_reduce_add_ps(s0[k]);

			for (int t = i; t < dim; t++)
			{
				float		d = qs[t] - (float) c[k][t];

				s += w[t] * d * d;
			}
			out[j + k] = s;
		}
	}
	for (; j < n; j++)
		out[j] = sq8_l2_avx512(qs, w, codes[j], dim);
}

__attribute__((target("avx512f")))
static void
sq8_dot_batch_avx512(const float *qs, const uint8_t *const *codes, int n, int dim,
					 float *out)
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
			__m512		q = _mm512_loadu_ps(qs + i);

#pragma GCC unroll 4
			for (int k = 0; k < 4; k++)
				s0[k] = _mm512_fmadd_ps(q, load_code16_avx512(c[k] + i), s0[k]);
		}
#pragma GCC unroll 4
		for (int k = 0; k < 4; k++)
		{
			float		s = _mm512_reduce_add_ps(s0[k]);

			for (int t = i; t < dim; t++)
				s += qs[t] * (float) c[k][t];
			out[j + k] = s;
		}
	}
	for (; j < n; j++)
		out[j] = sq8_dot_avx512(qs, codes[j], dim);
}
/*
 * Half vectors, AVX-512: sixteen halves widened per load, two accumulators
 * (a 768-d distance is otherwise one chain of 48 dependent FMAs); the
 * last dim % 16 halves go through a zero-padded copy, the float side
 * through a masked load (zero in both: no effect on either sum).
 */
__attribute__((target("avx512f")))
static void
floats_to_halves_avx512(const float *v, float scale, uint16_t *out, int dim)
{
	__m512		s = _mm512_set1_ps(scale);
	int			i = 0;

	for (; i + 16 <= dim; i += 16)
		_mm256_storeu_si256((__m256i *) (out + i),
							_mm512_cvtps_ph(_mm512_mul_ps(_mm512_loadu_ps(v + i), s),
											SHNSW_F16_ROUND));
	for (; i < dim; i++)
		out[i] = shnsw_float_to_half(v[i] * scale);
}

__attribute__((target("avx512f")))
static void
halves_to_floats_avx512(const uint16_t *h, float *out, int dim)
{
	int			i = 0;

	for (; i + 16 <= dim; i += 16)
		_mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (h + i))));
	for (; i < dim; i++)
		out[i] = shnsw_half_to_float(h[i]);
}

/* The last n < 16 halves of b, widened, zeros beyond. */
__attribute__((target("avx512f")))
static inline __m512
load_half_tail_avx512(const uint16_t *h, int n)
{
	uint16_t	pad[16] = {0};

	memcpy(pad, h, sizeof(uint16_t) * n);
	return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) pad));
}

__attribute__((target("avx512f")))
static float
l2sq_f32_f16_avx512(const float *a, const uint16_t *b, int dim)
{
	__m512		s0 = _mm512_setzero_ps(),
				s1 = _mm512_setzero_ps();
	int			i = 0;

	for (; i + 32 <= dim; i += 32)
	{
		__m512		d0 = _mm512_sub_ps(_mm512_loadu_ps(a + i), load_half16_avx512(b + i));
		__m512		d1 = _mm512_sub_ps(_mm512_loadu_ps(a + i + 16), load_half16_avx512(b + i + 16));

		s0 = _mm512_fmadd_ps(d0, d0, s0);
		s1 = _mm512_fmadd_ps(d1, d1, s1);
	}
	for (; i + 16 <= dim; i += 16)
	{
		__m512		d0 = _mm512_sub_ps(_mm512_loadu_ps(a + i), load_half16_avx512(b + i));

		s0 = _mm512_fmadd_ps(d0, d0, s0);
	}
	if (i < dim)
	{
		__mmask16	m = (__mmask16) ((1u << (dim - i)) - 1);
		__m512		d = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, a + i),
									  load_half_tail_avx512(b + i, dim - i));

		s1 = _mm512_fmadd_ps(d, d, s1);
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

__attribute__((target("avx512f")))
static float
dot_f32_f16_avx512(const float *a, const uint16_t *b, int dim)
{
	__m512		s0 = _mm512_setzero_ps(),
				s1 = _mm512_setzero_ps();
	int			i = 0;

	for (; i + 32 <= dim; i += 32)
	{
		s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), load_half16_avx512(b + i), s0);
		s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), load_half16_avx512(b + i + 16), s1);
	}
	for (; i + 16 <= dim; i += 16)
		s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), load_half16_avx512(b + i), s0);
	if (i < dim)
	{
		__mmask16	m = (__mmask16) ((1u << (dim - i)) - 1);

		s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i),
							 load_half_tail_avx512(b + i, dim - i), s1);
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}
#endif							/* SHNSW_X86_SIMD */

/* ---------- dispatch ---------- */

float		(*shnsw_l2sq_f32) (const float *a, const float *b, int dim) = l2sq_f32_portable;
float		(*shnsw_dot_f32) (const float *a, const float *b, int dim) = dot_f32_portable;
float		(*sq8_l2_kernel) (const float *qs, const float *w, const uint8_t *code, int dim) = sq8_l2_portable;
float		(*sq8_dot_kernel) (const float *qs, const uint8_t *code, int dim) = sq8_dot_portable;
void		(*sq8_l2_batch_kernel) (const float *qs, const float *w, const uint8_t *const *codes,
									int n, int dim, float *out) = sq8_l2_batch_portable;
void		(*sq8_dot_batch_kernel) (const float *qs, const uint8_t *const *codes, int n,
									 int dim, float *out) = sq8_dot_batch_portable;

void		(*shnsw_floats_to_halves) (const float *v, float scale, uint16_t *out,
									   int dim) = floats_to_halves_portable;
void		(*shnsw_halves_to_floats_nav) (const uint16_t *h, float *out,
										   int dim) = halves_to_floats_portable;
float		(*shnsw_l2sq_f32_f16) (const float *a, const uint16_t *b, int dim) = l2sq_f32_f16_portable;
float		(*shnsw_dot_f32_f16) (const float *a, const uint16_t *b, int dim) = dot_f32_f16_portable;

/*
 * shnsw_cpu_features reads the CPU's SIMD features once per process with
 * three CPUID instructions (highest leaf, leaf 1, leaf 7) and XGETBV for
 * the registers the operating system saves. GCC's __builtin_cpu_supports
 * is not used: it links libgcc's __cpu_indicator_init, a constructor that
 * runs when the library is loaded and issues a dozen more CPUIDs, and in a
 * virtual machine each one traps to the hypervisor (about 6 us here), so
 * every new connection's first query paid about 0.1 ms for it.
 */
const ShnswCpuFeatures *
shnsw_cpu_features(void)
{
	static ShnswCpuFeatures cpu;
	static bool done = false;

	if (done)
		return &cpu;
#ifdef SHNSW_X86_SIMD
	{
		unsigned int max = __get_cpuid_max(0, NULL);
		unsigned int a,
					b,
					c,
					d;
		uint64_t	xcr0 = 0;
		bool		avx = false;
		bool		ymm,
					zmm;

		if (max >= 1)
		{
			__cpuid(1, a, b, c, d);
			cpu.sse42 = (c & bit_SSE4_2) != 0;
			cpu.fma = (c & bit_FMA) != 0;
			cpu.f16c = (c & bit_F16C) != 0;
			avx = (c & bit_AVX) != 0;
			if (c & bit_OSXSAVE)
			{
				unsigned int lo,
							hi;

				__asm__ volatile ("xgetbv" : "=a" (lo), "=d" (hi) : "c" (0));
				xcr0 = ((uint64_t) hi << 32) | lo;
			}
		}
		if (max >= 7)
		{
			__cpuid_count(7, 0, a, b, c, d);
			cpu.avx2 = (b & bit_AVX2) != 0;
			cpu.avx512f = (b & bit_AVX512F) != 0;
		}
		/* XMM and YMM state (bits 1, 2); opmask and ZMM state (bits 5 to 7) */
		ymm = avx && (xcr0 & 0x6) == 0x6;
		zmm = ymm && (xcr0 & 0xe0) == 0xe0;
		cpu.avx2 &= ymm;
		cpu.fma &= ymm;
		cpu.f16c &= ymm;
		cpu.avx512f &= zmm;
	}
#endif
	done = true;
	return &cpu;
}

/*
 * shnsw_kernels_init picks the widest implementation the CPU supports, but
 * not wider than max. Safe to call again (tests switch levels).
 */
ShnswSimdLevel
shnsw_kernels_init(ShnswSimdLevel max)
{
	ShnswSimdLevel level = SHNSW_SIMD_PORTABLE;
	const ShnswCpuFeatures *cpu = shnsw_cpu_features();

	shnsw_l2sq_f32 = l2sq_f32_portable;
	shnsw_dot_f32 = dot_f32_portable;
	sq8_l2_kernel = sq8_l2_portable;
	sq8_dot_kernel = sq8_dot_portable;
	sq8_l2_batch_kernel = sq8_l2_batch_portable;
	sq8_dot_batch_kernel = sq8_dot_batch_portable;
	shnsw_floats_to_halves = floats_to_halves_portable;
	shnsw_halves_to_floats_nav = halves_to_floats_portable;
	shnsw_l2sq_f32_f16 = l2sq_f32_f16_portable;
	shnsw_dot_f32_f16 = dot_f32_f16_portable;

#ifdef SHNSW_X86_SIMD
	if (max >= SHNSW_SIMD_AVX2 && cpu->avx2 && cpu->fma)
	{
		shnsw_l2sq_f32 = l2sq_f32_avx2;
		shnsw_dot_f32 = dot_f32_avx2;
		sq8_l2_kernel = sq8_l2_avx2;
		sq8_dot_kernel = sq8_dot_avx2;
		sq8_l2_batch_kernel = sq8_l2_batch_avx2;
		sq8_dot_batch_kernel = sq8_dot_batch_avx2;
		if (cpu->f16c)
		{
			shnsw_floats_to_halves = floats_to_halves_avx2;
			shnsw_halves_to_floats_nav = halves_to_floats_avx2;
			shnsw_l2sq_f32_f16 = l2sq_f32_f16_avx2;
			shnsw_dot_f32_f16 = dot_f32_f16_avx2;
		}
		level = SHNSW_SIMD_AVX2;
	}
	if (max >= SHNSW_SIMD_AVX512 && cpu->avx512f)
	{
		shnsw_l2sq_f32 = l2sq_f32_avx512;
		shnsw_dot_f32 = dot_f32_avx512;
		sq8_l2_kernel = sq8_l2_avx512;
		sq8_dot_kernel = sq8_dot_avx512;
		sq8_l2_batch_kernel = sq8_l2_batch_avx512;
		sq8_dot_batch_kernel = sq8_dot_batch_avx512;
		shnsw_floats_to_halves = floats_to_halves_avx512;
		shnsw_halves_to_floats_nav = halves_to_floats_avx512;
		shnsw_l2sq_f32_f16 = l2sq_f32_f16_avx512;
		shnsw_dot_f32_f16 = dot_f32_f16_avx512;
		level = SHNSW_SIMD_AVX512;
	}
#else
	(void) max;
#endif
	shnsw_kernels_l1_init(level, cpu->f16c);
	shnsw_kernels_bit_init(level);
	return level;
}

/* ---------- halves, normalization ---------- */

/* shnsw_halves_to_floats converts dim halves to floats. */
void
shnsw_halves_to_floats(const uint16_t *h, float *out, int dim)
{
	for (int i = 0; i < dim; i++)
		out[i] = shnsw_half_to_float(h[i]);
}

/*
 * shnsw_float_to_half rounds a float to the nearest IEEE half, ties to
 * even, as F16C's conversion does: values from 65520 up become infinity,
 * values below 2^-14 halves' subnormals, NaN a quiet NaN keeping the top
 * of its payload.
 */
uint16_t
shnsw_float_to_half(float f)
{
	uint32_t	x;
	uint32_t	sign;
	uint32_t	a;

	memcpy(&x, &f, sizeof(x));
	sign = (x >> 16) & 0x8000;
	a = x & 0x7fffffff;
	if (a >= 0x7f800000)		/* infinity, NaN */
		return (uint16_t) (sign | 0x7c00 | (a > 0x7f800000 ? 0x200 | ((a >> 13) & 0x3ff) : 0));
	if (a >= 0x477ff000)		/* 65520 and up round to infinity */
		return (uint16_t) (sign | 0x7c00);
	if (a >= 0x38800000)
	{
		/* normal: round the 13 dropped bits to nearest, ties to even */
		a += 0xfff + ((a >> 13) & 1);
		return (uint16_t) (sign | ((a - 0x38000000) >> 13));
	}
	if (a < 0x33000000)			/* below 2^-25 (2^-25 itself ties to 0) */
		return (uint16_t) sign;
	{
		/* subnormal: the value in units of 2^-24, rounded likewise */
		uint32_t	mant = (a & 0x7fffff) | 0x800000;
		int			shift = 126 - (int) (a >> 23);	/* 14 .. 24 */
		uint32_t	h = mant >> shift;
		uint32_t	rem = mant & ((1u << shift) - 1);
		uint32_t	half = 1u << (shift - 1);

		if (rem > half || (rem == half && (h & 1)))
			h++;
		return (uint16_t) (sign | h);
	}
}

/*
 * shnsw_half_scale is the power of two that brings the largest magnitude
 * in the ranges mins/maxs to between 2^13 and 2^14: below binary16's
 * largest value (65504), and far above its subnormals (below 2^-14, where
 * precision is lost: values down to 2^-27 of the largest keep all of
 * theirs). The kernels widen halves to floats before any arithmetic, so
 * sums do not overflow. 1 if the ranges are empty or all zero; at most
 * 2^126 (a float).
 */
float
shnsw_half_scale(const float *mins, const float *maxs, int dim)
{
	float		top = 0.0f;
	int			e;

	for (int i = 0; i < dim; i++)
	{
		if (fabsf(mins[i]) > top && isfinite(mins[i]))
			top = fabsf(mins[i]);
		if (fabsf(maxs[i]) > top && isfinite(maxs[i]))
			top = fabsf(maxs[i]);
	}
	if (!(top > 0.0f))
		return 1.0f;
	(void) frexpf(top, &e);		/* top < 2^e */
	return ldexpf(1.0f, 14 - e < 126 ? 14 - e : 126);
}

/* shnsw_normalize scales v to unit length; false (v unchanged) if it is zero. */
bool
shnsw_normalize(float *v, int dim)
{
	double		n = 0.0;

	for (int i = 0; i < dim; i++)
		n += (double) v[i] * v[i];
	if (n <= 0.0)
		return false;
	n = sqrt(n);
	for (int i = 0; i < dim; i++)
		v[i] = (float) (v[i] / n);
	return true;
}

/* ---------- SQ8 ---------- */

/* sq8_train_init starts the per-dimension ranges of SQ8 training (empty). */
void
sq8_train_init(float *mins, float *maxs, int dim)
{
	for (int i = 0; i < dim; i++)
	{
		mins[i] = INFINITY;
		maxs[i] = -INFINITY;
	}
}

/* sq8_train_add widens the ranges mins/maxs to hold v. */
void
sq8_train_add(float *mins, float *maxs, const float *v, int dim)
{
	for (int i = 0; i < dim; i++)
	{
		if (v[i] < mins[i])
			mins[i] = v[i];
		if (v[i] > maxs[i])
			maxs[i] = v[i];
	}
}

/*
 * sq8_train_finish turns observed ranges into lo/scale. A dimension that saw
 * no data gets scale 1. A dimension that never varied (zero in every row, as
 * halfvec storage and dead model dimensions give) is coded exactly: code 0
 * decodes to its one value, and its step is made too small to matter in any
 * distance bound (SQ8_CONST_STEP relative to the value), where a step of 1
 * once made every bound of such an index useless (src/README, Scans). A
 * later value off that constant is clamped and flagged as any value
 * outside the trained range is.
 */
void
sq8_train_finish(const float *mins, const float *maxs, float *lo, float *scale, int dim)
{
	for (int i = 0; i < dim; i++)
	{
		if (!(mins[i] <= maxs[i]))
		{
			lo[i] = 0.0f;
			scale[i] = 1.0f;
			continue;
		}
		lo[i] = mins[i];
		scale[i] = (maxs[i] - mins[i]) / 255.0f;
		if (!(scale[i] > 0.0f))
			scale[i] = fmaxf(fabsf(lo[i]), 1.0f) * SQ8_CONST_STEP;
		else if (!isfinite(scale[i]))
			scale[i] = 1.0f;
	}
}

/*
 * sq8_train_identity sets lo 0 and scale 1: codes are the values 0 .. 255
 * themselves (a bit vector's bytes).
 */
void
sq8_train_identity(float *lo, float *scale, int dim)
{
	for (int i = 0; i < dim; i++)
	{
		lo[i] = 0.0f;
		scale[i] = 1.0f;
	}
}

/*
 * sq8_encode maps v to codes: (v - lo) / scale rounded, clamped to
 * 0..255 (NaN to 0).
 */
void
sq8_encode(const float *lo, const float *scale, const float *v, uint8_t *code, int dim)
{
	for (int i = 0; i < dim; i++)
	{
		float		c = (v[i] - lo[i]) / scale[i];

		if (!(c > 0.0f))		/* also catches NaN */
			code[i] = 0;
		else if (c >= 255.0f)
			code[i] = 255;
		else
			code[i] = (uint8_t) lrintf(c);
	}
}

/* sq8_decode maps codes back to the points they stand for: lo + code * scale. */
void
sq8_decode(const float *lo, const float *scale, const uint8_t *code, float *out, int dim)
{
	for (int i = 0; i < dim; i++)
		out[i] = lo[i] + (float) code[i] * scale[i];
}

/*
 * sq8_prepare_code is sq8_prepare_query for a query that is itself a code
 * (neighbour selection on codes), without decoding it to floats first.
 */
void
sq8_prepare_code(Sq8Query *sq, ShnswMetric metric, const uint8_t *code,
				 const float *lo, const float *scale)
{
	int			dim = sq->dim;

	sq->metric = metric;
	if (shnsw_metric_is_bit(metric))
	{
		/* a bit index's code is the value's bytes (lo 0, scale 1) */
		sq->qb = (uint8_t *) sq->qs;
		memcpy(sq->qb, code, dim);
		sq->bias = (float) shnsw_bit_count(sq->qb, dim);
	}
	else if (metric == SHNSW_METRIC_L2 || metric == SHNSW_METRIC_L1)
	{
		/* (lo + c * scale - lo) / scale is c itself */
		sq->bias = 0.0f;
		for (int i = 0; i < dim; i++)
		{
			sq->qs[i] = (float) code[i];
			sq->w[i] = metric == SHNSW_METRIC_L2 ? scale[i] * scale[i] : scale[i];
		}
	}
	else
	{
		float		bias = 0.0f;

		for (int i = 0; i < dim; i++)
		{
			float		x = lo[i] + (float) code[i] * scale[i];

			sq->qs[i] = x * scale[i];
			bias += x * lo[i];
		}
		sq->bias = bias;
	}
}

/*
 * sq8_prepare_query precomputes, for query q, the per-dimension terms that
 * let sq8_distance work on codes directly (sq->qs and sq->w, dim floats
 * each, are the caller's).
 */
void
sq8_prepare_query(Sq8Query *sq, ShnswMetric metric, const float *q,
				  const float *lo, const float *scale)
{
	int			dim = sq->dim;

	sq->metric = metric;
	if (shnsw_metric_is_bit(metric))
	{
		uint8_t    *qb = (uint8_t *) sq->qs;

		/* q holds byte values and lo/scale are 0/1: the code's own bytes */
		sq8_encode(lo, scale, q, qb, dim);
		sq->qb = qb;
		sq->bias = (float) shnsw_bit_count(qb, dim);
	}
	else if (metric == SHNSW_METRIC_L2 || metric == SHNSW_METRIC_L1)
	{
		sq->bias = 0.0f;
		for (int i = 0; i < dim; i++)
		{
			sq->qs[i] = (q[i] - lo[i]) / scale[i];
			sq->w[i] = metric == SHNSW_METRIC_L2 ? scale[i] * scale[i] : scale[i];
		}
	}
	else
	{
		double		bias = 0.0;

		for (int i = 0; i < dim; i++)
		{
			sq->qs[i] = q[i] * scale[i];
			bias += (double) q[i] * lo[i];
		}
		sq->bias = (float) bias;
	}
}
