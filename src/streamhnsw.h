/*-------------------------------------------------------------------------
 *
 * streamhnsw.h
 *	  Declarations of the streamhnsw index access method: page layouts,
 *	  metapage, options, GUCs and the functions each file exports.
 *
 * src/README describes the design; format.h has the node records that the
 * pure code reads too.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_H
#define STREAMHNSW_H

#include "postgres.h"

#if PG_VERSION_NUM < 180000
#error "streamhnsw requires PostgreSQL 18 or later"
#endif

#include "access/amapi.h"
#include "access/genam.h"
#include "access/itup.h"
#include "fmgr.h"
#include "nodes/execnodes.h"
#include "nodes/pathnodes.h"
#include "storage/block.h"
#include "storage/bufmgr.h"
#include "storage/bufpage.h"
#include "utils/relcache.h"

#include "buildgraph.h"
#include "cache.h"
#include "codebound.h"
#include "format.h"
#include "kernels.h"
#include "layout.h"
#include "lookahead.h"
#include "reachability.h"
#include "reader.h"
#include "search.h"

#define STREAMHNSW_VERSION "0.1.0"

/* ---------- options and GUCs ---------- */

#define SHNSW_DEFAULT_M					16
#define SHNSW_MIN_M						2
#define SHNSW_MAX_M_OPTION				100
#define SHNSW_DEFAULT_EF_CONSTRUCTION	64
#define SHNSW_MIN_EF_CONSTRUCTION		4
#define SHNSW_MAX_EF_CONSTRUCTION		1000
#define SHNSW_DEFAULT_EF_SEARCH			40
#define SHNSW_MIN_EF_SEARCH				1
#define SHNSW_MAX_EF_SEARCH				1000
#define SHNSW_DEFAULT_MAX_SCAN_TUPLES	20000
#define SHNSW_DEFAULT_SWEEP_THRESHOLD	1.0
#define SHNSW_MIN_MAX_SCAN_TUPLES		1

#define SHNSW_MAX_VECTOR_DIM			2000
#define SHNSW_MAX_HALFVEC_DIM			4000

StaticAssertDecl(SHNSW_MAX_M_OPTION <= SHNSW_MAX_M, "node records must hold 2 * max m neighbours");

typedef struct ShnswOptions
{
	int32		vl_len_;		/* varlena header (do not touch directly!) */
	int			m;
	int			ef_construction;
	int			ef_search;		/* the scans' when streamhnsw.ef_search is not set */
} ShnswOptions;

extern int	shnsw_ef_search;
extern int	shnsw_scan_ef_search(Relation index, bool *from_index);
extern int	shnsw_max_scan_tuples;
extern double shnsw_sweep_threshold;
extern int	shnsw_io_mode;
extern int	shnsw_max_read_ahead;
extern int	shnsw_lookahead_window;
extern int	shnsw_heap_prefetch;
extern bool shnsw_debug_discard_caches;
extern bool shnsw_debug_list_conflicts;
extern int	shnsw_debug_io_cap;
extern bool shnsw_debug_keep_lists;
extern bool shnsw_debug_build_floats;
extern int	shnsw_iterative_scan;

/* streamhnsw.io_mode */
#define SHNSW_IO_SYNC			0	/* one synchronous read at a time */
#define SHNSW_IO_STREAM			1	/* asynchronous reads kept in flight */

#define SHNSW_DEFAULT_MAX_READ_AHEAD	64
#define SHNSW_DEFAULT_LOOKAHEAD_WINDOW	32
#define SHNSW_DEFAULT_HEAP_PREFETCH		10	/* a LIMIT 10's rows */


/* streamhnsw.iterative_scan */
#define SHNSW_ITERATIVE_STRICT	0	/* rows in exact distance order */
#define SHNSW_ITERATIVE_RELAXED 1	/* each round's rows as soon as re-ranked */

/* ---------- support functions of the operator classes ---------- */

#define SHNSW_DISTANCE_PROC		1	/* exact distance: the ORDER BY operator's function */
#define SHNSW_METRIC_PROC		2	/* returns the ShnswMetric */
#define SHNSW_TYPE_PROC			3	/* returns the ShnswElemType */
#define SHNSW_NPROCS			3

/* ---------- pages ---------- */

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
	uint16		dims;
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

/*
 * An index that was built small (or empty) retrains SQ8 from its own exact
 * vectors each time it doubles, until it has trained on this many rows.
 */
#define SHNSW_RETRAIN_MAX_ROWS	100000
/* nodes placed, at least, between retrains for values far outside the range */
#define SHNSW_RETRAIN_MIN_STEP	64

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

