/*
 * nodecheck_test.c: unit tests of the node validator (src/nodecheck.c),
 * called from run_unit.c's main.
 */
#include <stdio.h>
#include <string.h>

#include "nodecheck.h"

int			test_nodecheck(int *passed);

static int	npassed,
			nfailed;

#define NC_CHECK(cond, ...) \
	do { \
		if (cond) npassed++; \
		else { \
			nfailed++; \
			printf("FAIL nodecheck: " __VA_ARGS__); \
			printf("\n"); \
		} \
	} while (0)

/* a live level-0 node in slot 1 of block 5 with two neighbours */
static void
good_node(char *rec, ShnswRef *self, const ShnswNodeLimits *lim)
{
	ShnswNodeHeader *h = (ShnswNodeHeader *) rec;
	ShnswRef   *nb = shnsw_node_neighbors(h);

	memset(rec, 0, 512);
	h->tid_blk_lo = 3;
	h->tid_off = 7;
	h->vec_block = 9;
	h->vec_offset = 64;
	h->nneighbors = 2;
	nb[0] = shnsw_make_ref(6, 0, lim->slot_bits);
	nb[1] = shnsw_make_ref(5, 2, lim->slot_bits);
	*self = shnsw_make_ref(5, 1, lim->slot_bits);
}

/* Runs the tests; returns the failures, *passed the checks passed. */
int
test_nodecheck(int *passed)
{
	ShnswNodeLimits lim = {8, 4, 32, 8000, 2048, 20};
	ShnswNodeFault fault;
	char		rec[512];
	ShnswNodeHeader *h = (ShnswNodeHeader *) rec;
	ShnswRef	self;
	const char *p;

	good_node(rec, &self, &lim);
	NC_CHECK(shnsw_node_problem(h, self, &lim, &fault) == NULL, "a sound node");

	h->level = SHNSW_MAX_LEVEL + 1;
	p = shnsw_node_problem(h, self, &lim, &fault);
	NC_CHECK(p && strcmp(p, "node level") == 0 && fault.value == SHNSW_MAX_LEVEL + 1, "level");

	good_node(rec, &self, &lim);
	h->nneighbors = 2 * lim.m + 1;
	p = shnsw_node_problem(h, self, &lim, &fault);
	NC_CHECK(p && strcmp(p, "neighbour count") == 0, "neighbour count");

	good_node(rec, &self, &lim);
	h->vec_offset = 66;
	p = shnsw_node_problem(h, self, &lim, &fault);
	NC_CHECK(p && strcmp(p, "vector offset") == 0, "vector offset");

	/* a vector that continues on the next page, past the end */
	good_node(rec, &self, &lim);
	h->vec_block = 19;
	h->vec_offset = 7996;
	p = shnsw_node_problem(h, self, &lim, &fault);
	NC_CHECK(p && strcmp(p, "vector block") == 0 && fault.past_end && fault.value == 20,
			 "vector block past the end");
	lim.nblocks = 0;			/* unknown length: not a problem */
	NC_CHECK(shnsw_node_problem(h, self, &lim, &fault) == NULL, "unknown length");
	lim.nblocks = 20;

	good_node(rec, &self, &lim);
	h->vec_block = 0;
	p = shnsw_node_problem(h, self, &lim, &fault);
	NC_CHECK(p && strcmp(p, "vector block") == 0 && !fault.past_end, "vector on the metapage");

	good_node(rec, &self, &lim);
	h->tid_off = 0;
	p = shnsw_node_problem(h, self, &lim, &fault);
	NC_CHECK(p && strcmp(p, "heap tuple offset") == 0, "heap tuple offset");

	good_node(rec, &self, &lim);
	h->extra_tids = SHNSW_NODE_TIDS;
	p = shnsw_node_problem(h, self, &lim, &fault);
	NC_CHECK(p && strcmp(p, "extra heap tuple count") == 0, "extra heap tuples");

	good_node(rec, &self, &lim);
	h->level = 1;
	h->upper_blk_lo = 0;
	p = shnsw_node_problem(h, self, &lim, &fault);
	NC_CHECK(p && strcmp(p, "upper record block") == 0, "upper record on the metapage");

	good_node(rec, &self, &lim);
	shnsw_node_neighbors(h)[1] = self;
	p = shnsw_node_problem(h, self, &lim, &fault);
	NC_CHECK(p && strcmp(p, "neighbour reference (the node itself)") == 0, "own neighbour");

	good_node(rec, &self, &lim);
	shnsw_node_neighbors(h)[0] = shnsw_make_ref(25, 0, lim.slot_bits);
	p = shnsw_node_problem(h, self, &lim, &fault);
	NC_CHECK(p && strcmp(p, "neighbour reference") == 0 && fault.value == 25, "neighbour block");

	/* a free slot: its heap TID and neighbours do not count, its link does */
	good_node(rec, &self, &lim);
	h->flags = SHNSW_NODE_FREE | SHNSW_NODE_DELETED;
	h->tid_off = 0;
	h->nneighbors = 0;
	shnsw_node_neighbors(h)[0] = SHNSW_INVALID_REF;
	NC_CHECK(shnsw_node_problem(h, self, &lim, &fault) == NULL, "a free slot");
	shnsw_node_neighbors(h)[0] = shnsw_make_ref(0, 3, lim.slot_bits);
	p = shnsw_node_problem(h, self, &lim, &fault);
	NC_CHECK(p && strcmp(p, "free list link") == 0, "free list link");
	*passed = npassed;
	return nfailed;
}
