/*-------------------------------------------------------------------------
 *
 * search.h
 *	  The resumable HNSW search over an index's graph on disk, that scans,
 *	  inserts and VACUUM run; it navigates on SQ8 codes only.
 *
 * Nothing here touches the buffer manager: the search reads node records
 * through a node source (nodesource.h), which the server implements over
 * shared buffers (pageaccess.c) or the shared cache, and the unit tests
 * over plain memory.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_SEARCH_H
#define STREAMHNSW_SEARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "codebound.h"
#include "format.h"
#include "kernels.h"
#include "nodesource.h"
#include "pqueue.h"
#include "visited.h"

/* What the search keeps about each node it computed a distance for. */
typedef struct ShnswCand
{
	ShnswRef	ref;
	float		d;				/* navigation (SQ8) distance */
	uint8_t		node_flags;		/* SHNSW_NODE_* as read */
	uint8_t		state;			/* SHNSW_CAND_* */
	uint16_t	tid_off;
	uint32_t	tid_blk;
	uint32_t	vec_block;
	uint16_t	vec_offset;
	uint8_t		level;			/* node's highest layer */
	uint8_t		nbr_count;		/* its layer-0 neighbours, saved ... */
	uint8_t		extra_tids;		/* its heap TIDs beyond the header's */
	uint32_t	nbr_start;		/* ... at nbrs[nbr_start] when read */
	ShnswUpperLoc upper;		/* its upper-layer record, if level > 0 */
} ShnswCand;

#define SHNSW_CAND_EXPANDED		0x01
#define SHNSW_CAND_EMITTED		0x02
#define SHNSW_CAND_IN_RESULTS	0x04
#define SHNSW_CAND_EDGE			0x08	/* the sweep found its code at an end of
										 * the range (scan_order.c: it may stand for a
										 * clamped value) */

/* codes whose distances the search computes together (kernels.c batches) */
#define SHNSW_STAGE 4
#define SHNSW_STAGE_MAX_DIM 2000	/* beyond it, one code at a time */

typedef struct ShnswSearch
{
	const Sq8Query *q;
	const ShnswNodeSource *ops;
	int			m;
	uint32_t	max_discovered; /* stop after this many nodes (0: no limit) */
	bool		clamp_on;		/* clamp_slack applies (a scan sets it) */
	ShnswHeap	F;				/* min-heap: SHNSW_NODE_CLAMPED nodes offered
								 * and not yet emitted, by their bound
								 * distance (shnsw_cand_bound_distance) */
	double		clamp_slack[SHNSW_NODE_CLAMP_CLASSES];	/* how much nearer a
														 * node of each clamp
														 * class may be than
														 * its code says */
	ShnswRef	target;			/* layer 0: stop once this node is seen */
	bool		target_seen;
	bool		pooled;			/* its arrays are the search pool's (search.c) */

	ShnswCand  *cands;
	uint32_t	ncands;
	uint32_t	capcands;
	ShnswRef   *nbrs;			/* saved neighbour lists of cands (none when
								 * ops->reread_cheap: read at expansion) */
	ShnswRef	expand_nbrs[2 * SHNSW_MAX_M];	/* that read's list */
	int			nexpand_nbrs;
	uint32_t	nnbrs;
	uint32_t	capnbrs;
	ShnswVisited visited;
	ShnswHeap	C;				/* min-heap: to expand */
	ShnswHeap	W;				/* max-heap: this round's results */
	ShnswHeap	D;				/* seen, not in W, not emitted ("parked"): a
								 * min-heap in D.a[0..park_heaped-1], the
								 * rest appended unsorted (search.c,
								 * search_park) */
	int			park_heaped;
	int			park_least;		/* the unsorted part's least, -1 if none */
	bool		started;
	bool		budget_spent;	/* max_discovered reached: rounds only drain D */
	bool		exhausted;
	int			rounds;
	int			widened;		/* times the first round was widened
								 * (shnsw_search_widen) */
	float		round_floor;	/* the frontier as the last round started */
	uint32_t   *taken;			/* emitted by shnsw_search_take, to expand */
	uint32_t	ntaken;
	uint32_t	captaken;

	/* scratch */
	ShnswRef   *spec;			/* speculative read-ahead list */
	ShnswRef   *ubuf;			/* m refs */
	ShnswUpperLoc *locs;		/* 2m upper locations */
	uint8_t    *stage;			/* room for SHNSW_STAGE codes, dim apart (NULL:
								 * no batching) */
	const uint8_t *stage_at[SHNSW_STAGE];	/* the staged codes: in stage, or
											 * in the source's records
											 * (read_nodes_held) */
	int			stage_pos[SHNSW_STAGE]; /* their positions in the batch */
	int			nstage;
	float	   *dists;			/* distances of one batch of nodes (2m) */

	/* statistics */
	uint64_t	nexpanded;
	uint64_t	ndistances;
} ShnswSearch;

extern void shnsw_search_init(ShnswSearch *s, const Sq8Query *q,
							  const ShnswNodeSource *ops, int m, uint32_t max_discovered);
extern void shnsw_search_free(ShnswSearch *s);

/*
 * Clamped nodes. A node flagged SHNSW_NODE_CLAMPED holds a value that lay
 * outside the trained SQ8 range: its exact distance may be nearer than its
 * code says by up to its slack, factor times the largest excess its clamp
 * class allows (shnsw_clamp_class_limit, of unit; factor: 1 for L2 and
 * cosine, the query's norm for inner product), never more than max_slack,
 * which also stands for class 0 (unknown). shnsw_search_set_clamp_slack
 * turns this on (a scan's first round bounds nodes by the codes' typical
 * error, scan_order.c; set before the first node is added). The walk still
 * orders every node by its navigation distance d; a flagged node's bound
 * distance (shnsw_cand_bound_distance), the navigation distance of a point
 * its slack nearer, is what the caller bounds it by, and the search keeps
 * the flagged nodes it has offered, until emitted, by that distance
 * (shnsw_search_clamped; shnsw_search_take_clamped emits the nearest, as
 * shnsw_search_take does the nearest parked node).
 */
