/*-------------------------------------------------------------------------
 *
 * search.c
 *	  The disk search: a resumable best-first walk of the graph over a node
 *	  source, with the per-backend pool of its arrays.
 *
 * The search navigates on SQ8 codes only. Unlike the textbook search it is
 * resumable: nodes pushed out of the result set, or never admitted, are
 * kept in a "discarded" heap so a later round can continue from them when
 * the executor wants more rows (iterative scan).
 *
 *-------------------------------------------------------------------------
 */
#include <math.h>
#include <string.h>

#include "search.h"

/*
 * The search pool: the growing arrays of a search (candidates, saved
 * neighbour lists, visited set, the three heaps), kept from one search to
 * the next in memory the host keeps across queries (host.h,
 * shnsw_alloc_kept), so that a hot scan allocates none of them and never
 * faults in fresh pages for them (a profile of 2,000 hot scans had 9% of a
 * backend's time in page faults, memmove and clearing new pages, most of
 * it these arrays being allocated and grown per scan). One search at a
 * time holds them (a second one, as in a nested scan, allocates its own);
 * shnsw_search_free gives them back, dropping arrays grown past
 * POOL_MAX_BYTES so that one large search does not make every later one
 * clear a large visited set. A search that ends in an error never gives
 * them back: shnsw_search_pool_end_xact (the access method calls it at
 * the end of every transaction, streamhnsw.c) then frees them all.
 */
#define POOL_MAX_BYTES (1u << 20)

typedef struct SearchPool
{
	bool		in_use;
	bool		have;
	ShnswCand  *cands;
	uint32_t	capcands;
	ShnswRef   *nbrs;
	uint32_t	capnbrs;
	ShnswVisited visited;
	ShnswHeap	C,
				W,
				D;
} SearchPool;

static SearchPool pool;

static void
pool_heap(ShnswHeap *h, int cap, bool max)
{
	h->cap = cap;
	h->a = shnsw_alloc_kept(sizeof(ShnswPair) * cap);
	h->n = 0;
	h->max = max;
}

/* Give the pool's arrays to s (the caller checked it is free). */
static void
pool_take(ShnswSearch *s, int m)
{
	if (!pool.have)
	{
		pool.capcands = 256;
		pool.cands = shnsw_alloc_kept(sizeof(ShnswCand) * pool.capcands);
		pool.capnbrs = 256 * 2 * 16;
		pool.nbrs = shnsw_alloc_kept(sizeof(ShnswRef) * pool.capnbrs);
		pool.visited.slots = shnsw_alloc_kept(sizeof(ShnswRef) * 1024);
		pool.visited.mask = 1023;
		pool_heap(&pool.C, 128, false);
		pool_heap(&pool.W, 128, true);
		pool_heap(&pool.D, 128, false);
		pool.have = true;
	}
	pool.in_use = true;
	s->pooled = true;
	s->cands = pool.cands;
	s->capcands = pool.capcands;
	s->nbrs = pool.nbrs;
	s->capnbrs = pool.capnbrs;
	if (s->capnbrs < 2u * m)
	{
		s->capnbrs = 2 * m;
		s->nbrs = shnsw_realloc(s->nbrs, sizeof(ShnswRef) * s->capnbrs);
	}
	s->visited = pool.visited;
	shnsw_visited_clear(&s->visited);
	s->C = pool.C;
	s->W = pool.W;
	s->D = pool.D;
	s->C.n = s->W.n = s->D.n = 0;
}

/* Take s's arrays back into the pool (or free them if they grew too large). */
static void
pool_give_back(ShnswSearch *s)
{
	pool.in_use = false;
	if (sizeof(ShnswCand) * s->capcands > POOL_MAX_BYTES ||
		sizeof(ShnswRef) * s->capnbrs > POOL_MAX_BYTES ||
		sizeof(ShnswRef) * (s->visited.mask + 1) > POOL_MAX_BYTES ||
		sizeof(ShnswPair) * s->C.cap > POOL_MAX_BYTES ||
		sizeof(ShnswPair) * s->W.cap > POOL_MAX_BYTES ||
		sizeof(ShnswPair) * s->D.cap > POOL_MAX_BYTES)
	{
		shnsw_search_pool_reset();
		return;
	}
	pool.cands = s->cands;
	pool.capcands = s->capcands;
	pool.nbrs = s->nbrs;
	pool.capnbrs = s->capnbrs;
	pool.visited = s->visited;
	pool.C = s->C;
	pool.W = s->W;
	pool.D = s->D;
}

void
shnsw_search_pool_reset(void)
{
	memset(&pool, 0, sizeof(pool));
	shnsw_kept_reset();
}

void
shnsw_search_pool_end_xact(void)
{
	if (pool.in_use)
		shnsw_search_pool_reset();
}

