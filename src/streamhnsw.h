/*-------------------------------------------------------------------------
 *
 * streamhnsw.h
 *	  Shared declarations of the streamhnsw index access method.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_H
#define STREAMHNSW_H

#define STREAMHNSW_VERSION "0.1.0"

#endif							/* STREAMHNSW_H */
