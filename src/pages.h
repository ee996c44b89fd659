/*-------------------------------------------------------------------------
 *
 * pages.h
 *	  On-disk format of streamhnsw pages at the page level: page types, the
 *	  special space and the metapage. format.h has the node records.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_PAGES_H
#define STREAMHNSW_PAGES_H

#include "storage/block.h"
#include "storage/bufpage.h"

#include "format.h"

#define SHNSW_METAPAGE_BLKNO	0

#define SHNSW_PAGE_META			1
#define SHNSW_PAGE_QUANT		2	/* quantizer parameters */
#define SHNSW_PAGE_GRAPH		3	/* fixed-size node records */
#define SHNSW_PAGE_VECTOR		4	/* exact vectors, a byte stream */
#define SHNSW_PAGE_UPPER		5	/* upper-layer records as line-pointer items */

/* Special space of every streamhnsw page. */
typedef struct ShnswPageOpaqueData
{
	uint16		page_type;		/* SHNSW_PAGE_* */
	uint16		nslots;			/* graph pages: node slots in use */
	uint32		magic;			/* SHNSW_MAGIC, identifies our pages */
} ShnswPageOpaqueData;

typedef ShnswPageOpaqueData *ShnswPageOpaque;

/* The node record in a graph page's slot. */
static inline ShnswNodeHeader *
shnsw_page_node(Page page, int slot, int node_size)
{
	return (ShnswNodeHeader *) (PageGetContents(page) + (Size) slot * node_size);
}

#define ShnswPageGetOpaque(page) ((ShnswPageOpaque) PageGetSpecialPointer(page))

/* Bytes usable for contents between the page header and the special space. */
#define SHNSW_PAGE_CAPACITY \
	(BLCKSZ - MAXALIGN(SizeOfPageHeaderData) - MAXALIGN(sizeof(ShnswPageOpaqueData)))

/* Quantizer kinds; SQ8 is the only one so far. */
#define SHNSW_QUANT_SQ8			1

/*
 * The metapage (block 0). Every change that can alter what a scan sees
 * increments cache_generation, which a shared decoded cache can check.
 */
typedef struct ShnswMetaPageData
{
	uint32		magic;
	uint32		version;
	uint32		dims;			/* the column's (bits for bit) */
	uint16		m;
	uint16		ef_construction;
	uint8		metric;			/* ShnswMetric */
	uint8		elemtype;		/* ShnswElemType */
	uint8		quantizer;		/* SHNSW_QUANT_* */
	uint8		quant_trained;	/* false until the first vector arrives */
	uint8		slot_bits;
	uint8		flags;			/* SHNSW_META_* */
	uint16		nodes_per_page;
	uint16		node_size;
	uint32		vec_size;		/* bytes of one exact vector (varlena image) */
	ShnswRef	entry;			/* entry point, or SHNSW_INVALID_REF if empty */
	int32		entry_level;
	BlockNumber quant_start;	/* first quantizer page */
	uint32		quant_nblocks;
	BlockNumber insert_graph_blk;	/* where inserts put new nodes ... */
	BlockNumber insert_vec_blk; /* ... exact vectors ... */
	BlockNumber insert_upper_blk;	/* ... and upper records */
	uint64		node_count;		/* nodes ever placed (deleted ones included) */
	uint64		deleted_count;
	uint64		cache_generation;
	uint64		rng_state;		/* level generator for inserts */
	uint64		quant_rows;		/* rows the quantizer was trained on */
	uint32		quant_version;	/* bumped whenever lo/scale change */
	ShnswRef	free_head;		/* first free node slot, or SHNSW_INVALID_REF */
	uint64		free_count;		/* slots on the free list (counted as deleted) */
	uint32		truncations;	/* VACUUM truncations so far (truncate.c): a
								 * block cut may come back as another type */
	double		max_residual;	/* with SHNSW_META_RESIDUAL: the largest |x -
								 * x'| of a node's navigation vector and its
								 * decoded code (codebound.c, shnsw_code_residual)
								 * of any node placed since the quantizer
								 * was last trained, clamped values included:
								 * scans bound exact distances with it */
	BlockNumber insert_vec_end; /* with SHNSW_META_VECRUN: the last block of
								 * the run of vector pages inserts fill in
								 * order (insert_vec_blk is in it), so that
								 * a vector may continue on the next page;
								 * InvalidBlockNumber: no run */
	uint64		build_nonce;	/* random, set by each build (0 in indexes
								 * built before it was added): a copy in
								 * the shared cache of an earlier build of
								 * the same relfilenode is never taken for
								 * one of this build */
} ShnswMetaPageData;

typedef ShnswMetaPageData *ShnswMetaPage;

/*
 * flags: a neighbour-list change ran out of retries (others kept changing
 * the list) and left a link unwritten; the next VACUUM searches for every
 * node (pass 4b over all of them) and clears the flag.
 */
#define SHNSW_META_RECHECK		0x01

/*
 * flags: max_residual is kept (indexes built since it was added; an older
 * one's metapage may end before the field, so nothing writes it there).
 */
#define SHNSW_META_RESIDUAL		0x02

/*
 * flags: every node whose value was clamped into the trained range carries
 * SHNSW_NODE_CLAMPED (indexes made since the flag was added; an older one
 * may have clamped nodes without it, so its scans cannot tell them apart).
 */
#define SHNSW_META_CLAMPS		0x04

/*
 * flags: insert_vec_end is kept, and appended vectors fill runs of
 * consecutive vector pages as one byte stream, as a build writes them
 * (insert.c, vec_reserve; indexes made since the flag was added: an older
 * metapage may end before the field). Without it every appended vector
 * lies whole on one page.
 */
#define SHNSW_META_VECRUN		0x08

/* Raise max_residual of meta to residual, if it keeps one (caller: exclusive lock). */
#define shnsw_meta_residual(meta, residual) \
	do { \
		if (((meta)->flags & SHNSW_META_RESIDUAL) && (residual) > (meta)->max_residual) \
			(meta)->max_residual = (residual); \
	} while (0)

#define ShnswPageGetMeta(page) ((ShnswMetaPage) PageGetContents(page))

#endif							/* STREAMHNSW_PAGES_H */