void
shnsw_search_init(ShnswSearch *s, const Sq8Query *q, const ShnswNodeSource *ops, int m,
				  uint32_t max_discovered)
{
	*s = (ShnswSearch) {
		.q = q,
		.ops = ops,
		.m = m,
		.max_discovered = max_discovered,
		.target = SHNSW_INVALID_REF,
		.round_floor = INFINITY,
		.park_least = -1,
	};
	if (!pool.in_use)
		pool_take(s, m);
	else
	{
		s->capcands = 256;
		s->cands = shnsw_alloc(sizeof(ShnswCand) * s->capcands);
		shnsw_visited_init(&s->visited, 512);
		shnsw_heap_init(&s->C, 128, false);
		shnsw_heap_init(&s->W, 128, true);
		shnsw_heap_init(&s->D, 128, false);
		s->capnbrs = 256 * 2 * m;
		s->nbrs = shnsw_alloc(sizeof(ShnswRef) * s->capnbrs);
	}
	s->spec = shnsw_alloc(sizeof(ShnswRef) * 2 * m * SHNSW_SPECULATIVE_CANDIDATES);
	s->ubuf = shnsw_alloc(sizeof(ShnswRef) * m);
	s->locs = shnsw_alloc(sizeof(ShnswUpperLoc) * 2 * m);
	/* (a small chunk: larger ones cost a malloc and page faults per scan) */
	s->stage = q->dim <= SHNSW_STAGE_MAX_DIM ? shnsw_alloc((size_t) SHNSW_STAGE * q->dim) : NULL;
	s->dists = shnsw_alloc(sizeof(float) * 2 * m);
}

void
shnsw_search_set_clamp_slack(ShnswSearch *s, double unit, double factor, double max_slack)
{
	s->clamp_on = max_slack > 0.0;
	if (!s->clamp_on)
		return;
	if (s->F.a == NULL)
		shnsw_heap_init(&s->F, 64, false);
	s->clamp_slack[0] = max_slack;
	for (int k = 1; k < SHNSW_NODE_CLAMP_CLASSES; k++)
		s->clamp_slack[k] = fmin(shnsw_clamp_class_limit(k, unit) * factor, max_slack);
}

void
shnsw_search_set_target(ShnswSearch *s, ShnswRef target)
{
	s->target = target;
	s->target_seen = false;
}

void
shnsw_search_free(ShnswSearch *s)
{
	if (s->pooled)
		pool_give_back(s);
	else
	{
		shnsw_free(s->cands);
		shnsw_visited_free(&s->visited);
		shnsw_heap_free(&s->C);
		shnsw_heap_free(&s->W);
		shnsw_heap_free(&s->D);
		shnsw_free(s->nbrs);
	}
	s->pooled = false;
	if (s->F.a != NULL)
		shnsw_heap_free(&s->F);
	shnsw_free(s->spec);
	shnsw_free(s->ubuf);
	shnsw_free(s->locs);
	if (s->stage)
		shnsw_free(s->stage);
	shnsw_free(s->dists);
	if (s->taken)
		shnsw_free(s->taken);
}

/* How many of node's layer-0 list entries a search reads (at most 2m). */
static inline int
search_list_len(const ShnswSearch *s, const ShnswNodeHeader *node)
{
	return node->nneighbors < 2 * s->m ? node->nneighbors : 2 * s->m;
}

/*
 * Record node as candidate slot j (j == s->ncands appends one), without its
 * distance (search_add_nodes computes the distances of a batch together).
 * keep_nbrs: save its layer-0 neighbours (not for swept nodes, which are
 * never expanded).
 */
static void
search_set_cand(ShnswSearch *s, uint32_t j, ShnswRef ref, const ShnswNodeHeader *node,
				bool keep_nbrs)
{
	ShnswCand  *c;

	if (j == s->ncands && s->ncands == s->capcands)
	{
		s->capcands *= 2;
		s->cands = shnsw_realloc(s->cands, sizeof(ShnswCand) * s->capcands);
	}
	c = &s->cands[j];
	c->ref = ref;
	c->d = 0.0f;
	c->node_flags = node->flags;
	c->state = 0;
	c->tid_blk = shnsw_node_tid_block(node);
	c->tid_off = node->tid_off;
	c->extra_tids = (uint8_t) (node->extra_tids < SHNSW_NODE_TIDS ? node->extra_tids : 0);
	c->vec_block = node->vec_block;
	c->vec_offset = node->vec_offset;
	c->level = node->level;
	c->upper = shnsw_node_upper_loc(node);

	/*
	 * Keep its layer-0 neighbours: expanding it later needs no second read
	 * of its page, and read-ahead can name the pages it will lead to.
	 */
	c->nbr_count = search_list_len(s, node);
	if (!keep_nbrs)
		c->nbr_count = 0;
	if (s->nnbrs + c->nbr_count > s->capnbrs)
	{
		s->capnbrs *= 2;
		s->nbrs = shnsw_realloc(s->nbrs, sizeof(ShnswRef) * s->capnbrs);
	}
	c->nbr_start = s->nnbrs;
	memcpy(s->nbrs + s->nnbrs, shnsw_node_neighbors(node), sizeof(ShnswRef) * c->nbr_count);
	s->nnbrs += c->nbr_count;
	if (j == s->ncands)
	{
		s->ncands++;
		s->ndistances++;
	}
}

