/*-------------------------------------------------------------------------
 *
 * explain.c
 *	  Lines in EXPLAIN (ANALYZE) for an Index Scan on a streamhnsw index.
 *
 * PostgreSQL 18's explain_per_node_hook lets us add lines to any plan node;
 * for an Index Scan on a streamhnsw index we print the figures the scan
 * keeps (scan.c, shnsw_scan_stats), named as in stats.c. This file sits
 * above both: nothing calls into it but the hook (src/README, Layers).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relscan.h"
#include "commands/explain.h"
#include "commands/explain_format.h"
#include "commands/explain_state.h"
#include "nodes/execnodes.h"
#include "utils/rel.h"

#include "cache.h"
#include "explain.h"
#include "lookahead.h"
#include "reader.h"
#include "scan.h"
#include "stats.h"

static explain_per_node_hook_type prev_explain_per_node_hook = NULL;

static const char *const io_mode_names[] = {"sync", "stream"};
static const char *const phase_names[SHNSW_NPHASES] = {"Descent", "Search", "Re-rank", "Other"};
static const char *const hist_labels[SHNSW_LA_HIST_BUCKETS] = {
	"0", "1", "2-3", "4-7", "8-15", "16-31", "32-63", "64+"
};

static void
explain_text_line(ExplainState *es, const char *fmt,...) pg_attribute_printf(2, 3);

/* explain_text_line appends one indented line to a text EXPLAIN. */
static void
explain_text_line(ExplainState *es, const char *fmt,...)
{
	va_list		ap;

	ExplainIndentText(es);
	for (;;)
	{
		int			needed;

		va_start(ap, fmt);
		needed = appendStringInfoVA(es->str, fmt, ap);
		va_end(ap);
		if (needed == 0)
			break;
		enlargeStringInfo(es->str, needed);
	}
	appendStringInfoChar(es->str, '\n');
}

/*
 * Names of the reasons a scan swept the index (ShnswSweepReason), as
 * EXPLAIN prints them.
 */
static const char *const shnsw_sweep_reason_names[SHNSW_SWEEP_NREASONS] = {
	"first round (sweep_threshold 0)",
	"sweep_threshold reached",
	"walk ended",
};

/* What the first round held rows against (ShnswFirstBound), as EXPLAIN prints it. */
static const char *const shnsw_first_bound_names[SHNSW_FIRST_NBOUNDS] = {
	"none",
	"typical error",
	"typical error, marked rows by how far outside the range they lie",
	"worst case (clamped rows not marked: index made before marks, REINDEX)",
	"worst case (query outside the trained range)",
};

/* explain_sweeps: how many sweeps the scan ran, for any reason */
static uint64
explain_sweeps(const ShnswScanStats *st)
{
	uint64		n = 0;

	for (int r = 0; r < SHNSW_SWEEP_NREASONS; r++)
		n += st->sweeps[r];
	return n;
}

/* explain_la_average: the look-ahead controller's average distance */
static double
explain_la_average(const ShnswScanStats *st)
{
	return st->io.la_samples ? (double) st->io.la_distance_sum / st->io.la_samples : 0.0;
}

