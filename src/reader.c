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
 *	 speculative pages the best queued candidates would lead to, best first
 *				 (a wish list: each request replaces the previous one).
 *
 * In stream mode each page is pinned with StartReadBuffer(), which starts
 * its read asynchronously (io_method=worker or io_uring) when the page is
 * not cached, and is kept in a small in-flight table until the search asks
 * for it; WaitReadBuffers() then returns at once if the read finished
 * meanwhile. The table lives as long as the scan, so read-ahead depth is
 * never reset between node hops (the problem of a read_stream per hop on
 * PostgreSQL 18, whose read_stream_reset() forgets its distance).
 *
 * The budget is effective_io_concurrency known reads in flight, and as
 * many speculative ones, where a read counts until it is seen complete
 * (polled, or waited for). The rule:
 *
 *	 1. every known page is started before the first of them is read: while
 *		more reads are wanted than the budget allows, wait for the oldest
 *		read in flight and start the next. So a page whose need is known
 *		ahead is never read synchronously; the waits are on reads already
 *		under way, oldest first, and the pages come in the order asked;
 *	 2. the speculative wishes, best first, have a budget of their own
 *		(effective_io_concurrency reads in flight, at most the controller's
 *		distance in pages; lookahead.c), so that a hop of more pages than
 *		the known budget does not leave the next hops unguessed. Every time
 *		a read completes or a page is consumed, both are topped up again,
 *		known pages first: the next hops' pages are in flight while this
 *		hop's distances are computed;
 *	 3. a speculative page never makes the search wait for its read, except
 *		when the table is full and its slot is wanted for a known page;
 *	 4. a speculative page whose read has completed is released at once
 *		(it is in shared buffers now; the block is remembered in a ring so
 *		that a later use counts as a used guess and is not guessed again):
 *		completed guesses hold no pins and no budget.
 *
 *	   search ──known──► ┌──────────────── in-flight table ─────────────┐
 *	          ──spec───► │ blk 812 io  │ blk 97 hit │ blk 4410 io spec │ ──► get(blk)
 *	                     └──────────────────────────────────────────────┘
 *	   limits: known reads in flight ≤ effective_io_concurrency;
 *	           speculative reads in flight ≤ effective_io_concurrency and
 *	           ≤ the controller's distance;
 *	           all pins ≤ streamhnsw.max_read_ahead and the backend's pin limit
 *
 * Round trips. A wait on a read not complete yet is counted (waits); several
 * reads started together and waited for one after the other are one
 * storage round trip, not several. A read carries the number of round
 * trips so far when it is started (gen); a wait on it starts a new round
 * trip only if no round trip ended since it was started (gen equals the
 * count): otherwise it was in flight during the last one, and what is left
 * of its latency overlaps it. serial_waits counts those; with the
 * synchronous reads (each a round trip of its own) they estimate the
 * serial round trips of a scan, which a loaded machine's wake-up delays
 * hide from latency / injected delay.
 *
 * Every page the search reads is reported to the look-ahead controller as a
 * hit or a miss. When the table is full, the oldest speculative page is
 * dropped to make room for a known one. Speculative pages never read are
 * released when the scan ends (after their reads complete).
 *
 * The heap. Once the scan knows the rows it returns next, it asks the
 * reader to start reads of their heap blocks (shnsw_reader_heap_prefetch):
 * the executor's heap fetch then finds the page in flight or cached,
 * instead of a LIMIT 10 costing ten serial heap reads. Those pins are
 * released as the executor moves past each row. While the heap is hot
 * (SHNSW_HEAP_PROBE_AFTER read-aheads in a row hit), only the first block
 * of a batch is read ahead, as a probe.
 *
 * sync mode (streamhnsw.io_mode = sync, or effective_io_concurrency = 0)
 * reads one page at a time, when the search reads it: the baseline every
 * gain of read-ahead is measured against.
 *
 * Contract: requests are made with no buffer content lock held; get()
 * returns a pinned, unlocked buffer that the caller releases. Slots never
 * move while in use: a ReadBuffersOperation must stay where it is until
 * WaitReadBuffers(), because the I/O reports its result into it. Nothing
 * waits for a read inside pgaio_enter_batchmode(): the AIO layer forbids
 * waiting while this backend has staged reads it has not submitted.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/instrument.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/aio.h"
#include "storage/io_worker.h"
#include "storage/bufmgr.h"
#include "utils/rel.h"
#include "utils/spccache.h"

#include "lookahead.h"
#include "options.h"
#include "reader.h"

/* a wait shorter than this means the read had already completed */
#define SHNSW_STALL_NS	20000