/* Record a node with its distance d; returns its index in cands. */
static uint32_t
search_add_cand_ex(ShnswSearch *s, ShnswRef ref, float d, const ShnswNodeHeader *node,
				   bool keep_nbrs)
{
	uint32_t	j = s->ncands;

	search_set_cand(s, j, ref, node, keep_nbrs);
	s->cands[j].d = d;
	return j;
}

/* read_nodes callback: record a candidate and stage its code. */
typedef struct AddArg
{
	ShnswSearch *s;
	const ShnswRef *refs;
	uint32_t   *idx;			/* out: candidate index per ref */
} AddArg;

/* Distances of the staged codes, into s->dists by position. */
static void
search_flush_stage(ShnswSearch *s)
{
	float		d[SHNSW_STAGE];

	if (s->nstage == 0)
		return;
	sq8_distances_at(s->q, s->stage_at, s->nstage, d);
	for (int k = 0; k < s->nstage; k++)
		s->dists[s->stage_pos[k]] = d[k];
	s->nstage = 0;
}

/*
 * Record the node of refs[i] as its candidate. A source that read a record
 * racily may call again for i: the last call wins (its candidate slot is
 * rewritten, its code staged after the earlier one, so its distance is
 * stored last).
 */
static inline ShnswSearch *
search_add_record(AddArg *a, int i, const ShnswNodeHeader *node)
{
	ShnswSearch *s = a->s;

	search_set_cand(s, a->idx[i], a->refs[i], node, !s->ops->reread_cheap);
	return s;
}

static void
search_add_cb(void *arg, int i, const ShnswNodeHeader *node)
{
	ShnswSearch *s = search_add_record((AddArg *) arg, i, node);
	uint8_t    *slot;

	if (s->stage == NULL)
	{
		s->dists[i] = sq8_distance(s->q, shnsw_node_code(node, s->m));
		return;
	}
	slot = s->stage + (size_t) s->nstage * s->q->dim;
	memcpy(slot, shnsw_node_code(node, s->m), s->q->dim);
	s->stage_at[s->nstage] = slot;
	s->stage_pos[s->nstage++] = i;
	if (s->nstage == SHNSW_STAGE)
		search_flush_stage(s);
}

_Static_assert(SHNSW_HELD_BATCH <= SHNSW_STAGE, "a held batch fits the stage");

/*
 * read_nodes_held callback: as search_add_cb, but the code is read where
 * the source holds it, at the next flush (search_held_flush_cb).
 */
static void
search_add_held_cb(void *arg, int i, const ShnswNodeHeader *node)
{
	ShnswSearch *s = search_add_record((AddArg *) arg, i, node);

	if (s->nstage == SHNSW_STAGE)	/* (not with SHNSW_HELD_BATCH calls a flush) */
		search_flush_stage(s);
	s->stage_at[s->nstage] = shnsw_node_code(node, s->m);
	s->stage_pos[s->nstage++] = i;
}

static void
search_held_flush_cb(void *arg)
{
	search_flush_stage(((AddArg *) arg)->s);
}

/*
 * read_nodes callback at expansion when the source rereads cheaply: the
 * node's layer-0 list (a racy read is followed by another call: the last
 * one wins).
 */
static void
search_nbrs_cb(void *arg, int i, const ShnswNodeHeader *node)
{
	ShnswSearch *s = (ShnswSearch *) arg;
	int			n = search_list_len(s, node);

	(void) i;					/* one node asked for */
	memcpy(s->expand_nbrs, shnsw_node_neighbors(node), sizeof(ShnswRef) * n);
	s->nexpand_nbrs = n;
}

/*
 * Read refs[0..n-1] (n <= 2m), recording candidates (idx gets their
 * indexes) and their distances, computed SHNSW_STAGE codes at a time by
 * the batch kernels (kernels.c, sq8_distances: each load of the query
 * serves several codes).
 */
