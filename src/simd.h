/*-------------------------------------------------------------------------
 *
 * simd.h
 *	  What every file of distance kernels shares: the implementation
 *	  levels shnsw_kernels_init chooses among, and the scalar conversion of
 *	  an IEEE half to float that their portable code and scalar tails use.
 *
 * Pure code, without PostgreSQL. The conversion is inline so that
 * kernels.c and kernels_l1.c (each a module of its own) share it without
 * calling into one another.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_SIMD_H
#define STREAMHNSW_SIMD_H

#include <stdint.h>
#include <string.h>

/* Which implementation shnsw_kernels_init() picked. */
typedef enum ShnswSimdLevel
{
	SHNSW_SIMD_PORTABLE = 0,
	SHNSW_SIMD_AVX2 = 1,
	SHNSW_SIMD_AVX512 = 2
} ShnswSimdLevel;

/* shnsw_half_to_float converts one IEEE half (halfvec element) to float. */
static inline float
shnsw_half_to_float(uint16_t h)
{
	uint32_t	sign = (uint32_t) (h & 0x8000) << 16;
	uint32_t	exp = (h >> 10) & 0x1f;
	uint32_t	mant = h & 0x3ff;
	uint32_t	bits;
	float		f;

	if (exp == 0)
	{
		/* zero or subnormal: value is mant * 2^-24 */
		f = (float) mant * (1.0f / 16777216.0f);
		return sign ? -f : f;
	}
	if (exp == 31)
		bits = sign | 0x7f800000u | (mant << 13);
	else
		bits = sign | ((exp + 112) << 23) | (mant << 13);
	memcpy(&f, &bits, sizeof(f));
	return f;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SHNSW_X86_SIMD 1
#include <immintrin.h>

/* Loads and sums both kernel files' AVX2 and AVX-512 kernels use. */

__attribute__((target("avx2,fma")))
static inline float
hsum256(__m256 v)
{
	__m128		lo = _mm256_castps256_ps128(v);
	__m128		hi = _mm256_extractf128_ps(v, 1);

	lo = _mm_add_ps(lo, hi);
	lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
	lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
	return _mm_cvtss_f32(lo);
}

/* Eight codes widened to eight floats. */
__attribute__((target("avx2,fma")))
static inline __m256
load_code8_avx2(const uint8_t *code)
{
	return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *) code)));
}

__attribute__((target("avx2,fma,f16c")))
static inline __m256
load_half8_avx2(const uint16_t *h)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) h));
}

__attribute__((target("avx512f")))
static inline __m512
load_code16_avx512(const uint8_t *code)
{
	return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *) code)));
}

__attribute__((target("avx512f")))
static inline __m512
load_half16_avx512(const uint16_t *h)
{
	return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) h));
}
#endif

#endif							/* STREAMHNSW_SIMD_H */
