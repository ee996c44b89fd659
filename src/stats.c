/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  What streamhnsw scans did: lines in EXPLAIN (ANALYZE) and cumulative
 *	  figures since the last reset (streamhnsw_stats()).
 *
 * EXPLAIN: PostgreSQL 18's explain_per_node_hook lets us add lines to any
 * plan node; for an Index Scan on a streamhnsw index we print the scan's
 * figures (scan.c keeps them). The cumulative figures live in a named DSM
 * segment (the DSM registry), as atomic counters that every backend adds
 * to when a scan ends, so no shared_preload_libraries is needed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relscan.h"
#include "catalog/pg_type.h"
#include "commands/explain.h"
#include "commands/explain_format.h"
#include "commands/explain_state.h"
#include "funcapi.h"
#include "nodes/execnodes.h"
#include "port/atomics.h"
#include "storage/dsm_registry.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/rel.h"

#include "streamhnsw.h"

/* The counters, in the order of streamhnsw_stats()'s columns. */
static const struct
{
	const char *label;			/* EXPLAIN (non-text) and column name */
	size_t		offset;
}			stat_fields[] =
{
	{"Scans", offsetof(ShnswScanStats, scans)},
	{"Rounds", offsetof(ShnswScanStats, rounds)},
	{"Nodes Expanded", offsetof(ShnswScanStats, nodes_expanded)},
	{"Distances", offsetof(ShnswScanStats, distances)},
	{"Re-ranked", offsetof(ShnswScanStats, reranked)},
	{"Pages Hit", offsetof(ShnswScanStats, pages_hit)},
	{"Pages Read", offsetof(ShnswScanStats, pages_read)},
	{"Synchronous Reads", offsetof(ShnswScanStats, sync_reads)},
	{"Reads Ahead", offsetof(ShnswScanStats, reads_ahead)},
	{"Speculative Pages", offsetof(ShnswScanStats, spec_issued)},
	{"Speculative Reads", offsetof(ShnswScanStats, spec_ios)},
	{"Speculative Used", offsetof(ShnswScanStats, spec_used)},
	{"Speculative Wasted", offsetof(ShnswScanStats, spec_wasted)},
	{"Stalls", offsetof(ShnswScanStats, stalls)},
	{"Wait Nanoseconds", offsetof(ShnswScanStats, wait_ns)},
	{"Look-ahead Samples", offsetof(ShnswScanStats, la_samples)},
	{"Look-ahead Distance Sum", offsetof(ShnswScanStats, la_distance_sum)},
};

#define NFIELDS lengthof(stat_fields)
#define FIELD(st, i) (*(uint64 *) ((char *) (st) + stat_fields[i].offset))

typedef struct ShnswSharedStats
{
	pg_atomic_uint64 fields[NFIELDS];
	pg_atomic_uint64 hist[SHNSW_LA_HIST_BUCKETS];
} ShnswSharedStats;

static ShnswSharedStats *shared_stats = NULL;
static explain_per_node_hook_type prev_explain_per_node_hook = NULL;

static const char *const io_mode_names[] = {"sync", "prefetch", "stream"};
static const char *const hist_labels[SHNSW_LA_HIST_BUCKETS] = {
	"0", "1", "2-3", "4-7", "8-15", "16-31", "32-63", "64+"
};

static void
shared_stats_init(void *ptr)
{
	ShnswSharedStats *s = (ShnswSharedStats *) ptr;

	for (int i = 0; i < (int) NFIELDS; i++)
		pg_atomic_init_u64(&s->fields[i], 0);
	for (int b = 0; b < SHNSW_LA_HIST_BUCKETS; b++)
		pg_atomic_init_u64(&s->hist[b], 0);
}

static ShnswSharedStats *
get_shared_stats(void)
{
	if (shared_stats == NULL)
	{
		bool		found;

		shared_stats = GetNamedDSMSegment("streamhnsw_stats", sizeof(ShnswSharedStats),
										  shared_stats_init, &found);
	}
	return shared_stats;
}

