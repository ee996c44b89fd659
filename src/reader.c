/*-------------------------------------------------------------------------
 *
 * reader.c
 *	  The scan's read pipeline: one look-ahead state for the whole scan.
 *
 * A scan owns one ShnswReader. The search tells it which pages it will need:
 *
 *	 known       pages about to be read (all unvisited neighbours of the node
 *				 being expanded; all exact vectors of a re-rank round), asked
 *				 for together before any of them is read;
 *	 speculative pages the best queued candidates would lead to, best first.
 *
 * In stream mode each requested page is pinned with StartReadBuffer(), which
 * starts its read asynchronously (io_method=worker or io_uring) when the page
 * is not cached, and is kept in a small in-flight table until the search
 * asks for it; WaitReadBuffers() then returns at once if the read finished
 * meanwhile. The table lives as long as the scan, so read-ahead depth is
 * never reset between node hops (the problem of a read_stream per hop on
 * PostgreSQL 18, whose read_stream_reset() forgets its distance).
 *
 *	   search ──known──► ┌──────────────── in-flight table ─────────────┐
 *	          ──spec───► │ blk 812 io  │ blk 97 hit │ blk 4410 io spec │ ──► get(blk)
 *	                     └──────────────────────────────────────────────┘
 *	   limits: known reads with I/O ≤ effective_io_concurrency;
 *	           speculative pages ≤ the controller's distance;
 *	           all pins ≤ streamhnsw.max_read_ahead and the backend's pin limit
 *
 * Every page the search reads is reported to the look-ahead controller
 * (lookahead.c) as a hit or a miss; its distance bounds the speculative
 * part. When the table is full, the oldest speculative page is dropped to
 * make room for a known one. Speculative pages never read are released when
 * the scan ends (after their reads complete).
 *
 * prefetch mode issues posix_fadvise hints (PrefetchBuffer) for the same
 * pages, remembered in the same table (without pins) so that a page is
 * advised once, and reads synchronously; sync mode reads one page at a
 * time. Both exist so that every gain can be measured A/B.
 *
 * Contract: requests are made with no buffer content lock held; get()
 * returns a pinned, unlocked buffer that the caller releases. Slots never
 * move while in use: a ReadBuffersOperation must stay where it is until
 * WaitReadBuffers(), because the I/O reports its result into it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/instrument.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/aio.h"
#include "storage/bufmgr.h"
#include "utils/rel.h"
#include "utils/spccache.h"

#include "streamhnsw.h"

/* a wait shorter than this means the read had already completed */
#define SHNSW_STALL_NS	20000

void
shnsw_reader_init(ShnswReader *r, Relation rel, ShnswScanStats *stats)
{
	int			pins;

	MemSet(r, 0, sizeof(*r));
	r->rel = rel;
	r->stats = stats;
	r->mode = shnsw_io_mode;
	r->target_ios = get_tablespace_io_concurrency(rel->rd_rel->reltablespace);
	if (r->target_ios == 0)
		r->mode = SHNSW_IO_SYNC;	/* effective_io_concurrency = 0: no read-ahead */
	pins = Min(shnsw_max_read_ahead, (int) GetAdditionalPinLimit());
	r->max_pins = Max(pins, 0);
	if (r->mode != SHNSW_IO_SYNC && r->max_pins > 0)
	{
		r->slots = palloc(sizeof(ShnswInflight) * r->max_pins);
		for (int i = 0; i < r->max_pins; i++)
			r->slots[i].blk = InvalidBlockNumber;
	}
	shnsw_la_init(&r->la, r->target_ios, r->mode == SHNSW_IO_SYNC ? 0 : r->max_pins,
				  shnsw_lookahead_window);
	stats->io_mode = r->mode;
}

static inline int
reader_find(ShnswReader *r, BlockNumber blk)
{
	if (r->nslots == 0)
		return -1;
	for (int i = 0; i < r->max_pins; i++)
		if (r->slots[i].blk == blk)
			return i;
	return -1;
}

static inline int
reader_free_slot(ShnswReader *r)
{
	for (int i = 0; i < r->max_pins; i++)
		if (r->slots[i].blk == InvalidBlockNumber)
			return i;
	return -1;
}

/*
 * Finish slot i's read (if any) and remove it; returns its pinned buffer.
 * Never called in batch mode: waiting for a read while this backend has
 * staged reads not yet submitted is not allowed (storage/aio.h).
 */
static Buffer
reader_take(ShnswReader *r, int i, bool *miss)
{
	ShnswInflight *s = &r->slots[i];
	Buffer		buf = s->buf;

	Assert(!r->in_batch);
	*miss = false;
	if (r->mode == SHNSW_IO_PREFETCH)
	{
		/* only a record of advice given: nothing pinned */
		if (s->io)
			r->ios_in_flight--;
		buf = InvalidBuffer;
	}
	else if (s->io)
	{
		instr_time	start,
					elapsed;

		INSTR_TIME_SET_CURRENT(start);
		WaitReadBuffers(&s->op);
		INSTR_TIME_SET_CURRENT(elapsed);
		INSTR_TIME_SUBTRACT(elapsed, start);
		r->stats->wait_ns += INSTR_TIME_GET_NANOSEC(elapsed);
		if (INSTR_TIME_GET_NANOSEC(elapsed) > SHNSW_STALL_NS)
			r->stats->stalls++;
		r->ios_in_flight--;
		*miss = true;
	}
	if (s->speculative)
		r->spec_pins--;
	s->blk = InvalidBlockNumber;
	r->nslots--;
	return buf;
}

