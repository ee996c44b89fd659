/*-------------------------------------------------------------------------
 *
 * buildpar.c
 *	  Parallel CREATE INDEX: the leader and its workers link the nodes of one
 *	  in-memory graph kept in dynamic shared memory.
 *
 * The leader scans the heap alone, as a serial build does (build.c: the
 * rows, their SQ8 ranges, the temporary file of exact values, the decision
 * to build on floats or codes and where the in-memory part stops). Only
 * then does it enter parallel mode: it sizes one DSM chunk for exactly the
 * in-memory rows (their vectors, halves or codes, levels, layer-0 lists
 * with their distance caches, the upper-layer lists, a lock per node),
 * draws every node's level with the serial build's generator (so both
 * builds have the same levels), launches the workers, and fills the
 * vectors, halves or codes from the temporary file in node order while
 * the workers link the nodes
 * already filled (a worker whose node is not yet filled waits:
 * par_wait_ready). Each process attaches its own ShnswBuildGraph to
 * the shared arrays (buildgraph.c, shnsw_build_attach: the visit stamps and
 * search scratch are its own) and claims nodes in order from an atomic
 * counter, linking each with shnsw_build_link under the locking scheme of
 * ShnswBuildSync (buildgraph.h): one LWLock per node, held shared to copy a list
 * and exclusive to change one, never two at a time; and an entry lock. The
 * leader links nodes too and reports progress (nodes claimed). When no
 * node is left to link, every process links again the nodes that were
 * held up while they were linked (par_relink_loop); once every worker is
 * done the leader alone links again any marked too late for that, makes
 * every node reachable, lays the
 * graph out and writes it, reading it from the DSM chunk, then ends
 * parallel mode; rows that did not fit are inserted afterwards by the
 * leader and new workers (shnsw_parallel_insert, at the end of this file).
 *
 * Why the scan stays serial: it is a few percent of a build (the linking is
 * the rest), and one scan in heap order keeps the serial build's rules as
 * they are: the in-memory part is a prefix in heap order, one temporary
 * file holds every row, and the float/code/spill decisions are made at the
 * same rows.
 *
 * Memory: maintenance_work_mem is the total, as in a serial build. The scan
 * keeps no float vectors when a parallel build is planned (they are re-read
 * from the temporary file into shared memory, so they are never held
 * twice), the budget counts the lock each node has and the visit stamp and
 * upper-list pointer each worker keeps per node (shnsw_parallel_row_bytes),
 * and the DSM chunk holds exactly what the budget counted for the graph.
 *
 * Linking order differs from run to run (which process takes which node and
 * when), so a parallel build's graph is not bit-for-bit reproducible; its
 * recall is the serial build's within noise (test_parallel_build.py).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/parallel.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "commands/progress.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "portability/instr_time.h"
#include "port/atomics.h"
#include "storage/buffile.h"
#include "storage/condition_variable.h"
#include "storage/lwlock.h"
#include "storage/shm_toc.h"
#include "utils/backend_progress.h"
#include "utils/memutils.h"

#include "buildgraph.h"
#include "buildpar.h"
#include "format.h"
#include "insert.h"
#include "pagewrite.h"

#define SHNSW_PAR_KEY_SHARED	UINT64CONST(0xA000000000000001)
#define SHNSW_PAR_KEY_INSERT	UINT64CONST(0xA000000000000002)

/* The shared chunk: this header, then the arrays at the offsets it names. */
typedef struct ShnswParallelShared
{
	int			dims;
	int			m;
	int			efc;
	ShnswMetric metric;
	bool		use_codes;
	bool		use_halves;		/* the vectors are halves (buildgraph.c) */
	float		half_scale;
	uint32		n;
	int			tranche;
	int			nprocs;			/* leader and launched workers */
	pg_atomic_uint32 next;		/* next node to link */
	pg_atomic_uint32 ready;		/* nodes whose vectors or codes are in place */
	ConditionVariable ready_cv; /* broadcast when ready moves */
	pg_atomic_uint32 next_stale;	/* next node to check for linking again */
	pg_atomic_uint32 nrelinked; /* held-up nodes linked again */
	LWLock		entry_lock;
	uint32		entry;			/* under entry_lock */
	int32		max_level;
	Size		upper_words;
	Size		off_locks;
	Size		off_vecs;		/* floats or codes */
	Size		off_levels;
	Size		off_nbr0;
	Size		off_cnt0;
	Size		off_dist0;
	Size		off_pruned0;
	Size		off_upper;
	Size		off_lo;
	Size		off_scale;
	Size		off_stale;		/* one byte a node: link again (mark_stale) */
	Size		total;
} ShnswParallelShared;

