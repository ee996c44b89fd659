/*-------------------------------------------------------------------------
 *
 * nodesource.h
 *	  The node source: how the disk search (search.c) gets node records and
 *	  upper-layer lists. Pure code.
 *
 * The search never touches pages itself. Implementations: pageaccess.c
 * over shared buffers (with reader.c's read-ahead behind it), cache_read.c
 * over the shared cache, and test/unit/run_unit.c over plain memory: one
 * search, several sources.
 *
 * Contract:
 *
 * read_nodes(ctx, refs, n, fn, arg) calls fn(arg, i, record) for each i in
 * 0..n-1 with the node record of refs[i] (format.h layout), at least once:
 * a source that reads shared memory optimistically (the shared cache,
 * cache_read.c, under a seqlock) calls again for an i whose read raced with a writer, and the
 * last call's record is the node's, so fn overwrites what an earlier call
 * for that i recorded; a record may be torn in any call but the last, so
 * fn must stay within bounds whatever it reads (clamp counts).
 * The record is valid only during that call: fn copies what it keeps. Calls
 * may come in any order (the buffer implementation groups references by
 * page, visiting each page once, in reference order, and for equal
 * references in the order given). References come from records read
 * from disk: an implementation checks what it reads (pageaccess.c raises
 * an ERROR for a reference or record that is out of range).
 *
 * read_nodes_held(ctx, refs, n, fn, flush, arg), which may be NULL, reads
 * as read_nodes does, but the record given to fn stays readable until the
 * source's next call of flush(arg): fn may keep pointers into it (the
 * search keeps the address of the node's code for the batch kernel instead
 * of copying it). The source calls flush after at most SHNSW_HELD_BATCH
 * calls of fn and after the last, and only then checks that the records
 * of those calls were not changed meanwhile: for one that was, it calls fn
 * again (and flush after it), and the last call wins as in read_nodes.
 * What fn and flush read of a record that turns out changed is garbage
 * they must survive (within bounds), never keep.
 *
 * read_upper(ctx, loc, layer, out) copies the layer-`layer` neighbour list
 * of the upper-layer record at loc into out (room for m entries) and returns
 * its length.
 *
 * prefetch(ctx, refs, n, speculative), which may be NULL, is a hint: which
 * nodes are wanted next. With speculative false, nodes about to be read
 * (the neighbours of the node being expanded, given together before any is
 * read); with speculative true, neighbours of the best candidates still
 * queued, best first, of which the implementation takes as many as its
 * look-ahead allows. A wrong guess costs I/O bandwidth, never a wrong
 * answer; a source with nothing to read ahead leaves it NULL, and one
 * that ignores speculative requests (the shared cache: memory prefetch a
 * whole expansion ahead does not pay) sets speculative false, so that the
 * search does not spend a look at the best queued candidates' neighbours
 * (up to SHNSW_SPECULATIVE_CANDIDATES x 2m visited-set probes) on every
 * expansion for nothing.
 *
 * page_records(ctx, blk, fn, arg), which may be NULL: whether the source
 * holds block blk in memory, and its node records. -1: it does not, or
 * cannot read it now (the caller reads the page through buffers). 0 for a
 * page of another kind (no nodes; fn is not called). For graph page blk it
 * calls fn(arg, records, n) with the n node slots in use (n may be 0;
 * records points at the first, slots are node_size apart) and returns n;
 * as read_nodes does, it calls again if a writer changed the page during
 * the call, and the last call wins: what an earlier call read may be torn,
 * so fn reads within bounds whatever it finds and keeps nothing of a call
 * but the last. With fn NULL it only says whether it holds the block (-1
 * or 0). The scan's sweep uses it (scan_sweep.c, scan_sweep).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_NODESOURCE_H
#define STREAMHNSW_NODESOURCE_H

#include <stdbool.h>
#include <stdint.h>

#include "format.h"

typedef void (*ShnswNodeFn) (void *arg, int i, const ShnswNodeHeader *node);
typedef void (*ShnswFlushFn) (void *arg);
typedef void (*ShnswRecordsFn) (void *arg, const char *records, int n);

/* fn calls between two flushes of read_nodes_held, at most */
#define SHNSW_HELD_BATCH 4

typedef struct ShnswNodeSource
{
	void	   *ctx;
	void		(*read_nodes) (void *ctx, const ShnswRef *refs, int n,
							   ShnswNodeFn fn, void *arg);
	void		(*read_nodes_held) (void *ctx, const ShnswRef *refs, int n,
									ShnswNodeFn fn, ShnswFlushFn flush, void *arg);
	int			(*read_upper) (void *ctx, ShnswUpperLoc loc, int layer,
							   ShnswRef *out);
	void		(*prefetch) (void *ctx, const ShnswRef *refs, int n, bool speculative);
	bool		speculative;	/* prefetch takes speculative requests too
								 * (false: the search does not look for them) */
	bool		reread_cheap;	/* reading a record again costs plain loads
								 * (the shared cache): the search reads a
								 * node's neighbour list when it expands it,
								 * instead of copying every list it sees */
	int			(*page_records) (void *ctx, uint32_t blk, ShnswRecordsFn fn, void *arg);
} ShnswNodeSource;

/* How many queued candidates' neighbourhoods speculative read-ahead looks at. */
#define SHNSW_SPECULATIVE_CANDIDATES 8

#endif							/* STREAMHNSW_NODESOURCE_H */