/*
 * Room this scan may take in the I/O workers' shared submission queue
 * (io_method = worker), beyond one read per worker: see reader_io_cap.
 */
#define SHNSW_WORKER_QUEUE_ROOM	16

/* at most this many heap blocks read ahead of the executor */
#define SHNSW_HEAP_AHEAD_MAX	32

/*
 * After this many heap read-aheads in a row found their block in shared
 * buffers, this backend reads ahead only the first block of each batch (a
 * probe); the first probe that needs a read turns full read-ahead back on
 * at once, for the rest of that batch too. A hot heap then costs one buffer
 * lookup a batch instead of one a row; a heap turning cold loses nothing,
 * and a partly cached one rarely strings this many hits together.
 */
#define SHNSW_HEAP_PROBE_AFTER	64

static uint32 heap_hit_run = 0;	/* heap read-aheads in a row that hit */

/*
 * reader_io_cap: how many reads a scan keeps in flight at most, known and
 * speculative together. With io_method = worker each I/O worker performs
 * one read at a time; reads beyond io_workers wait in a shared FIFO queue
 * (so a known read started after a burst of guesses waits behind them), and
 * once that queue (64 entries in PostgreSQL 18) is full, the backend that
 * submits performs the read itself, synchronously, before it goes on. So
 * 2 x effective_io_concurrency reads in flight at effective_io_concurrency
 * 64 made the scan read a good part of its guesses synchronously. The cap
 * is io_workers plus some room in the queue; known reads are never held
 * back by it (reader_budget), guesses are.
 */
static int
reader_io_cap(int target_ios)
{
	if (shnsw_debug_io_cap >= 0)
		return shnsw_debug_io_cap > 0 ? shnsw_debug_io_cap : 2 * target_ios;
	if (io_method == IOMETHOD_WORKER)
		return Min(2 * target_ios, io_workers + SHNSW_WORKER_QUEUE_ROOM);
	return 2 * target_ios;
}

void
shnsw_reader_init(ShnswReader *r, Relation rel)
{
	int			pins;

	MemSet(r, 0, sizeof(*r));
	r->rel = rel;
	r->mode = shnsw_io_mode;
	r->target_ios = get_tablespace_io_concurrency(rel->rd_rel->reltablespace);
	if (r->target_ios == 0)
		r->mode = SHNSW_IO_SYNC;	/* effective_io_concurrency = 0: no read-ahead */
	r->io_cap = Max(reader_io_cap(r->target_ios), 1);
	pins = Min(shnsw_max_read_ahead, (int) GetAdditionalPinLimit());
	r->max_pins = Max(pins, 0);
	if (r->mode != SHNSW_IO_SYNC && r->max_pins > 0)
	{
		r->slots = palloc0(sizeof(ShnswInflight) * r->max_pins);
		for (int i = 0; i < r->max_pins; i++)
			r->slots[i].blk = InvalidBlockNumber;
	}
	for (int k = 0; k < SHNSW_LANDED_RING; k++)
		r->landed[k] = InvalidBlockNumber;
	for (int k = 0; k < SHNSW_RANGE_OPS; k++)
		r->ranges[k].start = InvalidBlockNumber;
	shnsw_la_init(&r->la, r->target_ios, r->mode == SHNSW_IO_SYNC ? 0 : r->max_pins,
				  shnsw_lookahead_window);
	r->heap_nblocks = 0;
}

/* The slot holding blk (InvalidBlockNumber: a free slot), or -1. */
static inline int
reader_slot_of(ShnswReader *r, BlockNumber blk)
{
	for (int i = 0; i < r->max_pins; i++)
		if (r->slots[i].blk == blk)
			return i;
	return -1;
}

/* The slot of page blk, or -1 if no slot holds it. */
static inline int
reader_find(ShnswReader *r, BlockNumber blk)
{
	return r->nslots == 0 ? -1 : reader_slot_of(r, blk);
}

/*
 * reader_claim takes a free slot (there is one) for page blk, its read not
 * started yet, the newest request; landed: read speculatively before.
 */
static ShnswInflight *
reader_claim(ShnswReader *r, BlockNumber blk, bool speculative, bool landed)
{
	ShnswInflight *s = &r->slots[reader_slot_of(r, InvalidBlockNumber)];

	r->nslots++;
	s->blk = blk;
	s->buf = InvalidBuffer;
	s->started = false;
	s->io = false;
	s->inflight = false;
	s->landed = landed;
	s->speculative = speculative;
	s->seq = r->seq++;
	return s;
}

static inline void
reader_leave_batch(ShnswReader *r)
{
	if (r->in_batch)
	{
		pgaio_exit_batchmode();
		r->in_batch = false;
	}
}

