/*-------------------------------------------------------------------------
 *
 * build.c
 *	  CREATE INDEX: collect the vectors, train SQ8, build the graph in
 *	  memory, then write every page in order through the bulk writer.
 *
 * One pass over the heap collects each indexable row's heap TID, its
 * navigation vector (float, normalized for cosine) and its exact value,
 * which goes to a temporary file. SQ8 is trained on the ranges of all rows.
 * The graph is then built in memory on the float vectors (from 64
 * dimensions up on half-precision copies of them, read back from the
 * temporary file: SHNSW_HALF_MIN_DIMS); if they would not fit in
 * maintenance_work_mem, on the SQ8 codes instead (4x smaller than floats;
 * codes are re-derived from the temporary file). If even that does not
 * fit, the graph is built on the rows that fit, written, and the remaining
 * rows are read back from a file of their own and inserted into the
 * written index through aminsert, by the leader and, in a parallel build,
 * its workers at once (slower, but the build always finishes).
 *
 * The temporary files hold one fixed-size record per row, its heap TID and
 * its exact image: one file for the rows of the in-memory part (which also
 * keep their TID, file position and node in memory), another for the rest
 * (build_rest_open), which keep nothing in memory.
 *
 * The pages are laid out in breadth-first order of layer 0 from the entry
 * point, so a node's neighbours tend to share its page:
 *
 *	 block 0				metapage
 *	 1 .. Q					SQ8 lo[] and scale[]
 *	 graph pages			fixed-size node records
 *	 vector pages			exact vectors, one byte stream (may span pages)
 *	 upper pages			upper-layer records
 *
 * The bulk writer WAL-logs every page (when the relation needs WAL) and
 * syncs the relation, so the index survives a crash and reaches replicas.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/tableam.h"
#include "access/xloginsert.h"
#include "commands/progress.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/buffile.h"
#include "storage/bulk_write.h"
#include "storage/dsm.h"
#include "storage/sharedfileset.h"
#include "utils/backend_progress.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "build.h"
#include "buildgraph.h"
#include "buildpar.h"
#include "codebound.h"
#include "format.h"
#include "kernels.h"
#include "layout.h"
#include "meta.h"
#include "options.h"
#include "pages.h"
#include "reachability.h"
#include "vector.h"

/* The graph's level generator's seed: builds are reproducible (serial ones). */
#define SHNSW_BUILD_SEED 0x5EED5EEDULL

/*
 * A graph on floats links on halves (kernels.h, buildgraph.c) from this many
 * dimensions up: half the memory traffic of floats in the build's
 * distances, memory bound once the vectors outgrow the caches (72.7 % of
 * a 768-d parallel build's samples were the float kernel), for the same
 * graph (src/README, Build). Below it a vector is a few cache lines either
 * way and widening the halves costs more than it saves (GloVe 400k x 50
 * linked in 77 s on halves against 45 s on floats, one process).
 */
#define SHNSW_HALF_MIN_DIMS 64

typedef struct ShnswBuildState
{
	Relation	index;
	int			dims;			/* navigation dimensions (shnsw_nav_dims) */
	int			coldims;		/* the column's (bits for bit) */
	int			m;
	int			efc;
	ShnswMetric metric;
	ShnswElemType elemtype;
	int			vec_size;

	/* collected rows */
	uint32		n;				/* rows collected, both parts */
	uint32		nmem;			/* rows of the in-memory graph (a prefix) */
	bool		spilled;		/* rows after nmem are inserted afterwards */
	uint32		cap;
	ItemPointerData *tids;		/* in-memory rows only */
	float	   *nav;			/* cap * dims, NULL once over budget */
	bool		use_codes;
	bool		plan_halves;	/* a graph on floats would link on halves */
	bool		use_halves;		/* it does (not on codes) */
	float		half_scale;		/* their power-of-two scale (kernels.h) */
	uint8	   *half_codes;		/* nmem * dims: the node records' SQ8 codes */
	float	   *mins;
	float	   *maxs;
	BufFile    *exact;			/* records: heap TID, then exact image */
	int		   *exact_file;		/* BufFileTell position of each record */
	off_t	   *exact_off;		/* (in-memory rows only) */
	uint16	   *vlen;			/* a sparsevec's stored size, 4-aligned
								 * (in-memory rows; NULL for other types) */
	BufFile    *rest;			/* the spilled rows' records, in heap order */
	dsm_segment *rest_seg;		/* holds rest_fs (parallel builds) */
	SharedFileSet *rest_fs;		/* rest's file set: workers read it */

	int			nworkers;		/* parallel workers planned (0: serial) */
	Size		budget;			/* maintenance_work_mem in bytes */
	double		reltuples;
	float	   *navbuf;
	MemoryContext tmpctx;
	double		max_residual;	/* of the in-memory rows' codes (metapage) */
	bool		have_residual;	/* max_residual covers every in-memory row */

	/* seconds per phase, said at DEBUG1 (the suite's build-parallel preset reads them) */
	instr_time	phase_start;
	double		secs_scan;
	double		secs_read;		/* in-memory rows read back from the file */
	double		secs_link;		/* linking, with a parallel build's relinking */
	double		secs_reach;
	double		secs_layout;
	double		secs_write;
} ShnswBuildState;

/* Seconds since the last call (or build_state_init); starts the next phase. */
static double
phase_secs(ShnswBuildState *bs)
{
	instr_time	now;

	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, bs->phase_start);
	INSTR_TIME_SET_CURRENT(bs->phase_start);
	return INSTR_TIME_GET_DOUBLE(now);
}

/* Seconds since then. */
static double
phase_secs_since(instr_time then)
{
	instr_time	now;

	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, then);
	return INSTR_TIME_GET_DOUBLE(now);
}

/*
 * Memory the collected state, the graph and the layout would need for n
 * in-memory rows: the node (buildgraph.c), its heap TID and file position, and
 * its layout entries (order, pos, upper location, and the page layout's
 * state byte; its candidate index uses pos before pos is filled; the
 * reachability pass's 10 bytes a node come and go before).
 */
