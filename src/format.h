/*-------------------------------------------------------------------------
 *
 * format.h
 *	  On-disk format of streamhnsw index pages, in plain C types.
 *
 * Pure code (graph search, unit tests) reads node records through these
 * definitions without PostgreSQL headers; pages.h adds the page-level
 * structs (metapage, special space). src/README draws the layout.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_FORMAT_H
#define STREAMHNSW_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define SHNSW_MAGIC				0x53484E57	/* "SHNW" */
#define SHNSW_FORMAT_VERSION	6	/* 3: a node holds up to SHNSW_NODE_TIDS rows;
									 * 4: a node's rows beyond its first are in its
									 * upper record, not its graph record;
									 * 5: the metapage's dims is 32 bits (sparsevec);
									 * 6: sparsevec values stored at their own
									 * size, each on one page */

/*
 * A node reference: the graph page's block number and the node's slot on it,
 * packed as (block << slot_bits) | slot. slot_bits is fixed per index (in the
 * metapage) and at most SHNSW_MAX_SLOT_BITS, so a reference is 4 bytes and
 * names its page without any lookup.
 */
typedef uint32_t ShnswRef;

#define SHNSW_INVALID_REF		((ShnswRef) 0xFFFFFFFF)
#define SHNSW_MAX_SLOT_BITS		6
#define SHNSW_MAX_M				100 /* largest m a node record allows */
#define SHNSW_MAX_LEVEL			15	/* highest layer a node can have */
#define SHNSW_MAX_NODES_PER_PAGE (1 << SHNSW_MAX_SLOT_BITS)

/*
 * Heap rows one node can hold: identical vectors share a node. The first
 * TID is in the node's header; a node with more (extra_tids > 0) keeps its
 * whole list in its upper record (ShnswUpperHeader.ntids), which a level-0
 * node gets when its second row arrives. Graph pages, which a search reads,
 * pay nothing for it; more copies than fit go to another node.
 */
#define SHNSW_NODE_TIDS			10

static inline uint32_t
shnsw_ref_block(ShnswRef ref, int slot_bits)
{
	return ref >> slot_bits;
}

static inline uint32_t
shnsw_ref_slot(ShnswRef ref, int slot_bits)
{
	return ref & ((1u << slot_bits) - 1);
}

static inline ShnswRef
shnsw_make_ref(uint32_t block, uint32_t slot, int slot_bits)
{
	return (block << slot_bits) | slot;
}

/* Node flags */
#define SHNSW_NODE_DELETED		0x01	/* heap tuple is dead: never returned */
#define SHNSW_NODE_FREE			0x02	/* slot (and its vector space) is on the
										 * free list: DELETED too, level 0, no
										 * neighbours; neighbors[0] is the next
										 * free slot */
#define SHNSW_NODE_CLAMPED		0x04	/* a value of the navigation vector lay
										 * outside the trained SQ8 range and was
										 * clamped into it: the code can be off
										 * by more than half a step (indexes
										 * whose metapage has SHNSW_META_CLAMPS;
										 * src/README, Scans) */
/*
 * With SHNSW_NODE_CLAMPED, the flags' top five bits hold the node's clamp
 * class: how far at most its value lies outside the cells its code stands
 * for (codebound.c, shnsw_clamp_flags); 0: unknown.
 */
#define SHNSW_NODE_CLAMP_SHIFT	3
#define SHNSW_NODE_CLAMP_CLASSES 32

static inline int
shnsw_node_clamp_class(uint8_t flags)
{
	return (flags & SHNSW_NODE_CLAMPED) ? flags >> SHNSW_NODE_CLAMP_SHIFT : 0;
}

/*
 * A node record on a graph page. Records have a fixed size per index:
 *
 *	 ShnswNodeHeader (24 bytes)
 *	 ShnswRef neighbors[2 * m]		layer-0 adjacency, nneighbors used
 *	 uint8	  code[dims]			SQ8 code of the navigation vector (a bit
 *									vector's bytes: shnsw_nav_dims)
 *	 padding to a multiple of 4
 *
 * Upper layers (level >= 1) and the heap TIDs of a node with several rows
 * live in a separate record on an upper page, found through upper_*; the
 * exact vector lives on vector pages at (vec_block, vec_offset), read only
 * to re-rank.
 */
