/*-------------------------------------------------------------------------
 *
 * vector.h
 *	  pgvector's values and what an index's operator class says about them
 *	  (vector.c); the support function numbers of the operator classes.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_VECTOR_H
#define STREAMHNSW_VECTOR_H

#include "utils/relcache.h"

#include "format.h"

#define SHNSW_MAX_VECTOR_DIM			2000
#define SHNSW_MAX_HALFVEC_DIM			4000

#define SHNSW_DISTANCE_PROC		1	/* exact distance: the ORDER BY operator's function */
#define SHNSW_METRIC_PROC		2	/* returns the ShnswMetric */
#define SHNSW_TYPE_PROC			3	/* returns the ShnswElemType */
#define SHNSW_NPROCS			3

extern ShnswMetric shnsw_index_metric(Relation index);
extern ShnswElemType shnsw_index_elemtype(Relation index);
extern int	shnsw_max_dims(ShnswElemType elemtype);
extern const char *shnsw_elemtype_name(ShnswElemType elemtype);
extern int	shnsw_index_dims(Relation index, ShnswElemType elemtype);
extern int	shnsw_vec_size(ShnswElemType elemtype, int dims);
extern struct varlena *shnsw_check_vector(Datum value, ShnswElemType elemtype, int dims);
extern struct varlena *shnsw_stored_image(struct varlena *v, ShnswElemType elemtype,
										  int vec_size);
extern bool shnsw_vector_to_nav(const struct varlena *v, ShnswElemType elemtype,
								ShnswMetric metric, int dims, float *nav);

#endif							/* STREAMHNSW_VECTOR_H */