/* explain_scan_text prints one scan's figures as text lines. */
static void
explain_scan_text(const ShnswScanStats *st, ExplainState *es)
{
	const char *mode = io_mode_names[st->io_mode];
	StringInfoData hist;

	explain_text_line(es, "streamhnsw: rounds=" UINT64_FORMAT " nodes expanded=" UINT64_FORMAT
					  " distances=" UINT64_FORMAT " re-ranked=" UINT64_FORMAT,
					  st->rounds, st->nodes_expanded, st->distances, st->reranked);
	if (st->ef_search > 0 && st->sketch_walk > 0)
		explain_text_line(es, "streamhnsw search: ef_search=%d (%s) sketch walk=%d",
						  st->ef_search,
						  st->ef_from_index ? "index option" : "streamhnsw.ef_search",
						  st->sketch_walk);
	else if (st->ef_search > 0)
		explain_text_line(es, "streamhnsw search: ef_search=%d (%s)", st->ef_search,
						  st->ef_from_index ? "index option" : "streamhnsw.ef_search");
	explain_text_line(es, "streamhnsw shared cache: %s, nodes from cache=" UINT64_FORMAT
					  " through buffers=" UINT64_FORMAT,
					  shnsw_cache_status_name(st->cache_status), st->cache_nodes,
					  st->cache_fallback_nodes);
	explain_text_line(es, "streamhnsw order: held back=" UINT64_FORMAT " late finds placed="
					  UINT64_FORMAT " found after a farther row=" UINT64_FORMAT
					  " parked rows re-ranked=" UINT64_FORMAT " swept nodes=" UINT64_FORMAT
					  " returned unproven=" UINT64_FORMAT " proof capped=" UINT64_FORMAT
					  " ended at distance bound=" UINT64_FORMAT
					  " max_scan_tuples spent=" UINT64_FORMAT,
					  st->held_back, st->late_placed, st->late_unplaced, st->parked_reranked,
					  st->swept, st->unproven, st->proof_capped, st->range_ends,
					  st->budget_spent);
	if (st->swept > 0 || explain_sweeps(st) > 0)
	{
		StringInfoData why;

		initStringInfo(&why);
		for (int r = 0; r < SHNSW_SWEEP_NREASONS; r++)
			if (st->sweeps[r] > 0)
				appendStringInfo(&why, "%s%s=" UINT64_FORMAT, why.len ? " " : "",
								 shnsw_sweep_reason_names[r], st->sweeps[r]);
		explain_text_line(es, "streamhnsw sweeps: %s", why.data);
		pfree(why.data);
	}
	if (st->first_bound != SHNSW_FIRST_NONE)
		explain_text_line(es, "streamhnsw first round bound: %s",
						  shnsw_first_bound_names[st->first_bound]);
	explain_text_line(es, "streamhnsw I/O: mode=%s pages hit=" UINT64_FORMAT " read=" UINT64_FORMAT
					  " (synchronous=" UINT64_FORMAT " known=" UINT64_FORMAT ") reads ahead="
					  UINT64_FORMAT " speculative=" UINT64_FORMAT " (reads=" UINT64_FORMAT
					  " used=" UINT64_FORMAT " wasted=" UINT64_FORMAT " evicted=" UINT64_FORMAT ") waits=" UINT64_FORMAT
					  " stalls=" UINT64_FORMAT " wait=%.3f ms round trips=" UINT64_FORMAT
					  " (serial=" UINT64_FORMAT ")",
					  mode, st->io.pages_hit, st->io.pages_read, st->io.sync_reads,
					  st->io.known_sync, st->io.reads_ahead, st->io.spec_issued, st->io.spec_ios,
					  st->io.spec_used, st->io.spec_wasted, st->io.spec_evicted, st->io.waits, st->io.stalls,
					  st->io.wait_ns / 1e6, st->io.waits + st->io.sync_reads,
					  st->io.serial_waits + st->io.sync_reads);
	if (es->verbose)
		explain_text_line(es, "streamhnsw serial round trips by phase: descent=" UINT64_FORMAT
						  " search=" UINT64_FORMAT " re-rank=" UINT64_FORMAT " other="
						  UINT64_FORMAT " (reads " UINT64_FORMAT "/" UINT64_FORMAT "/"
						  UINT64_FORMAT "/" UINT64_FORMAT ")",
						  st->io.phase_serial[0], st->io.phase_serial[1],
						  st->io.phase_serial[2], st->io.phase_serial[3],
						  st->io.phase_reads[0], st->io.phase_reads[1],
						  st->io.phase_reads[2], st->io.phase_reads[3]);
	if (st->io.heap_prefetched > 0)
		explain_text_line(es, "streamhnsw heap: blocks read ahead=" UINT64_FORMAT " (reads="
						  UINT64_FORMAT ")", st->io.heap_prefetched, st->io.heap_reads);
	initStringInfo(&hist);
	for (int b = 0; b < SHNSW_LA_HIST_BUCKETS; b++)
		appendStringInfo(&hist, "%s%s:" UINT64_FORMAT, b ? " " : "", hist_labels[b], st->io.la_hist[b]);
	explain_text_line(es, "streamhnsw look-ahead: avg distance=%.1f histogram=[%s]",
					  explain_la_average(st), hist.data);
	pfree(hist.data);
}

