/*-------------------------------------------------------------------------
 *
 * lookahead.h
 *	  The look-ahead controller: how many pages a scan should read ahead.
 *
 * Pure code (unit-tested without a server). The controller sees every page
 * access of a scan as a hit (already cached) or a miss (needed I/O), keeps
 * an exponentially weighted miss rate over about `window` accesses, and
 * asks for enough read-ahead to keep `target_ios` reads in flight:
 *
 *	 distance = target_ios / miss_rate, within [floor, max_distance]
 *
 * so that 50 % misses give twice target_ios, not the ~2 that a
 * double-on-miss, decrement-on-hit rule collapses to. The floor jumps up
 * on a miss (doubling) and decays by one only after `window` accesses
 * without a miss, so a burst of misses is not forgotten at the first hit.
 * When the window has seen (almost) no misses, there is nothing to hide and
 * the distance falls back to the floor.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_LOOKAHEAD_H
#define STREAMHNSW_LOOKAHEAD_H

#include <stdbool.h>
#include <stdint.h>

#define SHNSW_LA_HIST_BUCKETS 8	/* 0, 1, 2-3, 4-7, ..., 64+ */

typedef struct ShnswLookahead
{
	int			target_ios;		/* I/Os to keep in flight (effective_io_concurrency) */
	int			max_distance;	/* cap: pins we may hold for read-ahead */
	int			window;			/* accesses the miss rate averages over */
	double		alpha;			/* 1 / window */
	double		miss_rate;
	int			floor;
	int			hits_since_miss;
	int			distance;

	/* statistics */
	uint64_t	accesses;
	uint64_t	misses;
	uint64_t	samples;		/* la_sample() calls */
	uint64_t	distance_sum;
	uint64_t	hist[SHNSW_LA_HIST_BUCKETS];
} ShnswLookahead;

extern void shnsw_la_init(ShnswLookahead *la, int target_ios, int max_distance, int window);
extern void shnsw_la_record(ShnswLookahead *la, bool miss);
extern int	shnsw_la_distance(const ShnswLookahead *la);
/* Record the current distance in the statistics (once per decision). */
extern void shnsw_la_sample(ShnswLookahead *la);
extern int	shnsw_la_bucket(int distance);
/* True while the window has seen (almost) no misses: read-ahead is useless. */
extern bool shnsw_la_all_hits(const ShnswLookahead *la);

#endif							/* STREAMHNSW_LOOKAHEAD_H */