struct ShnswParallelBuild
{
	ParallelContext *pcxt;
	ShnswParallelShared *shared;
	ShnswBuildSync sync;
	int			launched;
};

static int	shnsw_build_tranche = 0;

PGDLLEXPORT void shnsw_parallel_build_main(dsm_segment *seg, shm_toc *toc);
PGDLLEXPORT void shnsw_parallel_insert_main(dsm_segment *seg, shm_toc *toc);

/*
 * A node linked while more than this many nodes per process were claimed
 * is linked again (ShnswBuildSync): a process links about one node while
 * each other links one, so 8 per process means it was held up.
 */
#define SHNSW_PAR_STALE_PER_PROCESS 8

#define SHARED_AT(sh, off) ((char *) (sh) + (off))

/* Node i's lock; the locks follow the header. */
static inline LWLock *
par_node_lock(ShnswParallelShared *sh, uint32 i)
{
	return (LWLock *) SHARED_AT(sh, sh->off_locks) + i;
}

static void
par_lock_node(void *arg, uint32_t i, bool exclusive)
{
	LWLockAcquire(par_node_lock((ShnswParallelShared *) arg, i),
				  exclusive ? LW_EXCLUSIVE : LW_SHARED);
}

static void
par_unlock_node(void *arg, uint32_t i)
{
	LWLockRelease(par_node_lock((ShnswParallelShared *) arg, i));
}

static void
par_lock_entry(void *arg, bool exclusive)
{
	LWLockAcquire(&((ShnswParallelShared *) arg)->entry_lock,
				  exclusive ? LW_EXCLUSIVE : LW_SHARED);
}

static void
par_unlock_entry(void *arg)
{
	LWLockRelease(&((ShnswParallelShared *) arg)->entry_lock);
}

static uint32_t
par_progress(void *arg)
{
	return pg_atomic_read_u32(&((ShnswParallelShared *) arg)->next);
}

/*
 * A node's stale byte: linked once (0), held up while it was linked and to
 * be linked again (STALE_RELINK), claimed for that (STALE_CLAIMED). Its
 * linker writes STALE_RELINK, after linking it; the process that claims
 * the node's range of bytes writes STALE_CLAIMED (par_relink_loop).
 */
#define STALE_RELINK	1
#define STALE_CLAIMED	2

/* Nodes a process claims at a time when it looks for held-up ones. */
#define SHNSW_PAR_STALE_CHUNK 64

/* Node i is linked again when linking is over (par_relink_loop). */
static void
par_mark_stale(void *arg, uint32_t i)
{
	ShnswParallelShared *sh = (ShnswParallelShared *) arg;

	((volatile uint8 *) SHARED_AT(sh, sh->off_stale))[i] = STALE_RELINK;
}

/* Seconds from then to now. */
static double
shnsw_secs_since(instr_time then)
{
	instr_time	now;

	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, then);
	return INSTR_TIME_GET_DOUBLE(now);
}

/*
 * Memory a parallel build with nworkers workers needs per in-memory row
 * beyond a serial build's: the node's lock, and each worker's visit stamp,
 * visited distance and upper-list pointer for it.
 */
Size
shnsw_parallel_row_bytes(int nworkers)
{
	return sizeof(LWLock) + sizeof(uint8) +
		(Size) nworkers * (sizeof(uint32 *) + sizeof(uint32) + sizeof(float));
}

