/*-------------------------------------------------------------------------
 *
 * kernels_sparse.h
 *	  The navigation sketch of a sparse vector: a fixed-size dense vector.
 *	  Pure code.
 *
 * A node's code has a fixed size per index, and a sparsevec may declare up
 * to a billion dimensions: it navigates on a dense vector of
 * shnsw_nav_dims dimensions (src/README, Sparse vectors). Up to
 * SHNSW_SPARSE_SKETCH_DIMS dimensions that vector is the value itself,
 * densified; beyond, each non-zero element is added, with a sign, to one
 * of SHNSW_SPARSE_SKETCH_DIMS buckets that a hash of its index chooses
 * (signed feature hashing). The sketch's inner products and squared
 * distances estimate the value's without bias; they bound nothing.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_KERNELS_SPARSE_H
#define STREAMHNSW_KERNELS_SPARSE_H

#include <stdint.h>

#include "format.h"

/*
 * The sparse vector of dims dimensions whose nnz elements are values at
 * indices (0-based), as a dense vector of nav_dims dimensions into out:
 * the value itself when dims <= nav_dims, else its signed feature hash.
 */
extern void shnsw_sparse_sketch(const int32_t *indices, const float *values, int nnz,
								int dims, float *out, int nav_dims);

/* The bucket (low bits) and sign (bit 63) an index hashes to. */
extern uint64_t shnsw_sparse_hash(uint32_t index);

#endif							/* STREAMHNSW_KERNELS_SPARSE_H */