static Size
build_memory(ShnswBuildState *bs, uint32 n, bool use_codes)
{
	bool		halves = !use_codes && bs->plan_halves;
	Size		per = shnsw_build_node_bytes(bs->dims, bs->m, use_codes, halves) +
		sizeof(ItemPointerData) + sizeof(int) + sizeof(off_t) +
		sizeof(uint32) * 2 + sizeof(ShnswUpperLoc) + sizeof(uint8);

	/* a graph on halves keeps the node records' codes beside (build_put_half) */
	if (halves)
		per += bs->dims;
	/* a sparsevec's stored size and its place in the vector stream */
	if (bs->elemtype == SHNSW_ELEM_SPARSE)
		per += sizeof(uint16) + sizeof(uint64);

	/* a parallel build's node locks and workers' per-node scratch */
	if (bs->nworkers > 0)
		per += shnsw_parallel_row_bytes(bs->nworkers);
	return (Size) n * per;
}

/* The most in-memory rows the budget allows (at least one). */
static uint32
build_max_rows(ShnswBuildState *bs, bool use_codes)
{
	Size		per = build_memory(bs, 1, use_codes);
	Size		rows = bs->budget / per;

	return (uint32) Max(Min(rows, (Size) PG_UINT32_MAX - 1), 1);
}

/*
 * Grow the per-row arrays, never beyond the rows the budget allows, so
 * that what is allocated (not just what is used) stays within it.
 */
static void
build_grow(ShnswBuildState *bs)
{
	uint32		limit = build_max_rows(bs, bs->use_codes);
	uint32		newcap = (uint32) Min((uint64) bs->cap * 2, (uint64) Max(limit, bs->n + 1));

	bs->tids = repalloc_huge(bs->tids, sizeof(ItemPointerData) * newcap);
	bs->exact_file = repalloc_huge(bs->exact_file, sizeof(int) * newcap);
	bs->exact_off = repalloc_huge(bs->exact_off, sizeof(off_t) * newcap);
	if (bs->vlen)
		bs->vlen = repalloc_huge(bs->vlen, sizeof(uint16) * newcap);
	if (bs->nav)
		bs->nav = repalloc_huge(bs->nav, sizeof(float) * (Size) newcap * bs->dims);
	bs->cap = newcap;
}

/*
 * build_rest_open creates the file of the rows that did not fit: one
 * record each (heap TID, exact image), read back by record number by
 * whichever process inserts the row. A build planned parallel puts it in a
 * file set its workers can open; the set lives in a DSM segment of its own
 * (its files go when the segment is detached, at the end of the build or
 * at its abort), created now because the workers' chunk is sized only
 * after the scan.
 */
static void
build_rest_open(ShnswBuildState *bs)
{
	if (bs->nworkers > 0)
	{
		bs->rest_seg = dsm_create(sizeof(SharedFileSet), 0);
		bs->rest_fs = (SharedFileSet *) dsm_segment_address(bs->rest_seg);
		SharedFileSetInit(bs->rest_fs, bs->rest_seg);
		bs->rest = BufFileCreateFileSet(&bs->rest_fs->fs, shnsw_rest_file_name());
	}
	else
		bs->rest = BufFileCreateTemp(false);
}

/*
 * build_callback receives each live heap tuple: validates the value, keeps
 * what the build needs, and updates the SQ8 ranges.
 */
static void
build_callback(Relation index, ItemPointer tid, Datum *values, bool *isnull,
			   bool tupleIsAlive, void *state)
{
	ShnswBuildState *bs = (ShnswBuildState *) state;
	MemoryContext old;
	struct varlena *v;

	if (isnull[0])
		return;

	old = MemoryContextSwitchTo(bs->tmpctx);
	v = shnsw_check_vector(values[0], bs->elemtype, bs->coldims);
	v = shnsw_stored_image(v, bs->elemtype, bs->vec_size);
	if (!shnsw_vector_to_nav(v, bs->elemtype, bs->metric, bs->dims, bs->navbuf))
	{
		/* a zero vector under cosine is not indexed */
		MemoryContextSwitchTo(old);
		MemoryContextReset(bs->tmpctx);
		return;
	}
	MemoryContextSwitchTo(old);

	if (bs->n == PG_UINT32_MAX - 1)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many rows for a streamhnsw index")));
	sq8_train_add(bs->mins, bs->maxs, bs->navbuf, bs->dims);

	if (bs->spilled)
	{
		/* past the in-memory part: only the file of remaining rows keeps it */
		BufFileWrite(bs->rest, tid, sizeof(ItemPointerData));
		BufFileWrite(bs->rest, v, bs->vec_size);
		bs->n++;
		MemoryContextReset(bs->tmpctx);
		if ((bs->n & 1023) == 0)
			pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, bs->n);
		return;
	}

	if (!bs->use_codes && bs->n > 0 && build_memory(bs, bs->n + 1, false) > bs->budget)
	{
		/* the float graph would not fit: switch to the low-memory path */
		bs->use_codes = true;
		if (bs->nav)
			pfree(bs->nav);
		bs->nav = NULL;
		ereport(NOTICE,
				(errmsg("streamhnsw graph on float vectors no longer fits into maintenance_work_mem after %u rows; building on SQ8 codes",
						bs->n),
				 errdetail("Building on codes uses less memory and gives a slightly less accurate graph; exact re-ranking keeps results exact."),
				 errhint("Increase maintenance_work_mem to build on float vectors.")));
	}
	if (bs->use_codes && bs->n > 0 && build_memory(bs, bs->n + 1, true) > bs->budget)
	{
		/*
		 * Even the codes would not fit: the graph is built on the rows so
		 * far; this row and the rest are inserted into the written index.
		 */
		bs->spilled = true;
		bs->nmem = bs->n;
		build_rest_open(bs);
		ereport(NOTICE,
				(errmsg("streamhnsw graph no longer fits into maintenance_work_mem after %u rows; inserting the remaining rows into the written index",
						bs->n),
				 errdetail("Building will take significantly more time."),
				 errhint("Increase maintenance_work_mem to at least %zu MB to build the whole graph in memory.",
						 build_memory(bs, (uint32) Max(bs->reltuples, bs->n + 1.0), true) / (1024 * 1024) + 1)));
		BufFileWrite(bs->rest, tid, sizeof(ItemPointerData));
		BufFileWrite(bs->rest, v, bs->vec_size);
		bs->n++;
		MemoryContextReset(bs->tmpctx);
		return;
	}

	if (bs->n == bs->cap)
		build_grow(bs);
	bs->tids[bs->n] = *tid;
	BufFileTell(bs->exact, &bs->exact_file[bs->n], &bs->exact_off[bs->n]);
	BufFileWrite(bs->exact, tid, sizeof(ItemPointerData));
	BufFileWrite(bs->exact, v, bs->vec_size);
	if (bs->vlen)
		bs->vlen[bs->n] = (uint16) TYPEALIGN(4, VARSIZE(v));
	if (bs->nav)
		memcpy(bs->nav + (Size) bs->n * bs->dims, bs->navbuf, sizeof(float) * bs->dims);
	bs->n++;
	bs->nmem = bs->n;
	MemoryContextReset(bs->tmpctx);

	if ((bs->n & 1023) == 0)
		pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, bs->n);
}