/*
 * op_done: is the read that StartReadBuffers() started in op known to have
 * completed, without waiting? The asynchronous I/O layer answers through
 * the operation's wait reference, as WaitReadBuffers() asks it before it
 * waits (this only reads the reference, which the operation owns). Without
 * one (io_method = sync, whose reads WaitReadBuffers() performs) the read
 * has not been done. A read another process completed counts as done once
 * that process has reported it. Outside batch mode: our own staged reads
 * are not submitted inside it.
 */
static inline bool
op_done(ReadBuffersOperation *op)
{
	return pgaio_wref_valid(&op->io_wref) && pgaio_wref_check_done(&op->io_wref);
}

/*
 * Is the read into slot s's buffer known to have completed (without
 * waiting)? Only a read started (s->io) has an operation to ask. Local
 * buffers are never polled: their reads are waited for.
 */
static inline bool
read_done(ShnswInflight *s)
{
	return s->started && s->io && !BufferIsLocal(s->buf) && op_done(&s->op);
}

/* Slot s's read is no longer counted as in flight. */
static inline void
reader_landed(ShnswReader *r, ShnswInflight *s)
{
	Assert(s->inflight);
	s->inflight = false;
	r->ios_in_flight--;
	if (s->speculative)
		r->ios_spec--;
}

static void reader_release_landed(ShnswReader *r, int i);
static void reader_ring_add(ShnswReader *r, BlockNumber blk);

/* The range read holding blk, or -1. */
static inline int
reader_range_find(ShnswReader *r, BlockNumber blk)
{
	if (r->nranges == 0)
		return -1;
	for (int k = 0; k < SHNSW_RANGE_OPS; k++)
	{
		ShnswRangeRead *g = &r->ranges[k];

		if (g->start != InvalidBlockNumber && blk >= g->start &&
			blk < g->start + (BlockNumber) g->nblocks)
			return k;
	}
	return -1;
}

/* Is range g's read known to have completed (without waiting)? */
static bool
range_done(ShnswRangeRead *g)
{
	return !BufferIsLocal(g->bufs[0]) && op_done(&g->op);
}

/*
 * reader_op_begin prepares op to read the index's main fork, in the
 * reader's I/O batch (entered on the first read started).
 */
static void
reader_op_begin(ShnswReader *r, ReadBuffersOperation *op)
{
	if (!r->in_batch)
	{
		pgaio_enter_batchmode();
		r->in_batch = true;
	}
	op->rel = r->rel;
	op->smgr = RelationGetSmgr(r->rel);
	op->persistence = r->rel->rd_rel->relpersistence;
	op->forknum = MAIN_FORKNUM;
	op->strategy = NULL;
}

/*
 * reader_count_wait counts a wait of elapsed on a read started in round
 * trip gen: a read started after the last round trip ended makes a new,
 * serial one (charged to the current phase).
 */
static void
reader_count_wait(ShnswReader *r, uint32 gen, instr_time elapsed)
{
	r->stats.waits++;
	if (gen == r->round_trips)
	{
		r->stats.serial_waits++;
		r->stats.phase_serial[r->phase]++;
		r->round_trips++;
	}
	r->stats.wait_ns += INSTR_TIME_GET_NANOSEC(elapsed);
	if (INSTR_TIME_GET_NANOSEC(elapsed) > SHNSW_STALL_NS)
		r->stats.stalls++;
}

/*
 * reader_range_finish completes range k's read (waiting for it, counted as
 * a wait with count, if must_wait and it is not complete; else only if it
 * is) and
 * releases its pins: its pages are in shared buffers, remembered in the
 * landed ring so that the search's use counts as a used guess. Returns
 * false if the read was left in flight. Outside batch mode.
 */
static bool
reader_range_finish(ShnswReader *r, int k, bool must_wait, bool count)
{
	ShnswRangeRead *g = &r->ranges[k];

	Assert(!r->in_batch);
	if (g->io)
	{
		if (!range_done(g))
		{
			instr_time	start,
						elapsed;

			if (!must_wait)
				return false;
			INSTR_TIME_SET_CURRENT(start);
			WaitReadBuffers(&g->op);
			INSTR_TIME_SET_CURRENT(elapsed);
			INSTR_TIME_SUBTRACT(elapsed, start);
			if (count)
				reader_count_wait(r, g->gen, elapsed);
		}
		else
			WaitReadBuffers(&g->op);
	}
	for (int j = 0; j < g->nblocks; j++)
	{
		ReleaseBuffer(g->bufs[j]);
		if (g->io)
			reader_ring_add(r, g->start + j);
	}
	g->start = InvalidBlockNumber;
	r->nranges--;
	return true;
}