static void
search_add_nodes(ShnswSearch *s, const ShnswRef *refs, int n, uint32_t *idx)
{
	AddArg		a = {s, refs, idx};

	if (n <= 0)
		return;

	/*
	 * Candidate slots in reference order, taken before any is read: the
	 * source may call back in any order (the shared cache reads in the
	 * order it prefetched, the buffer path page by page) and the search
	 * comes out the same.
	 */
	while (s->ncands + (uint32_t) n > s->capcands)
	{
		s->capcands *= 2;
		s->cands = shnsw_realloc(s->cands, sizeof(ShnswCand) * s->capcands);
	}
	for (int k = 0; k < n; k++)
		idx[k] = s->ncands + (uint32_t) k;
	s->ncands += (uint32_t) n;
	s->ndistances += (uint64_t) n;
	s->nstage = 0;
	if (s->ops->read_nodes_held != NULL && s->stage != NULL)
		s->ops->read_nodes_held(s->ops->ctx, refs, n, search_add_held_cb,
								search_held_flush_cb, &a);
	else
	{
		s->ops->read_nodes(s->ops->ctx, refs, n, search_add_cb, &a);
		search_flush_stage(s);
	}
	for (int k = 0; k < n; k++)
		s->cands[idx[k]].d = s->dists[k];
}

/*
 * The greedy descent's reads over a memory source: a memory prefetch of
 * all the records of a hop before the first is read, so that their cache
 * misses overlap instead of coming one record after another (layer 0 and
 * layer 1's beam do the same through the prefetch they ask for at every
 * expansion). Not for the buffer source: the descent's pages have
 * read-ahead of their own (pageaccess.c).
 */
static inline void
search_prefetch_upper(ShnswSearch *s, const ShnswRef *refs, int n)
{
	if (s->ops->reread_cheap && s->ops->prefetch != NULL && n > 0)
		s->ops->prefetch(s->ops->ctx, refs, n, false);
}

ShnswRef
shnsw_search_descend(ShnswSearch *s, ShnswRef entry, int entry_level, int stop_layer)
{
	uint32_t	cur;
	uint32_t   *idx = shnsw_alloc(sizeof(uint32_t) * s->m);

	search_add_nodes(s, &entry, 1, &cur);

	/*
	 * Start at the entry node's own level if the caller's is higher (a
	 * corrupt or stale entry level must not make this loop count down from
	 * a huge number). Each hop strictly decreases the distance, so the
	 * greedy walk of a layer cannot cycle.
	 */
	if (entry_level > s->cands[cur].level)
		entry_level = s->cands[cur].level;
	for (int l = entry_level; l > stop_layer; l--)
	{
		bool		changed = true;

		while (changed)
		{
			int			n;

			shnsw_check_interrupts();
			changed = false;
			if (s->cands[cur].level < l)
				break;			/* cannot happen in a well-formed graph */
			n = s->ops->read_upper(s->ops->ctx, s->cands[cur].upper, l, s->ubuf);
			search_prefetch_upper(s, s->ubuf, n);
			search_add_nodes(s, s->ubuf, n, idx);
			for (int k = 0; k < n; k++)
			{
				if (s->cands[idx[k]].d < s->cands[cur].d)
				{
					cur = idx[k];
					changed = true;
				}
			}
		}
	}
	shnsw_free(idx);
	return s->cands[cur].ref;
}

/*
 * A greedy step on SQ8 codes can take the wrong turn where two clusters are
 * about as near: on pgvector's 4000 x 64 clustered l2 build case one query
 * in 100 started layer 0 in the wrong cluster and found none of its rows at
 * ef_search 10 and 20. A beam of a few nodes on layer 1 picks the start
 * among more than one local minimum, for about 1 % more distances there
 * and 4 % on 100k x 384 sentence embeddings at ef_search 33.
 */
ShnswRef
shnsw_search_start(ShnswSearch *s, ShnswRef entry, int entry_level)
{
	ShnswRef	start = shnsw_search_descend(s, entry, entry_level, 1);
	uint32_t	best[SHNSW_START_EF];

	if (entry_level >= 1 &&
		shnsw_search_upper_layer(s, start, 1, SHNSW_START_EF, best) > 0)
		start = s->cands[best[0]].ref;
	return start;
}

/*
 * upper_read_ahead names, for the page layer to read ahead, the unvisited
 * neighbours on this layer of the candidates still queued in an upper
 * layer's beam that can still be expanded (none farther than the worst
 * of the ef kept), as layer 0's search_read_ahead does: each expansion of
 * the beam otherwise costs a round trip to storage on a cold index, its
 * neighbours' records being named only once it is popped. Their upper
 * records are on the pages the descent reads ahead (pageaccess.c).
 * Speculative: a wrong guess costs a read, never a result.
 */
