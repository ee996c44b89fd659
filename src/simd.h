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

#endif							/* STREAMHNSW_SIMD_H */
