/*-------------------------------------------------------------------------
 *
 * neighbors_select.h
 *	  The neighbour heuristic, the one every phase uses (build on float
 *	  vectors or codes, inserts and VACUUM on SQ8 codes), and the sort of
 *	  candidates by distance that comes before it. Pure code.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_NEIGHBORS_SELECT_H
#define STREAMHNSW_NEIGHBORS_SELECT_H

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
 * their distance to the node being linked. A candidate is chosen only if it
 * is nearer to that node than to every candidate chosen before it, up to
 * max. Pruned connections are kept: if fewer than fill (<= max) were
 * chosen, the list is filled up to fill with the candidates passed over,
 * nearest first (0: no fill). Writes the kept candidates' positions to sel
 * (room for max), nearest first, with passed[k] (if not NULL) = 1 for the
 * filled ones; *nchosen (if not NULL) says how many were chosen. Returns
 * how many were kept.
 */
extern int	shnsw_select_heuristic(const float *d, int n, int max, int fill,
								   ShnswCandDistFn dist, void *arg, int *sel,
								   uint8_t *passed, int *nchosen);

/*
 * The back-link rule on a list kept nearest first with its entries'
 * distances to the owner d[] and flags passed[] (1: the heuristic passed the
 * entry over), as the build keeps layer-0 lists while it links: newnode, at
 * distance dnew from the owner, is added as shnsw_select_heuristic with
 * fill = max would keep it from the list and newnode, from at most one
 * distance per chosen entry. newnode is passed over if a chosen entry
 * before it is nearer to it than the owner is; if chosen, it passes over
 * the chosen entries after it that are nearer to it than to the owner. A
 * full list then drops its farthest passed-over entry (newnode itself, if
 * that is newnode), or, if every entry is chosen, its farthest. (An entry
 * passed over only because of one that newnode now passes over is not
 * examined again; that only makes it the first to go.) dist(arg, x, y):
 * the distance between nodes x and y. Returns the new length.
 */
typedef float (*ShnswNodeDistFn) (void *arg, uint32_t x, uint32_t y);
extern int	shnsw_keep_update(uint32_t *list, float *d, uint8_t *passed, int cnt, int max,
							  uint32_t newnode, float dnew, ShnswNodeDistFn dist, void *arg);

/* Sort the pairs (ids[k], d[k]) by distance, then id. */
extern void shnsw_sort_by_distance(uint32_t *ids, float *d, int n);

/*
 * How a back-link reaches the lists it changes: the build's in-memory graph,
 * or a copy of a list on a page (neighbors_update.c).
 *
 * distances writes to d[0..n-1] the distances from the list's owner to
 * list[0..n-1]. choose sorts list[0..n-1] and d nearest first and keeps
 * those shnsw_select_heuristic keeps (at most max, filled up to max) at the
 * front; returns how many, and how many of them it chose in *nchosen.
 * cache (may be NULL) gives the list's cached distances and flags for
 * shnsw_keep_update, or returns false if it has none; dist, the distance
 * between two nodes, is then needed too.
 */
typedef struct ShnswListOps
{
	void		(*distances) (void *arg, const uint32_t *list, int n, float *d);
	int			(*choose) (void *arg, uint32_t *list, float *d, int n, int max, int *nchosen);
	bool		(*cache) (void *arg, float **d, uint8_t **passed);
	ShnswNodeDistFn dist;
} ShnswListOps;

/*
 * The back-link rule, for the build, inserts and VACUUM alike: a node's list
 * list[0..cnt-1] (room for max + 1 entries) is to link newnode. A list with
 * room takes it at the end (a cached list, in its place); a full one keeps
 * pruned connections: it is chosen again with the heuristic among its
 * entries and newnode, filled up to max with the ones passed over, so
 * exactly one entry goes (shnsw_keep_update does the same incrementally
 * for a cached list). If newnode is not kept but force is set, it replaces
 * the farthest entry. Returns the new length, or -1 if the list holds
 * newnode already. *kept says whether the list holds newnode; *nchosen (if
 * not NULL) is less than max if the entry that went was one the heuristic
 * passed over (under L2 and cosine it is nearer to one of the list's chosen
 * entries than to the owner).
 */
extern int	shnsw_backlink(uint32_t *list, int cnt, int max, uint32_t newnode, bool force,
						   const ShnswListOps *ops, void *arg, bool *kept, int *nchosen);

#endif							/* STREAMHNSW_NEIGHBORS_SELECT_H */
