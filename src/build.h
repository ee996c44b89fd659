/*-------------------------------------------------------------------------
 *
 * build.h
 *	  CREATE INDEX (build.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_BUILD_H
#define STREAMHNSW_BUILD_H

#include "access/genam.h"
#include "nodes/execnodes.h"
#include "utils/relcache.h"

/* CREATE INDEX sub-phases for pg_stat_progress_create_index */
#define SHNSW_PHASE_LOAD		2
#define SHNSW_PHASE_GRAPH		3
#define SHNSW_PHASE_WRITE		4
#define SHNSW_PHASE_INSERT		5

extern IndexBuildResult *shnsw_build(Relation heap, Relation index, IndexInfo *indexInfo);
extern void shnsw_buildempty(Relation index);

#endif							/* STREAMHNSW_BUILD_H */
