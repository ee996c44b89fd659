/*-------------------------------------------------------------------------
 *
 * graph.h
 *	  Pure HNSW algorithms: in-memory graph construction for index builds,
 *	  and the resumable search that scans and inserts run over index pages.
 *
 * Nothing here touches the buffer manager: the disk search reads node
 * records through a node source (nodesource.h), which the server
 * implements over shared buffers (pageaccess.c) and the unit tests over
 * plain memory.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_GRAPH_H
#define STREAMHNSW_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "format.h"
#include "kernels.h"
#include "nodesource.h"
#include "pqueue.h"
#include "visited.h"

/* ---------- in-memory construction ---------- */

/*
 * Concurrent linking (parallel builds, buildpar.c): several processes call
 * shnsw_build_link on one graph whose arrays live in shared memory. A node's
 * lists (every layer), its layer-0 distance cache and passed-over flags are
 * read under its lock held shared and changed under it held exclusive; one
 * node's lock is held at a time, so there is no lock order to keep. The
 * entry point and its level live in shared memory under the entry lock: a
 * link reads them under it shared, and a link whose node goes above the
 * entry level holds it exclusive from start to end (the others wait), then
 * makes its node the entry. A node's vector, code and level are written
 * before the node is ready for linking (in a parallel build the leader
 * reads rows back while workers link the ones already read: buildpar.c)
 * and only read after.
 */
typedef struct ShnswBuildSync
{
	void	   *arg;
	void		(*lock_node) (void *arg, uint32_t i, bool exclusive);
	void		(*unlock_node) (void *arg, uint32_t i);
	void		(*lock_entry) (void *arg, bool exclusive);
	void		(*unlock_entry) (void *arg);
	uint32_t   *entry;			/* shared, under the entry lock */
	int32_t    *max_level;

	/*
	 * Nodes claimed by all processes so far: a node whose linking saw more
	 * than stale_after claimed meanwhile is passed to mark_stale, for
	 * shnsw_build_relink once linking is over.
	 */
	uint32_t	(*progress) (void *arg);
	void		(*mark_stale) (void *arg, uint32_t i);
	uint32_t	stale_after;
} ShnswBuildSync;

/*
 * The graph under construction. Node i's navigation data is a float vector
 * (vecs), or that vector scaled by a power of two and rounded to IEEE
 * halves (halves: half the memory traffic; shnsw_build_init_halves), or an
 * SQ8 code (codes, with lo/scale): the last form is the low-memory build
 * path. Layer-0 lists hold up to 2m neighbours, upper layers
 * up to m; upper[i] holds, for each layer 1..level, a count then m entries.
 */
typedef struct ShnswBuildGraph
{
	int			dim;
	int			m;
	int			ef_construction;
	ShnswMetric metric;
	bool		use_codes;
	double		ml;				/* level multiplier 1 / ln(m) */
	uint64_t	rng;			/* xorshift state: builds are reproducible */

	uint32_t	n;
	uint32_t	cap;
	float	   *vecs;			/* cap * dim, if floats */
	uint16_t   *halves;			/* cap * dim, if use_halves */
	bool		use_halves;		/* floats rounded to halves (kernels.h) */
	float		half_scale;		/* power of two they were scaled by */
	uint8_t    *codes;			/* cap * dim, if use_codes */
	const float *lo;			/* SQ8 parameters, if use_codes */
	const float *scale;
	uint8_t    *levels;
	ShnswRef   *nbr0;			/* cap * 2m; entries are node numbers here */
	uint16_t   *cnt0;
	float	   *dist0;			/* cap * 2m: each layer-0 entry's distance to
								 * its list's owner (lists sorted nearest first) */
	uint8_t    *pruned0;		/* cap * 2m: 1 if the heuristic passed the entry
								 * over (it fills the list, see build_select) */
	uint32_t  **upper;

	uint32_t	entry;
	int			max_level;

	/* concurrent linking: NULL when one process links (see ShnswBuildSync) */
	const ShnswBuildSync *sync;
	bool		external;		/* node arrays are the caller's (shnsw_build_attach) */

	/* scratch, reused across inserts */
	uint32_t   *vis;			/* visit stamps, cap entries */
	uint32_t	stamp;
	float	   *vdist;			/* cap: distance from vis_node of each node
								 * stamped by the last search */
	uint32_t	vis_node;		/* the node that search was for */
	float	   *qbuf;			/* dim floats: decoded query */
	float	   *qbuf2;
	Sq8Query	sq;
	Sq8Query	sq2;
	ShnswHeap	cand;
	ShnswHeap	res;
} ShnswBuildGraph;

