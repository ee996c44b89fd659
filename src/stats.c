/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  Cumulative figures of all streamhnsw scans since the last reset
 *	  (streamhnsw_stats()), and the table of their names that EXPLAIN
 *	  (explain.c) uses too.
 *
 * The figures live in a named DSM segment (the DSM registry), as atomic
 * counters that every backend adds to when a scan ends (scan.c calls
 * shnsw_stats_accumulate), so no shared_preload_libraries is needed. This
 * file calls nothing of the scan: see src/README, Layers.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "port/atomics.h"
#include "access/xact.h"
#include "storage/dsm_registry.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "cache.h"
#include "lookahead.h"
#include "stats.h"

/* The counters, in the order of streamhnsw_stats()'s columns. */
const ShnswStatField shnsw_stat_fields[] =
{
	{"Scans", offsetof(ShnswScanStats, scans)},
	{"Rounds", offsetof(ShnswScanStats, rounds)},
	{"Nodes Expanded", offsetof(ShnswScanStats, nodes_expanded)},
	{"Distances", offsetof(ShnswScanStats, distances)},
	{"Re-ranked", offsetof(ShnswScanStats, reranked)},
	{"Pages Hit", offsetof(ShnswScanStats, io.pages_hit)},
	{"Pages Read", offsetof(ShnswScanStats, io.pages_read)},
	{"Synchronous Reads", offsetof(ShnswScanStats, io.sync_reads)},
	{"Reads Ahead", offsetof(ShnswScanStats, io.reads_ahead)},
	{"Speculative Pages", offsetof(ShnswScanStats, io.spec_issued)},
	{"Speculative Reads", offsetof(ShnswScanStats, io.spec_ios)},
	{"Speculative Used", offsetof(ShnswScanStats, io.spec_used)},
	{"Speculative Wasted", offsetof(ShnswScanStats, io.spec_wasted)},
	{"Waits", offsetof(ShnswScanStats, io.waits)},
	{"Stalls", offsetof(ShnswScanStats, io.stalls)},
	{"Wait Nanoseconds", offsetof(ShnswScanStats, io.wait_ns)},
	{"Known Synchronous Reads", offsetof(ShnswScanStats, io.known_sync)},
	{"Heap Prefetches", offsetof(ShnswScanStats, io.heap_prefetched)},
	{"Heap Reads", offsetof(ShnswScanStats, io.heap_reads)},
	{"Speculative Evicted", offsetof(ShnswScanStats, io.spec_evicted)},
	{"Serial Waits", offsetof(ShnswScanStats, io.serial_waits)},
	{"Look-ahead Samples", offsetof(ShnswScanStats, io.la_samples)},
	{"Look-ahead Distance Sum", offsetof(ShnswScanStats, io.la_distance_sum)},
};

#define NFIELDS lengthof(shnsw_stat_fields)
const int	shnsw_stat_nfields = NFIELDS;

typedef struct ShnswSharedStats
{
	pg_atomic_uint64 fields[NFIELDS];
	pg_atomic_uint64 hist[SHNSW_LA_HIST_BUCKETS];
} ShnswSharedStats;

static ShnswSharedStats *shared_stats = NULL;

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
		char		name[64];

		/*
		 * The name carries the segment's size: a library built with other
		 * counters (an upgrade without a server restart) gets a segment of
		 * its own instead of an error at the end of every scan.
		 */
		snprintf(name, sizeof(name), "streamhnsw_stats_%zu", sizeof(ShnswSharedStats));
		shared_stats = GetNamedDSMSegment(name, sizeof(ShnswSharedStats),
										  shared_stats_init, &found);
	}
	return shared_stats;
}

/* when this backend last failed to attach the segment (try_get_shared_stats) */
static TimestampTz stats_failed_at = 0;

/* shnsw_dsm_try's work for try_get_shared_stats: attach or create the segment */
static void
dsm_get_shared_stats(void *arg)
{
	(void) get_shared_stats();
}

/*
 * try_get_shared_stats is get_shared_stats for the end of a scan: a failure
 * to create or attach the segment (no space in /dev/shm) is caught in a
 * subtransaction and returns NULL, not retried for ten seconds; the scan's
 * figures are then not counted. No buffer or LWLock may be held. In
 * parallel mode (no subtransaction) or outside a transaction: NULL unless
 * attached already.
 */
static ShnswSharedStats *
try_get_shared_stats(void)
{
	if (shared_stats != NULL)
		return shared_stats;
	if (IsInParallelMode() || !IsTransactionState() ||
		(stats_failed_at != 0 &&
		 !TimestampDifferenceExceeds(stats_failed_at, GetCurrentTimestamp(), 10 * 1000)))
		return NULL;
	if (!shnsw_dsm_try(dsm_get_shared_stats, NULL))
		stats_failed_at = GetCurrentTimestamp();
	return shared_stats;
}

/*
 * shnsw_stats_accumulate adds one scan's figures to the cumulative ones,
 * if the statistics segment can be had (a scan never fails for lack of
 * dynamic shared memory). No buffer or LWLock may be held.
 */
void
shnsw_stats_accumulate(const ShnswScanStats *st)
{
	ShnswSharedStats *s = try_get_shared_stats();

	if (s == NULL)
		return;

	for (int i = 0; i < (int) NFIELDS; i++)
		if (SHNSW_STAT_FIELD(st, i) != 0)
			pg_atomic_fetch_add_u64(&s->fields[i], (int64) SHNSW_STAT_FIELD(st, i));
	for (int b = 0; b < SHNSW_LA_HIST_BUCKETS; b++)
		if (st->io.la_hist[b] != 0)
			pg_atomic_fetch_add_u64(&s->hist[b], (int64) st->io.la_hist[b]);
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

		if (shnsw_stat_fields[i].offset == offsetof(ShnswScanStats, io.la_samples))
			samples = v;
		else if (shnsw_stat_fields[i].offset == offsetof(ShnswScanStats, io.la_distance_sum))
			dsum = v;
		else if (shnsw_stat_fields[i].offset == offsetof(ShnswScanStats, io.wait_ns))
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
