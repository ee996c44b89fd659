/*-------------------------------------------------------------------------
 *
 * kernels_l1.h
 *	  Distance kernels of the L1 (taxicab) metric: floats, float against
 *	  half, and a query against SQ8 codes. Pure code.
 *
 * kernels.h dispatches to these by metric (shnsw_float_distance,
 * shnsw_half_distance, sq8_distance); shnsw_kernels_init picks their
 * implementation along with the others'.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_KERNELS_L1_H
#define STREAMHNSW_KERNELS_L1_H

#include <stdbool.h>
#include <stdint.h>

#include "simd.h"

/* sum |a_i - b_i| of two float vectors */
extern float (*shnsw_l1_f32) (const float *a, const float *b, int dim);

/* the same for a float vector a and a half vector b */
extern float (*shnsw_l1_f32_f16) (const float *a, const uint16_t *b, int dim);

/*
 * A query prepared for SQ8 codes (sq8_prepare_query): sum w_i |qs_i - c_i|,
 * qs = (q - lo) / scale, w = scale; the batch kernel gives each code's
 * value bit for bit as the one-code kernel does.
 */
extern float (*sq8_l1_kernel) (const float *qs, const float *w, const uint8_t *code, int dim);
extern void (*sq8_l1_batch_kernel) (const float *qs, const float *w,
									const uint8_t *const *codes, int n, int dim, float *out);

/*
 * Use the implementations of level (f16c: the CPU converts halves; without
 * it the float-half kernel stays portable below AVX-512). Called by
 * shnsw_kernels_init, which has checked that the CPU has level.
 */
extern void shnsw_kernels_l1_init(ShnswSimdLevel level, bool f16c);

#endif							/* STREAMHNSW_KERNELS_L1_H */
