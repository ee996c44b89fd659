/*-------------------------------------------------------------------------
 *
 * indexopen.c
 *	  Opening an index that a user names to one of our SQL functions
 *	  (streamhnsw_verify, streamhnsw_metapage, streamhnsw_cache_load and
 *	  _drop): its kind and the caller's right are checked in the catalog
 *	  first, so that no lock is ever queued on a relation that is not a
 *	  streamhnsw index or that the caller has no right to, and again once
 *	  the lock is held (the OID may name another relation by then).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/relation.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "indexopen.h"

/* Is a relation of this kind and access method a streamhnsw index? */
static bool
is_ours(char relkind, Oid relam)
{
	return (relkind == RELKIND_INDEX || relkind == RELKIND_PARTITIONED_INDEX) &&
		relam == get_index_am_oid("streamhnsw", false);
}

/*
 * shnsw_index_check raises an error unless relid is a streamhnsw index
 * (perhaps partitioned) on which the current user has the right, reading
 * only the catalog: no lock is taken.
 */
void
shnsw_index_check(Oid relid, ShnswIndexRight right)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Form_pg_class cls;

	if (!HeapTupleIsValid(tup))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	cls = (Form_pg_class) GETSTRUCT(tup);
	if (!is_ours(cls->relkind, cls->relam))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a streamhnsw index", NameStr(cls->relname))));
	if (right == SHNSW_RIGHT_SELECT &&
		pg_class_aclcheck(relid, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_INDEX, NameStr(cls->relname));
	if (right == SHNSW_RIGHT_INSPECT &&
		!object_ownercheck(RelationRelationId, relid, GetUserId()) &&
		!has_privs_of_role(GetUserId(), ROLE_PG_MONITOR))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for index %s", NameStr(cls->relname)),
				 errdetail("Only the owner of the index, members of pg_monitor and superusers may inspect it.")));
	ReleaseSysCache(tup);
}

/*
 * shnsw_index_open opens relid with lockmode, insisting that it is a
 * streamhnsw index with pages of its own, which this session may read, and
 * that the current user has the right to it (checked before the lock is
 * taken, and the kind again after).
 */
Relation
shnsw_index_open(Oid relid, LOCKMODE lockmode, ShnswIndexRight right)
{
	Relation	index;

	shnsw_index_check(relid, right);
	index = relation_open(relid, lockmode);
	if (!is_ours(index->rd_rel->relkind, index->rd_rel->relam))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a streamhnsw index", RelationGetRelationName(index))));
	if (index->rd_rel->relkind == RELKIND_PARTITIONED_INDEX)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is a partitioned streamhnsw index, which has no pages of its own",
						RelationGetRelationName(index)),
				 errhint("Name the index of one of its partitions.")));
	if (index->rd_rel->relpersistence == RELPERSISTENCE_TEMP && !RELATION_IS_LOCAL(index))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot access temporary indexes of other sessions")));
	return index;
}