/* explain_scan_properties prints one scan's figures as structured properties. */
static void
explain_scan_properties(const ShnswScanStats *st, ExplainState *es)
{
	ExplainPropertyText("streamhnsw I/O Mode", io_mode_names[st->io_mode], es);
	if (st->ef_search > 0)
	{
		ExplainPropertyInteger("streamhnsw ef_search", NULL, st->ef_search, es);
		ExplainPropertyText("streamhnsw ef_search From",
							st->ef_from_index ? "index option" : "streamhnsw.ef_search", es);
		if (st->sketch_walk > 0)
			ExplainPropertyInteger("streamhnsw Sketch Walk", NULL, st->sketch_walk, es);
	}
	ExplainPropertyText("streamhnsw Shared Cache", shnsw_cache_status_name(st->cache_status), es);
	ExplainPropertyText("streamhnsw First Round Bound", shnsw_first_bound_names[st->first_bound], es);
	ExplainPropertyInteger("streamhnsw Cache Nodes", NULL, (int64) st->cache_nodes, es);
	ExplainPropertyInteger("streamhnsw Cache Fallback Nodes", NULL, (int64) st->cache_fallback_nodes, es);
	for (int i = 0; i < shnsw_stat_nfields; i++)
	{
		char		label[64];

		if (shnsw_stat_fields[i].offset == offsetof(ShnswScanStats, scans) ||
			shnsw_stat_fields[i].offset == offsetof(ShnswScanStats, io.la_samples) ||
			shnsw_stat_fields[i].offset == offsetof(ShnswScanStats, io.la_distance_sum))
			continue;
		snprintf(label, sizeof(label), "streamhnsw %s", shnsw_stat_fields[i].label);
		ExplainPropertyInteger(label, NULL, (int64) SHNSW_STAT_FIELD(st, i), es);
	}
	ExplainPropertyInteger("streamhnsw Round Trips", NULL,
						   (int64) (st->io.waits + st->io.sync_reads), es);
	ExplainPropertyInteger("streamhnsw Serial Round Trips", NULL,
						   (int64) (st->io.serial_waits + st->io.sync_reads), es);
	for (int p = 0; p < SHNSW_NPHASES; p++)
	{
		char		label[64];

		snprintf(label, sizeof(label), "streamhnsw Serial %s", phase_names[p]);
		ExplainPropertyInteger(label, NULL, (int64) st->io.phase_serial[p], es);
		snprintf(label, sizeof(label), "streamhnsw Reads %s", phase_names[p]);
		ExplainPropertyInteger(label, NULL, (int64) st->io.phase_reads[p], es);
	}
	ExplainPropertyInteger("streamhnsw Held Back", NULL, (int64) st->held_back, es);
	ExplainPropertyInteger("streamhnsw Late Finds Placed", NULL, (int64) st->late_placed, es);
	ExplainPropertyInteger("streamhnsw Found After Farther Row", NULL, (int64) st->late_unplaced, es);
	ExplainPropertyInteger("streamhnsw Parked Re-ranked", NULL, (int64) st->parked_reranked, es);
	ExplainPropertyInteger("streamhnsw Swept Nodes", NULL, (int64) st->swept, es);
	ExplainPropertyInteger("streamhnsw Returned Unproven", NULL, (int64) st->unproven, es);
	ExplainPropertyInteger("streamhnsw Proof Capped", NULL, (int64) st->proof_capped, es);
	ExplainPropertyInteger("streamhnsw Max Scan Tuples Spent", NULL, (int64) st->budget_spent, es);
	ExplainPropertyInteger("streamhnsw Ended At Distance Bound", NULL, (int64) st->range_ends, es);
	for (int r = 0; r < SHNSW_SWEEP_NREASONS; r++)
	{
		char		label[64];

		snprintf(label, sizeof(label), "streamhnsw Sweeps (%s)", shnsw_sweep_reason_names[r]);
		ExplainPropertyInteger(label, NULL, (int64) st->sweeps[r], es);
	}
	ExplainPropertyFloat("streamhnsw Look-ahead Average", NULL, explain_la_average(st), 1, es);
	for (int b = 0; b < SHNSW_LA_HIST_BUCKETS; b++)
	{
		char		label[64];

		snprintf(label, sizeof(label), "streamhnsw Look-ahead %s", hist_labels[b]);
		ExplainPropertyInteger(label, NULL, (int64) st->io.la_hist[b], es);
	}
}

/*
 * explain_node adds our lines to an Index Scan on a streamhnsw index when
 * EXPLAIN ANALYZE ran it.
 */
static void
explain_node(PlanState *planstate, List *ancestors, const char *relationship,
			 const char *plan_name, ExplainState *es)
{
	if (prev_explain_per_node_hook)
		prev_explain_per_node_hook(planstate, ancestors, relationship, plan_name, es);
	if (es->analyze && IsA(planstate, IndexScanState))
	{
		IndexScanDesc scan = ((IndexScanState *) planstate)->iss_ScanDesc;

		if (scan != NULL && scan->indexRelation->rd_indam->amgettuple == shnsw_gettuple &&
			scan->opaque != NULL)
		{
			const ShnswScanStats *st = shnsw_scan_stats(scan);

			if (es->format == EXPLAIN_FORMAT_TEXT)
				explain_scan_text(st, es);
			else
				explain_scan_properties(st, es);
		}
	}
}

/*
 * shnsw_explain_init installs the EXPLAIN hook (from _PG_init).
 */
void
shnsw_explain_init(void)
{
	prev_explain_per_node_hook = explain_per_node_hook;
	explain_per_node_hook = explain_node;
}
