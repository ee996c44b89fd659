/*-------------------------------------------------------------------------
 *
 * layout.h
 *	  The order in which a build writes its graph's nodes to pages, so that
 *	  a search's expansions read few pages. Pure code.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_LAYOUT_H
#define STREAMHNSW_LAYOUT_H

#include <stdint.h>

/* the build's graph (buildgraph.h) */
struct ShnswBuildGraph;

/*
 * Order nodes for the on-disk layout: breadth-first over layer 0 from the
 * entry point, so neighbours tend to share pages; nodes the walk does not
 * reach follow in their own order. order[k] is the node placed k-th.
 */
extern void shnsw_build_layout_order(const struct ShnswBuildGraph *g, uint32_t *order);

/*
 * Order nodes page by page (per_page nodes a page) so that a node's
 * layer-0 neighbours lie on few pages besides its own: each page starts
 * from the node the last page rated best (the entry point first) and takes,
 * one at a time, the unplaced node whose placement there saves the most
 * page reads of expansions (layout.c, co-location; src/README, Page layout).
 * scratch (n entries, the caller's) is overwritten; the function allocates
 * one byte per node more, and a few hundred kB for the page being filled.
 */
extern void shnsw_build_layout_pages(const struct ShnswBuildGraph *g, int per_page,
									 uint32_t *order, uint32_t *scratch);

#endif							/* STREAMHNSW_LAYOUT_H */
