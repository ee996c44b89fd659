/*-------------------------------------------------------------------------
 *
 * reachability.h
 *	  Every node must be reachable on layer 0 from the entry point, or no
 *	  search finds it: one walk-and-attach loop for the build (in memory)
 *	  and VACUUM (vacuum.c, pass 4, on pages). Pure code.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_REACHABILITY_H
#define STREAMHNSW_REACHABILITY_H

#include <stdbool.h>
#include <stdint.h>

/*
 * How the loop sees the graph; nodes are numbered 0..n-1.
 *
 * walk(arg, i) marks node i reached (if it is not) and everything reachable
 * from it. reached(arg, i) says whether node i is. attach(arg, i) links
 * unreached node i from a reached node and returns whether it did. done
 * (may be NULL) says that every node is reached, so the loop can stop.
 * step (may be NULL) is called for every unreached node before attach
 * (interrupts, VACUUM's delay point).
 */
typedef struct ShnswReachOps
{
	void		(*walk) (void *arg, int64_t i);
	bool		(*reached) (void *arg, int64_t i);
	bool		(*attach) (void *arg, int64_t i);
	bool		(*done) (void *arg);
	void		(*step) (void *arg, int64_t i);
} ShnswReachOps;

/*
 * shnsw_reach_all walks from entry, then visits the nodes in order: each
 * one still unreached is attached and the walk continues from it (picking
 * up any part of the graph only it leads to). Checks for interrupts once
 * per node. Returns the number attached.
 */
extern int64_t shnsw_reach_all(int64_t n, int64_t entry, const ShnswReachOps *ops, void *arg);

/* the build's graph (buildgraph.h) */
struct ShnswBuildGraph;

/*
 * Make every node of a build's graph reachable on layer 0 from the entry
 * point; call once, after every node is linked. The neighbour heuristic can
 * prune a node out of every list (no incoming link), or cut a group of
 * nodes off, and no search would ever reach them. Each unreached node, in
 * node order, gets an incoming link from its nearest reached node that can
 * take one (its own neighbours first, else nodes a search for it finds), in
 * a free slot or over that node's farthest neighbour that stays reachable
 * through another link (a list gives up at most one entry while another
 * candidate can take the link). Lists stay within 2m, upper layers are
 * untouched, and the result is deterministic.
 * Returns the number of links added (0 if every node was reachable).
 */
extern uint32_t shnsw_build_ensure_reachable(struct ShnswBuildGraph *g);

#endif							/* STREAMHNSW_REACHABILITY_H */