/* Lay the arrays out after the header; returns the chunk's size. */
static Size
par_layout(ShnswParallelShared *sh)
{
	Size		off = MAXALIGN(sizeof(ShnswParallelShared));
	Size		n = sh->n;
	Size		deg = (Size) 2 * sh->m;

#define PLACE(field, bytes) \
	do { sh->field = off; off = add_size(off, MAXALIGN(bytes)); } while (0)
	PLACE(off_locks, mul_size(n, sizeof(LWLock)));
	PLACE(off_vecs, mul_size(mul_size(n, sh->dims),
							 sh->use_codes ? 1 : sh->use_halves ? sizeof(uint16) : sizeof(float)));
	PLACE(off_levels, n);
	PLACE(off_nbr0, mul_size(mul_size(n, deg), sizeof(ShnswRef)));
	PLACE(off_cnt0, mul_size(n, sizeof(uint16)));
	PLACE(off_dist0, mul_size(mul_size(n, deg), sizeof(float)));
	PLACE(off_pruned0, mul_size(n, deg));
	PLACE(off_upper, mul_size(sh->upper_words, sizeof(uint32)));
	PLACE(off_lo, mul_size(sh->dims, sizeof(float)));
	PLACE(off_scale, mul_size(sh->dims, sizeof(float)));
	PLACE(off_stale, n);
#undef PLACE
	sh->total = off;
	return off;
}

/* Attach a process's graph to the shared arrays, with the shared locks. */
static void
par_attach(ShnswParallelShared *sh, ShnswBuildGraph *g, ShnswBuildSync *sync)
{
	shnsw_build_attach(g, sh->dims, sh->m, sh->efc, sh->metric, sh->n, sh->use_codes,
					   (const float *) SHARED_AT(sh, sh->off_lo),
					   (const float *) SHARED_AT(sh, sh->off_scale),
					   (float *) SHARED_AT(sh, sh->off_vecs),
					   (uint8 *) SHARED_AT(sh, sh->off_vecs),
					   (uint8 *) SHARED_AT(sh, sh->off_levels),
					   (ShnswRef *) SHARED_AT(sh, sh->off_nbr0),
					   (uint16 *) SHARED_AT(sh, sh->off_cnt0),
					   (float *) SHARED_AT(sh, sh->off_dist0),
					   (uint8 *) SHARED_AT(sh, sh->off_pruned0),
					   (uint32 *) SHARED_AT(sh, sh->off_upper));
	if (sh->use_halves)
		shnsw_build_attach_halves(g, (uint16 *) SHARED_AT(sh, sh->off_vecs), sh->half_scale);
	sync->arg = sh;
	sync->lock_node = par_lock_node;
	sync->unlock_node = par_unlock_node;
	sync->lock_entry = par_lock_entry;
	sync->unlock_entry = par_unlock_entry;
	sync->entry = &sh->entry;
	sync->max_level = &sh->max_level;
	sync->progress = par_progress;
	sync->mark_stale = par_mark_stale;
	sync->stale_after = (uint32) (SHNSW_PAR_STALE_PER_PROCESS * (sh->nprocs));
}

/*
 * Wait until node i's vector or code (and so every earlier node's) is in
 * place: the leader reads them back from its temporary file while the
 * workers link the first nodes (shnsw_parallel_ready). Only a worker can
 * wait here, and only for the first nodes of the build: reading a row back
 * costs far less than linking one.
 */
static void
par_wait_ready(ShnswParallelShared *sh, uint32 i)
{
	if (i < pg_atomic_read_membarrier_u32(&sh->ready))
		return;
	ConditionVariablePrepareToSleep(&sh->ready_cv);
	while (i >= pg_atomic_read_membarrier_u32(&sh->ready))
		ConditionVariableSleep(&sh->ready_cv, PG_WAIT_EXTENSION);
	ConditionVariableCancelSleep();
}

/*
 * Claim nodes and link them until none is left; the leader (progress true)
 * reports the nodes claimed so far every 256 of its own. Returns how many
 * this process linked.
 */
static uint32
par_link_loop(ShnswParallelShared *sh, ShnswBuildGraph *g, bool progress)
{
	uint32		mine = 0;

	for (;;)
	{
		uint32		i = pg_atomic_fetch_add_u32(&sh->next, 1);

		if (i >= sh->n)
			break;
		CHECK_FOR_INTERRUPTS();
		par_wait_ready(sh, i);
		shnsw_build_link(g, i);
		mine++;
		if (progress && (mine & 255) == 0)
			pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, Min(i, sh->n));
	}
	return mine;
}

/*
 * Once no node is left to link, link again the held-up nodes (marked
 * stale), claiming them SHNSW_PAR_STALE_CHUNK at a time, with the other
 * processes doing the same or still linking their last node (so each is
 * linked again beside at most nprocs - 1 others, not the many it missed).
 * A node marked after its range was claimed is left to the leader, which
 * links again whatever is still marked when every worker is done. Returns
 * how many this process linked again.
 */
