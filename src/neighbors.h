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

#include <stdbool.h>
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

/*
 * How a back-link reaches the lists it changes: the build's in-memory graph,
 * or a copy of a list on a page (links.c).
 *
 * distances writes to d[0..n-1] the distances from the list's owner to
 * list[0..n-1]. choose sorts list[0..n-1] and d nearest first and keeps
 * those the heuristic chooses (at most max) at the front; returns how many.
 */
typedef struct ShnswListOps
{
	void		(*distances) (void *arg, const uint32_t *list, int n, float *d);
	int			(*choose) (void *arg, uint32_t *list, float *d, int n, int max);
} ShnswListOps;

/*
 * The back-link rule, for the build, inserts and VACUUM alike: a node's list
 * list[0..cnt-1] (room for max + 1 entries) is to link newnode. A list with
 * room takes it at the end; a full one is chosen again with the heuristic
 * among its entries and newnode, and if newnode is not kept but force is
 * set, it replaces the farthest entry. Returns the new length (a full list
 * chosen again may have lost entries even when newnode was not kept: the
 * build writes it, a disk change does not), or -1 if the list holds newnode
 * already. *kept says whether the list holds newnode.
 */
extern int	shnsw_backlink(uint32_t *list, int cnt, int max, uint32_t newnode, bool force,
						   const ShnswListOps *ops, void *arg, bool *kept);

#endif							/* STREAMHNSW_NEIGHBORS_H */
