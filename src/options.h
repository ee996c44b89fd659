/*-------------------------------------------------------------------------
 *
 * options.h
 *	  Index options (reloptions) and the GUCs that steer scans and builds
 *	  (options.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_OPTIONS_H
#define STREAMHNSW_OPTIONS_H

#include "utils/relcache.h"

#include "format.h"

#define SHNSW_DEFAULT_M					16
#define SHNSW_MIN_M						2
#define SHNSW_MAX_M_OPTION				100
#define SHNSW_DEFAULT_EF_CONSTRUCTION	64
#define SHNSW_MIN_EF_CONSTRUCTION		4
#define SHNSW_MAX_EF_CONSTRUCTION		1000
#define SHNSW_DEFAULT_EF_SEARCH			40
#define SHNSW_MIN_EF_SEARCH				1
#define SHNSW_MAX_EF_SEARCH				1000
#define SHNSW_DEFAULT_MAX_SCAN_TUPLES	20000
#define SHNSW_DEFAULT_SWEEP_THRESHOLD	1.0
#define SHNSW_MIN_MAX_SCAN_TUPLES		1

StaticAssertDecl(SHNSW_MAX_M_OPTION <= SHNSW_MAX_M, "node records must hold 2 * max m neighbours");

typedef struct ShnswOptions
{
	int32		vl_len_;		/* varlena header (do not touch directly!) */
	int			m;
	int			ef_construction;
	int			ef_search;		/* the scans' when streamhnsw.ef_search is not set */
} ShnswOptions;

extern int	shnsw_ef_search;
extern int	shnsw_scan_ef_search(Relation index, bool *from_index);
extern int	shnsw_max_scan_tuples;
extern double shnsw_sweep_threshold;
extern int	shnsw_io_mode;
extern int	shnsw_max_read_ahead;
extern int	shnsw_lookahead_window;
extern int	shnsw_heap_prefetch;
extern bool shnsw_debug_discard_caches;
extern bool shnsw_debug_list_conflicts;
extern int	shnsw_debug_io_cap;
extern bool shnsw_debug_keep_lists;
extern bool shnsw_debug_build_floats;
extern int	shnsw_iterative_scan;

/* streamhnsw.io_mode */
#define SHNSW_IO_SYNC			0	/* one synchronous read at a time */
#define SHNSW_IO_STREAM			1	/* asynchronous reads kept in flight */

#define SHNSW_DEFAULT_MAX_READ_AHEAD	64
#define SHNSW_DEFAULT_LOOKAHEAD_WINDOW	32
#define SHNSW_DEFAULT_HEAP_PREFETCH		10	/* a LIMIT 10's rows */

/* streamhnsw.iterative_scan */
#define SHNSW_ITERATIVE_STRICT	0	/* rows in exact distance order */
#define SHNSW_ITERATIVE_RELAXED 1	/* each round's rows as soon as re-ranked */

extern void shnsw_init_options(void);
extern bytea *shnsw_options(Datum reloptions, bool validate);
extern int	shnsw_get_m(Relation index);
extern int	shnsw_get_ef_construction(Relation index);

#endif							/* STREAMHNSW_OPTIONS_H */