static uint32
par_relink_loop(ShnswParallelShared *sh, ShnswBuildGraph *g)
{
	volatile uint8 *stale = (volatile uint8 *) SHARED_AT(sh, sh->off_stale);
	uint32		mine = 0;

	for (;;)
	{
		uint32		start = pg_atomic_fetch_add_u32(&sh->next_stale, SHNSW_PAR_STALE_CHUNK);

		if (start >= sh->n)
			break;
		for (uint32 i = start; i < Min(sh->n, start + SHNSW_PAR_STALE_CHUNK); i++)
		{
			if (stale[i] != STALE_RELINK)
				continue;
			CHECK_FOR_INTERRUPTS();
			stale[i] = STALE_CLAIMED;
			/* the entry point as it is now (others may still move it) */
			LWLockAcquire(&sh->entry_lock, LW_SHARED);
			g->entry = sh->entry;
			g->max_level = sh->max_level;
			LWLockRelease(&sh->entry_lock);
			shnsw_build_relink(g, i);
			mine++;
		}
	}
	pg_atomic_fetch_add_u32(&sh->nrelinked, mine);
	return mine;
}

/*
 * shnsw_parallel_begin enters parallel mode and sets up a parallel context
 * for up to nworkers workers whose DSM chunk holds the graph of n nodes
 * (n >= 2) on floats, halves (use_halves, scaled by half_scale) or codes;
 * draws the nodes' levels (the serial build's, from seed) and copies
 * lo/scale (for a graph on codes) into it, and attaches g (in the current
 * memory context) to it. The caller then launches the workers
 * (shnsw_parallel_launch), fills g->vecs, g->halves or g->codes in node
 * order, saying how far it got (shnsw_parallel_ready), and calls
 * shnsw_parallel_link once all n are in place. The chunk lives until shnsw_parallel_end (or the
 * transaction's abort).
 */
ShnswParallelBuild *
shnsw_parallel_begin(int nworkers, int dims, int m, int efc, ShnswMetric metric,
					 bool use_codes, bool use_halves, float half_scale, uint32 n,
					 const float *lo, const float *scale, uint64 seed, ShnswBuildGraph *g)
{
	ShnswParallelBuild *pb = palloc0(sizeof(ShnswParallelBuild));
	ShnswParallelShared hdr;
	ShnswParallelShared *sh;
	uint8	   *levels = palloc_extended(n, MCXT_ALLOC_HUGE);
	Size		total;

	Assert(n >= 2);
	if (shnsw_build_tranche == 0)
		shnsw_build_tranche = LWLockNewTrancheId();
	LWLockRegisterTranche(shnsw_build_tranche, "streamhnsw_build");

	/* the levels first: they size the upper lists */
	shnsw_build_draw_levels(levels, n, m, seed);
	MemSet(&hdr, 0, sizeof(hdr));
	hdr.dims = dims;
	hdr.m = m;
	hdr.efc = efc;
	hdr.metric = metric;
	hdr.use_codes = use_codes;
	hdr.use_halves = use_halves;
	hdr.half_scale = half_scale;
	hdr.n = n;
	hdr.tranche = shnsw_build_tranche;
	hdr.upper_words = shnsw_build_upper_words(levels, n, m);
	total = par_layout(&hdr);

	EnterParallelMode();
	pb->pcxt = CreateParallelContext("streamhnsw", "shnsw_parallel_build_main", nworkers);
	shm_toc_estimate_chunk(&pb->pcxt->estimator, total);
	shm_toc_estimate_keys(&pb->pcxt->estimator, 1);
	InitializeParallelDSM(pb->pcxt);

	sh = shm_toc_allocate(pb->pcxt->toc, total);
	memcpy(sh, &hdr, sizeof(hdr));
	pg_atomic_init_u32(&sh->next, 1);	/* node 0 is the first entry point */
	pg_atomic_init_u32(&sh->ready, 0);
	ConditionVariableInit(&sh->ready_cv);
	pg_atomic_init_u32(&sh->next_stale, 0);
	pg_atomic_init_u32(&sh->nrelinked, 0);
	LWLockInitialize(&sh->entry_lock, sh->tranche);
	for (uint32 i = 0; i < n; i++)
		LWLockInitialize(par_node_lock(sh, i), sh->tranche);
	memcpy(SHARED_AT(sh, sh->off_levels), levels, n);
	pfree(levels);
	MemSet(SHARED_AT(sh, sh->off_cnt0), 0, sizeof(uint16) * (Size) n);
	MemSet(SHARED_AT(sh, sh->off_upper), 0, sizeof(uint32) * sh->upper_words);
	MemSet(SHARED_AT(sh, sh->off_stale), 0, n);
	if (use_codes)
	{
		memcpy(SHARED_AT(sh, sh->off_lo), lo, sizeof(float) * dims);
		memcpy(SHARED_AT(sh, sh->off_scale), scale, sizeof(float) * dims);
	}
	sh->entry = 0;
	sh->max_level = ((uint8 *) SHARED_AT(sh, sh->off_levels))[0];
	shm_toc_insert(pb->pcxt->toc, SHNSW_PAR_KEY_SHARED, sh);
	pb->shared = sh;

	par_attach(sh, g, &pb->sync);
	return pb;
}

