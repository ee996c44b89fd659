/*-------------------------------------------------------------------------
 *
 * nodecheck.h
 *	  The one validator of a node record's fields (nodecheck.c). Pure code.
 *
 * Every reader of a node record checks it here before it uses a field as
 * a count, an offset or a block number: the buffer path and the writers
 * (pageaccess.c shnsw_check_node, which raises an error), the shared
 * cache's copy of a page (which leaves the page out instead), VACUUM and
 * its truncation (which raise) and streamhnsw_verify (which reports and
 * goes on). What a caller does with a problem is its own business; what
 * counts as one is decided here only.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_NODECHECK_H
#define STREAMHNSW_NODECHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "format.h"

/* The index's limits a record is checked against. */
typedef struct ShnswNodeLimits
{
	int			m;
	int			slot_bits;
	int			vec_span;		/* bytes a stored vector is known to take
								 * from its offset (shnsw_vec_span) */
	uint32_t	page_capacity;	/* bytes of a page's contents */
	uint32_t	max_offset;		/* largest valid heap tuple offset */
	uint32_t	nblocks;		/* the index's length as the caller knows
								 * it; 0 if unknown: block numbers are then
								 * only checked not to name the metapage or
								 * no block */
} ShnswNodeLimits;

/* What is wrong with a record, beside the field's name. */
typedef struct ShnswNodeFault
{
	uint64_t	value;			/* the field's value */
	bool		past_end;		/* a block number at or past nblocks: a
								 * caller whose nblocks may be out of date
								 * looks at the relation's length again */
} ShnswNodeFault;

/*
 * shnsw_node_problem checks the record h of node self: NULL if it can be
 * used as it stands (its level, neighbour count and vector offset within
 * their limits, its neighbours, vector and upper record on pages of the
 * index other than the metapage, no neighbour naming the node itself, and
 * a live node's heap TID offset and extra row count valid); else the name
 * of the first field out of range, with *fault saying more. Whether the
 * pages a record names are of the right type is checked when they are read.
 */
extern const char *shnsw_node_problem(const ShnswNodeHeader *h, ShnswRef self,
									  const ShnswNodeLimits *lim, ShnswNodeFault *fault);

#endif							/* STREAMHNSW_NODECHECK_H */