/* Read node i's exact image back from the temporary file. */
static void
build_read_exact(ShnswBuildState *bs, uint32 i, char *out)
{
	ItemPointerData tid;

	if (BufFileSeek(bs->exact, bs->exact_file[i], bs->exact_off[i], SEEK_SET) != 0)
		elog(ERROR, "streamhnsw: could not seek in temporary file");
	BufFileReadExact(bs->exact, &tid, sizeof(ItemPointerData));
	BufFileReadExact(bs->exact, out, bs->vec_size);
	Assert(ItemPointerEquals(&tid, &bs->tids[i]));
}

/*
 * build_put_half fills node i of a graph on halves from its navigation
 * vector nav: the SQ8 code its node record gets (from the floats, as a
 * float graph's is) and its residual (metapage), then its halves.
 */
static void
build_put_half(ShnswBuildState *bs, ShnswBuildGraph *g, uint32 i, const float *nav,
			   const float *lo, const float *scale)
{
	uint8	   *code = bs->half_codes + (Size) i * bs->dims;

	sq8_encode(lo, scale, nav, code, bs->dims);
	bs->max_residual = Max(bs->max_residual,
						   shnsw_code_residual(bs->metric, lo, scale, nav, code, bs->dims));
	shnsw_floats_to_halves(nav, bs->half_scale, g->halves + (Size) i * bs->dims, bs->dims);
}

/*
 * Placement of every node, computed before any page is written so that
 * node records can name their neighbours, vectors and upper records.
 */
typedef struct ShnswLayout
{
	int			per_page;
	int			slot_bits;
	int			node_size;
	int			vec_stride;		/* a vector's bytes, 4-aligned (not sparsevec) */
	uint64	   *vpos;			/* a sparsevec's place in the vector stream,
								 * by position; NULL for other types */
	BlockNumber graph_start;
	BlockNumber ngraph;
	BlockNumber vec_start;
	BlockNumber nvec;
	BlockNumber upper_start;
	BlockNumber nupper;
	uint32	   *order;			/* position -> node */
	uint32	   *pos;			/* node -> position */
	ShnswUpperLoc *upper;		/* by position */
} ShnswLayout;

static inline ShnswRef
layout_ref(const ShnswLayout *l, uint32 p)
{
	return shnsw_make_ref(l->graph_start + p / l->per_page, p % l->per_page, l->slot_bits);
}

static void
build_layout(ShnswBuildState *bs, ShnswBuildGraph *g, ShnswLayout *l)
{
	Size		free = 0;
	OffsetNumber off = 0;
	BlockNumber blk;
	uint64		vec_bytes;
	uint64		max_blocks;

	l->node_size = (int) shnsw_node_size(bs->m, bs->dims);
	l->per_page = shnsw_nodes_per_page(l->node_size);
	l->slot_bits = shnsw_slot_bits(l->per_page);
	l->vec_stride = TYPEALIGN(4, bs->vec_size);
	l->graph_start = SHNSW_METAPAGE_BLKNO + 1 + shnsw_quant_nblocks(bs->dims);
	l->ngraph = (bs->nmem + l->per_page - 1) / l->per_page;
	l->vec_start = l->graph_start + l->ngraph;
	vec_bytes = (uint64) bs->nmem * l->vec_stride;
	l->vpos = NULL;
	l->nvec = (BlockNumber) ((vec_bytes + SHNSW_PAGE_CAPACITY - 1) / SHNSW_PAGE_CAPACITY);
	l->upper_start = l->vec_start + l->nvec;

	l->order = palloc_extended(sizeof(uint32) * Max(bs->nmem, 1), MCXT_ALLOC_HUGE);
	l->pos = palloc_extended(sizeof(uint32) * Max(bs->nmem, 1), MCXT_ALLOC_HUGE);
	l->upper = palloc_extended(sizeof(ShnswUpperLoc) * Max(bs->nmem, 1), MCXT_ALLOC_HUGE);
	/* l->pos is the layout's scratch until it is filled below */
	shnsw_build_layout_pages(g, l->per_page, l->order, l->pos);
	for (uint32 p = 0; p < bs->nmem; p++)
		l->pos[l->order[p]] = p;
	if (bs->vlen != NULL)
	{
		/* sparsevec values at their own size, none across a page's end */
		l->vpos = palloc_extended(sizeof(uint64) * Max(bs->nmem, 1), MCXT_ALLOC_HUGE);
		vec_bytes = 0;
		for (uint32 p = 0; p < bs->nmem; p++)
		{
			int			len = bs->vlen[l->order[p]];

			if (vec_bytes % SHNSW_PAGE_CAPACITY + len > SHNSW_PAGE_CAPACITY)
				vec_bytes += SHNSW_PAGE_CAPACITY - vec_bytes % SHNSW_PAGE_CAPACITY;
			l->vpos[p] = vec_bytes;
			vec_bytes += len;
		}
		l->nvec = (BlockNumber) ((vec_bytes + SHNSW_PAGE_CAPACITY - 1) / SHNSW_PAGE_CAPACITY);
		l->upper_start = l->vec_start + l->nvec;
	}

	/* upper records: pack them in position order, as PageAddItem would */
	blk = l->upper_start - 1;
	for (uint32 p = 0; p < bs->nmem; p++)
	{
		int			level = g->levels[l->order[p]];
		Size		need;

		l->upper[p].block = InvalidBlockNumber;
		l->upper[p].offset = 0;
		if (level == 0)
			continue;
		need = MAXALIGN(shnsw_upper_size(level, bs->m)) + sizeof(ItemIdData);
		if (off == 0 || need > free || off >= MaxOffsetNumber)
		{
			blk++;
			free = SHNSW_PAGE_CAPACITY;
			off = 0;
		}
		free -= need;
		off++;
		l->upper[p].block = blk;
		l->upper[p].offset = off;
	}
	l->nupper = blk + 1 - l->upper_start;

	max_blocks = (uint64) 1 << (32 - l->slot_bits);
	if ((uint64) l->upper_start + l->nupper > max_blocks)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("streamhnsw index would need %u blocks, more than the %llu its node references can address",
						l->upper_start + l->nupper, (unsigned long long) max_blocks)));
}