/*
 * shnsw_parallel_launch launches the workers, before the caller fills the
 * vectors or codes: they start linking the first nodes while the leader
 * reads the rest back (the leader alone read back 1 to 4 s of a 70 s
 * build of 100k x 768 before, with the workers not yet started). Returns
 * the number of workers launched.
 */
int
shnsw_parallel_launch(ShnswParallelBuild *pb)
{
	ShnswParallelShared *sh = pb->shared;

	/* workers read nprocs when they attach, after the launch */
	sh->nprocs = 1 + pb->pcxt->nworkers_to_launch;
	pb->sync.stale_after = (uint32) (SHNSW_PAR_STALE_PER_PROCESS * sh->nprocs);
	LaunchParallelWorkers(pb->pcxt);
	pb->launched = pb->pcxt->nworkers_launched;
	return pb->launched;
}

/*
 * shnsw_parallel_ready says that the first n nodes' vectors or codes are
 * in place (n never decreases): workers may link them now.
 */
void
shnsw_parallel_ready(ShnswParallelBuild *pb, uint32 n)
{
	Assert(n <= pb->shared->n);
	pg_atomic_write_membarrier_u32(&pb->shared->ready, n);
	ConditionVariableBroadcast(&pb->shared->ready_cv);
}

/*
 * shnsw_parallel_link links nodes in the leader too (every node must be
 * ready) and waits for the workers; g (the leader's, from
 * shnsw_parallel_begin) is then the whole graph, with its entry point, and
 * no longer synchronized. Returns the number of workers launched (0: the
 * leader linked every node).
 */
int
shnsw_parallel_link(ShnswParallelBuild *pb, ShnswBuildGraph *g)
{
	ShnswParallelShared *sh = pb->shared;
	uint32		mine;
	uint32		nstale = 0;
	uint8	   *stale;
	instr_time	start,
				linked;

	Assert(pg_atomic_read_u32(&sh->ready) == sh->n);
	INSTR_TIME_SET_CURRENT(start);
	g->sync = &pb->sync;
	mine = par_link_loop(sh, g, true);
	(void) par_relink_loop(sh, g);
	WaitForParallelWorkersToFinish(pb->pcxt);
	g->sync = NULL;
	g->entry = sh->entry;
	g->max_level = sh->max_level;
	INSTR_TIME_SET_CURRENT(linked);

	/* nodes marked held up after their range was claimed: again, alone */
	stale = (uint8 *) SHARED_AT(sh, sh->off_stale);
	for (uint32 i = 0; i < sh->n; i++)
	{
		if (stale[i] != STALE_RELINK)
			continue;
		CHECK_FOR_INTERRUPTS();
		shnsw_build_relink(g, i);
		nstale++;
	}
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, sh->n);
	elog(DEBUG1, "streamhnsw: %d parallel workers launched; the leader linked %u of %u nodes; %u held-up nodes linked again in parallel and %u alone (%.2f s linking, %.2f s alone)",
		 pb->launched, mine, sh->n, pg_atomic_read_u32(&sh->nrelinked), nstale,
		 INSTR_TIME_GET_DOUBLE(linked) - INSTR_TIME_GET_DOUBLE(start),
		 shnsw_secs_since(linked));
	return pb->launched;
}

/*
 * shnsw_parallel_end ends the parallel context (the graph's shared memory
 * goes with it) and parallel mode.
 */
void
shnsw_parallel_end(ShnswParallelBuild *pb)
{
	DestroyParallelContext(pb->pcxt);
	ExitParallelMode();
	pfree(pb);
}

