/*-------------------------------------------------------------------------
 *
 * buildpar.h
 *	  Parallel CREATE INDEX (buildpar.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_BUILDPAR_H
#define STREAMHNSW_BUILDPAR_H

#include "nodes/execnodes.h"
#include "utils/relcache.h"

#include "buildgraph.h"
#include "format.h"

typedef struct ShnswParallelBuild ShnswParallelBuild;
extern Size shnsw_parallel_row_bytes(int nworkers);
extern ShnswParallelBuild *shnsw_parallel_begin(int nworkers, int dims, int m, int efc,
												ShnswMetric metric, bool use_codes,
												bool use_halves, float half_scale, uint32 n,
												const float *lo, const float *scale,
												uint64 seed, ShnswBuildGraph *g);
extern int	shnsw_parallel_launch(ShnswParallelBuild *pb);
extern void shnsw_parallel_ready(ShnswParallelBuild *pb, uint32 n);
extern int	shnsw_parallel_link(ShnswParallelBuild *pb, ShnswBuildGraph *g);
extern void shnsw_parallel_end(ShnswParallelBuild *pb);
struct BufFile;
struct FileSet;
extern const char *shnsw_rest_file_name(void);
extern int	shnsw_parallel_insert(Relation heap, Relation index, IndexInfo *indexInfo,
								  int nworkers, struct BufFile *file,
								  const struct FileSet *fileset, uint32 nrows, int vec_size,
								  uint32 *leader_rows);

#endif							/* STREAMHNSW_BUILDPAR_H */
