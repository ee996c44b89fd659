/*-------------------------------------------------------------------------
 *
 * kernels_sparse.c
 *	  The navigation sketch of a sparse vector (kernels_sparse.h).
 *
 * The hash is a fixed 64-bit mixer of the element's index (no seed: every
 * build, insert and query of every index sketches alike, and the sketch
 * is part of the on-disk format). Two elements that share a bucket add up
 * in it, each with its own sign, so collisions cancel on average instead
 * of piling up: E[s(x).s(y)] = x.y.
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "kernels_sparse.h"

uint64_t
shnsw_sparse_hash(uint32_t index)
{
	uint64_t	z = (uint64_t) index + 0x9E3779B97F4A7C15ULL;

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

void
shnsw_sparse_sketch(const int32_t *indices, const float *values, int nnz, int dims,
					float *out, int nav_dims)
{
	memset(out, 0, sizeof(float) * (size_t) nav_dims);
	for (int i = 0; i < nnz; i++)
	{
		uint32_t	at = (uint32_t) indices[i];
		uint64_t	h;

		if (dims <= nav_dims)
		{
			if (at < (uint32_t) nav_dims)
				out[at] = values[i];
			continue;
		}
		h = shnsw_sparse_hash(at);
		out[(uint32_t) h % (uint32_t) nav_dims] += (h >> 63) ? -values[i] : values[i];
	}
}