/*
 * shnsw_reader_request_range reads blocks start .. start + n - 1 ahead as
 * guesses, in runs of adjacent blocks of up to io_combine_limit pages, one
 * I/O each (at most SHNSW_RANGE_OPS runs in flight, and within the
 * backend's pin limit): the top layers' pages, which a build places side by
 * side, cost a few I/Os instead of one each, and do not fill the I/O
 * workers' queue ahead of the pages a search needs now. Pages cached
 * already are skipped; so are blocks the table holds. In stream mode, and
 * not while every access hits (as shnsw_reader_request).
 */
void
shnsw_reader_request_range(ShnswReader *r, BlockNumber start, int n)
{
	if (r->mode != SHNSW_IO_STREAM || n <= 0 || shnsw_la_all_hits(&r->la))
		return;
	while (n > 0)
	{
		ShnswRangeRead *g = NULL;
		int			nb;
		uint32		limit;

		for (int k = 0; k < SHNSW_RANGE_OPS && g == NULL; k++)
			if (r->ranges[k].start == InvalidBlockNumber)
				g = &r->ranges[k];
		limit = GetAdditionalPinLimit();
		if (g == NULL || limit == 0)
			break;
		if (reader_find(r, start) >= 0 || reader_range_find(r, start) >= 0)
		{
			start++;
			n--;
			continue;
		}
		nb = Min(n, Min(io_combine_limit, SHNSW_RANGE_MAX));
		nb = Min(nb, (int) limit);
		/* stop before a block the table holds: it is read already */
		for (int j = 1; j < nb; j++)
			if (reader_find(r, start + j) >= 0)
			{
				nb = j;
				break;
			}
		reader_op_begin(r, &g->op);
		for (int j = 0; j < nb; j++)
			g->bufs[j] = InvalidBuffer;
		g->io = StartReadBuffers(&g->op, g->bufs, start, &nb, 0);
		g->start = start;
		g->nblocks = nb;
		g->gen = r->round_trips;
		r->nranges++;
		r->stats.spec_issued += nb;
		if (g->io)
		{
			r->stats.spec_ios += nb;
		}
		else
		{
			/* cached: nothing to read ahead */
			for (int j = 0; j < nb; j++)
				ReleaseBuffer(g->bufs[j]);
			g->start = InvalidBlockNumber;
			r->nranges--;
		}
		start += nb;
		n -= nb;
	}
	reader_leave_batch(r);
}

/*
 * reader_reap stops counting the reads seen complete, so that the budget
 * is that of reads really under way. Outside batch mode.
 */
static void
reader_reap(ShnswReader *r)
{
	Assert(!r->in_batch);
	if (r->mode != SHNSW_IO_STREAM)
		return;
	for (int k = 0; k < SHNSW_RANGE_OPS && r->nranges > 0; k++)
		if (r->ranges[k].start != InvalidBlockNumber)
			(void) reader_range_finish(r, k, false, false);
	for (int i = 0; i < r->max_pins && r->ios_in_flight > 0; i++)
	{
		ShnswInflight *s = &r->slots[i];

		if (s->blk != InvalidBlockNumber && s->inflight && read_done(s))
		{
			reader_landed(r, s);
			if (s->speculative)
				reader_release_landed(r, i);
		}
	}
}

/*
 * reader_wait completes the read of slot s (WaitReadBuffers), counting a
 * wait if it was not complete yet. The slot keeps its pinned buffer.
 */
static void
reader_wait(ShnswReader *r, ShnswInflight *s)
{
	Assert(!r->in_batch);
	Assert(s->io);
	if (s->inflight && !read_done(s))
	{
		instr_time	start,
					elapsed;

		INSTR_TIME_SET_CURRENT(start);
		WaitReadBuffers(&s->op);
		INSTR_TIME_SET_CURRENT(elapsed);
		INSTR_TIME_SUBTRACT(elapsed, start);
		reader_count_wait(r, s->gen, elapsed);
	}
	else
		WaitReadBuffers(&s->op);
	s->io = false;
	if (s->inflight)
		reader_landed(r, s);
}

/*
 * reader_start starts the read of slot s (pins the page). Enters batch
 * mode, so that the reads started together are submitted together.
 */
static void
reader_start(ShnswReader *r, ShnswInflight *s)
{
	Assert(!s->started);
	reader_op_begin(r, &s->op);
	s->io = StartReadBuffer(&s->op, &s->buf, s->blk, 0);
	s->started = true;
	s->gen = r->round_trips;
	s->miss = s->io || s->landed;
	s->inflight = s->io;
	if (s->io)
	{
		r->ios_in_flight++;
		if (s->speculative)
			r->ios_spec++;
		if (s->speculative)
			r->stats.spec_ios++;
		else
			r->stats.reads_ahead++;
	}
	if (!s->speculative)
		r->npending--;
}