/*
 * shnsw_parallel_build_main is a worker's entry point (by name, from the
 * library): attach to the leader's graph and link nodes until none is
 * left. Its memory is the worker's transaction's, freed when it exits.
 */
void
shnsw_parallel_build_main(dsm_segment *seg, shm_toc *toc)
{
	ShnswParallelShared *sh = shm_toc_lookup(toc, SHNSW_PAR_KEY_SHARED, false);
	ShnswBuildGraph g;
	ShnswBuildSync sync;

	LWLockRegisterTranche(sh->tranche, "streamhnsw_build");
	par_attach(sh, &g, &sync);
	g.sync = &sync;
	(void) par_link_loop(sh, &g, false);
	(void) par_relink_loop(sh, &g);
	shnsw_build_free(&g);
}


/*
 * Parallel insertion of the rows that did not fit.
 *
 * The graph of the in-memory rows is written (every page, through the bulk
 * writer, synced) and its shared chunk is gone before this starts: a second
 * parallel context, with a small chunk, is set up only then, so no worker
 * can see the index before the flush is complete; its workers read the
 * written pages through shared buffers like any backend. The rows wait in
 * the build's file of remaining rows (build.c), one fixed-size record each
 * (heap TID, exact image), in a file set the workers open read-only. Every
 * process claims rows one at a time from an atomic counter and inserts each
 * through aminsert (shnsw_insert), so they take exactly the locks of
 * concurrent INSERTs (src/README, Locking): the quantizer is trained on
 * every row and the index is not empty, so the insert lock is only ever
 * taken shared. An error in a worker reaches the leader at its next
 * CHECK_FOR_INTERRUPTS (or when it waits for the workers) and fails the
 * build; a cancel ends the leader's transaction, which terminates the
 * workers.
 */
typedef struct ShnswParInsertShared
{
	Oid			heaprelid;
	Oid			indexrelid;
	bool		concurrent;		/* CREATE INDEX CONCURRENTLY (heap lock mode) */
	uint32		nrows;
	int			vec_size;
	FileSet		fileset;		/* the leader's; the file is only read */
	pg_atomic_uint32 next;		/* next row to insert */
	pg_atomic_uint32 done;		/* rows inserted, by every process */
} ShnswParInsertShared;

#define SHNSW_REST_FILE "streamhnsw_rest"

/* The file set's name of the build's file of remaining rows. */
const char *
shnsw_rest_file_name(void)
{
	return SHNSW_REST_FILE;
}

/* Read record k (heap TID, then the exact image) of the file of remaining rows. */
static void
rest_read(BufFile *file, uint32 k, int vec_size, int64 *pos, ItemPointer tid, char *img)
{
	int64		want = (int64) k * (int64) (sizeof(ItemPointerData) + vec_size);

	if (want != *pos &&
		(BufFileSeekBlock(file, want / BLCKSZ) != 0 ||
		 BufFileSeek(file, 0, (off_t) (want % BLCKSZ), SEEK_CUR) != 0))
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("streamhnsw: could not seek in the build's temporary file")));
	BufFileReadExact(file, tid, sizeof(ItemPointerData));
	BufFileReadExact(file, img, vec_size);
	*pos = want + sizeof(ItemPointerData) + vec_size;
}

/*
 * Claim rows and insert them until none is left; the leader (progress true)
 * reports the rows every process has inserted. One memory context reset a
 * row. Returns how many this process inserted.
 */
