/*-------------------------------------------------------------------------
 *
 * quantizer.h
 *	  SQ8 parameters on disk: written by a build, trained from the first
 *	  vector, retrained as a small index grows (quantizer.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_QUANTIZER_H
#define STREAMHNSW_QUANTIZER_H

#include "utils/relcache.h"

#include "meta.h"

/*
 * An index that was built small (or empty) retrains SQ8 from its own exact
 * vectors each time it doubles, until it has trained on this many rows.
 */
#define SHNSW_RETRAIN_MAX_ROWS	100000
/* nodes placed, at least, between retrains for values far outside the range */
#define SHNSW_RETRAIN_MIN_STEP	64

extern void shnsw_write_quant(Relation index, BlockNumber quant_start, int dims,
							  const float *lo, const float *scale);
extern void shnsw_retrain(Relation index);
extern void shnsw_train_from_first(Relation index, ShnswIndexInfo *info, const float *nav);

#endif							/* STREAMHNSW_QUANTIZER_H */