/* Write one node record for the node at position p. */
static void
build_fill_node(ShnswBuildState *bs, ShnswBuildGraph *g, ShnswLayout *l, uint32 p,
				ShnswNodeHeader *h, const float *lo, const float *scale)
{
	uint32		node = l->order[p];
	ItemPointer tid = &bs->tids[node];
	int			cnt;
	ShnswRef   *nb = shnsw_build_neighbors(g, node, 0, &cnt);
	ShnswRef   *out = shnsw_node_neighbors(h);
	uint64		vo = l->vpos ? l->vpos[p] : (uint64) p * l->vec_stride;

	MemSet(h, 0, l->node_size);
	h->tid_blk_hi = tid->ip_blkid.bi_hi;
	h->tid_blk_lo = tid->ip_blkid.bi_lo;
	h->tid_off = tid->ip_posid;
	h->level = g->levels[node];
	h->flags = 0;
	h->upper_blk_hi = (uint16) (l->upper[p].block >> 16);
	h->upper_blk_lo = (uint16) (l->upper[p].block & 0xFFFF);
	h->upper_off = l->upper[p].offset;
	h->nneighbors = cnt;
	h->vec_block = l->vec_start + (BlockNumber) (vo / SHNSW_PAGE_CAPACITY);
	h->vec_offset = (uint16) (vo % SHNSW_PAGE_CAPACITY);
	for (int k = 0; k < cnt; k++)
		out[k] = layout_ref(l, l->pos[nb[k]]);
	if (g->use_codes)
		memcpy(shnsw_node_code(h, bs->m), g->codes + (Size) node * bs->dims, bs->dims);
	else if (g->use_halves)
		memcpy(shnsw_node_code(h, bs->m), bs->half_codes + (Size) node * bs->dims, bs->dims);
	else
		sq8_encode(lo, scale, g->vecs + (Size) node * bs->dims, shnsw_node_code(h, bs->m), bs->dims);
}

/*
 * write_meta_pages writes the metapage and the quantizer pages (lo[] then
 * scale[] as one float stream; zeros when lo is NULL).
 */
static void
write_meta_pages(ShnswBuildState *bs, ShnswBuildGraph *g, ShnswLayout *l, const float *lo,
				 const float *scale, BulkWriteState *bulk, BlockNumber *blk)
{
	BulkWriteBuffer buf;
	Page		page;
	ShnswMetaPage meta;
	int			nquant = shnsw_quant_nblocks(bs->dims);

	/* metapage */
	buf = smgr_bulk_get_buf(bulk);
	page = (Page) buf;
	shnsw_init_page(page, SHNSW_PAGE_META);
	meta = ShnswPageGetMeta(page);
	shnsw_fill_meta(meta, bs->coldims, bs->m, bs->efc, bs->metric, bs->elemtype);
	meta->cache_generation = 1;
	if (bs->nmem > 0)
	{
		meta->quant_trained = true;
		meta->quant_rows = bs->n;	/* trained on every row */
		meta->max_residual = bs->max_residual;	/* rows inserted later raise it */
		meta->entry = layout_ref(l, l->pos[g->entry]);
		meta->entry_level = g->max_level;
		meta->node_count = bs->nmem;
		meta->insert_graph_blk = l->graph_start + l->ngraph - 1;
		meta->insert_vec_blk = l->vec_start + l->nvec - 1;
		meta->insert_upper_blk = l->nupper > 0 ? l->upper_start + l->nupper - 1 : InvalidBlockNumber;
	}
	((PageHeader) page)->pd_lower = (char *) meta + sizeof(ShnswMetaPageData) - (char *) page;
	smgr_bulk_write(bulk, (*blk)++, buf, true);

	/* quantizer pages: lo[] then scale[] as one float stream */
	{
		Size		total = 2 * sizeof(float) * bs->dims;
		char	   *stream = palloc0(total);
		Size		done = 0;

		if (lo != NULL)
		{
			memcpy(stream, lo, sizeof(float) * bs->dims);
			memcpy(stream + sizeof(float) * bs->dims, scale, sizeof(float) * bs->dims);
		}
		for (int q = 0; q < nquant; q++)
		{
			Size		chunk = Min(total - done, SHNSW_PAGE_CAPACITY);

			buf = smgr_bulk_get_buf(bulk);
			page = (Page) buf;
			shnsw_init_page(page, SHNSW_PAGE_QUANT);
			memcpy(PageGetContents(page), stream + done, chunk);
			((PageHeader) page)->pd_lower = MAXALIGN(SizeOfPageHeaderData) + chunk;
			smgr_bulk_write(bulk, (*blk)++, buf, true);
			done += chunk;
		}
		pfree(stream);
	}
}

