/*-------------------------------------------------------------------------
 *
 * stats.h
 *	  What a scan did (ShnswScanStats: EXPLAIN, streamhnsw_stats()), the
 *	  names of its counters and the server-wide sums (stats.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_STATS_H
#define STREAMHNSW_STATS_H

#include "reader.h"

/* why a scan swept the index (scan_sweep.c, scan_sweep; EXPLAIN names them) */
typedef enum ShnswSweepReason
{
	SHNSW_SWEEP_FIRST_ROUND,	/* streamhnsw.sweep_threshold = 0 */
	SHNSW_SWEEP_THRESHOLD,		/* the walk saw sweep_threshold of the nodes */
	SHNSW_SWEEP_WALK_ENDED,		/* the walk found no more nodes */
	SHNSW_SWEEP_NREASONS
} ShnswSweepReason;

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

typedef struct ShnswScanStats
{
	int			io_mode;
	int			first_bound;	/* ShnswFirstBound of the last scan; EXPLAIN only */
	int			ef_search;		/* the last scan's ef_search; EXPLAIN only */
	bool		ef_from_index;	/* ... taken from the index's option */
	int			sketch_walk;	/* its first round's width under a sketch, else
								 * 0 (SHNSW_SKETCH_WALK); EXPLAIN only */
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

#endif							/* STREAMHNSW_STATS_H */