/* ---------- per-backend description of an index (rd_amcache) ---------- */

/*
 * The description of an index: its fixed sizes and its SQ8 parameters, in
 * one chunk (lo and scale point into quant[] of the same chunk).
 * rd_amcache keeps one, never written in place; shnsw_get_index_info hands
 * out copies that the caller owns, so a scan, an insert or a VACUUM never
 * holds a pointer into rd_amcache, which relcache invalidation frees.
 */
typedef struct ShnswIndexInfo
{
	int			dims;
	int			m;
	int			ef_construction;	/* the build's; never the reloption */
	ShnswMetric metric;
	ShnswElemType elemtype;
	int			slot_bits;
	int			node_size;
	int			vec_size;
	BlockNumber quant_start;
	bool		quant_trained;
	uint32		quant_version;
	float	   *lo;				/* SQ8 lower bounds, dims floats */
	float	   *scale;			/* SQ8 steps, dims floats */
	float		quant[FLEXIBLE_ARRAY_MEMBER];	/* lo[dims] then scale[dims] */
} ShnswIndexInfo;

/* A snapshot of the metapage's changing fields. */
typedef struct ShnswMetaSnapshot
{
	ShnswRef	entry;
	int			entry_level;
	uint64		node_count;
	uint64		cache_generation;
	uint32		quant_version;
	uint32		truncations;	/* see ShnswMetaPageData */
	uint64		build_nonce;	/* see ShnswMetaPageData */
	double		max_residual;	/* see ShnswMetaPageData; -1: not kept */
	bool		clamps_marked;	/* SHNSW_META_CLAMPS */
	uint64		lsn;			/* the metapage's LSN */
} ShnswMetaSnapshot;

/* ---------- handler.c: handler, options, GUCs, cost ---------- */

/* CREATE INDEX sub-phases for pg_stat_progress_create_index */
#define SHNSW_PHASE_LOAD		2
#define SHNSW_PHASE_GRAPH		3
#define SHNSW_PHASE_WRITE		4
#define SHNSW_PHASE_INSERT		5

extern void shnsw_init_options(void);
extern bytea *shnsw_options(Datum reloptions, bool validate);
extern void shnsw_costestimate(PlannerInfo *root, IndexPath *path, double loop_count,
							   Cost *indexStartupCost, Cost *indexTotalCost,
							   Selectivity *indexSelectivity, double *indexCorrelation,
							   double *indexPages);
extern int	shnsw_get_m(Relation index);
extern int	shnsw_get_ef_construction(Relation index);

/* ---------- validate.c ---------- */
extern bool shnsw_validate(Oid opclassoid);

/* ---------- vector.c: pgvector values ---------- */
extern ShnswMetric shnsw_index_metric(Relation index);
extern ShnswElemType shnsw_index_elemtype(Relation index);
extern int	shnsw_index_dims(Relation index, ShnswElemType elemtype);
extern int	shnsw_vec_size(ShnswElemType elemtype, int dims);
extern struct varlena *shnsw_check_vector(Datum value, ShnswElemType elemtype, int dims);
extern bool shnsw_vector_to_nav(const struct varlena *v, ShnswElemType elemtype,
								ShnswMetric metric, int dims, float *nav);

/* ---------- meta.c: metapage and per-backend index description ---------- */
extern ShnswIndexInfo *shnsw_get_index_info(Relation index);
extern void shnsw_forget_index_info(Relation index);
extern void shnsw_debug_discard(Relation index);
extern void shnsw_read_meta(Relation index, ShnswMetaSnapshot *snap);
extern void shnsw_init_page(Page page, uint16 page_type);
extern void shnsw_check_page(Relation index, Page page, BlockNumber blkno, uint16 page_type);
extern void shnsw_fill_meta(ShnswMetaPage meta, int dims, int m, int efc, ShnswMetric metric,
							ShnswElemType elemtype);
extern int	shnsw_quant_nblocks(int dims);
extern int	shnsw_slot_bits(int nodes_per_page);
extern int	shnsw_nodes_per_page(int node_size);

/* ---------- quantizer.c: SQ8 parameters on disk ---------- */
extern void shnsw_write_quant(Relation index, BlockNumber quant_start, int dims,
							  const float *lo, const float *scale);
extern void shnsw_retrain(Relation index);
extern void shnsw_train_from_first(Relation index, ShnswIndexInfo *info, const float *nav);

/* ---------- what a scan did (EXPLAIN, streamhnsw_stats()) ---------- */