extern void shnsw_search_set_clamp_slack(ShnswSearch *s, double unit, double factor,
										 double max_slack);

/* The distance candidate c is bounded by: d, or the clamped one for a flagged node. */
static inline float
shnsw_cand_bound_distance(const ShnswSearch *s, const ShnswCand *c)
{
	if (!s->clamp_on || !(c->node_flags & SHNSW_NODE_CLAMPED))
		return c->d;
	return shnsw_clamp_distance(s->q->metric, c->d,
								s->clamp_slack[shnsw_node_clamp_class(c->node_flags)]);
}

/* The least bound distance of a flagged node offered, not emitted (infinity: none). */
extern float shnsw_search_clamped(ShnswSearch *s);

/* Emit the flagged node of least bound distance (-1: none), as shnsw_search_take. */
extern int64_t shnsw_search_take_clamped(ShnswSearch *s);

/*
 * shnsw_search_pool_reset frees the search pool (search.c). The access
 * method calls shnsw_search_pool_end_xact at the end of every transaction
 * (streamhnsw.c), when no search can be running: if a search that ended in
 * an error still holds the pool, it is freed (the arrays may have moved
 * since it took them).
 */
extern void shnsw_search_pool_reset(void);
extern void shnsw_search_pool_end_xact(void);

/*
 * Make shnsw_search_next stop as soon as it reaches node target (VACUUM's
 * "is this node found?" check needs no more); s->target_seen tells.
 */
extern void shnsw_search_set_target(ShnswSearch *s, ShnswRef target);

/*
 * Where a scan's layer-0 search starts: greedy descent from the entry point
 * to layer 1, then layer 1 searched with a beam of SHNSW_START_EF. The
 * insert's findability check starts the same way, so that the node it
 * makes findable is found by the search a scan makes.
 */
#define SHNSW_START_EF 4
extern ShnswRef shnsw_search_start(ShnswSearch *s, ShnswRef entry, int entry_level);

/*
 * Greedy descent from the entry point through layers entry_level..1.
 * Returns the reference of the best node found, which seeds layer 0.
 */
extern ShnswRef shnsw_search_descend(ShnswSearch *s, ShnswRef entry, int entry_level,
									 int stop_layer);

/*
 * Best-first search of one upper layer with width ef (used by inserts);
 * fills out with up to ef candidate indexes, nearest first.
 */
extern int	shnsw_search_upper_layer(ShnswSearch *s, ShnswRef entry, int layer,
									 int ef, uint32_t *out);

/*
 * Run layer 0 until this round holds ef results and no candidate can improve
 * them. Writes the indexes (into s->cands) of the round's results, not yet
 * emitted, into out (room for ef) and marks them emitted; returns how many.
 * Later calls continue where the last stopped (iterative scan). Once the
 * max_discovered budget is reached nothing more is expanded: later rounds
 * hand out the nodes already seen but not emitted, ef at a time, nearest
 * first. 0 means every node the search will ever see has been emitted.
 */
extern int	shnsw_search_next(ShnswSearch *s, ShnswRef start, int ef, uint32_t *out);

/*
 * Continue the first round as if it had been ef wide (more than it was):
 * the rows it emitted (the nearest ef / 2 of them) count towards ef, so
 * about ef minus those are
 * written into out, emitted, and *median is the navigation distance of the
 * middle of all ef. The first round's rules still apply: no frontier is
 * fixed where the widening starts. Returns how many; 0 when nothing more
 * can be found or the budget is spent.
 */
extern int	shnsw_search_widen(ShnswSearch *s, int ef, uint32_t *out, float *median);

/*
 * The smallest navigation distance among the nodes that the rounds so far
 * have seen but not emitted and, until the budget is spent, the nodes they
 * have not expanded (not counting nodes shnsw_search_take emitted: the
 * caller knows their exact distances), and, after a continuation round,
 * the frontier as that round started (so the search has explored a whole
 * round past it); +infinity if there are none. A caller that holds emitted
 * rows back until their exact distance is within this frontier (allowing
 * for the codes' error) returns rows in exact order (scan_order.c).
 */
extern float shnsw_search_frontier(ShnswSearch *s);

/* The navigation distance of the nearest parked node not emitted (or +infinity). */
extern float shnsw_search_parked(ShnswSearch *s);

/*
 * Emit the nearest parked node without expanding it; the next round expands
 * it first. Returns its index in s->cands, or -1 if no node is parked.
 */
extern int64_t shnsw_search_take(ShnswSearch *s);

/*
 * The sweep (scan_sweep.c): once a scan's budget covers every node of the index,
 * it reads every graph page and offers each live node here. A node the
 * search has not seen is parked (in D) with its navigation distance d (the
 * caller computes them a page at a time), without its neighbour list
 * (nothing is expanded after a sweep); returns true if it was new, and its
 * index in cands in *idx. shnsw_search_swept then ends the walk: every node
 * is seen, later rounds hand out parked nodes nearest first, and
 * shnsw_search_frontier is the nearest of them, a bound on every node not
 * yet emitted (no graph premise needed).
 */
extern bool shnsw_search_sweep_node(ShnswSearch *s, ShnswRef ref, const ShnswNodeHeader *node,
									float d, uint32_t *idx);
extern void shnsw_search_swept(ShnswSearch *s);

#endif							/* STREAMHNSW_SEARCH_H */
