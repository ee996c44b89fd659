/*-------------------------------------------------------------------------
 *
 * scan_rows.c
 *	  The rows a scan holds: the heap of re-ranked rows waiting for their
 *	  turn, the buffer of candidates a round hands over, the code bound
 *	  widened when a re-rank shows a clamped code, and a finished search's
 *	  figures folded into the scan's. The bottom of the scan's files: it
 *	  calls none of them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "codebound.h"
#include "reader.h"
#include "scan_int.h"

/* ---------- held rows ---------- */

/* held_push adds a re-ranked row to the heap of held rows. */
void
scan_held_push(ShnswScanOpaque so, const ShnswResult *r)
{
	int			i;

	if (so->nheld == so->heldcap)
	{
		so->heldcap = Max(64, so->heldcap * 2);
		so->held = so->held ? repalloc(so->held, sizeof(ShnswResult) * so->heldcap)
			: palloc(sizeof(ShnswResult) * so->heldcap);
	}
	if (r->round >= so->held_rounds_cap)
	{
		int			cap = Max(16, r->round * 2);

		so->held_per_round = so->held_per_round
			? repalloc0(so->held_per_round, sizeof(int) * so->held_rounds_cap, sizeof(int) * cap)
			: palloc0(sizeof(int) * cap);
		so->held_rounds_cap = cap;
	}
	so->held_per_round[r->round]++;
	i = so->nheld++;
	while (i > 0 && scan_result_cmp(r, &so->held[(i - 1) / 2]) < 0)
	{
		so->held[i] = so->held[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	so->held[i] = *r;
}

/*
 * held_pop removes the nearest held row. Sets *late if a row re-ranked in an
 * earlier round is still held (this one was found late and is placed ahead
 * of it).
 */
ShnswResult
scan_held_pop(ShnswScanOpaque so, bool *late)
{
	ShnswResult top = so->held[0];
	ShnswResult last = so->held[--so->nheld];
	int			i = 0;

	for (;;)
	{
		int			c = 2 * i + 1;

		if (c >= so->nheld)
			break;
		if (c + 1 < so->nheld && scan_result_cmp(&so->held[c + 1], &so->held[c]) < 0)
			c++;
		if (scan_result_cmp(&last, &so->held[c]) <= 0)
			break;
		so->held[i] = so->held[c];
		i = c;
	}
	if (so->nheld > 0)
		so->held[i] = last;

	so->held_per_round[top.round]--;
	while (so->oldest_held_round < so->held_rounds_cap &&
		   so->held_per_round[so->oldest_held_round] == 0)
		so->oldest_held_round++;
	*late = so->nheld > 0 && so->oldest_held_round < top.round;
	return top;
}

/*
 * scan_check_bound: node c, of navigation distance est, re-ranked to exact
 * distance d. A value inserted outside the trained range was clamped to
 * the range's edge, and its code can be off by more than half a step: if d
 * is below the bound, widen the error so that the bound holds for it (the
 * rest of the scan then waits long enough for nodes like it).
 */
static void
bound_widen(ShnswCodeBound *b, float est, double d)
{
	for (int i = 0; i < 64 && shnsw_codebound_lower(b, est) > d; i++)
		b->err_abs = b->err_abs * 2 + 1e-7;
}

void
scan_check_bound(ShnswScanOpaque so, float est, double d)
{
	if (isnan(d))
		return;
	bound_widen(&so->walk, est, d);
	bound_widen(&so->bound, est, d);
	bound_widen(&so->proof, est, d);
}

/* ---------- the candidate buffer ---------- */

/* Make so->outbuf hold at least n candidate indexes. */
void
scan_outbuf_room(ShnswScanOpaque so, int n)
{
	if (so->outcap < n)
	{
		so->outcap = n;
		so->outbuf = so->outbuf ? repalloc(so->outbuf, sizeof(uint32) * n)
			: palloc(sizeof(uint32) * n);
	}
}

/* ---------- ending a search ---------- */

/*
 * scan_fold_reader adds the reader's figures so far to so->stats and starts
 * its counters again (heap read-ahead goes on after the search ends).
 */
void
scan_fold_reader(ShnswScanOpaque so)
{
	shnsw_reader_stats_add(&so->stats.io, &so->reader.stats, NULL);
	MemSet(&so->reader.stats, 0, sizeof(so->reader.stats));
}

/*
 * scan_fold ends the active search: releases the reader's pins and adds the
 * search's figures to so->stats.
 */
void
scan_fold(ShnswScanOpaque so)
{
	if (!so->live)
		return;
	so->stats.rounds += so->search.rounds + so->search.widened;
	so->stats.nodes_expanded += so->search.nexpanded;
	so->stats.distances += so->search.ndistances;
	/* the walk spent max_scan_tuples: it handed out what it had seen */
	if (so->search.budget_spent && !so->swept)
		so->stats.budget_spent++;
	shnsw_reader_end(&so->reader);
	scan_fold_reader(so);
	so->live = false;
}
