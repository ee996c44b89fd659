/*-------------------------------------------------------------------------
 *
 * reader.h
 *	  The scan's read pipeline (reader.c): its state, its own counters and
 *	  its interface.
 *
 * The reader keeps what it did in a ShnswReaderStats of its own; the scan
 * folds it into its statistics (scan.c) and EXPLAIN and streamhnsw_stats()
 * read it from there (stats.c). Nothing here writes another file's struct.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_READER_H
#define STREAMHNSW_READER_H

#include "storage/block.h"
#include "storage/bufmgr.h"
#include "storage/itemptr.h"
#include "utils/relcache.h"

#include "lookahead.h"

/*
 * What the scan is doing when a read is waited for or made synchronously
 * (the scan sets it: shnsw_reader_phase), so that the serial round trips
 * can be told apart by where they come from.
 */
typedef enum ShnswReadPhase
{
	SHNSW_PHASE_DESCENT,		/* entry point and upper layers */
	SHNSW_PHASE_SEARCH,			/* layer-0 rounds */
	SHNSW_PHASE_RERANK,			/* exact vectors of a round's results */
	SHNSW_PHASE_OTHER,			/* parked rows taken, sweeps, TID lists */
	SHNSW_NPHASES
} ShnswReadPhase;

/* What a reader did (summed over the searches of a scan). */
typedef struct ShnswReaderStats
{
	uint64		pages_hit;		/* page accesses that found the page cached */
	uint64		pages_read;		/* page accesses that needed a read */
	uint64		sync_reads;		/* of those, read synchronously on demand */
	uint64		known_sync;		/* of those, pages asked for ahead that could
								 * not be started ahead (no pin was free) */
	uint64		reads_ahead;	/* known-order reads started ahead */
	uint64		spec_issued;	/* speculative pages requested */
	uint64		spec_ios;		/* of those, needing a read */
	uint64		spec_used;		/* speculative pages the search then read */
	uint64		spec_wasted;	/* speculative pages dropped unread */
	uint64		spec_evicted;	/* of those, dropped from a full table to make
								 * room for a known page */
	uint64		waits;			/* waits for a read not complete yet */
	uint64		serial_waits;	/* of those, on a read started after the
								 * last such wait ended (reader.c: the
								 * serial round trips, with sync_reads) */
	uint64		stalls;			/* of those, longer than 20 us */
	uint64		wait_ns;
	uint64		heap_prefetched;	/* heap blocks of result rows asked for
									 * ahead of the executor */
	uint64		heap_reads;		/* of those, needing a read */
	uint64		la_samples;
	uint64		la_distance_sum;
	uint64		la_hist[SHNSW_LA_HIST_BUCKETS];
	uint64		phase_serial[SHNSW_NPHASES];	/* serial round trips by phase */
	uint64		phase_reads[SHNSW_NPHASES]; /* pages read by phase */
} ShnswReaderStats;

/* speculative pages remembered after their read completed */
#define SHNSW_LANDED_RING 128

/* A page asked for: one slot of the in-flight table. */
typedef struct ShnswInflight
{
	BlockNumber blk;			/* InvalidBlockNumber: free slot */
	Buffer		buf;
	bool		started;		/* pinned (read started, or cached) */
	bool		io;				/* a read was started: WaitReadBuffers pending */
	bool		inflight;		/* counted in ios_in_flight (not seen complete) */
	bool		miss;			/* the page needed a read */
	bool		speculative;
	bool		landed;			/* read speculatively before, released */
	uint32		seq;			/* order of the request: oldest first */
	uint32		gen;			/* the reader's round_trips when started */
	ReadBuffersOperation op;
} ShnswInflight;

/* A heap block of a row about to be returned, read ahead. */
typedef struct ShnswHeapAhead
{
	BlockNumber blk;			/* InvalidBlockNumber: free slot */
	Buffer		buf;
	bool		io;
	uint32		seq;
	ReadBuffersOperation op;
} ShnswHeapAhead;

/*
 * A run of adjacent blocks read ahead as one I/O (the descent's pages:
 * shnsw_reader_request_range); its pins are released once it completes.
 */
#define SHNSW_RANGE_OPS		8
#define SHNSW_RANGE_MAX		16

typedef struct ShnswRangeRead
{
	BlockNumber start;			/* InvalidBlockNumber: free */
	int			nblocks;
	bool		io;				/* WaitReadBuffers pending */
	uint32		gen;			/* the reader's round_trips when started */
	Buffer		bufs[SHNSW_RANGE_MAX];
	ReadBuffersOperation op;
} ShnswRangeRead;

typedef struct ShnswReader
{
	Relation	rel;
	int			mode;
	int			target_ios;		/* effective_io_concurrency */
	int			io_cap;			/* all reads in flight, at most (reader.c) */
	int			max_pins;
	ShnswInflight *slots;
	int			nslots;			/* slots in use */
	int			npending;		/* known pages not started yet */
	int			ios_in_flight;	/* reads started, not known to be complete */
	int			ios_spec;		/* of those, speculative ones */
	int			spec_pins;
	uint32		seq;
	uint32		round_trips;	/* serial round trips so far (serial_waits +
								 * sync_reads) */
	bool		in_batch;		/* inside pgaio_enter_batchmode(): no waits */
	ShnswReadPhase phase;		/* what the scan is doing (statistics only) */
	ShnswLookahead la;
	ShnswReaderStats stats;

	/* the latest speculative wishes, best first, started as budget frees */
	BlockNumber *wish;
	int			nwish;
	int			wish_next;
	int			wishcap;

	/* speculative pages read and released, not used yet (ring) */
	BlockNumber landed[SHNSW_LANDED_RING];
	int			nlanded;
	int			landed_next;

	/* runs of blocks read ahead as one I/O each */
	ShnswRangeRead ranges[SHNSW_RANGE_OPS];
	int			nranges;

	/* heap blocks of the rows the scan returns next */
	Relation	heap;
	BlockNumber heap_nblocks;
	ShnswHeapAhead *hslots;
	int			max_heap;
	int			nheap;
} ShnswReader;

extern void shnsw_reader_init(ShnswReader *r, Relation rel);

/* The scan says what it is doing, for the per-phase round trips. */
static inline void
shnsw_reader_phase(ShnswReader *r, ShnswReadPhase phase)
{
	r->phase = phase;
}

extern void shnsw_reader_request(ShnswReader *r, const BlockNumber *blocks, int n, bool speculative);
extern Buffer shnsw_reader_get(ShnswReader *r, BlockNumber blk);
extern void shnsw_reader_request_range(ShnswReader *r, BlockNumber start, int n);
extern void shnsw_reader_end(ShnswReader *r);

/* Read the heap blocks of these rows ahead (in the order given). */
extern void shnsw_reader_heap_prefetch(ShnswReader *r, Relation heap, const ItemPointerData *tids,
									   int n);

/* The executor is done with heap block blk: release its read-ahead pin. */
extern void shnsw_reader_heap_done(ShnswReader *r, BlockNumber blk);
extern void shnsw_reader_heap_end(ShnswReader *r);

/* dst += src, with the look-ahead controller's figures of a live reader. */
extern void shnsw_reader_stats_add(ShnswReaderStats *dst, const ShnswReaderStats *src,
								   const ShnswLookahead *la);

#endif							/* STREAMHNSW_READER_H */
