/*-------------------------------------------------------------------------
 *
 * explain.h
 *	  EXPLAIN (ANALYZE) lines of streamhnsw scans (explain.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_EXPLAIN_H
#define STREAMHNSW_EXPLAIN_H

extern void shnsw_explain_init(void);

#endif							/* STREAMHNSW_EXPLAIN_H */
