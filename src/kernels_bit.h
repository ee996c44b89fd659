/*-------------------------------------------------------------------------
 *
 * kernels_bit.h
 *	  Distance kernels of bit vectors: Hamming and Jaccard on packed bytes.
 *	  Pure code.
 *
 * A bit index's code is the vector's own bytes (src/README, Bit vectors),
 * so these kernels give the exact distance, as pgvector's hamming_distance
 * and jaccard_distance define it; kernels.h dispatches to them by metric
 * (sq8_distance).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_KERNELS_BIT_H
#define STREAMHNSW_KERNELS_BIT_H

#include <stdint.h>

#include "simd.h"

/* Bits set in the nbytes bytes at a. */
extern uint32_t (*shnsw_bit_count) (const uint8_t *a, int nbytes);

/* Bits that differ between a and b: the Hamming distance. */
extern uint32_t (*shnsw_bit_xor_count) (const uint8_t *a, const uint8_t *b, int nbytes);

/* Bits set in both a and b. */
extern uint32_t (*shnsw_bit_and_count) (const uint8_t *a, const uint8_t *b, int nbytes);

/*
 * The Jaccard distance of a (acount bits set, shnsw_bit_count) and b:
 * 1 - |a and b| / |a or b|, and 1 when they share no bit (two zero
 * vectors included), as pgvector's jaccard_distance gives it.
 */
extern float shnsw_bit_jaccard(const uint8_t *a, uint32_t acount, const uint8_t *b, int nbytes);

/* Use the implementations of level (AVX2 and up: the popcnt instruction). */
extern void shnsw_kernels_bit_init(ShnswSimdLevel level);

#endif							/* STREAMHNSW_KERNELS_BIT_H */