typedef struct ShnswNodeHeader
{
	uint16_t	tid_blk_hi;		/* heap TID, laid out as ItemPointerData */
	uint16_t	tid_blk_lo;
	uint16_t	tid_off;
	uint8_t		level;			/* highest layer of this node */
	uint8_t		flags;			/* SHNSW_NODE_* */
	uint16_t	upper_blk_hi;	/* upper-layer record, as ItemPointerData */
	uint16_t	upper_blk_lo;
	uint16_t	upper_off;
	uint16_t	nneighbors;		/* used entries of neighbors[] */
	uint32_t	vec_block;		/* exact vector: first vector page */
	uint16_t	vec_offset;		/* byte offset in that page's contents */
	uint16_t	extra_tids;		/* rows beyond the first: the upper record
								 * lists all extra_tids + 1 when > 0 */
} ShnswNodeHeader;

/* A heap TID in an upper record, laid out as ItemPointerData (2-byte aligned). */
typedef struct ShnswTid
{
	uint16_t	blk_hi;
	uint16_t	blk_lo;
	uint16_t	off;
} ShnswTid;

_Static_assert(sizeof(ShnswTid) == 6, "a TID must be 6 bytes");

_Static_assert(sizeof(ShnswNodeHeader) == 24, "node header must be 24 bytes");

/* Block number of the node's heap TID. */
static inline uint32_t
shnsw_node_tid_block(const ShnswNodeHeader *node)
{
	return ((uint32_t) node->tid_blk_hi << 16) | node->tid_blk_lo;
}

static inline ShnswRef *
shnsw_node_neighbors(const ShnswNodeHeader *node)
{
	return (ShnswRef *) ((char *) node + sizeof(ShnswNodeHeader));
}

/* Where a node record's code starts (after the header and 2m neighbours). */
static inline size_t
shnsw_node_code_offset(int m)
{
	return sizeof(ShnswNodeHeader) + sizeof(ShnswRef) * 2 * m;
}

static inline uint8_t *
shnsw_node_code(const ShnswNodeHeader *node, int m)
{
	return (uint8_t *) node + shnsw_node_code_offset(m);
}

static inline size_t
shnsw_node_size(int m, int dims)
{
	size_t		sz = sizeof(ShnswNodeHeader) + sizeof(ShnswRef) * 2 * m + dims;

	return (sz + 3) & ~(size_t) 3;
}

/*
 * An upper-layer record (a line-pointer item on an upper page):
 *
 *	 ShnswUpperHeader
 *	 uint16	  counts[level]		(padded to a multiple of 4 bytes)
 *	 ShnswRef neighbors[level][m]	layer l's list at index (l - 1) * m
 *	 ShnswTid tids[SHNSW_NODE_TIDS]	the node's heap rows, ntids used
 *
 * Every record has room for the rows, so any node can take copies of its
 * vector. A level-0 node gets a record of level 0 (no lists) when its
 * second row arrives. The list is the node's only while the node's header
 * says extra_tids > 0 (then ntids = extra_tids + 1 and tids[0] is the
 * header's TID); otherwise it is left over (a slot's earlier node) and
 * never read.
 */
typedef struct ShnswUpperHeader
{
	ShnswRef	node;			/* the node this record belongs to */
	uint8_t		level;
	uint8_t		ntids;			/* used entries of tids[] */
	uint8_t		reserved[2];
} ShnswUpperHeader;

static inline uint16_t *
shnsw_upper_counts(const ShnswUpperHeader *u)
{
	return (uint16_t *) ((char *) u + sizeof(ShnswUpperHeader));
}

static inline ShnswRef *
shnsw_upper_neighbors(const ShnswUpperHeader *u, int layer, int m)
{
	size_t		off = sizeof(ShnswUpperHeader) + ((sizeof(uint16_t) * u->level + 3) & ~(size_t) 3);

	return (ShnswRef *) ((char *) u + off) + (size_t) (layer - 1) * m;
}

/* Bytes of the record's lists: where its TIDs start. */
static inline size_t
shnsw_upper_lists_size(int level, int m)
{
	return sizeof(ShnswUpperHeader) + ((sizeof(uint16_t) * level + 3) & ~(size_t) 3) +
		sizeof(ShnswRef) * (size_t) level * m;
}

#define SHNSW_UPPER_TIDS_SIZE \
	((sizeof(ShnswTid) * SHNSW_NODE_TIDS + 3) & ~(size_t) 3)

static inline size_t
shnsw_upper_size(int level, int m)
{
	return shnsw_upper_lists_size(level, m) + SHNSW_UPPER_TIDS_SIZE;
}

/* The record's heap TIDs (ntids used). */
static inline ShnswTid *
shnsw_upper_tids(const ShnswUpperHeader *u, int m)
{
	return (ShnswTid *) ((char *) u + shnsw_upper_lists_size(u->level, m));
}