/* why a scan swept the index (scan_sweep.c, scan_sweep; EXPLAIN names them) */
typedef enum ShnswSweepReason
{
	SHNSW_SWEEP_FIRST_ROUND,	/* streamhnsw.sweep_threshold = 0 */
	SHNSW_SWEEP_THRESHOLD,		/* the walk saw sweep_threshold of the nodes */
	SHNSW_SWEEP_WALK_ENDED,		/* the walk found no more nodes */
	SHNSW_SWEEP_NREASONS
} ShnswSweepReason;

extern const char *const shnsw_sweep_reason_names[SHNSW_SWEEP_NREASONS];
extern bool shnsw_sweep_fits(double nodes);

/*
 * What a scan's first round held rows against (scan.c, scan_prepare_bounds);
 * EXPLAIN prints it (explain.c, shnsw_first_bound_names).
 */
typedef enum ShnswFirstBound
{
	SHNSW_FIRST_NONE = 0,		/* no bound (NULL or zero cosine query, empty) */
	SHNSW_FIRST_TYPICAL,		/* the codes' typical error: no value clamped */
	SHNSW_FIRST_MARKED,			/* typical, marked (clamped) nodes by class */
	SHNSW_FIRST_WORST_OLD,		/* worst case: clamped nodes unmarked (an index
								 * made before the marks) or residual unknown */
	SHNSW_FIRST_WORST_QUERY,	/* worst case: the query far outside the range */
	SHNSW_FIRST_NBOUNDS
} ShnswFirstBound;

extern const char *const shnsw_first_bound_names[SHNSW_FIRST_NBOUNDS];

typedef struct ShnswScanStats
{
	int			io_mode;
	int			first_bound;	/* ShnswFirstBound of the last scan; EXPLAIN only */
	int			ef_search;		/* the last scan's ef_search; EXPLAIN only */
	bool		ef_from_index;	/* ... taken from the index's option */
	uint64		scans;
	uint64		rounds;
	uint64		nodes_expanded;
	uint64		distances;
	uint64		reranked;
	uint64		held_back;		/* rows returned after a later round ran */
	uint64		late_placed;	/* rows returned ahead of an earlier round's */
	uint64		late_unplaced;	/* rows found after a farther row was returned */
	uint64		parked_reranked;	/* of reranked, parked nodes taken (scan_take) */
	uint64		swept;			/* nodes the sweep found that the walk had not */
	uint64		sweeps[SHNSW_SWEEP_NREASONS];	/* sweeps, by why (scan_sweep) */
	uint64		unproven;		/* strict rows returned before the scan had seen
								 * every node: on the graph walk's premise */
	uint64		proof_capped;	/* of those, rows returned when the proof of
								 * their place had spent its bounded effort */
	uint64		budget_spent;	/* scans whose walk spent max_scan_tuples */
	uint64		range_ends;		/* scans ended at the WHERE clause's distance
								 * bound (bound.c); EXPLAIN only */
	ShnswReaderStats io;		/* the read pipeline's figures (reader.h) */
	int			cache_status;	/* SHNSW_CACHE_*: did the scan search the
								 * shared cache */
	uint64		cache_nodes;	/* node records read from the shared cache */
	uint64		cache_fallback_nodes;	/* ... and through buffers instead */
} ShnswScanStats;

/* ---------- pageaccess.c: ShnswNodeSource over shared buffers ---------- */
typedef struct ShnswPageCtx
{
	Relation	index;
	int			slot_bits;
	int			node_size;
	int			m;
	ShnswReader *reader;		/* NULL: plain synchronous reads (writes) */
	BlockNumber *blkbuf;		/* scratch for block lists */
	int			blkcap;
	int			vec_size;
	BlockNumber nblocks;		/* relation length last seen (only grows) */
	/* descent read-ahead (shnsw_buffer_source_descent) */
	int			ahead_graph;	/* graph pages from the entry's on */
	int			ahead_upper;	/* upper pages from the entry's record's on */
	BlockNumber entry_blk;		/* the first page read */
} ShnswPageCtx;

extern void shnsw_buffer_source_init(ShnswNodeSource *ops, ShnswPageCtx *ctx, Relation index,
								const ShnswIndexInfo *info, ShnswReader *reader);
extern void shnsw_buffer_source_descent(ShnswPageCtx *ctx, uint64 node_count);
extern void shnsw_read_vector(Relation index, ShnswReader *reader, BlockNumber blk,
							  uint16 offset, int size, char *out);
extern int	shnsw_vector_blocks(BlockNumber blk, uint16 offset, int size, BlockNumber *out);

/* bounds checks of what is read from disk (pageaccess.c; src/README, Corruption) */
pg_noreturn extern void shnsw_corrupt(Relation index, BlockNumber blk, const char *field,
									  uint64 value);
