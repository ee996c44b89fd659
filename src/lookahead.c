/*-------------------------------------------------------------------------
 *
 * lookahead.c
 *	  The look-ahead controller (see lookahead.h for the rule).
 *
 *-------------------------------------------------------------------------
 */
#include <math.h>

#include "lookahead.h"

void
shnsw_la_init(ShnswLookahead *la, int target_ios, int max_distance, int window)
{
	la->target_ios = target_ios > 0 ? target_ios : 0;
	la->max_distance = max_distance > 0 ? max_distance : 0;
	la->window = window > 0 ? window : 1;
	la->alpha = 1.0 / la->window;
	la->miss_rate = 0.0;
	la->floor = la->max_distance > 0 ? 1 : 0;
	la->hits_since_miss = 0;
	la->distance = la->floor;
	la->accesses = la->misses = la->samples = la->distance_sum = 0;
	for (int i = 0; i < SHNSW_LA_HIST_BUCKETS; i++)
		la->hist[i] = 0;
}

bool
shnsw_la_all_hits(const ShnswLookahead *la)
{
	return la->miss_rate < 0.5 * la->alpha;
}

static void
la_update(ShnswLookahead *la)
{
	int			d;

	if (la->max_distance == 0 || la->target_ios == 0)
	{
		la->distance = 0;
		return;
	}
	/* (almost) no misses in the window: nothing to hide */
	if (shnsw_la_all_hits(la))
		d = la->floor;
	else
	{
		double		want = round(la->target_ios / la->miss_rate);

		d = want > la->max_distance ? la->max_distance : (int) want;
		if (d < la->floor)
			d = la->floor;
	}
	la->distance = d;
}

void
shnsw_la_record(ShnswLookahead *la, bool miss)
{
	la->accesses++;
	la->miss_rate = (1.0 - la->alpha) * la->miss_rate + (miss ? la->alpha : 0.0);
	if (miss)
	{
		la->misses++;
		la->hits_since_miss = 0;
		la->floor = la->floor < 1 ? 1 : la->floor * 2;
		if (la->floor > la->target_ios)
			la->floor = la->target_ios;
		if (la->floor > la->max_distance)
			la->floor = la->max_distance;
	}
	else if (++la->hits_since_miss >= la->window)
	{
		la->hits_since_miss = 0;
		if (la->floor > 1)
			la->floor--;
	}
	la_update(la);
}

int
shnsw_la_distance(const ShnswLookahead *la)
{
	return la->distance;
}

int
shnsw_la_bucket(int distance)
{
	int			b = 0;

	if (distance <= 0)
		return 0;
	/* 1 -> 1, 2-3 -> 2, 4-7 -> 3, ... */
	while (distance > 0 && b < SHNSW_LA_HIST_BUCKETS - 1)
	{
		distance >>= 1;
		b++;
	}
	return b;
}

void
shnsw_la_sample(ShnswLookahead *la)
{
	la->samples++;
	la->distance_sum += la->distance;
	la->hist[shnsw_la_bucket(la->distance)]++;
}