/* Bytes of memory one node costs in a graph (for maintenance_work_mem). */
extern size_t shnsw_build_node_bytes(int dim, int m, bool use_codes, bool use_halves);

/*
 * vecs, if not NULL, is an array of capacity * dim floats (from shnsw_alloc)
 * whose ownership passes to the graph; its rows are added with
 * shnsw_build_add_in_place.
 */
extern void shnsw_build_init(ShnswBuildGraph *g, int dim, int m, int ef_construction,
							 ShnswMetric metric, uint32_t capacity, bool use_codes,
							 const float *lo, const float *scale, uint64_t seed,
							 float *vecs);
extern void shnsw_build_free(ShnswBuildGraph *g);

/*
 * A graph that links on half vectors (kernels.h, shnsw_half_scale): the
 * nodes' distances are those between their float vectors rounded to
 * halves after scaling by half_scale, a power of two, so their order is
 * that of float distances up to the rounding. halves, if not NULL, is an
 * array of capacity rows of dim halves
 * (from shnsw_alloc) whose ownership passes to the graph, its rows added
 * with shnsw_build_add_in_place; rows added with shnsw_build_add_vector
 * are scaled and rounded.
 */
extern void shnsw_build_init_halves(ShnswBuildGraph *g, int dim, int m, int ef_construction,
									ShnswMetric metric, uint32_t capacity, uint64_t seed,
									uint16_t *halves, float half_scale);

/*
 * Levels of n nodes as a graph seeded with seed draws them when its nodes
 * are added one by one (shnsw_build_add_*), so a parallel build's nodes
 * get the serial build's levels.
 */
extern void shnsw_build_draw_levels(uint8_t *levels, uint32_t n, int m, uint64_t seed);

/* 32-bit words of upper-layer lists that n nodes of these levels need. */
extern size_t shnsw_build_upper_words(const uint8_t *levels, uint32_t n, int m);

/*
 * Set up g over n nodes whose arrays the caller allocated (shared memory
 * in a parallel build; each process attaches its own g): vecs (n * dim
 * floats) or codes (n * dim, with lo/scale), levels, nbr0 and dist0 and
 * pruned0 (n * 2m each), cnt0 (n, zeroed) and upper_pool
 * (shnsw_build_upper_words words, zeroed), handed out to the nodes in node
 * order. The scratch (visit stamps, queries, heaps) is the process's own;
 * shnsw_build_free frees only that. Entry and max_level are left unset
 * (-1): set them, or link node 0 first.
 */
extern void shnsw_build_attach(ShnswBuildGraph *g, int dim, int m, int ef_construction,
							   ShnswMetric metric, uint32_t n, bool use_codes,
							   const float *lo, const float *scale, float *vecs,
							   uint8_t *codes, uint8_t *levels, ShnswRef *nbr0,
							   uint16_t *cnt0, float *dist0, uint8_t *pruned0,
							   uint32_t *upper_pool);

/*
 * Make a graph attached with vecs NULL (and not on codes) link on the
 * caller's half vectors instead (n rows of dim halves, scaled by
 * half_scale).
 */
extern void shnsw_build_attach_halves(ShnswBuildGraph *g, uint16_t *halves, float half_scale);

/* Append a node (navigation vector or code) without linking it; returns its number. */
extern uint32_t shnsw_build_add_vector(ShnswBuildGraph *g, const float *v);
extern uint32_t shnsw_build_add_code(ShnswBuildGraph *g, const uint8_t *code);
extern uint32_t shnsw_build_add_in_place(ShnswBuildGraph *g);