extern bool shnsw_block_exists(Relation index, BlockNumber blk, BlockNumber *nblocks);
extern void shnsw_check_block(Relation index, BlockNumber blk, BlockNumber *nblocks,
							  BlockNumber from, const char *field);
extern int	shnsw_graph_nslots(Relation index, Page page, BlockNumber blk, int node_size);
extern void shnsw_node_first_tid(Relation index, BlockNumber blk, const ShnswNodeHeader *h,
								 ItemPointer tid);
extern int	shnsw_upper_node_tids(Relation index, BlockNumber ublk, const ShnswUpperHeader *u,
								  int m, ShnswRef ref, ItemPointerData *tids);
extern void shnsw_node_set_tids(ShnswNodeHeader *h, ShnswUpperHeader *u, int m,
								const ItemPointerData *tids, int n);
struct ShnswNodeLimits;
extern void shnsw_node_limits(struct ShnswNodeLimits *lim, int m, int slot_bits, int vec_size,
							  BlockNumber nblocks);
extern void shnsw_check_node(Relation index, BlockNumber blk, int slot, const ShnswNodeHeader *h,
							 int m, int slot_bits, int vec_size, BlockNumber *nblocks);
extern ShnswUpperHeader *shnsw_upper_record(Relation index, Page page, BlockNumber blk,
											OffsetNumber off, int m);
extern int	shnsw_read_node_tids(Relation index, ShnswReader *reader, ShnswRef ref,
								 BlockNumber blk, const ShnswNodeHeader *h, int m,
								 BlockNumber *nblocks, ItemPointerData *tids);

/* ---------- neighbors_find.c and neighbors_update.c: neighbour lists on disk ---------- */
#define SHNSW_MAX_DUPS 64

typedef struct ShnswLinker
{
	Relation	index;
	ShnswIndexInfo *info;		/* the owner's copy (insert, VACUUM) */
	ShnswPageCtx pctx;
	ShnswNodeSource ops;		/* through shared buffers */
	ShnswNodeSource search_ops; /* shnsw_find_neighbors' reads: ops, or an
								 * insert's over the shared graph image
								 * (shnsw_cache_insert_begin) */
	int			dims;
	int			m;
	float	   *scratch;		/* (2m + 2) * dims floats */
	int64		given_up;		/* list changes that ran out of retries */
	/* an insert's duplicate check (shnsw_find_neighbors, layer 0) */
	const uint8 *dup_code;		/* if set: collect nodes with this code ... */
	ShnswRef	dups[SHNSW_MAX_DUPS];	/* ... that had room for a row */
	int			ndups;
} ShnswLinker;

/* What shnsw_read_node copies out of a node record. */
typedef struct ShnswNodeCopy
{
	uint8		flags;
	uint8		level;
	ShnswUpperLoc upper;
	int			count;			/* entries of list on the layer read */
	ShnswRef	list[2 * SHNSW_MAX_M];
} ShnswNodeCopy;

/* A sorted array of node references (VACUUM's deleted nodes). */
typedef struct ShnswRefSet
{
	ShnswRef   *refs;
	int64		n;
} ShnswRefSet;

/* neighbors_find.c: reading and choosing */
extern void shnsw_linker_init(ShnswLinker *lk, Relation index, ShnswIndexInfo *info);
extern void shnsw_read_codes(ShnswLinker *lk, const ShnswRef *refs, int n, uint8 *codes);
extern void shnsw_read_node(ShnswLinker *lk, ShnswRef e, int layer, ShnswNodeCopy *out,
							uint8 *code);
extern int	shnsw_select_neighbors(ShnswLinker *lk, ShnswRef *refs, float *d, uint8 *codes,
								   int n, int max, int fill, int *nchosen);
extern void shnsw_find_neighbors(ShnswLinker *lk, const float *q, ShnswRef entry,
								 int entry_level, int level, int ef, ShnswRef exclude,
								 ShnswRef **nbrs, int *nnbrs);
extern void shnsw_code_distances(ShnswLinker *lk, const uint8 *ecode, const uint8 *codes, int n,
								 float *d);
extern int	shnsw_ref_cmp(const void *a, const void *b);
extern bool shnsw_refset_has(const ShnswRefSet *set, ShnswRef r);

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

/* ---------- stats.c: cumulative figures, and the names of the counters ---------- */
typedef struct ShnswStatField
{
	const char *label;			/* EXPLAIN (non-text) and column name */
	size_t		offset;			/* of a uint64 in ShnswScanStats */
} ShnswStatField;

extern const ShnswStatField shnsw_stat_fields[];
extern const int shnsw_stat_nfields;

