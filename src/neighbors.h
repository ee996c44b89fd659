/*-------------------------------------------------------------------------
 *
 * neighbors.h
 *	  The neighbour heuristic, the one every phase uses (build on float
 *	  vectors or codes, inserts and VACUUM on SQ8 codes), and the sort of
 *	  candidates by distance that comes before it. Pure code.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_NEIGHBORS_H
#define STREAMHNSW_NEIGHBORS_H

#include <stdint.h>

/*
 * The distance between candidates a and b, measured from a (the heuristic
 * asks for one a with several b in a row, so an implementation may prepare
 * a once and keep it until a changes).
 */
typedef float (*ShnswCandDistFn) (void *arg, int a, int b);

/*
 * The neighbour heuristic: candidates 0..n-1 are sorted nearest first, d[k]
 * their distance to the node being linked. A candidate is kept only if it
 * is nearer to that node than to every candidate kept before it. Writes the
 * kept candidates' positions to sel (room for max) and returns how many.
 */
extern int	shnsw_select_heuristic(const float *d, int n, int max,
								   ShnswCandDistFn dist, void *arg, int *sel);

/* Sort the pairs (ids[k], d[k]) by distance, then id. */
extern void shnsw_sort_by_distance(uint32_t *ids, float *d, int n);

#endif							/* STREAMHNSW_NEIGHBORS_H */