/* write_graph_pages writes the node records in layout order. */
static void
write_graph_pages(ShnswBuildState *bs, ShnswBuildGraph *g, ShnswLayout *l, const float *lo,
				  const float *scale, BulkWriteState *bulk, BlockNumber *blk)
{
	BulkWriteBuffer buf;
	Page		page;

	/* graph pages */
	Assert(*blk == l->graph_start);
	for (BlockNumber gp = 0; gp < l->ngraph; gp++)
	{
		uint32		first = gp * l->per_page;
		uint32		count = Min((uint32) l->per_page, bs->nmem - first);

		buf = smgr_bulk_get_buf(bulk);
		page = (Page) buf;
		shnsw_init_page(page, SHNSW_PAGE_GRAPH);
		for (uint32 s = 0; s < count; s++)
			build_fill_node(bs, g, l, first + s,
							shnsw_page_node(page, s, l->node_size),
							lo, scale);
		ShnswPageGetOpaque(page)->nslots = count;
		((PageHeader) page)->pd_lower = MAXALIGN(SizeOfPageHeaderData) + count * l->node_size;
		smgr_bulk_write(bulk, (*blk)++, buf, true);
		if ((gp & 63) == 0)
			CHECK_FOR_INTERRUPTS();
	}
}

/* Write out the vector page and start the next one. */
static Page
vector_page_next(BulkWriteState *bulk, BulkWriteBuffer *buf, Page page, Size used,
				 BlockNumber *blk)
{
	((PageHeader) page)->pd_lower = MAXALIGN(SizeOfPageHeaderData) + used;
	smgr_bulk_write(bulk, (*blk)++, *buf, true);
	*buf = smgr_bulk_get_buf(bulk);
	page = (Page) *buf;
	shnsw_init_page(page, SHNSW_PAGE_VECTOR);
	return page;
}

/*
 * write_vector_pages writes the exact images in position order, one byte
 * stream: each vec_stride bytes, or a sparsevec's own size at the place the
 * layout gave it (l->vpos: a value that would cross a page's end starts the
 * next page).
 */
static void
write_vector_pages(ShnswBuildState *bs, ShnswLayout *l, BulkWriteState *bulk, BlockNumber *blk)
{
	BulkWriteBuffer buf;
	Page		page;
	char	   *img = palloc0(Max(l->vec_stride, bs->vec_size));
	Size		used = 0;

	buf = smgr_bulk_get_buf(bulk);
	page = (Page) buf;
	shnsw_init_page(page, SHNSW_PAGE_VECTOR);
	for (uint32 p = 0; p < bs->nmem; p++)
	{
		Size		done = 0;
		Size		len = l->vec_stride;

		build_read_exact(bs, l->order[p], img);
		if (l->vpos != NULL)
		{
			len = bs->vlen[l->order[p]];
			if (l->vpos[p] % SHNSW_PAGE_CAPACITY != used)
			{
				Assert(l->vpos[p] % SHNSW_PAGE_CAPACITY == 0);
				page = vector_page_next(bulk, &buf, page, used, blk);
				used = 0;
			}
		}
		while (done < len)
		{
			Size		chunk = Min(len - done, SHNSW_PAGE_CAPACITY - used);

			memcpy(PageGetContents(page) + used, img + done, chunk);
			used += chunk;
			done += chunk;
			if (used == SHNSW_PAGE_CAPACITY)
			{
				page = vector_page_next(bulk, &buf, page, used, blk);
				used = 0;
			}
		}
		if ((p & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
	}
	if (used > 0)
	{
		((PageHeader) page)->pd_lower = MAXALIGN(SizeOfPageHeaderData) + used;
		smgr_bulk_write(bulk, (*blk)++, buf, true);
	}
	else
		pfree(buf);
	pfree(img);
}

/* write_upper_pages writes the upper-layer records where the layout put them. */
static void
write_upper_pages(ShnswBuildState *bs, ShnswBuildGraph *g, ShnswLayout *l,
				  BulkWriteState *bulk, BlockNumber *blk)
{
	BulkWriteBuffer buf;
	Page		page;

	/* upper pages */
	Assert(*blk == l->upper_start);
	{
		Size		maxsize = shnsw_upper_size(SHNSW_MAX_LEVEL, bs->m);
		char	   *rec = palloc0(maxsize);
		BlockNumber cur = InvalidBlockNumber;

		page = NULL;
		buf = NULL;
		for (uint32 p = 0; p < bs->nmem; p++)
		{
			uint32		node = l->order[p];
			int			level = g->levels[node];
			ShnswUpperHeader *u = (ShnswUpperHeader *) rec;
			Size		size;

			if (level == 0)
				continue;
			if (l->upper[p].block != cur)
			{
				if (buf != NULL)
					smgr_bulk_write(bulk, (*blk)++, buf, true);
				buf = smgr_bulk_get_buf(bulk);
				page = (Page) buf;
				shnsw_init_page(page, SHNSW_PAGE_UPPER);
				cur = l->upper[p].block;
				Assert(cur == *blk);
			}
			size = shnsw_upper_size(level, bs->m);
			MemSet(rec, 0, size);
			u->node = layout_ref(l, p);
			u->level = level;
			for (int layer = 1; layer <= level; layer++)
			{
				int			cnt;
				ShnswRef   *nb = shnsw_build_neighbors(g, node, layer, &cnt);
				ShnswRef   *out = shnsw_upper_neighbors(u, layer, bs->m);

				shnsw_upper_counts(u)[layer - 1] = cnt;
				for (int k = 0; k < cnt; k++)
					out[k] = layout_ref(l, l->pos[nb[k]]);
			}
			if (PageAddItem(page, (Item) rec, size, InvalidOffsetNumber, false, false) != l->upper[p].offset)
				elog(ERROR, "streamhnsw: failed to place upper record of node %u", node);
		}
		if (buf != NULL)
			smgr_bulk_write(bulk, (*blk)++, buf, true);
		pfree(rec);
	}
}

/*
 * build_write_pages writes the whole index in block order through the bulk
 * writer (WAL-logged when the relation needs it). lo/scale are NULL for an
 * empty index (the quantizer is trained by the first insert).
 */
static void
build_write_pages(ShnswBuildState *bs, ShnswBuildGraph *g, ShnswLayout *l,
				  const float *lo, const float *scale, ForkNumber fork)
{
	/*
	 * A build that inserts rows afterwards logs every page once at its end
	 * (build_insert_rest), these included: not twice.
	 */
	BulkWriteState *bulk = fork == MAIN_FORKNUM && bs->spilled ?
		smgr_bulk_start_smgr(RelationGetSmgr(bs->index), fork, false) :
		smgr_bulk_start_rel(bs->index, fork);
	BlockNumber blk = SHNSW_METAPAGE_BLKNO;

	if (bs->nmem > 0 && !g->use_codes && !bs->have_residual)
	{
		/*
		 * the codes write_node will write, for their largest residual (code
		 * builds, and parallel builds as they read rows back, took it then)
		 */
		uint8	   *code = palloc(bs->dims);

		for (uint32 i = 0; i < bs->nmem; i++)
		{
			const float *v = g->vecs + (Size) i * bs->dims;

			sq8_encode(lo, scale, v, code, bs->dims);
			bs->max_residual = Max(bs->max_residual,
								   shnsw_code_residual(bs->metric, lo, scale, v, code, bs->dims));
		}
		pfree(code);
	}
	write_meta_pages(bs, g, l, lo, scale, bulk, &blk);
	if (bs->nmem > 0)
	{
		write_graph_pages(bs, g, l, lo, scale, bulk, &blk);
		write_vector_pages(bs, l, bulk, &blk);
		write_upper_pages(bs, g, l, bulk, &blk);
		Assert(blk == l->upper_start + l->nupper);
	}
	smgr_bulk_finish(bulk);
}

/*
 * build_type_init sets the index's type, metric, dimensions and m; raises
 * an error if a node record of them would not fit on a page (only a wide
 * bit(n) with a large m: bit(64000) takes m up to 16).
 */
static void
build_type_init(ShnswBuildState *bs, Relation index)
{
	bs->elemtype = shnsw_index_elemtype(index);
	bs->metric = shnsw_index_metric(index);
	bs->coldims = shnsw_index_dims(index, bs->elemtype);
	bs->dims = shnsw_nav_dims(bs->elemtype, bs->coldims);
	bs->m = shnsw_get_m(index);
	if (shnsw_node_size(bs->m, bs->dims) > SHNSW_PAGE_CAPACITY)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a streamhnsw node of a %s(%d) value with m = %d does not fit on a page",
						shnsw_elemtype_name(bs->elemtype), bs->coldims, bs->m),
				 errhint("Use m = %d or less.",
						 (int) ((SHNSW_PAGE_CAPACITY - shnsw_node_size(0, bs->dims)) /
								(2 * sizeof(ShnswRef))))));
}