/* Distance families; stored in the metapage, so values are on-disk format. */
typedef enum ShnswMetric
{
	SHNSW_METRIC_L2 = 1,		/* squared Euclidean for navigation */
	SHNSW_METRIC_IP = 2,		/* negative inner product */
	SHNSW_METRIC_COSINE = 3,	/* negative inner product of normalized vectors */
	SHNSW_METRIC_L1 = 4,		/* taxicab: sum of absolute differences */
	SHNSW_METRIC_HAMMING = 5,	/* bits that differ (bit vectors) */
	SHNSW_METRIC_JACCARD = 6	/* 1 - |a and b| / |a or b| (bit vectors) */
} ShnswMetric;

#define SHNSW_METRIC_LAST		SHNSW_METRIC_JACCARD

/* Does the metric compare bit vectors (whose codes are their own bytes)? */
static inline int
shnsw_metric_is_bit(ShnswMetric metric)
{
	return metric == SHNSW_METRIC_HAMMING || metric == SHNSW_METRIC_JACCARD;
}

/* The most bits a bit(n) column may have (pgvector's hnsw allows as many). */
#define SHNSW_MAX_BIT_DIM		64000
#define SHNSW_BIT_MAX_BYTES		(SHNSW_MAX_BIT_DIM / 8)

/* Element types of the exact vectors; on-disk format too. */
typedef enum ShnswElemType
{
	SHNSW_ELEM_FLOAT4 = 1,		/* pgvector vector */
	SHNSW_ELEM_FLOAT2 = 2,		/* pgvector halfvec */
	SHNSW_ELEM_BIT = 3,			/* PostgreSQL bit(n), packed 8 to a byte */
	SHNSW_ELEM_SPARSE = 4		/* pgvector sparsevec */
} ShnswElemType;

/*
 * A sparsevec: the most non-zero elements an indexed value may have
 * (pgvector's hnsw's limit), the most dimensions (pgvector's), and the
 * navigation dimensions of one of more dimensions than
 * SHNSW_SPARSE_SKETCH_DIMS (its sketch: kernels_sparse.h).
 */
#define SHNSW_SPARSE_MAX_NNZ		1000
#define SHNSW_MAX_SPARSE_DIM		1000000000
#define SHNSW_SPARSE_SKETCH_DIMS	1024
#define SHNSW_SPARSE_HEAD			16	/* a sparsevec's header: varlena,
										 * dim, nnz, unused */

/*
 * The bytes a stored vector is known to take from its offset before it is
 * read: the fixed size (the metapage's vec_size) of a vector, halfvec or
 * bit; for a sparsevec only its header, for it is stored at its own size
 * (its varlena header's, at most vec_size) and never crosses a page: the
 * whole value lies on the page its header is on (src/README, Page formats).
 */
static inline int
shnsw_vec_span(ShnswElemType elemtype, int vec_size)
{
	return elemtype == SHNSW_ELEM_SPARSE ? SHNSW_SPARSE_HEAD : vec_size;
}

/*
 * The navigation dimensions of a column of dims dimensions: the length of
 * its navigation vector and of a node's code. A bit(n) column navigates on
 * its bytes, ceil(n / 8), each an exact code (src/README, Bit vectors); a
 * sparsevec on at most SHNSW_SPARSE_SKETCH_DIMS (src/README, Sparse
 * vectors).
 */
static inline int
shnsw_nav_dims(ShnswElemType elemtype, int dims)
{
	if (elemtype == SHNSW_ELEM_SPARSE && dims > SHNSW_SPARSE_SKETCH_DIMS)
		return SHNSW_SPARSE_SKETCH_DIMS;
	return elemtype == SHNSW_ELEM_BIT ? (dims + 7) / 8 : dims;
}

/*
 * Does the column navigate on a sketch, whose distances bound nothing (a
 * sparsevec of more dimensions than its navigation vector has)?
 */
static inline int
shnsw_nav_sketched(ShnswElemType elemtype, int dims)
{
	return elemtype == SHNSW_ELEM_SPARSE && dims > SHNSW_SPARSE_SKETCH_DIMS;
}

/* Where an upper-layer record lives (an item on an upper page). */
typedef struct ShnswUpperLoc
{
	uint32_t	block;
	uint16_t	offset;
} ShnswUpperLoc;

static inline ShnswUpperLoc
shnsw_node_upper_loc(const ShnswNodeHeader *node)
{
	ShnswUpperLoc loc;

	loc.block = ((uint32_t) node->upper_blk_hi << 16) | node->upper_blk_lo;
	loc.offset = node->upper_off;
	return loc;
}

#endif							/* STREAMHNSW_FORMAT_H */