/* Finish slot i's read (if any) and remove it; returns its pinned buffer. */
static Buffer
reader_take(ShnswReader *r, int i, bool *miss)
{
	ShnswInflight *s = &r->slots[i];
	Buffer		buf = s->buf;

	Assert(!r->in_batch);
	Assert(s->started);
	*miss = s->miss;
	if (s->io)
		reader_wait(r, s);
	if (s->speculative)
		r->spec_pins--;
	s->blk = InvalidBlockNumber;
	r->nslots--;
	return buf;
}

/* Remove slot i, whatever its state, releasing its pin. */
static void
reader_drop(ShnswReader *r, int i)
{
	ShnswInflight *s = &r->slots[i];
	bool		miss;

	if (!s->started)
	{
		/* a known page not started yet: nothing pinned */
		r->npending--;
		s->blk = InvalidBlockNumber;
		r->nslots--;
		return;
	}
	{
		Buffer		buf = reader_take(r, i, &miss);

		if (BufferIsValid(buf))
			ReleaseBuffer(buf);
	}
}

/*
 * A speculative page whose read has completed is in shared buffers: release
 * its pin and slot (the search finds it cached if it gets there), and
 * remember it in the landed ring so that a later use still counts as one.
 */
static void
reader_release_landed(ShnswReader *r, int i)
{
	BlockNumber blk = r->slots[i].blk;

	reader_drop(r, i);
	reader_ring_add(r, blk);
}

/* Remember blk, read speculatively and released, in the landed ring. */
static void
reader_ring_add(ShnswReader *r, BlockNumber blk)
{
	int			k = r->landed_next;

	if (r->landed[k] != InvalidBlockNumber)
		r->stats.spec_wasted++;		/* pushed out of the ring unused */
	else
		r->nlanded++;
	r->landed[k] = blk;
	r->landed_next = (k + 1) % SHNSW_LANDED_RING;
}

/*
 * Is blk in the landed ring (read speculatively, released, not used yet)?
 * With take, it is now used: counted as such and removed.
 */
static bool
reader_ring_find(ShnswReader *r, BlockNumber blk, bool take)
{
	if (r->nlanded == 0)
		return false;
	for (int k = 0; k < SHNSW_LANDED_RING; k++)
		if (r->landed[k] == blk)
		{
			if (take)
			{
				r->landed[k] = InvalidBlockNumber;
				r->nlanded--;
				r->stats.spec_used++;
			}
			return true;
		}
	return false;
}

/* Which slots reader_oldest looks among (each a page in a slot). */
static inline bool
slot_speculative(const ShnswInflight *s)
{
	return s->speculative;
}

static inline bool
slot_pending(const ShnswInflight *s)
{
	return !s->started;
}

static inline bool
slot_awaited(const ShnswInflight *s)
{
	return s->inflight && !s->speculative;
}

/* The slot of the oldest page for which want holds, or -1. */
static inline int
reader_oldest(ShnswReader *r, bool (*want) (const ShnswInflight *))
{
	int			oldest = -1;

	for (int i = 0; i < r->max_pins; i++)
	{
		ShnswInflight *s = &r->slots[i];

		if (s->blk != InvalidBlockNumber && want(s) &&
			(oldest < 0 || (int32) (s->seq - r->slots[oldest].seq) < 0))
			oldest = i;
	}
	return oldest;
}

/* Drop the oldest speculative slot to make room; false if there is none. */
static bool
reader_evict_speculative(ShnswReader *r)
{
	int			oldest = reader_oldest(r, slot_speculative);

	if (oldest < 0)
		return false;
	reader_leave_batch(r);
	reader_drop(r, oldest);
	r->stats.spec_wasted++;
	r->stats.spec_evicted++;
	return true;
}

/*
 * Is there budget for one more read? Known and speculative reads have a
 * budget each, effective_io_concurrency reads in flight: a guess never
 * holds back a page the search needs now, and a hop of more known pages
 * than the budget still leaves the guesses theirs. Guesses also stop at the
 * scan's cap on all its reads in flight (reader_io_cap). Known reads past
 * their own budget may use what the guesses leave of the cap: a hop of 18
 * pages at effective_io_concurrency 16, or a re-rank of 40 vector pages
 * (when nothing is guessed), starts more of them at once. Looks for
 * completed reads if the budget seems spent.
 */