static void
upper_read_ahead(ShnswSearch *s, const ShnswHeap *C, const ShnswHeap *W, int ef,
				 ShnswVisited *vis, int layer, ShnswRef *buf)
{
	float		bound = W->n >= ef ? shnsw_heap_top(W).d : INFINITY;
	int			n = 0;

	for (int q = 0; q < C->n && q < SHNSW_SPECULATIVE_CANDIDATES; q++)
	{
		ShnswCand  *c = &s->cands[C->a[q].id];
		int			cnt;

		if (C->a[q].d > bound || c->level < layer)
			continue;
		cnt = s->ops->read_upper(s->ops->ctx, c->upper, layer, buf);
		for (int k = 0; k < cnt; k++)
			if (!shnsw_visited_contains(vis, buf[k]))
				s->spec[n++] = buf[k];
	}
	if (n > 0)
		s->ops->prefetch(s->ops->ctx, s->spec, n, true);
}

int
shnsw_search_upper_layer(ShnswSearch *s, ShnswRef entry, int layer, int ef, uint32_t *out)
{
	ShnswVisited vis;
	ShnswHeap	C,
				W;
	uint32_t	first;
	uint32_t   *idx = shnsw_alloc(sizeof(uint32_t) * s->m);
	ShnswRef   *fresh = shnsw_alloc(sizeof(ShnswRef) * s->m);
	ShnswRef   *ubuf2 = s->ops->speculative ? shnsw_alloc(sizeof(ShnswRef) * s->m) : NULL;
	int			n;

	shnsw_visited_init(&vis, 64);
	shnsw_heap_init(&C, ef, false);
	shnsw_heap_init(&W, ef + 1, true);
	search_add_nodes(s, &entry, 1, &first);
	shnsw_visited_add(&vis, entry);
	shnsw_heap_push(&C, s->cands[first].d, first);
	shnsw_heap_push(&W, s->cands[first].d, first);
	while (C.n > 0)
	{
		ShnswPair	c = shnsw_heap_pop(&C);
		int			cnt,
					nf = 0;

		shnsw_check_interrupts();
		if (W.n >= ef && c.d > shnsw_heap_top(&W).d)
			break;
		if (s->cands[c.id].level < layer)
			continue;
		cnt = s->ops->read_upper(s->ops->ctx, s->cands[c.id].upper, layer, s->ubuf);
		for (int k = 0; k < cnt; k++)
			if (shnsw_visited_add(&vis, s->ubuf[k]))
				fresh[nf++] = s->ubuf[k];
		if (s->ops->prefetch != NULL)
		{
			/* this hop's records first (cache lines or pages), then guesses */
			if (nf > 0)
				s->ops->prefetch(s->ops->ctx, fresh, nf, false);
			if (s->ops->speculative)
				upper_read_ahead(s, &C, &W, ef, &vis, layer, ubuf2);
		}
		search_add_nodes(s, fresh, nf, idx);
		for (int k = 0; k < nf; k++)
		{
			float		d = s->cands[idx[k]].d;

			if (W.n < ef || d < shnsw_heap_top(&W).d)
			{
				shnsw_heap_push(&C, d, idx[k]);
				shnsw_heap_push(&W, d, idx[k]);
				if (W.n > ef)
					shnsw_heap_pop(&W);
			}
		}
	}
	n = W.n;
	for (int k = n - 1; k >= 0; k--)
		out[k] = shnsw_heap_pop(&W).id;
	shnsw_visited_free(&vis);
	shnsw_heap_free(&C);
	shnsw_heap_free(&W);
	shnsw_free(idx);
	shnsw_free(fresh);
	if (ubuf2)
		shnsw_free(ubuf2);
	return n;
}

/*
 * search_read_ahead names, best first, the unvisited neighbours of the best
 * few candidates still queued, for the page layer to read ahead.
 */
static void
search_read_ahead(ShnswSearch *s, int ef)
{
	ShnswPair	top[SHNSW_SPECULATIVE_CANDIDATES];
	int			ntop = 0,
				n = 0;
	float		bound = s->W.n >= ef ? shnsw_heap_top(&s->W).d : INFINITY;

	while (ntop < SHNSW_SPECULATIVE_CANDIDATES && s->C.n > 0)
	{
		ShnswPair	p = shnsw_heap_pop(&s->C);

		if (s->cands[p.id].state & SHNSW_CAND_EXPANDED)
			continue;			/* stale entry: it would be skipped anyway */
		if (p.d > bound)
		{
			/* neither it nor any after it is expanded this round */
			shnsw_heap_push(&s->C, p.d, p.id);
			break;
		}
		top[ntop++] = p;
	}
	for (int t = 0; t < ntop; t++)
	{
		ShnswCand  *c = &s->cands[top[t].id];

		for (int k = 0; k < c->nbr_count; k++)
		{
			ShnswRef	r = s->nbrs[c->nbr_start + k];

			if (!shnsw_visited_contains(&s->visited, r))
				s->spec[n++] = r;
		}
		shnsw_heap_push(&s->C, top[t].d, top[t].id);
	}
	if (n > 0)
		s->ops->prefetch(s->ops->ctx, s->spec, n, true);
}