/*
 * build_state_init fills the build state for index from its options and
 * type; allocates in the current (build) memory context.
 */
static void
build_state_init(ShnswBuildState *bs, Relation heap, Relation index, int nworkers)
{
	MemSet(bs, 0, sizeof(*bs));
	INSTR_TIME_SET_CURRENT(bs->phase_start);
	bs->index = index;
	build_type_init(bs, index);
	bs->efc = shnsw_get_ef_construction(index);
	if (bs->efc < 2 * bs->m)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ef_construction must be greater than or equal to 2 * m")));
	bs->vec_size = shnsw_vec_size(bs->elemtype, bs->coldims);
	bs->nworkers = Max(nworkers, 0);
	bs->budget = (Size) maintenance_work_mem * 1024;
	bs->reltuples = heap->rd_rel->reltuples;
	bs->plan_halves = bs->dims >= SHNSW_HALF_MIN_DIMS && !shnsw_debug_build_floats;

	/*
	 * A bit vector's code is the vector itself, 32 times smaller than its
	 * navigation floats: its graph is built on codes from the start.
	 */
	if (bs->elemtype == SHNSW_ELEM_BIT)
	{
		bs->use_codes = true;
		bs->plan_halves = false;
	}
	bs->cap = Min(1024, build_max_rows(bs, false));
	bs->tids = palloc_extended(sizeof(ItemPointerData) * bs->cap, MCXT_ALLOC_HUGE);
	bs->exact_file = palloc_extended(sizeof(int) * bs->cap, MCXT_ALLOC_HUGE);
	bs->exact_off = palloc_extended(sizeof(off_t) * bs->cap, MCXT_ALLOC_HUGE);
	if (bs->elemtype == SHNSW_ELEM_SPARSE)
		bs->vlen = palloc_extended(sizeof(uint16) * bs->cap, MCXT_ALLOC_HUGE);

	/*
	 * A parallel build keeps no float vectors while it scans: it reads them
	 * back from the temporary file into shared memory (buildpar.c), so they
	 * are never held twice. The budget counts them all the same. Nor does a
	 * build whose graph will link on halves: it reads them back as halves,
	 * and the budget counts halves and codes.
	 */
	if (bs->nworkers == 0 && !bs->plan_halves && !bs->use_codes)
		bs->nav = palloc_extended(sizeof(float) * bs->cap * bs->dims, MCXT_ALLOC_HUGE);
	bs->mins = palloc(sizeof(float) * bs->dims);
	bs->maxs = palloc(sizeof(float) * bs->dims);
	bs->navbuf = palloc(sizeof(float) * bs->dims);
	sq8_train_init(bs->mins, bs->maxs, bs->dims);
	bs->exact = BufFileCreateTemp(false);
	bs->tmpctx = AllocSetContextCreate(CurrentMemoryContext, "streamhnsw build tuple",
									  ALLOCSET_DEFAULT_SIZES);
}

/*
 * build_reread_nav reads row i's exact vector back from the temporary file
 * into img (vec_size bytes) and its navigation form into bs->navbuf.
 */
static void
build_reread_nav(ShnswBuildState *bs, uint32 i, char *img)
{
	if ((i & 255) == 0)
		CHECK_FOR_INTERRUPTS();
	build_read_exact(bs, i, img);
	shnsw_vector_to_nav((struct varlena *) img, bs->elemtype, bs->metric, bs->dims, bs->navbuf);
}

/*
 * build_graph adds the in-memory rows to g (their float vectors, already
 * the graph's, or codes re-derived from the temporary file), links them and
 * makes every node reachable.
 */