/*
 * shnsw_stats_accumulate adds one scan's figures to the cumulative ones.
 */
void
shnsw_stats_accumulate(const ShnswScanStats *st)
{
	ShnswSharedStats *s = get_shared_stats();

	for (int i = 0; i < (int) NFIELDS; i++)
		if (FIELD(st, i) != 0)
			pg_atomic_fetch_add_u64(&s->fields[i], (int64) FIELD(st, i));
	for (int b = 0; b < SHNSW_LA_HIST_BUCKETS; b++)
		if (st->la_hist[b] != 0)
			pg_atomic_fetch_add_u64(&s->hist[b], (int64) st->la_hist[b]);
}

/* ---------- EXPLAIN ---------- */

static void
explain_text_line(ExplainState *es, const char *fmt,...) pg_attribute_printf(2, 3);

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

static void
explain_scan(const ShnswScanStats *st, ExplainState *es)
{
	double		avg = st->la_samples ? (double) st->la_distance_sum / st->la_samples : 0.0;
	const char *mode = io_mode_names[st->io_mode];

	if (es->format == EXPLAIN_FORMAT_TEXT)
	{
		StringInfoData hist;

		explain_text_line(es, "streamhnsw: rounds=" UINT64_FORMAT " nodes expanded=" UINT64_FORMAT
						  " distances=" UINT64_FORMAT " re-ranked=" UINT64_FORMAT,
						  st->rounds, st->nodes_expanded, st->distances, st->reranked);
		explain_text_line(es, "streamhnsw shared graph: %s, nodes from image=" UINT64_FORMAT
						  " through buffers=" UINT64_FORMAT,
						  shnsw_shm_status_name(st->shared_graph), st->image_nodes,
						  st->image_fallback_nodes);
		explain_text_line(es, "streamhnsw order: held back=" UINT64_FORMAT " late finds placed="
						  UINT64_FORMAT " found after a farther row=" UINT64_FORMAT
						  " parked rows re-ranked=" UINT64_FORMAT,
						  st->held_back, st->late_placed, st->late_unplaced, st->parked_reranked);
		explain_text_line(es, "streamhnsw I/O: mode=%s pages hit=" UINT64_FORMAT " read=" UINT64_FORMAT
						  " (synchronous=" UINT64_FORMAT ") reads ahead=" UINT64_FORMAT
						  " speculative=" UINT64_FORMAT " (reads=" UINT64_FORMAT " used=" UINT64_FORMAT
						  " wasted=" UINT64_FORMAT ") stalls=" UINT64_FORMAT " wait=%.3f ms",
						  mode, st->pages_hit, st->pages_read, st->sync_reads, st->reads_ahead,
						  st->spec_issued, st->spec_ios, st->spec_used, st->spec_wasted,
						  st->stalls, st->wait_ns / 1e6);
		initStringInfo(&hist);
		for (int b = 0; b < SHNSW_LA_HIST_BUCKETS; b++)
			appendStringInfo(&hist, "%s%s:" UINT64_FORMAT, b ? " " : "", hist_labels[b], st->la_hist[b]);
		explain_text_line(es, "streamhnsw look-ahead: avg distance=%.1f histogram=[%s]", avg, hist.data);
		pfree(hist.data);
		return;
	}
	ExplainPropertyText("streamhnsw I/O Mode", mode, es);
	ExplainPropertyText("streamhnsw Shared Graph", shnsw_shm_status_name(st->shared_graph), es);
	ExplainPropertyInteger("streamhnsw Image Nodes", NULL, (int64) st->image_nodes, es);
	ExplainPropertyInteger("streamhnsw Image Fallback Nodes", NULL, (int64) st->image_fallback_nodes, es);
	for (int i = 0; i < (int) NFIELDS; i++)
	{
		char		label[64];

		if (stat_fields[i].offset == offsetof(ShnswScanStats, scans) ||
			stat_fields[i].offset == offsetof(ShnswScanStats, la_samples) ||
			stat_fields[i].offset == offsetof(ShnswScanStats, la_distance_sum))
			continue;
		snprintf(label, sizeof(label), "streamhnsw %s", stat_fields[i].label);
		ExplainPropertyInteger(label, NULL, (int64) FIELD(st, i), es);
	}
	ExplainPropertyInteger("streamhnsw Held Back", NULL, (int64) st->held_back, es);
	ExplainPropertyInteger("streamhnsw Late Finds Placed", NULL, (int64) st->late_placed, es);
	ExplainPropertyInteger("streamhnsw Found After Farther Row", NULL, (int64) st->late_unplaced, es);
	ExplainPropertyInteger("streamhnsw Parked Re-ranked", NULL, (int64) st->parked_reranked, es);
	ExplainPropertyFloat("streamhnsw Look-ahead Average", NULL, avg, 1, es);
	for (int b = 0; b < SHNSW_LA_HIST_BUCKETS; b++)
	{
		char		label[64];

		snprintf(label, sizeof(label), "streamhnsw Look-ahead %s", hist_labels[b]);
		ExplainPropertyInteger(label, NULL, (int64) st->la_hist[b], es);
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
			explain_scan(shnsw_scan_stats(scan), es);
	}
}