static inline bool
reader_budget_left(ShnswReader *r, bool speculative)
{
	int			known = r->ios_in_flight - r->ios_spec;

	if (speculative)
		return r->ios_spec < r->target_ios && r->ios_in_flight < r->io_cap;
	if (known < Min(r->target_ios, r->io_cap))
		return true;
	/* past its own budget, a known read may take what guesses leave */
	return r->ios_in_flight < r->io_cap;
}

static bool
reader_budget(ShnswReader *r, bool speculative)
{
	if (reader_budget_left(r, speculative))
		return true;
	reader_leave_batch(r);
	reader_reap(r);
	return reader_budget_left(r, speculative);
}

/*
 * reader_pump starts known pages, oldest first, then speculative wishes,
 * best first, while the budget allows. With wait_for_known, known pages
 * beyond the budget are started as the oldest reads in flight complete
 * (waiting for them): on return every known page is started. Ends outside
 * batch mode.
 */
static void
reader_pump(ShnswReader *r, bool wait_for_known)
{
	while (r->npending > 0)
	{
		int			i;

		if (!reader_budget(r, false))
		{
			if (!wait_for_known)
				break;
			/* wait for the oldest known read in flight, if one is */
			reader_leave_batch(r);
			i = reader_oldest(r, slot_awaited);
			if (i < 0)
				break;
			reader_wait(r, &r->slots[i]);
			continue;
		}
		i = reader_oldest(r, slot_pending);
		if (i < 0)
			break;
		reader_start(r, &r->slots[i]);
	}

	if (r->ios_spec > 0 && r->wish_next < r->nwish && r->npending == 0)
	{
		reader_leave_batch(r);
		reader_reap(r);
	}
	while (r->wish_next < r->nwish && r->npending == 0)
	{
		BlockNumber blk = r->wish[r->wish_next];
		ShnswInflight *s;

		if (r->ios_spec >= shnsw_la_distance(&r->la) || r->nslots >= r->max_pins ||
			!reader_budget(r, true))
			break;
		r->wish_next++;
		if (reader_find(r, blk) >= 0 || reader_ring_find(r, blk, false) ||
			reader_range_find(r, blk) >= 0)
			continue;
		s = reader_claim(r, blk, true, false);
		r->spec_pins++;
		r->stats.spec_issued++;
		reader_start(r, s);
		if (!s->io)
		{
			/* cached already: nothing to read ahead, no pin to hold */
			ReleaseBuffer(s->buf);
			s->blk = InvalidBlockNumber;
			r->nslots--;
			r->spec_pins--;
		}
	}
	reader_leave_batch(r);
}

/*
 * shnsw_reader_request asks for pages (see the file header). Blocks may
 * repeat; those already in the table are skipped. A speculative request
 * replaces the previous wishes.
 */
void
shnsw_reader_request(ShnswReader *r, const BlockNumber *blocks, int n, bool speculative)
{
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

	if (speculative)
	{
		if (r->wishcap < n)
		{
			r->wishcap = Max(n, 2 * r->wishcap);
			r->wish = r->wish ? repalloc(r->wish, sizeof(BlockNumber) * r->wishcap)
				: palloc(sizeof(BlockNumber) * r->wishcap);
		}
		memcpy(r->wish, blocks, sizeof(BlockNumber) * n);
		r->nwish = n;
		r->wish_next = 0;
		reader_pump(r, false);
		return;
	}

	for (int k = 0; k < n; k++)
	{
		BlockNumber blk = blocks[k];
		int			i;

		if (k > 0 && blocks[k - 1] == blk)
			continue;
		if (reader_range_find(r, blk) >= 0)
			continue;			/* read ahead in a run: get() completes it */
		i = reader_find(r, blk);
		if (i >= 0)
		{
			/* wished for, now needed: it is no longer a guess */
			if (r->slots[i].speculative)
			{
				r->slots[i].speculative = false;
				r->spec_pins--;
				if (r->slots[i].inflight)
					r->ios_spec--;
				r->stats.spec_used++;
			}
			continue;
		}
		if (r->nslots >= r->max_pins && !reader_evict_speculative(r))
			break;				/* the rest is asked for again as pages are read */
		/* read speculatively and released: cached now, but it was our read */
		(void) reader_claim(r, blk, false, reader_ring_find(r, blk, true));
		r->npending++;
	}
	reader_pump(r, true);
}

/*
 * shnsw_reader_get returns blk pinned (not locked), from the in-flight table
 * when it was requested, else by a synchronous read, and reports the access
 * to the controller.
 */