/* Drop the oldest speculative slot to make room; false if there is none. */
static bool
reader_evict_speculative(ShnswReader *r)
{
	for (int i = 0; i < r->max_pins; i++)
	{
		if (r->slots[i].blk != InvalidBlockNumber && r->slots[i].speculative)
		{
			bool		miss;
			Buffer		buf = reader_take(r, i, &miss);

			if (BufferIsValid(buf))
				ReleaseBuffer(buf);
			r->stats->spec_wasted++;
			return true;
		}
	}
	return false;
}

/*
 * shnsw_reader_request asks for pages (see the file header). Blocks may
 * repeat; those already in flight are skipped.
 */
void
shnsw_reader_request(ShnswReader *r, const BlockNumber *blocks, int n, bool speculative)
{
	bool		batch = false;

	if (r->mode == SHNSW_IO_SYNC || n == 0)
		return;
	if (speculative)
		shnsw_la_sample(&r->la);

	/*
	 * Fast path: while the window has seen no miss (a cached index), asking
	 * for pages ahead only costs pins and lookups. Read on demand until the
	 * first miss raises the miss rate, as read_stream does.
	 */
	if (shnsw_la_all_hits(&r->la))
		return;

	for (int k = 0; k < n; k++)
	{
		BlockNumber blk = blocks[k];
		ShnswInflight *s;

		if (k > 0 && blocks[k - 1] == blk)
			continue;
		if (speculative && r->spec_pins >= shnsw_la_distance(&r->la))
			break;

		if (reader_find(r, blk) >= 0)
			continue;
		if (!speculative && r->ios_in_flight >= r->target_ios)
			break;				/* topped up as earlier reads are consumed */
		if (r->nslots >= r->max_pins)
		{
			if (speculative)
				break;

			/*
			 * Evicting waits for the slot's read: submit the reads staged
			 * so far first, as the AIO layer requires before any wait
			 * (a staged read might be the one waited for, or another
			 * backend might wait for one of ours).
			 */
			if (batch)
			{
				pgaio_exit_batchmode();
				batch = r->in_batch = false;
			}
			if (!reader_evict_speculative(r))
				break;
		}

		s = &r->slots[reader_free_slot(r)];
		r->nslots++;
		s->blk = blk;
		s->speculative = speculative;
		s->buf = InvalidBuffer;
		if (r->mode == SHNSW_IO_PREFETCH)
		{
			/* only advice: the slot records it, nothing is pinned */
			s->io = PrefetchBuffer(r->rel, MAIN_FORKNUM, blk).initiated_io;
		}
		else
		{
			if (!batch)
			{
				pgaio_enter_batchmode();
				batch = r->in_batch = true;
			}
			s->op.rel = r->rel;
			s->op.smgr = RelationGetSmgr(r->rel);
			s->op.persistence = r->rel->rd_rel->relpersistence;
			s->op.forknum = MAIN_FORKNUM;
			s->op.strategy = NULL;
			s->io = StartReadBuffer(&s->op, &s->buf, blk, 0);
		}
		if (s->io)
		{
			r->ios_in_flight++;
			if (speculative)
				r->stats->spec_ios++;
			else
				r->stats->reads_ahead++;
		}
		if (speculative)
		{
			r->spec_pins++;
			r->stats->spec_issued++;
		}
	}
	if (batch)
	{
		pgaio_exit_batchmode();
		r->in_batch = false;
	}
}

/*
 * shnsw_reader_get returns blk pinned (not locked), from the in-flight table
 * when it was requested, else by a synchronous read, and reports the access
 * to the controller.
 */
Buffer
shnsw_reader_get(ShnswReader *r, BlockNumber blk)
{
	Buffer		buf;
	bool		miss;
	int			i = r->slots ? reader_find(r, blk) : -1;

	if (i >= 0)
	{
		if (r->slots[i].speculative)
			r->stats->spec_used++;
		buf = reader_take(r, i, &miss);
	}
	if (i < 0 || r->mode == SHNSW_IO_PREFETCH)
	{
		int64		before = pgBufferUsage.shared_blks_read + pgBufferUsage.local_blks_read;

		buf = ReadBuffer(r->rel, blk);
		miss = pgBufferUsage.shared_blks_read + pgBufferUsage.local_blks_read != before;
		if (miss && r->mode != SHNSW_IO_PREFETCH)
			r->stats->sync_reads++;
	}
	if (miss)
		r->stats->pages_read++;
	else
		r->stats->pages_hit++;
	shnsw_la_record(&r->la, miss);
	return buf;
}

/*
 * shnsw_reader_end completes and releases every page still in flight and
 * folds the controller's figures into the statistics.
 */
void
shnsw_reader_end(ShnswReader *r)
{
	for (int i = 0; r->nslots > 0 && i < r->max_pins; i++)
	{
		bool		miss;

		if (r->slots[i].blk == InvalidBlockNumber)
			continue;
		if (r->slots[i].speculative)
			r->stats->spec_wasted++;
		{
			Buffer		buf = reader_take(r, i, &miss);

			if (BufferIsValid(buf))
				ReleaseBuffer(buf);
		}
	}
	r->stats->la_samples += r->la.samples;
	r->stats->la_distance_sum += r->la.distance_sum;
	for (int b = 0; b < SHNSW_LA_HIST_BUCKETS; b++)
		r->stats->la_hist[b] += r->la.hist[b];
	r->la.samples = r->la.distance_sum = 0;
	for (int b = 0; b < SHNSW_LA_HIST_BUCKETS; b++)
		r->la.hist[b] = 0;
}