/*
 * D, the parked nodes. A search parks most nodes it sees (some 800 of a
 * hot query's 840 on 100k x 384 sentences at ef_search 40) and looks at
 * few of them again: only their least, for the frontier, unless a later
 * round or the scan takes some. So a node is parked by appending it, its
 * least kept on the side, and D is made a heap only when one must be
 * popped (search_park_pop). The heap part is D.a[0..park_heaped-1].
 */
static inline void
search_park(ShnswSearch *s, float d, uint32_t j)
{
	ShnswHeap  *h = &s->D;
	int			at = shnsw_heap_append(h, d, j);

	if (s->park_least < 0 || shnsw_heap_above(h, &h->a[at], &h->a[s->park_least]))
		s->park_least = at;
}

/* D's least parked node, without reordering D; false if D is empty. */
static inline bool
search_park_least(const ShnswSearch *s, ShnswPair *out)
{
	const ShnswHeap *h = &s->D;

	if (s->park_heaped > 0 &&
		(s->park_least < 0 || shnsw_heap_above(h, &h->a[0], &h->a[s->park_least])))
		*out = h->a[0];
	else if (s->park_least >= 0)
		*out = h->a[s->park_least];
	else
		return false;
	return true;
}

/* Remove and return D's least parked node (D must not be empty). */
static ShnswPair
search_park_pop(ShnswSearch *s)
{
	ShnswHeap  *h = &s->D;
	ShnswPair	p;

	if (s->park_heaped < h->n)
	{
		int			n = h->n;

		h->n = s->park_heaped;
		for (int i = s->park_heaped; i < n; i++)
		{
			ShnswPair	x = h->a[i];

			shnsw_heap_push(h, x.d, x.id);
		}
		s->park_least = -1;
	}
	p = shnsw_heap_pop(h);
	s->park_heaped = h->n;
	return p;
}

/* Drop emitted nodes from the top of D; D's least then, or INFINITY. */
static float
search_park_front(ShnswSearch *s)
{
	ShnswPair	p;

	while (search_park_least(s, &p))
	{
		if (!(s->cands[p.id].state & SHNSW_CAND_EMITTED))
			return p.d;
		(void) search_park_pop(s);
	}
	return INFINITY;
}

/* Offer candidate j to this round's results W, else park it in D. */
static void
search_offer(ShnswSearch *s, uint32_t j, int ef, bool expandable)
{
	ShnswCand  *c = &s->cands[j];

	if (s->clamp_on && (c->node_flags & SHNSW_NODE_CLAMPED))
		shnsw_heap_push(&s->F, shnsw_cand_bound_distance(s, c), j);
	if (s->W.n < ef || c->d < shnsw_heap_top(&s->W).d)
	{
		if (expandable && !(c->state & SHNSW_CAND_EXPANDED))
			shnsw_heap_push(&s->C, c->d, j);
		shnsw_heap_push(&s->W, c->d, j);
		c->state |= SHNSW_CAND_IN_RESULTS;
		if (s->W.n > ef)
		{
			ShnswPair	out = shnsw_heap_pop(&s->W);

			s->cands[out.id].state &= ~SHNSW_CAND_IN_RESULTS;
			search_park(s, out.d, out.id);
		}
	}
	else
		search_park(s, c->d, j);
}

/* Offer the best parked nodes not emitted to W, until it holds ef. */
static void
search_offer_parked(ShnswSearch *s, int ef)
{
	while (s->D.n > 0 && s->W.n < ef)
	{
		ShnswPair	p = search_park_pop(s);

		if (s->cands[p.id].state & SHNSW_CAND_EMITTED)
			continue;
		search_offer(s, p.id, ef, true);
	}
}

/*
 * search_drain hands out up to ef nodes parked in D, nearest first, once the
 * budget forbids expanding more (as pgvector returns its discarded
 * candidates when hnsw.max_scan_tuples is reached).
 */
static int
search_drain(ShnswSearch *s, int ef, uint32_t *out)
{
	int			n = 0;

	while (s->D.n > 0 && n < ef)
	{
		ShnswPair	p = search_park_pop(s);
		ShnswCand  *c = &s->cands[p.id];

		if (c->state & SHNSW_CAND_EMITTED)
			continue;
		c->state |= SHNSW_CAND_EMITTED;
		out[n++] = p.id;
	}
	if (n == 0)
		s->exhausted = true;
	return n;
}