static uint32
par_insert_loop(ShnswParInsertShared *sh, BufFile *file, Relation heap, Relation index,
				IndexInfo *indexInfo, bool progress)
{
	char	   *img = palloc(sh->vec_size);	/* aligned, unlike in the record */
	MemoryContext rowctx = AllocSetContextCreate(CurrentMemoryContext,
												 "streamhnsw build insert",
												 ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = CurrentMemoryContext;
	int64		pos = -1;
	uint32		mine = 0;

	/*
	 * The pages are changed in place, without WAL: the leader logs every
	 * page once when all rows are in (build.c, build_insert_rest).
	 */
	shnsw_write_direct(RelationGetRelid(index));
	PG_TRY();
	{
		for (;;)
		{
			uint32		k = pg_atomic_fetch_add_u32(&sh->next, 1);
			ItemPointerData tid;
			Datum		values[1];
			bool		isnull[1] = {false};
			uint32		done;

			if (k >= sh->nrows)
				break;
			CHECK_FOR_INTERRUPTS();
			rest_read(file, k, sh->vec_size, &pos, &tid, img);
			values[0] = PointerGetDatum(img);
			MemoryContextSwitchTo(rowctx);
			shnsw_insert(index, values, isnull, &tid, heap, UNIQUE_CHECK_NO, false, indexInfo);
			MemoryContextSwitchTo(old);
			MemoryContextReset(rowctx);
			mine++;
			done = pg_atomic_add_fetch_u32(&sh->done, 1);
			if (progress && (mine & 15) == 0)
				pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, done);
		}
	}
	PG_FINALLY();
	{
		shnsw_write_direct(InvalidOid);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(old);
	MemoryContextDelete(rowctx);
	pfree(img);
	return mine;
}

/*
 * shnsw_parallel_insert inserts the nrows records of file (the build's file
 * of remaining rows, named shnsw_rest_file_name() in fileset) into the
 * written index, in the leader and up to nworkers workers. With no file set
 * (a serial build: the file is the leader's own) or no worker requested,
 * the leader inserts them alone, in order. Returns the number of workers
 * launched; *leader_rows is how many rows the leader inserted.
 */
int
shnsw_parallel_insert(Relation heap, Relation index, IndexInfo *indexInfo, int nworkers,
					  BufFile *file, const FileSet *fileset, uint32 nrows, int vec_size,
					  uint32 *leader_rows)
{
	ParallelContext *pcxt = NULL;
	ShnswParInsertShared *sh;
	int			launched = 0;

	if (nworkers > 0 && fileset != NULL)
	{
		EnterParallelMode();
		pcxt = CreateParallelContext("streamhnsw", "shnsw_parallel_insert_main", nworkers);
		shm_toc_estimate_chunk(&pcxt->estimator, sizeof(ShnswParInsertShared));
		shm_toc_estimate_keys(&pcxt->estimator, 1);
		InitializeParallelDSM(pcxt);
		sh = shm_toc_allocate(pcxt->toc, sizeof(ShnswParInsertShared));
	}
	else
		sh = palloc0(sizeof(ShnswParInsertShared));
	sh->heaprelid = RelationGetRelid(heap);
	sh->indexrelid = RelationGetRelid(index);
	sh->concurrent = indexInfo->ii_Concurrent;
	sh->nrows = nrows;
	sh->vec_size = vec_size;
	if (fileset != NULL)
		sh->fileset = *fileset;
	pg_atomic_init_u32(&sh->next, 0);
	pg_atomic_init_u32(&sh->done, 0);

	if (pcxt != NULL)
	{
		shm_toc_insert(pcxt->toc, SHNSW_PAR_KEY_INSERT, sh);
		LaunchParallelWorkers(pcxt);
		launched = pcxt->nworkers_launched;
	}
	*leader_rows = par_insert_loop(sh, file, heap, index, indexInfo, true);
	if (pcxt != NULL)
	{
		/* each worker has at most the row it claimed last to finish */
		WaitForParallelWorkersToFinish(pcxt);
		DestroyParallelContext(pcxt);
		ExitParallelMode();
	}
	else
		pfree(sh);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, nrows);
	return launched;
}

/*
 * shnsw_parallel_insert_main is an insert worker's entry point: open the
 * relations (the leader holds their locks; group locking lets a worker take
 * the same ones) and the file of remaining rows, and insert rows until none
 * is left.
 */
void
shnsw_parallel_insert_main(dsm_segment *seg, shm_toc *toc)
{
	ShnswParInsertShared *sh = shm_toc_lookup(toc, SHNSW_PAR_KEY_INSERT, false);
	LOCKMODE	heap_mode = sh->concurrent ? ShareUpdateExclusiveLock : ShareLock;
	Relation	heap = table_open(sh->heaprelid, heap_mode);
	Relation	index = index_open(sh->indexrelid, RowExclusiveLock);
	IndexInfo  *indexInfo = BuildIndexInfo(index);
	BufFile    *file = BufFileOpenFileSet(&sh->fileset, SHNSW_REST_FILE, O_RDONLY, false);

	(void) par_insert_loop(sh, file, heap, index, indexInfo, false);
	BufFileClose(file);
	index_close(index, RowExclusiveLock);
	table_close(heap, heap_mode);
}