/* Link node i into the graph (HNSW insertion with the neighbour heuristic). */
extern void shnsw_build_link(ShnswBuildGraph *g, uint32_t i);

/*
 * Link node i, already in the graph, again: search from the entry point,
 * choose its lists among the results and its current entries, and add the
 * back-links (for nodes a concurrent build marked stale; one process).
 */
extern void shnsw_build_relink(ShnswBuildGraph *g, uint32_t i);

/*
 * Make every node reachable on layer 0 from the entry point; call once, after
 * every node is linked. The neighbour heuristic can prune a node out of every
 * list (no incoming link), or cut a group of nodes off, and no search would
 * ever reach them. Each unreached node, in node order, gets an incoming link
 * from its nearest reached node that can take one (its own neighbours first,
 * else nodes a search for it finds), in a free slot or over that node's
 * farthest neighbour that stays reachable through another link (a list
 * gives up at most one entry while another candidate can take the link).
 * Lists stay within 2m, upper layers are untouched, and the result is
 * deterministic.
 * Returns the number of links added (0 if every node was reachable).
 */
extern uint32_t shnsw_build_ensure_reachable(ShnswBuildGraph *g);

/* Neighbour list of node i on a layer, and its length. */
extern ShnswRef *shnsw_build_neighbors(const ShnswBuildGraph *g, uint32_t i, int layer,
									   int *count);

/*
 * The form of the SQ8 distance inserts and VACUUM navigate and choose
 * neighbours with, for an index of metric: L2 for cosine (the navigation
 * vectors are unit length, so the L2 order is the cosine order, and the
 * L2 estimate's error scales with |x - q| where the inner-product one's
 * scales with |q|), the metric itself otherwise (inner product has no such
 * equivalence).
 */
extern ShnswMetric shnsw_code_metric(ShnswMetric metric);

/*
 * The neighbour heuristic on SQ8 codes (inserts): candidates 0..n-1 are
 * sorted nearest first with distances d[] to the new node (on the form
 * shnsw_code_metric(metric) gives) and codes
 * codes[k * dim], filled up to fill with the ones passed over
 * (shnsw_select_heuristic). Writes the kept candidates' positions to sel,
 * nearest first; returns how many (at most max <= 2 * SHNSW_MAX_M + 1) and
 * how many were chosen in *nchosen (may be NULL). scratch needs
 * (1 + max) * dim floats.
 */
extern int	shnsw_select_by_codes(const float *d, const uint8_t *codes, int n, int max,
								  int fill, int dim, ShnswMetric metric, const float *lo,
								  const float *scale, float *scratch, int *sel, int *nchosen);

/*
 * Do the neighbours chosen for a new node lie together, away from it? d[0]
 * is the new node's distance to the first (nearest) of codes[0..n-1] (on
 * the form shnsw_code_metric(metric) gives); true if it exceeds
 * SHNSW_FAR_RATIO times the distance from that neighbour to the nearest
 * of the others that is not a copy of it (code distance 0). Never for
 * inner product, whose distances are no scale, nor when all are copies.
 * scratch needs 2 * dim floats.
 */
#define SHNSW_FAR_RATIO 4.0f
extern bool shnsw_codes_lie_apart(const float *d, const uint8_t *codes, int n, int dim,
								  ShnswMetric metric, const float *lo, const float *scale,
								  float *scratch);

/* Draw a level for a new node (used by inserts too). */
extern int	shnsw_random_level(uint64_t *rng, double ml, int max_level);

/*
 * Order nodes for the on-disk layout: breadth-first over layer 0 from the
 * entry point, so neighbours tend to share pages; nodes the walk does not
 * reach follow in their own order. order[k] is the node placed k-th.
 */
extern void shnsw_build_layout_order(const ShnswBuildGraph *g, uint32_t *order);

/*
 * Order nodes page by page (per_page nodes a page) so that a node's
 * layer-0 neighbours lie on few pages besides its own: each page starts
 * from the node the last page rated best (the entry point first) and takes,
 * one at a time, the unplaced node whose placement there saves the most
 * page reads of expansions (graph.c, co-location; src/README, Page layout).
 * scratch (n entries, the caller's) is overwritten; the function allocates
 * one byte per node more, and a few hundred kB for the page being filled.
 */
