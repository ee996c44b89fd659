/*-------------------------------------------------------------------------
 *
 * neighbors_update.h
 *	  Changing neighbour lists on disk: back-links, adoption, repair,
 *	  findability (neighbors_update.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_NEIGHBORS_UPDATE_H
#define STREAMHNSW_NEIGHBORS_UPDATE_H

#include "format.h"
#include "neighbors_find.h"

/* neighbors_update.c: changing lists */
extern bool shnsw_make_findable(ShnswLinker *lk, ShnswRef e, int ef, bool copies,
								ShnswRef *dropped, int *ndropped);
extern bool shnsw_add_backlink(ShnswLinker *lk, ShnswRef e, int layer, ShnswRef newref,
							   const uint8 *newcode, bool force, ShnswRef *dropped,
							   int *ndropped);
extern int	shnsw_adopt(ShnswLinker *lk, ShnswRef e, ShnswRef *refs, int n);
extern bool shnsw_replace_link(ShnswLinker *lk, ShnswRef e, ShnswRef old, ShnswRef newref);
extern bool shnsw_repair_list(ShnswLinker *lk, ShnswRef e, int layer, const ShnswRefSet *dead);
extern bool shnsw_take_recheck(Relation index);

#endif							/* STREAMHNSW_NEIGHBORS_UPDATE_H */
