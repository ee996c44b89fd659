/*-------------------------------------------------------------------------
 *
 * buildgraph.h
 *	  The in-memory HNSW graph an index build links (serial or parallel),
 *	  and the neighbour choice on SQ8 codes that inserts share with it.
 *
 * Pure code: no PostgreSQL header. Reachability repair (reachability.h)
 * and the page layout (layout.h) work on this graph once it is linked.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_BUILDGRAPH_H
#define STREAMHNSW_BUILDGRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format.h"
#include "kernels.h"
#include "pqueue.h"

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

/* Neighbour list of node i on a layer, and its length. */
extern ShnswRef *shnsw_build_neighbors(const ShnswBuildGraph *g, uint32_t i, int layer,
									   int *count);

/* parent[v] of a node no walk has reached (shnsw_build_walk) */
#define SHNSW_BUILD_UNREACHED UINT32_MAX

/*
 * Walk layer 0 breadth-first from queue[head..tail-1]: each node found
 * with parent SHNSW_BUILD_UNREACHED gets as its parent the node whose list
 * named it, and joins the queue. Returns the new tail (layout.c's page
 * order, reachability.c's tree).
 */
extern uint32_t shnsw_build_walk(const ShnswBuildGraph *g, uint32_t *parent,
								 uint32_t *queue, uint32_t head, uint32_t tail);

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
 * For reachability.c, which links on the graph too: the distances, the
 * descent and the layer search that linking uses, and a list's length.
 *
 * A prepared "from" point for build distances: a float vector (a half
 * vector widened to floats, exactly), or in the low-memory path an SQ8
 * query made from a decoded code. It lives in the graph's scratch: slot
 * (0 or 1) picks which of two buffers, and the point stays valid until
 * the next shnsw_build_from_node with the same slot.
 */
typedef struct ShnswBuildFrom
{
	const float *v;
	const Sq8Query *sq;
} ShnswBuildFrom;

extern ShnswBuildFrom shnsw_build_from_node(ShnswBuildGraph *g, uint32_t i, int slot);

/* The distance from a prepared point to node j. */
extern float shnsw_build_distance(const ShnswBuildGraph *g, const ShnswBuildFrom *f,
								  uint32_t j);

/* Set the length of node i's list on a layer (entries written by the caller). */
extern void shnsw_build_set_count(ShnswBuildGraph *g, uint32_t i, int layer, int count);

/*
 * Greedy descent for q from ep through layers max_level..stop+1; returns
 * the nearest node found.
 */
extern uint32_t shnsw_build_descend(ShnswBuildGraph *g, const ShnswBuildFrom *q, uint32_t ep,
									int max_level, int stop);

/*
 * Best-first search of one layer from entry points eps for node qnode
 * (prepared as q); leaves up to ef results, nearest first, in out/outd and
 * returns their count.
 */
extern int	shnsw_build_search_layer(ShnswBuildGraph *g, const ShnswBuildFrom *q,
									 uint32_t qnode, const uint32_t *eps, int neps,
									 int layer, int ef, uint32_t *out, float *outd);

#endif							/* STREAMHNSW_BUILDGRAPH_H */