extern void shnsw_build_layout_pages(const ShnswBuildGraph *g, int per_page, uint32_t *order,
									 uint32_t *scratch);

/* ---------- disk search ---------- */

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
										 * the range (scan.c: it may stand for a
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
	bool		pooled;			/* its arrays are the search pool's (graph.c) */

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
								 * rest appended unsorted (graph.c,
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
 * error, scan.c; set before the first node is added). The walk still
 * orders every node by its navigation distance d; a flagged node's bound
 * distance (shnsw_cand_bound_distance), the navigation distance of a point
 * its slack nearer, is what the caller bounds it by, and the search keeps
 * the flagged nodes it has offered, until emitted, by that distance
 * (shnsw_search_clamped; shnsw_search_take_clamped emits the nearest, as
 * shnsw_search_take does the nearest parked node).
 */
extern void shnsw_search_set_clamp_slack(ShnswSearch *s, double unit, double factor,
										 double max_slack);

/*
 * The navigation distance d (of a query prepared for nav_metric: L2 or
 * inner product) taken slack nearer: L2 (and cosine, which navigates on
 * the squared L2 distance) (sqrt(d) - slack)^2, floored at 0; inner
 * product d - slack. Rounded down.
 */
extern float shnsw_clamp_distance(ShnswMetric nav_metric, float d, double slack);

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
 * shnsw_search_pool_reset frees the search pool (graph.c). The host calls
 * shnsw_search_pool_end_xact at the end of every transaction, when no
 * search can be running: if a search that ended in an error still holds
 * the pool, it is freed (the arrays may have moved since it took them).
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
 * for the codes' error) returns rows in exact order (scan.c).
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
 * The sweep (scan.c): once a scan's budget covers every node of the index,
 * it reads every graph page and offers each live node here. A node the
 * search has not seen is parked (in D) with its navigation distance d (the
 * caller computes them a page at a time),
 * without its neighbour list (nothing is expanded after a sweep); returns
 * true if it was new, and its index in cands in *idx. shnsw_search_swept then ends the walk: every node is
 * seen, later rounds hand out parked nodes nearest first, and
 * shnsw_search_frontier is the nearest of them, a bound on every node not
 * yet emitted (no graph premise needed).
 */
extern bool shnsw_search_sweep_node(ShnswSearch *s, ShnswRef ref, const ShnswNodeHeader *node,
									float d, uint32_t *idx);
extern void shnsw_search_swept(ShnswSearch *s);

/* ---------- lower bound on exact distances ---------- */

/*
 * What an SQ8 navigation distance says about the exact distance (in the
 * ORDER BY operator's units: l2_distance, negative inner product, cosine
 * distance) of the node it was computed for: scan.c returns a row only
 * when no node not yet re-ranked can be nearer (src/README, Scans).
 */
typedef struct ShnswBound
{
	ShnswMetric metric;			/* the index's metric */
	bool		unbounded;		/* cosine, zero query: every distance is NaN */
	double		err_abs;		/* SQ8 error, in exact-distance units */
	double		err_typ;		/* the error a row inside the trained range
								 * exceeds with odds below 1e-8
								 * (SHNSW_BOUND_SIGMAS standard deviations of
								 * its rounding: a premise, not a proof) */
	double		err_rel;		/* float rounding, relative */
	double		qnorm;			/* |nav|: inner product's factor for a
								 * distance in the space of the values */
	double		res_range;		/* the largest |x - x'| of a value inside the
								 * trained range: sqrt(sum step_i^2) / 2, the
								 * unit of clamp classes (shnsw_clamp_unit) */
	int			dims;			/* for shnsw_bound_code: */
	const float *nav;			/* the query's navigation form (caller's memory) */
	const float *lo;			/* SQ8 parameters (caller's memory) */
	const float *scale;
	double		rnd_l2;			/* float rounding's share, for */
	double		rnd_ip;			/* shnsw_bound_set_residual */
	double		mag;
} ShnswBound;

/* standard deviations of the codes' rounding in ShnswBound.err_typ */
#define SHNSW_BOUND_SIGMAS	6.0

/*
 * Prepare the bound for query nav (the navigation form: normalized for
 * cosine) and SQ8 parameters lo/scale of dims dimensions. residual, if not
 * negative, is at least |x - x'| (shnsw_code_residual) for every node the
 * bound must hold for: the metapage's largest residual of any node placed
 * (clamped values included), so the bound holds for every node. Negative:
 * unknown (an index made before it was kept); the bound then takes the
 * largest error of a value inside the trained range (a clamped value can
 * be off by more: the caller widens err_abs when re-ranking shows it,
 * scan.c scan_check_bound).
 */
extern void shnsw_bound_prepare(ShnswBound *b, ShnswMetric metric, bool unbounded,
								const float *nav, const float *lo, const float *scale,
								int dims, double residual);

/*
 * The same bound for another residual (not negative): what
 * shnsw_bound_prepare with that residual gives, without its pass over the
 * dimensions (a scan prepares both, with and without the metapage's).
 */
extern void shnsw_bound_set_residual(ShnswBound *b, double residual);

/*
 * |v - x'| for the code of v (x' = lo + code * scale, decoded exactly), in
 * double, rounded up: what inserts and builds keep the largest of on the
 * metapage (max_residual). A value clamped into the trained range has its
 * true, larger residual.
 */
extern double shnsw_code_residual(const float *lo, const float *scale, const float *v,
								  const uint8_t *code, int dims);

/*
 * How far v lies outside the cells its code stands for: |v - y| for the
 * nearest y whose every value is within half a step (and float rounding)
 * of the value its code decodes to, rounded up; 0 but for a value outside
 * the trained range, clamped into it. Such a value's exact distance is at
 * most that much nearer than that of a value inside its cells (y), which
 * the typical error of the codes covers: inserts flag such nodes with a
 * class of the excess (shnsw_clamp_flags), and the first round of a scan
 * bounds them with it.
 */
extern double shnsw_code_excess(const float *lo, const float *scale, const float *v,
								const uint8_t *code, int dims);

/* The unit of clamp classes for SQ8 steps scale: sqrt(sum scale_i^2) / 2. */
extern double shnsw_clamp_unit(const float *scale, int dims);

/*
 * The largest excess clamp class k (1 .. SHNSW_NODE_CLAMP_CLASSES - 1)
 * stands for: unit * 2^((k - 20) / 4), from 0.037 to 6.7 units, each a
 * fifth above the last.
 */
extern double shnsw_clamp_class_limit(int k, double unit);

/*
 * A node's flags for an excess of its value (shnsw_code_excess): 0 when it
 * is 0; otherwise SHNSW_NODE_CLAMPED and the least class whose limit is at
 * least excess (class 0, unknown, when none is).
 */
extern uint8_t shnsw_clamp_flags(double excess, double unit);

/*
 * An upper bound on the exact distance of any node whose navigation
 * distance is est (the mirror of shnsw_bound_lower; +infinity for a
 * zero cosine query).
 */
extern double shnsw_bound_upper(const ShnswBound *b, double est);

/*
 * A lower bound on the exact distance of any node whose navigation
 * distance is est (L2 and cosine navigate on |q - x'|^2, inner product on
 * -q.x', x' the decoded code).
 */
extern double shnsw_bound_lower(const ShnswBound *b, double est);

/* Whether a code has a value at either end of the range (0 or 255). */
extern bool shnsw_code_at_edge(const uint8_t *code, int dims);

/*
 * A lower bound on the exact distance of a node from its code alone that
 * holds even if its values were clamped into the trained range (inserted
 * after training): a dimension whose code is 0 or 255 may lie anywhere
 * beyond that end. The distance from the query to the box of values the
 * code allows (-infinity for inner product when the box is unbounded in
 * the query's direction). One pass over the code: the sweep uses it for
 * the codes shnsw_code_at_edge picks.
 */
extern double shnsw_bound_code(const ShnswBound *b, const uint8_t *code);

#endif							/* STREAMHNSW_GRAPH_H */
