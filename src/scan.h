/*-------------------------------------------------------------------------
 *
 * scan.h
 *	  The access method's scan entry points (scan.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_SCAN_H
#define STREAMHNSW_SCAN_H

#include "access/genam.h"
#include "access/relscan.h"

#include "stats.h"

extern IndexScanDesc shnsw_beginscan(Relation index, int nkeys, int norderbys);
extern void shnsw_rescan(IndexScanDesc scan, ScanKey keys, int nkeys, ScanKey orderbys, int norderbys);
extern bool shnsw_gettuple(IndexScanDesc scan, ScanDirection dir);
extern void shnsw_endscan(IndexScanDesc scan);
extern const ShnswScanStats *shnsw_scan_stats(IndexScanDesc scan);

#endif							/* STREAMHNSW_SCAN_H */