float
shnsw_search_parked(ShnswSearch *s)
{
	return search_park_front(s);
}

/*
 * Emit parked candidate j to the caller; the next round expands it (unless
 * it is expanded or the budget is spent).
 */
static int64_t
search_take_cand(ShnswSearch *s, uint32_t j)
{
	s->cands[j].state |= SHNSW_CAND_EMITTED;
	if (!(s->cands[j].state & SHNSW_CAND_EXPANDED) && !s->budget_spent)
	{
		if (s->ntaken == s->captaken)
		{
			s->captaken = s->captaken ? s->captaken * 2 : 64;
			s->taken = s->taken ? shnsw_realloc(s->taken, sizeof(uint32_t) * s->captaken)
				: shnsw_alloc(sizeof(uint32_t) * s->captaken);
		}
		s->taken[s->ntaken++] = j;
	}
	return j;
}

int64_t
shnsw_search_take(ShnswSearch *s)
{
	if (s->exhausted || isinf(shnsw_search_parked(s)))
		return -1;
	return search_take_cand(s, search_park_pop(s).id);
}

float
shnsw_search_clamped(ShnswSearch *s)
{
	if (!s->clamp_on)
		return INFINITY;
	while (s->F.n > 0 && (s->cands[shnsw_heap_top(&s->F).id].state & SHNSW_CAND_EMITTED))
		shnsw_heap_pop(&s->F);
	return s->F.n > 0 ? shnsw_heap_top(&s->F).d : INFINITY;
}

int64_t
shnsw_search_take_clamped(ShnswSearch *s)
{
	if (isinf(shnsw_search_clamped(s)))
		return -1;
	return search_take_cand(s, shnsw_heap_pop(&s->F).id);
}

float
shnsw_search_frontier(ShnswSearch *s)
{
	float		f = search_park_front(s);

	if (!s->budget_spent && !s->exhausted)
	{
		/*
		 * An emitted node still queued is one shnsw_search_take emitted (the
		 * next round queues it again) or one a spent budget left
		 * unexpanded: the caller knows its exact distance.
		 */
		while (s->C.n > 0 &&
			   (s->cands[shnsw_heap_top(&s->C).id].state & (SHNSW_CAND_EXPANDED | SHNSW_CAND_EMITTED)))
			shnsw_heap_pop(&s->C);
		if (s->C.n > 0 && shnsw_heap_top(&s->C).d < f)
			f = shnsw_heap_top(&s->C).d;
		if (s->round_floor < f)
			f = s->round_floor;
	}
	return f;
}

static int	search_run(ShnswSearch *s, int ef, float *median, uint32_t *out);

/* Queue the nodes shnsw_search_take emitted since the last round. */
static void
search_queue_taken(ShnswSearch *s)
{
	for (uint32_t k = 0; k < s->ntaken; k++)
		shnsw_heap_push(&s->C, s->cands[s->taken[k]].d, s->taken[k]);
	s->ntaken = 0;
}

int
shnsw_search_next(ShnswSearch *s, ShnswRef start, int ef, uint32_t *out)
{
	if (s->exhausted)
		return 0;
	s->rounds++;
	s->W.n = 0;
	if (s->budget_spent)
		return search_drain(s, ef, out);

	if (!s->started)
	{
		uint32_t	first;

		s->started = true;
		s->target_seen |= start == s->target;
		shnsw_visited_add(&s->visited, start);
		search_add_nodes(s, &start, 1, &first);
		search_offer(s, first, ef, true);
	}
	else
	{
		/*
		 * The frontier as this round starts bounds what the caller may
		 * return after it: this round explores the shell past it, where the
		 * neighbours that lead back into it lie.
		 */
		s->round_floor = INFINITY;
		s->round_floor = shnsw_search_frontier(s);

		/* nodes taken since the last round are expanded first */
		search_queue_taken(s);
		search_offer_parked(s, ef);
	}
	return search_run(s, ef, NULL, out);
}

/*
 * shnsw_search_widen continues the first round as if it had been ef wide
 * from the start: its results so far (emitted) count towards the ef, so
 * it finds about ef minus those new rows, and *median is the navigation
 * distance of the middle one of all ef (the first round's floor of a round
 * that wide). Not a new round: the frontier is not fixed where it starts.
 */
