/*-------------------------------------------------------------------------
 *
 * nodecheck.c
 *	  The one validator of a node record's fields (see nodecheck.h). Pure
 *	  code: no PostgreSQL header.
 *
 *-------------------------------------------------------------------------
 */
#include "nodecheck.h"

/* the metapage is block 0 (pages.h, SHNSW_METAPAGE_BLKNO) */
#define METAPAGE_BLOCK		0u
#define NO_BLOCK			0xFFFFFFFFu

/* Whether blk can name a page of the index other than the metapage. */
static bool
block_ok(uint32_t blk, const ShnswNodeLimits *lim, ShnswNodeFault *fault)
{
	fault->value = blk;
	fault->past_end = false;
	if (blk == METAPAGE_BLOCK || blk == NO_BLOCK)
		return false;
	if (lim->nblocks != 0 && blk >= lim->nblocks)
	{
		fault->past_end = true;
		return false;
	}
	return true;
}

/* The name of field with value, as a problem. */
static const char *
fail(const char *field, uint64_t value, ShnswNodeFault *fault)
{
	fault->value = value;
	fault->past_end = false;
	return field;
}

const char *
shnsw_node_problem(const ShnswNodeHeader *h, ShnswRef self, const ShnswNodeLimits *lim,
				   ShnswNodeFault *fault)
{
	const ShnswRef *nb = shnsw_node_neighbors(h);
	int			nneighbors = h->nneighbors;

	if (h->level > SHNSW_MAX_LEVEL)
		return fail("node level", h->level, fault);
	if (nneighbors > 2 * lim->m)
		return fail("neighbour count", nneighbors, fault);
	if (h->vec_offset >= lim->page_capacity || h->vec_offset % 4 != 0)
		return fail("vector offset", h->vec_offset, fault);
	if (!block_ok(h->vec_block, lim, fault))
		return "vector block";
	if (h->vec_offset + (uint32_t) lim->vec_span > lim->page_capacity &&
		!block_ok(h->vec_block + 1, lim, fault))
		return "vector block";
	if (h->flags & SHNSW_NODE_FREE)
	{
		if (nb[0] != SHNSW_INVALID_REF &&
			!block_ok(shnsw_ref_block(nb[0], lim->slot_bits), lim, fault))
			return "free list link";
		return NULL;
	}
	if (h->tid_off == 0 || h->tid_off > lim->max_offset)
		return fail("heap tuple offset", h->tid_off, fault);
	if (h->extra_tids >= SHNSW_NODE_TIDS)
		return fail("extra heap tuple count", h->extra_tids, fault);
	if ((h->level > 0 || h->extra_tids > 0) &&
		!block_ok(shnsw_node_upper_loc(h).block, lim, fault))
		return "upper record block";
	for (int k = 0; k < nneighbors; k++)
	{
		if (nb[k] == self)
			return fail("neighbour reference (the node itself)", nb[k], fault);
		if (!block_ok(shnsw_ref_block(nb[k], lim->slot_bits), lim, fault))
			return "neighbour reference";
	}
	return NULL;
}