Buffer
shnsw_reader_get(ShnswReader *r, BlockNumber blk)
{
	Buffer		buf = InvalidBuffer;
	bool		miss = false;
	bool		sync = true;
	int			i = r->slots ? reader_find(r, blk) : -1;

	if (i >= 0)
	{
		ShnswInflight *s = &r->slots[i];

		if (!s->started)
		{
			/* asked for, but no budget or pin was free to start it ahead */
			reader_start(r, s);
			reader_leave_batch(r);
			if (s->io)
			{
				/* started only now: a synchronous read, not one ahead */
				r->stats.reads_ahead--;
				r->stats.known_sync++;
			}
		}
		else
			sync = false;
		if (s->speculative)
			r->stats.spec_used++;
		buf = reader_take(r, i, &miss);
	}
	if (i < 0 && r->nranges > 0)
	{
		int			k = reader_range_find(r, blk);

		/* read ahead in a run: complete it; the page is then a hit below */
		if (k >= 0)
		{
			reader_leave_batch(r);
			(void) reader_range_finish(r, k, true, true);
		}
	}
	if (i < 0)
	{
		int64		before = pgBufferUsage.shared_blks_read + pgBufferUsage.local_blks_read;

		buf = ReadBuffer(r->rel, blk);
		miss = pgBufferUsage.shared_blks_read + pgBufferUsage.local_blks_read != before;
		sync = true;
		if (!miss && reader_ring_find(r, blk, true))
		{
			/* read speculatively by this scan, then released: a read ahead */
			miss = true;
			sync = false;
		}
	}
	if (miss)
	{
		r->stats.pages_read++;
		r->stats.phase_reads[r->phase]++;
		if (sync)
		{
			r->stats.sync_reads++;
			r->stats.phase_serial[r->phase]++;
			r->round_trips++;
		}
	}
	else
		r->stats.pages_hit++;
	shnsw_la_record(&r->la, miss);

	/* a read was consumed: keep the budget in use */
	if (r->mode == SHNSW_IO_STREAM && (r->npending > 0 || r->wish_next < r->nwish))
		reader_pump(r, false);
	return buf;
}

/*
 * shnsw_reader_end completes and releases every index page still in flight
 * and folds the controller's figures into the reader's statistics. The
 * heap pages stay (shnsw_reader_heap_end releases them).
 */
void
shnsw_reader_end(ShnswReader *r)
{
	reader_leave_batch(r);
	for (int k = 0; k < SHNSW_RANGE_OPS && r->nranges > 0; k++)
		if (r->ranges[k].start != InvalidBlockNumber)
			(void) reader_range_finish(r, k, true, false);
	for (int i = 0; r->nslots > 0 && i < r->max_pins; i++)
	{
		if (r->slots[i].blk == InvalidBlockNumber)
			continue;
		if (r->slots[i].speculative)
			r->stats.spec_wasted++;
		reader_drop(r, i);
	}
	r->nwish = r->wish_next = 0;
	r->stats.spec_wasted += r->nlanded;
	for (int k = 0; k < SHNSW_LANDED_RING; k++)
		r->landed[k] = InvalidBlockNumber;
	r->nlanded = 0;
	r->stats.la_samples += r->la.samples;
	r->stats.la_distance_sum += r->la.distance_sum;
	for (int b = 0; b < SHNSW_LA_HIST_BUCKETS; b++)
		r->stats.la_hist[b] += r->la.hist[b];
	r->la.samples = r->la.distance_sum = 0;
	for (int b = 0; b < SHNSW_LA_HIST_BUCKETS; b++)
		r->la.hist[b] = 0;
}

/* ---------- heap blocks of the rows returned next ---------- */

/* Complete (if needed) and release heap slot i. */
static void
heap_release(ShnswReader *r, int i)
{
	ShnswHeapAhead *h = &r->hslots[i];

	if (h->io)
		WaitReadBuffers(&h->op);
	if (BufferIsValid(h->buf))
		ReleaseBuffer(h->buf);
	h->blk = InvalidBlockNumber;
	h->buf = InvalidBuffer;
	h->io = false;
	r->nheap--;
}

/*
 * shnsw_reader_heap_prefetch starts reads of the heap blocks of these rows
 * (the rows the scan returns next, nearest first), at most
 * effective_io_concurrency blocks (and SHNSW_HEAP_AHEAD_MAX) held at a
 * time; blocks already held are skipped. In sync mode it does nothing. A
 * block beyond the heap's end
 * (which a valid TID never names) is left to the executor.
 */