int
shnsw_search_widen(ShnswSearch *s, int ef, uint32_t *out, float *median)
{
	*median = INFINITY;
	if (s->exhausted || s->budget_spent || !s->started)
		return 0;
	s->widened++;
	s->W.n = 0;
	search_queue_taken(s);
	/*
	 * The nearest rows found so far, at most half of W: nodes the caller
	 * took one at a time count too, and W must keep room for new rows, or
	 * a W full of emitted rows would end the walk as if nothing were left.
	 */
	for (uint32_t j = 0; j < s->ncands; j++)
	{
		ShnswCand  *c = &s->cands[j];

		if (!(c->state & SHNSW_CAND_EMITTED))
			continue;
		shnsw_heap_push(&s->W, c->d, j);
		c->state |= SHNSW_CAND_IN_RESULTS;
		if (s->W.n > ef / 2)
			s->cands[shnsw_heap_pop(&s->W).id].state &= ~SHNSW_CAND_IN_RESULTS;
	}
	search_offer_parked(s, ef);
	return search_run(s, ef, median, out);
}

/*
 * search_run expands until W holds ef results and no candidate can improve
 * them, then writes W's nodes not yet emitted into out and marks them
 * emitted; with median, also the navigation distance of W's middle node.
 */
static int
search_run(ShnswSearch *s, int ef, float *median, uint32_t *out)
{
	uint32_t	idx[2 * SHNSW_MAX_M];
	ShnswRef	fresh[2 * SHNSW_MAX_M];
	int			n,
				popped,
				mid;

	while (s->C.n > 0)
	{
		ShnswPair	c = shnsw_heap_top(&s->C);
		ShnswCand  *cand;
		const ShnswRef *nbrs;
		int			nnbrs;
		int			nf = 0;

		shnsw_check_interrupts();
		if (s->W.n >= ef && c.d > shnsw_heap_top(&s->W).d)
			break;
		shnsw_heap_pop(&s->C);
		cand = &s->cands[c.id];
		if (cand->state & SHNSW_CAND_EXPANDED)
			continue;
		if (s->max_discovered > 0 && s->ncands >= s->max_discovered)
		{
			shnsw_heap_push(&s->C, c.d, c.id);	/* still unexpanded */
			s->budget_spent = true;
			break;
		}
		cand->state |= SHNSW_CAND_EXPANDED;
		s->nexpanded++;
		nbrs = s->nbrs + cand->nbr_start;
		nnbrs = cand->nbr_count;
		if (s->ops->reread_cheap)
		{
			/* its list now, from the record (plain loads) */
			s->nexpand_nbrs = 0;
			s->ops->read_nodes(s->ops->ctx, &cand->ref, 1, search_nbrs_cb, s);
			nbrs = s->expand_nbrs;
			nnbrs = s->nexpand_nbrs;
		}

		for (int k = 0; k < nnbrs; k++)
		{
			ShnswRef	r = nbrs[k];

			if (shnsw_visited_add(&s->visited, r))
				fresh[nf++] = r;
			s->target_seen |= r == s->target;
		}
		if (s->ops->prefetch != NULL)
		{
			/* this expansion's pages first, then the likely next ones */
			if (nf > 0)
				s->ops->prefetch(s->ops->ctx, fresh, nf, false);
			if (s->ops->speculative)
				search_read_ahead(s, ef);
		}
		search_add_nodes(s, fresh, nf, idx);
		for (int k = 0; k < nf; k++)
			search_offer(s, idx[k], ef, true);
		if (s->target_seen)
			break;
	}

	n = 0;
	/* W pops farthest first: its middle node is popped after mid others */
	mid = s->W.n - 1 - (s->W.n - 1) / 2;
	for (popped = 0; s->W.n > 0; popped++)
	{
		ShnswPair	p = shnsw_heap_pop(&s->W);
		ShnswCand  *c = &s->cands[p.id];

		if (median && popped == mid)
			*median = p.d;
		c->state &= ~SHNSW_CAND_IN_RESULTS;
		if (c->state & SHNSW_CAND_EMITTED)
			continue;
		c->state |= SHNSW_CAND_EMITTED;
		out[n++] = p.id;
	}
	if (n == 0)
	{
		if (s->budget_spent)
			return search_drain(s, ef, out);
		s->exhausted = true;
	}
	return n;
}

bool
shnsw_search_sweep_node(ShnswSearch *s, ShnswRef ref, const ShnswNodeHeader *node,
						float d, uint32_t *idx)
{
	uint32_t	j;

	if (!shnsw_visited_add(&s->visited, ref))
		return false;
	j = search_add_cand_ex(s, ref, d, node, false);
	search_park(s, s->cands[j].d, j);
	*idx = j;
	return true;
}

void
shnsw_search_swept(ShnswSearch *s)
{
	/*
	 * Every node is seen: expanding adds nothing, and the frontier is the
	 * nearest parked node alone (shnsw_search_frontier with a spent budget:
	 * after a round ends, every node not emitted is parked in D).
	 */
	s->budget_spent = true;
	s->exhausted = false;		/* a walk that had ended has new nodes parked */
	s->round_floor = INFINITY;
}