static void
build_graph(ShnswBuildState *bs, ShnswBuildGraph *g, const float *lo, const float *scale,
			bool have_nav)
{
	uint32		nrepaired;

	if (!bs->use_codes && !have_nav)
	{
		/*
		 * a graph on halves (whose scan kept no floats), or a parallel build
		 * planned with too few rows: read them back
		 */
		char	   *img = palloc(bs->vec_size);

		for (uint32 i = 0; i < bs->nmem; i++)
		{
			build_reread_nav(bs, i, img);
			if (bs->use_halves)
			{
				(void) shnsw_build_add_in_place(g);
				build_put_half(bs, g, i, bs->navbuf, lo, scale);
			}
			else
				shnsw_build_add_vector(g, bs->navbuf);
		}
		bs->have_residual = bs->use_halves;
		pfree(img);
	}
	else if (bs->use_codes)
	{
		char	   *img = palloc(bs->vec_size);
		uint8	   *code = palloc(bs->dims);

		for (uint32 i = 0; i < bs->nmem; i++)
		{
			build_reread_nav(bs, i, img);
			sq8_encode(lo, scale, bs->navbuf, code, bs->dims);
			bs->max_residual = Max(bs->max_residual,
								   shnsw_code_residual(bs->metric, lo, scale, bs->navbuf, code,
													   bs->dims));
			shnsw_build_add_code(g, code);
		}
		pfree(img);
		pfree(code);
	}
	else
	{
		for (uint32 i = 0; i < bs->nmem; i++)
			shnsw_build_add_in_place(g);
	}
	bs->secs_read = phase_secs(bs);
	for (uint32 i = 0; i < bs->nmem; i++)
	{
		shnsw_build_link(g, i);
		if ((i & 255) == 0)
		{
			CHECK_FOR_INTERRUPTS();
			pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, i);
		}
	}
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, bs->nmem);
	bs->secs_link = phase_secs(bs);
	nrepaired = shnsw_build_ensure_reachable(g);
	bs->secs_reach = phase_secs(bs);
	elog(DEBUG1, "streamhnsw: build added %u links to make every node reachable", nrepaired);
}

/*
 * Nodes the leader reads back between two shnsw_parallel_ready calls: the
 * workers' first nodes wait for at most this many rows.
 */
#define SHNSW_READY_EVERY 256

/*
 * build_graph_parallel launches the workers of the parallel build whose
 * shared graph g is (shnsw_parallel_begin), fills it with the in-memory
 * rows' float vectors or codes, read back from the temporary file in node
 * order while the workers link the nodes already read, links the rest in
 * the leader and the workers (buildpar.c), and makes every node reachable
 * (the leader alone). The codes' largest residual (metapage) is taken here
 * for float graphs too, while the workers link, instead of in a pass of its
 * own before the pages are written (build_write_pages), when the leader
 * works alone.
 */
static void
build_graph_parallel(ShnswBuildState *bs, ShnswBuildGraph *g, ShnswParallelBuild *pb,
					 const float *lo, const float *scale)
{
	char	   *img = palloc(bs->vec_size);
	uint8	   *codebuf = palloc(bs->dims);
	uint32		nrepaired;
	int			launched;

	(void) shnsw_parallel_launch(pb);
	for (uint32 i = 0; i < bs->nmem; i++)
	{
		float	   *nav = bs->use_codes || bs->use_halves ? bs->navbuf : g->vecs + (Size) i * bs->dims;
		uint8	   *code = bs->use_codes ? g->codes + (Size) i * bs->dims : codebuf;

		if ((i & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
		if (i % SHNSW_READY_EVERY == 0 && i > 0)
			shnsw_parallel_ready(pb, i);
		build_read_exact(bs, i, img);
		shnsw_vector_to_nav((struct varlena *) img, bs->elemtype, bs->metric, bs->dims, nav);
		if (bs->use_halves)
		{
			build_put_half(bs, g, i, nav, lo, scale);
			continue;
		}
		sq8_encode(lo, scale, nav, code, bs->dims);
		bs->max_residual = Max(bs->max_residual,
							   shnsw_code_residual(bs->metric, lo, scale, nav, code, bs->dims));
	}
	shnsw_parallel_ready(pb, bs->nmem);
	bs->have_residual = true;
	pfree(img);
	pfree(codebuf);
	bs->secs_read = phase_secs(bs);
	launched = shnsw_parallel_link(pb, g);
	bs->secs_link = phase_secs(bs);
	nrepaired = shnsw_build_ensure_reachable(g);
	bs->secs_reach = phase_secs(bs);
	elog(DEBUG1, "streamhnsw: parallel build (%d workers launched) added %u links to make every node reachable",
		 launched, nrepaired);
}

/*
 * build_insert_rest inserts the rows that did not fit through aminsert,
 * in the leader and (a parallel build) its workers (buildpar.c,
 * shnsw_parallel_insert): the written index is a complete index of the
 * in-memory part, with the quantizer trained on every row (quant_rows
 * covers them all, so these inserts never retrain it).
 */
static void
build_insert_rest(ShnswBuildState *bs, Relation heap, Relation index, IndexInfo *indexInfo)
{
	uint32		nrest = bs->n - bs->nmem;
	uint32		leader_rows;
	int			launched;
	instr_time	start;

	INSTR_TIME_SET_CURRENT(start);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, SHNSW_PHASE_INSERT);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_TOTAL, nrest);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, 0);
	/* written out and read-only from here: the workers open it */
	if (bs->rest_fs != NULL)
		BufFileExportFileSet(bs->rest);
	launched = shnsw_parallel_insert(heap, index, indexInfo, bs->nworkers, bs->rest,
									 bs->rest_fs != NULL ? &bs->rest_fs->fs : NULL,
									 nrest, bs->vec_size, &leader_rows);
	/* forget the index info the inserts cached */
	shnsw_forget_index_info(index);

	/*
	 * The inserts changed pages in place without WAL (shnsw_write_direct),
	 * and the graph's pages were written without it: log every page once,
	 * now that nothing else changes them (as pgvector does).
	 */
	if (RelationNeedsWAL(index))
		log_newpage_range(index, MAIN_FORKNUM, 0, RelationGetNumberOfBlocks(index), true);
	ereport(NOTICE,
			(errmsg_plural("streamhnsw build placed %u rows in memory and inserted %u rows into the written index after them, in %d process",
						   "streamhnsw build placed %u rows in memory and inserted %u rows into the written index after them, in %d processes",
						   1 + launched, bs->nmem, nrest, 1 + launched)));
	elog(DEBUG1, "streamhnsw: %d insert workers launched; the leader inserted %u of %u rows (%.2f s)",
		 launched, leader_rows, nrest, phase_secs_since(start));
}