void
shnsw_reader_heap_prefetch(ShnswReader *r, Relation heap, const ItemPointerData *tids, int n)
{
	if (r->mode == SHNSW_IO_SYNC || heap == NULL || n == 0)
		return;
	Assert(r->heap == NULL || r->heap == heap);
	if (r->hslots == NULL)
	{
		r->max_heap = Min(Max(r->target_ios, 1), SHNSW_HEAP_AHEAD_MAX);
		r->hslots = palloc(sizeof(ShnswHeapAhead) * r->max_heap);
		for (int i = 0; i < r->max_heap; i++)
		{
			r->hslots[i].blk = InvalidBlockNumber;
			r->hslots[i].buf = InvalidBuffer;
			r->hslots[i].io = false;
		}
		r->heap = heap;
	}
	for (int k = 0; k < n && r->nheap < r->max_heap; k++)
	{
		BlockNumber blk = ItemPointerGetBlockNumber(&tids[k]);
		ShnswHeapAhead *h = NULL;
		bool		held = false;
		bool		missed;

		for (int i = 0; i < r->max_heap; i++)
		{
			if (r->hslots[i].blk == blk)
				held = true;
			else if (h == NULL && r->hslots[i].blk == InvalidBlockNumber)
				h = &r->hslots[i];
		}
		if (held || h == NULL)
			continue;
		if (blk >= r->heap_nblocks)
		{
			r->heap_nblocks = RelationGetNumberOfBlocks(heap);
			if (blk >= r->heap_nblocks)
				continue;
		}
		if (GetAdditionalPinLimit() == 0)
			break;
		if (!r->in_batch)
		{
			pgaio_enter_batchmode();
			r->in_batch = true;
		}
		h->op.rel = heap;
		h->op.smgr = RelationGetSmgr(heap);
		h->op.persistence = heap->rd_rel->relpersistence;
		h->op.forknum = MAIN_FORKNUM;
		h->op.strategy = NULL;
		h->buf = InvalidBuffer;
		h->io = StartReadBuffer(&h->op, &h->buf, blk, 0);
		missed = h->io;
		h->blk = blk;
		h->seq = r->seq++;
		r->nheap++;
		r->stats.heap_prefetched++;
		if (missed)
		{
			r->stats.heap_reads++;
			heap_hit_run = 0;
		}
		else if (++heap_hit_run >= SHNSW_HEAP_PROBE_AFTER)
		{
			/* the probe hit (or the run just got long enough): the rest too */
			heap_hit_run = SHNSW_HEAP_PROBE_AFTER;
			break;
		}
	}
	reader_leave_batch(r);
}

/*
 * shnsw_reader_heap_done releases the read-ahead pin of heap block blk, if
 * any: the executor has fetched the row (and holds its own pin).
 */
void
shnsw_reader_heap_done(ShnswReader *r, BlockNumber blk)
{
	if (r->nheap == 0)
		return;
	for (int i = 0; i < r->max_heap; i++)
		if (r->hslots[i].blk == blk)
		{
			heap_release(r, i);
			return;
		}
}

/* shnsw_reader_heap_end releases every heap block still held. */
void
shnsw_reader_heap_end(ShnswReader *r)
{
	reader_leave_batch(r);
	for (int i = 0; r->nheap > 0 && i < r->max_heap; i++)
		if (r->hslots[i].blk != InvalidBlockNumber)
			heap_release(r, i);
}

/*
 * shnsw_reader_stats_add adds src (and, for a reader still running, its
 * controller's figures la) to dst.
 */
void
shnsw_reader_stats_add(ShnswReaderStats *dst, const ShnswReaderStats *src,
					   const ShnswLookahead *la)
{
	dst->pages_hit += src->pages_hit;
	dst->pages_read += src->pages_read;
	dst->sync_reads += src->sync_reads;
	dst->known_sync += src->known_sync;
	dst->reads_ahead += src->reads_ahead;
	dst->spec_issued += src->spec_issued;
	dst->spec_ios += src->spec_ios;
	dst->spec_used += src->spec_used;
	dst->spec_wasted += src->spec_wasted;
	dst->spec_evicted += src->spec_evicted;
	dst->waits += src->waits;
	dst->serial_waits += src->serial_waits;
	dst->stalls += src->stalls;
	dst->wait_ns += src->wait_ns;
	dst->heap_prefetched += src->heap_prefetched;
	dst->heap_reads += src->heap_reads;
	dst->la_samples += src->la_samples;
	dst->la_distance_sum += src->la_distance_sum;
	for (int b = 0; b < SHNSW_LA_HIST_BUCKETS; b++)
		dst->la_hist[b] += src->la_hist[b];
	for (int p = 0; p < SHNSW_NPHASES; p++)
	{
		dst->phase_serial[p] += src->phase_serial[p];
		dst->phase_reads[p] += src->phase_reads[p];
	}
	if (la != NULL)
	{
		dst->la_samples += la->samples;
		dst->la_distance_sum += la->distance_sum;
		for (int b = 0; b < SHNSW_LA_HIST_BUCKETS; b++)
			dst->la_hist[b] += la->hist[b];
	}
}
