/*-------------------------------------------------------------------------
 *
 * validate.h
 *	  amvalidate (validate.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMHNSW_VALIDATE_H
#define STREAMHNSW_VALIDATE_H

extern bool shnsw_validate(Oid opclassoid);

#endif							/* STREAMHNSW_VALIDATE_H */
