/*-------------------------------------------------------------------------
 *
 * kernels_bit.c
 *	  Popcount kernels of bit vectors: portable, and with the popcnt
 *	  instruction on x86-64.
 *
 * The bytes are read as 64-bit words (memcpy: codes and values are not
 * 8-aligned), then the tail byte by byte; the word loops are written once
 * (always inline) and compiled twice, without and with the popcnt target,
 * so both levels count exactly alike.
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "kernels_bit.h"

static inline uint64_t
load64(const uint8_t *p)
{
	uint64_t	w;

	memcpy(&w, p, sizeof(w));
	return w;
}

/* op 0: a alone; 1: a xor b; 2: a and b */
__attribute__((always_inline))
static inline uint32_t
count_words(const uint8_t *a, const uint8_t *b, int nbytes, int op)
{
	uint64_t	s0 = 0,
				s1 = 0;
	int			i = 0;

	for (; i + 16 <= nbytes; i += 16)
	{
		uint64_t	x0 = load64(a + i),
					x1 = load64(a + i + 8);

		if (op == 1)
			x0 ^= load64(b + i), x1 ^= load64(b + i + 8);
		else if (op == 2)
			x0 &= load64(b + i), x1 &= load64(b + i + 8);
		s0 += (uint64_t) __builtin_popcountll(x0);
		s1 += (uint64_t) __builtin_popcountll(x1);
	}
	for (; i < nbytes; i++)
	{
		unsigned int x = a[i];

		if (op == 1)
			x ^= b[i];
		else if (op == 2)
			x &= b[i];
		s0 += (uint64_t) __builtin_popcount(x);
	}
	return (uint32_t) (s0 + s1);
}

static uint32_t
count_portable(const uint8_t *a, int nbytes)
{
	return count_words(a, NULL, nbytes, 0);
}

static uint32_t
xor_count_portable(const uint8_t *a, const uint8_t *b, int nbytes)
{
	return count_words(a, b, nbytes, 1);
}

static uint32_t
and_count_portable(const uint8_t *a, const uint8_t *b, int nbytes)
{
	return count_words(a, b, nbytes, 2);
}

#ifdef SHNSW_X86_SIMD
__attribute__((target("popcnt")))
static uint32_t
count_popcnt(const uint8_t *a, int nbytes)
{
	return count_words(a, NULL, nbytes, 0);
}

__attribute__((target("popcnt")))
static uint32_t
xor_count_popcnt(const uint8_t *a, const uint8_t *b, int nbytes)
{
	return count_words(a, b, nbytes, 1);
}

__attribute__((target("popcnt")))
static uint32_t
and_count_popcnt(const uint8_t *a, const uint8_t *b, int nbytes)
{
	return count_words(a, b, nbytes, 2);
}
#endif

uint32_t	(*shnsw_bit_count) (const uint8_t *a, int nbytes) = count_portable;
uint32_t	(*shnsw_bit_xor_count) (const uint8_t *a, const uint8_t *b, int nbytes) = xor_count_portable;
uint32_t	(*shnsw_bit_and_count) (const uint8_t *a, const uint8_t *b, int nbytes) = and_count_portable;

float
shnsw_bit_jaccard(const uint8_t *a, uint32_t acount, const uint8_t *b, int nbytes)
{
	uint32_t	both = shnsw_bit_and_count(a, b, nbytes);
	uint32_t	either;

	if (both == 0)
		return 1.0f;
	either = acount + shnsw_bit_count(b, nbytes) - both;
	return (float) (1.0 - (double) both / (double) either);
}

void
shnsw_kernels_bit_init(ShnswSimdLevel level)
{
	shnsw_bit_count = count_portable;
	shnsw_bit_xor_count = xor_count_portable;
	shnsw_bit_and_count = and_count_portable;
#ifdef SHNSW_X86_SIMD
	if (level >= SHNSW_SIMD_AVX2 && __builtin_cpu_supports("popcnt"))
	{
		shnsw_bit_count = count_popcnt;
		shnsw_bit_xor_count = xor_count_popcnt;
		shnsw_bit_and_count = and_count_popcnt;
	}
#else
	(void) level;
#endif
}