void
shnsw_stats_init(void)
{
	prev_explain_per_node_hook = explain_per_node_hook;
	explain_per_node_hook = explain_node;
}

/* ---------- SQL ---------- */

PG_FUNCTION_INFO_V1(streamhnsw_stats);

/*
 * streamhnsw_stats() returns the cumulative figures of all streamhnsw scans
 * since the last reset, one row.
 */
Datum
streamhnsw_stats(PG_FUNCTION_ARGS)
{
	ShnswSharedStats *s = get_shared_stats();
	TupleDesc	desc;
	Datum		values[NFIELDS + 2];
	bool		nulls[NFIELDS + 2] = {0};
	Datum		hist[SHNSW_LA_HIST_BUCKETS];
	uint64		samples = 0,
				dsum = 0;
	int			n = 0;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	for (int i = 0; i < (int) NFIELDS; i++)
	{
		uint64		v = pg_atomic_read_u64(&s->fields[i]);

		if (stat_fields[i].offset == offsetof(ShnswScanStats, la_samples))
			samples = v;
		else if (stat_fields[i].offset == offsetof(ShnswScanStats, la_distance_sum))
			dsum = v;
		else if (stat_fields[i].offset == offsetof(ShnswScanStats, wait_ns))
			values[n++] = Float8GetDatum(v / 1e6);
		else
			values[n++] = Int64GetDatum((int64) v);
	}
	values[n++] = Float8GetDatum(samples ? (double) dsum / samples : 0.0);
	for (int b = 0; b < SHNSW_LA_HIST_BUCKETS; b++)
		hist[b] = Int64GetDatum((int64) pg_atomic_read_u64(&s->hist[b]));
	values[n++] = PointerGetDatum(construct_array_builtin(hist, SHNSW_LA_HIST_BUCKETS, INT8OID));
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}

PG_FUNCTION_INFO_V1(streamhnsw_stats_reset);

/*
 * streamhnsw_stats_reset() sets the cumulative figures to zero.
 */
Datum
streamhnsw_stats_reset(PG_FUNCTION_ARGS)
{
	ShnswSharedStats *s = get_shared_stats();

	for (int i = 0; i < (int) NFIELDS; i++)
		pg_atomic_write_u64(&s->fields[i], 0);
	for (int b = 0; b < SHNSW_LA_HIST_BUCKETS; b++)
		pg_atomic_write_u64(&s->hist[b], 0);
	PG_RETURN_VOID();
}