#define SHNSW_STAT_FIELD(st, i) \
	(*(uint64 *) ((char *) (st) + shnsw_stat_fields[i].offset))

extern void shnsw_stats_accumulate(const ShnswScanStats *st);

/* ---------- explain.c: EXPLAIN (ANALYZE) lines ---------- */
extern void shnsw_explain_init(void);

/* bound.c: a monotone step between the distance and the compared value */
typedef enum ShnswStepKind
{
	SHNSW_STEP_C_MINUS,			/* c - x */
	SHNSW_STEP_PLUS,			/* x + c, c + x */
	SHNSW_STEP_MINUS,			/* x - c */
	SHNSW_STEP_NEG,				/* -x */
	SHNSW_STEP_TIMES,			/* x * c, c * x (c a non-zero constant) */
	SHNSW_STEP_DIVIDED			/* x / c (c a non-zero constant) */
} ShnswStepKind;

#define SHNSW_BOUND_MAX_STEPS 4

typedef struct ShnswBoundStep
{
	ShnswStepKind kind;
	Expr	   *c;				/* NULL for SHNSW_STEP_NEG */
	bool		decreasing;
} ShnswBoundStep;

/* What shnsw_distance_bound found: f(distance) < value, f the steps. */
typedef struct ShnswBoundShape
{
	Expr	   *value;
	bool		inclusive;		/* <= rather than < */
	int			nsteps;
	ShnswBoundStep steps[SHNSW_BOUND_MAX_STEPS];	/* outermost first */
} ShnswBoundShape;

extern bool shnsw_distance_bound(Expr *clause, List *orderbys, ShnswBoundShape *shape);
extern bool shnsw_bound_for_scan(IndexScanDesc scan, double *bound, bool *inclusive);
extern void shnsw_bound_init(void);

/* ---------- build.c ---------- */
extern IndexBuildResult *shnsw_build(Relation heap, Relation index, IndexInfo *indexInfo);
extern void shnsw_buildempty(Relation index);

/* ---------- buildpar.c ---------- */
typedef struct ShnswParallelBuild ShnswParallelBuild;
extern Size shnsw_parallel_row_bytes(int nworkers);
extern ShnswParallelBuild *shnsw_parallel_begin(int nworkers, int dims, int m, int efc,
												ShnswMetric metric, bool use_codes,
												bool use_halves, float half_scale, uint32 n,
												const float *lo, const float *scale,
												uint64 seed, ShnswBuildGraph *g);
extern int	shnsw_parallel_launch(ShnswParallelBuild *pb);
extern void shnsw_parallel_ready(ShnswParallelBuild *pb, uint32 n);
extern int	shnsw_parallel_link(ShnswParallelBuild *pb, ShnswBuildGraph *g);
extern void shnsw_parallel_end(ShnswParallelBuild *pb);
struct BufFile;
struct FileSet;
extern const char *shnsw_rest_file_name(void);
extern int	shnsw_parallel_insert(Relation heap, Relation index, IndexInfo *indexInfo,
								  int nworkers, struct BufFile *file,
								  const struct FileSet *fileset, uint32 nrows, int vec_size,
								  uint32 *leader_rows);

/* ---------- insert.c ---------- */
extern bool shnsw_insert(Relation index, Datum *values, bool *isnull, ItemPointer heap_tid,
						 Relation heap, IndexUniqueCheck checkUnique, bool indexUnchanged,
						 IndexInfo *indexInfo);

/* ---------- scan.c ---------- */
extern IndexScanDesc shnsw_beginscan(Relation index, int nkeys, int norderbys);
extern void shnsw_rescan(IndexScanDesc scan, ScanKey keys, int nkeys, ScanKey orderbys, int norderbys);
extern bool shnsw_gettuple(IndexScanDesc scan, ScanDirection dir);
extern void shnsw_endscan(IndexScanDesc scan);
extern const ShnswScanStats *shnsw_scan_stats(IndexScanDesc scan);

/* ---------- vacuum.c ---------- */
extern IndexBulkDeleteResult *shnsw_bulkdelete(IndexVacuumInfo *info, IndexBulkDeleteResult *stats,
											   IndexBulkDeleteCallback callback, void *callback_state);
extern IndexBulkDeleteResult *shnsw_vacuumcleanup(IndexVacuumInfo *info, IndexBulkDeleteResult *stats);

/* ---------- truncate.c: VACUUM's cut of free pages at the end ---------- */
extern BlockNumber shnsw_truncate_tail(Relation index, const ShnswIndexInfo *info,
									   BufferAccessStrategy bas, int elevel);

#endif							/* STREAMHNSW_H */
