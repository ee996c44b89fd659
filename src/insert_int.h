/*-------------------------------------------------------------------------
 *
 * insert_int.h
 *	  What insert.c and insert_place.c share: an insert's state, the new
 *	  node, and where a node is placed (insert_place.c, below insert.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_INSERT_INT_H
#define STREAMHNSW_INSERT_INT_H

#include "storage/bufmgr.h"
#include "utils/relcache.h"

#include "format.h"
#include "meta.h"
#include "neighbors_find.h"

typedef struct InsertState
{
	Relation	index;
	ShnswIndexInfo *info;		/* our own copy (shnsw_get_index_info) */
	ShnswLinker lk;				/* page access and list changes */
	int			dims;
	int			m;
	BlockNumber nblocks;		/* relation length last seen (bounds checks) */
	int			vlen;			/* the value's stored bytes, 4-aligned: vec_size's,
								 * or a sparsevec's own (shnsw_vec_span) */
} InsertState;

/* What a new node record holds, whichever slot it goes to. */
typedef struct NewNode
{
	ItemPointer heap_tid;
	int			level;
	const ShnswRef *nbrs0;		/* layer-0 neighbours */
	int			nnbrs0;
	const uint8 *code;
	double		residual;		/* |nav - decoded code| (metapage max_residual) */
	uint8		clamp_flags;	/* SHNSW_NODE_CLAMPED and its class, or 0 */
	struct varlena *value;		/* exact vector, its VARSIZE stored */
} NewNode;

extern void insert_check_nameable(InsertState *is, BlockNumber last);
extern Buffer insert_pin_or_extend(InsertState *is, BlockNumber blk, bool *isnew);
extern void insert_fill_node(InsertState *is, ShnswNodeHeader *h, const NewNode *nn,
							 BlockNumber ublk, OffsetNumber uoff, BlockNumber vblk,
							 Size voff);
extern int insert_free_slot_level(InsertState *is, Buffer metabuf);
extern ShnswRef insert_place_in_free_slot(InsertState *is, Buffer metabuf,
										  const NewNode *nn, ShnswRef **nbrs,
										  const int *nnbrs);
extern OffsetNumber insert_append_upper_record(InsertState *is, Page upage,
											   BlockNumber ublk, ShnswRef newref,
											   int level, Size usize, ShnswRef **nbrs,
											   const int *nnbrs);

#endif							/* STREAMHNSW_INSERT_INT_H */