/*
 * shnsw_build is ambuild: collect the rows, train SQ8, build the graph in
 * memory, write it, then insert what did not fit (src/README, Build).
 */
IndexBuildResult *
shnsw_build(Relation heap, Relation index, IndexInfo *indexInfo)
{
	IndexBuildResult *result = palloc0(sizeof(IndexBuildResult));
	ShnswBuildState bs;
	ShnswBuildGraph g;
	ShnswLayout layout;
	ShnswParallelBuild *pb = NULL;
	float	   *lo,
			   *scale;
	double		reltuples;
	MemoryContext buildctx,
				graphctx,
				old;

	if (RelationGetNumberOfBlocks(index) != 0)
		elog(ERROR, "index \"%s\" already contains data", RelationGetRelationName(index));

	buildctx = AllocSetContextCreate(CurrentMemoryContext, "streamhnsw build",
									 ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(buildctx);
	build_state_init(&bs, heap, index, indexInfo->ii_ParallelWorkers);

	/* pass 1: collect */
	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, SHNSW_PHASE_LOAD);
	reltuples = table_index_build_scan(heap, index, indexInfo, true, true,
									   build_callback, &bs, NULL);

	bs.secs_scan = phase_secs(&bs);

	/* train SQ8 on every collected row */
	lo = palloc(sizeof(float) * bs.dims);
	scale = palloc(sizeof(float) * bs.dims);
	if (bs.elemtype == SHNSW_ELEM_BIT)
		sq8_train_identity(lo, scale, bs.dims);
	else
		sq8_train_finish(bs.mins, bs.maxs, lo, scale, bs.dims);

	/* build the graph in memory, on the in-memory part */
	graphctx = AllocSetContextCreate(buildctx, "streamhnsw build graph",
									 ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(graphctx);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, SHNSW_PHASE_GRAPH);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_TOTAL, bs.nmem);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, 0);
	bs.use_halves = bs.plan_halves && !bs.use_codes;
	if (bs.use_halves)
	{
		bs.half_scale = shnsw_half_scale(bs.mins, bs.maxs, bs.dims);
		bs.half_codes = palloc_extended((Size) Max(bs.nmem, 1) * bs.dims, MCXT_ALLOC_HUGE);
	}
	if (bs.nworkers > 0 && bs.nmem >= 2)
	{
		/* parallel: the graph lives in shared memory until the pages are written */
		pb = shnsw_parallel_begin(bs.nworkers, bs.dims, bs.m, bs.efc, bs.metric, bs.use_codes,
								  bs.use_halves, bs.half_scale, bs.nmem, lo, scale,
								  SHNSW_BUILD_SEED, &g);
		build_graph_parallel(&bs, &g, pb, lo, scale);
	}
	else
	{
		bool		have_nav = bs.nav != NULL;

		if (bs.use_halves)
			shnsw_build_init_halves(&g, bs.dims, bs.m, bs.efc, bs.metric, Max(bs.nmem, 1),
									SHNSW_BUILD_SEED, NULL, bs.half_scale);
		else
			shnsw_build_init(&g, bs.dims, bs.m, bs.efc, bs.metric, Max(bs.nmem, 1), bs.use_codes,
							 lo, scale, SHNSW_BUILD_SEED, bs.use_codes ? NULL : bs.nav);
		bs.nav = NULL;			/* owned by the graph now */
		build_graph(&bs, &g, lo, scale, have_nav);
	}

	/* lay out and write */
	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, SHNSW_PHASE_WRITE);
	build_layout(&bs, &g, &layout);
	bs.secs_layout = phase_secs(&bs);
	build_write_pages(&bs, &g, &layout, bs.nmem > 0 ? lo : NULL, bs.nmem > 0 ? scale : NULL,
					  MAIN_FORKNUM);
	if (pb != NULL)
		shnsw_parallel_end(pb);	/* the shared graph goes with it */
	bs.secs_write = phase_secs(&bs);
	elog(DEBUG1, "streamhnsw: build phases: scan %.2f s, read back %.2f s, link %.2f s, reachable %.2f s, layout %.2f s, write %.2f s",
		 bs.secs_scan, bs.secs_read, bs.secs_link, bs.secs_reach, bs.secs_layout, bs.secs_write);

	/* the graph, layout and per-row arrays are no longer needed */
	MemoryContextSwitchTo(buildctx);
	MemoryContextDelete(graphctx);
	pfree(bs.tids);
	pfree(bs.exact_file);
	pfree(bs.exact_off);
	if (bs.vlen)
		pfree(bs.vlen);
	bs.tids = NULL;
	bs.exact_file = NULL;
	bs.exact_off = NULL;
	bs.vlen = NULL;

	/*
	 * Insert the rows that did not fit through aminsert, in the leader and
	 * (parallel builds) the workers: the written index is a complete index
	 * of the in-memory part. The in-memory rows' file is no longer needed.
	 */
	BufFileClose(bs.exact);
	bs.exact = NULL;
	if (bs.spilled)
	{
		build_insert_rest(&bs, heap, index, indexInfo);
		BufFileClose(bs.rest);
		if (bs.rest_seg != NULL)
			dsm_detach(bs.rest_seg);	/* deletes the file */
	}

	result->heap_tuples = reltuples;
	result->index_tuples = bs.n;

	MemoryContextSwitchTo(old);
	MemoryContextDelete(buildctx);
	return result;
}

/*
 * shnsw_buildempty writes the init fork of an unlogged index: a metapage
 * and untrained quantizer pages.
 */
void
shnsw_buildempty(Relation index)
{
	ShnswBuildState bs;

	MemSet(&bs, 0, sizeof(bs));
	bs.index = index;
	build_type_init(&bs, index);
	bs.efc = shnsw_get_ef_construction(index);
	bs.n = 0;
	build_write_pages(&bs, NULL, NULL, NULL, NULL, INIT_FORKNUM);
}
