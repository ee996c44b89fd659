/*-------------------------------------------------------------------------
 *
 * cache_sql.c
 *	  The shared cache's SQL functions: streamhnsw_cache_load, _drop and
 *	  _list, and their C counterpart for VACUUM's truncation
 *	  (shnsw_cache_drop_index).
 *
 * load and drop check the index's kind and the caller's privilege in the
 * catalog before they lock it (indexopen.c); list shows a plain role
 * only this database's indexes it may read.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/relation.h"
#include "catalog/index.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "commands/defrem.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "cache.h"
#include "cache_int.h"
#include "indexopen.h"
#include "meta.h"

/*
 * evict_rights_collect fills r with the owners of ready copies whose
 * privileges the current user has (a superuser: NULL, any). Reads the
 * registry under its lock, then the catalog with no lock held.
 */
static const EvictRights *
evict_rights_collect(EvictRights *r)
{
	Oid			seen[CACHE_MAX_ENTRIES];
	int			nseen = 0;

	if (superuser())
		return NULL;
	LWLockAcquire(&cache_ctl->lock, LW_SHARED);
	for (int i = 0; i < CACHE_MAX_ENTRIES; i++)
	{
		CacheEntry   *e = &cache_ctl->entries[i];
		bool		dup = false;

		if (e->state != ENTRY_READY)
			continue;
		for (int k = 0; k < nseen && !dup; k++)
			dup = seen[k] == e->owner;
		if (!dup)
			seen[nseen++] = e->owner;
	}
	LWLockRelease(&cache_ctl->lock);
	r->n = 0;
	for (int k = 0; k < nseen; k++)
		if (has_privs_of_role(GetUserId(), seen[k]))
			r->owners[r->n++] = seen[k];
	return r;
}

PG_FUNCTION_INFO_V1(streamhnsw_cache_load);

/*
 * streamhnsw_cache_load(index) builds (or brings up to date) the index's
 * copy now and returns its size in bytes; NULL, with a NOTICE saying why,
 * if it cannot have one.
 */
Datum
streamhnsw_cache_load(PG_FUNCTION_ARGS)
{
	Relation	index = shnsw_index_open(PG_GETARG_OID(0), AccessShareLock, SHNSW_RIGHT_SELECT);
	ShnswIndexInfo *info;
	ShnswMetaSnapshot snap;
	LocalCopy *li = NULL;
	int			status = SHNSW_CACHE_UNAVAILABLE;
	Datum		result = (Datum) 0;

	EvictRights rights;

	cache_registry_failed_at = 0;		/* on request: try again now */
	shnsw_read_meta(index, &snap);
	info = shnsw_get_index_info(index);
	cache_evict_refused = false;
	if (RelationUsesLocalBuffers(index) || cache_try_get_ctl() == NULL)
		status = SHNSW_CACHE_UNAVAILABLE;
	else if (!info->quant_trained)
		status = SHNSW_CACHE_MISSING;
	else
	{
		CacheToken	tok = cache_token_of(&snap);

		cache_sweep_dropped();
		li = cache_lookup_or_build(index, info, &tok, false, false, &status);
		if (li == NULL && status == SHNSW_CACHE_STALE)
			li = cache_lookup_or_build(index, info, &tok, true, false, &status);
		if (li == NULL && status != SHNSW_CACHE_BUILDING)
		{
			/* only copies of indexes the caller could drop may make room */
			cache_evict_rights = evict_rights_collect(&rights);
			PG_TRY();
			{
				li = cache_build(index, info, true, &status);
			}
			PG_FINALLY();
			{
				cache_evict_rights = NULL;
			}
			PG_END_TRY();
		}
	}
	if (li != NULL)
		result = Int64GetDatum((int64) li->cp->total);
	else if (cache_evict_refused && (status == SHNSW_CACHE_FULL || status == SHNSW_CACHE_UNAVAILABLE))
		ereport(NOTICE,
				(errmsg("index \"%s\" has no copy in the shared cache: %s",
						RelationGetRelationName(index), shnsw_cache_status_name(status)),
				 errdetail("Making room would evict copies of other roles' indexes that are in use."),
				 errhint("Only their owners or a superuser may evict them; or raise streamhnsw.shared_cache_size.")));
	else
		ereport(NOTICE,
				(errmsg("index \"%s\" has no copy in the shared cache: %s",
						RelationGetRelationName(index), shnsw_cache_status_name(status))));
	relation_close(index, AccessShareLock);
	if (li == NULL)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

/*
 * shnsw_cache_drop_index drops the index's copy; true if it had a ready
 * one. Attaches the registry only if it exists: none is created to say
 * there is no copy.
 */
bool
shnsw_cache_drop_index(Relation index)
{
	CacheEntry *e;
	dsm_handle	h = DSM_HANDLE_INVALID;
	bool		dropped = false;

	if (!cache_registry_exists())
		return false;
	cache_get_ctl();
	LWLockAcquire(&cache_ctl->lock, LW_EXCLUSIVE);
	e = cache_find_entry(index);
	if (e != NULL && e->state == ENTRY_READY)
	{
		h = cache_drop_segment(e);
		e->invalidations++;
		dropped = true;
	}
	LWLockRelease(&cache_ctl->lock);
	cache_unpin(&h, 1);
	cache_local_sweep();		/* its own mapping of it, if no scan uses it */
	if (dropped)
		cache_warm_note();
	return dropped;
}

PG_FUNCTION_INFO_V1(streamhnsw_cache_drop);

/*
 * streamhnsw_cache_drop(index) drops the index's copy; true if it had one.
 */
Datum
streamhnsw_cache_drop(PG_FUNCTION_ARGS)
{
	Relation	index = shnsw_index_open(PG_GETARG_OID(0), AccessShareLock, SHNSW_RIGHT_SELECT);
	bool		dropped = shnsw_cache_drop_index(index);

	relation_close(index, AccessShareLock);
	PG_RETURN_BOOL(dropped);
}

PG_FUNCTION_INFO_V1(streamhnsw_cache_list);

/*
 * cache_list_visible: whether the current user may see the entry of index
 * relid of this database (SELECT on its table, or owning the index).
 * Reads the catalog; no registry lock may be held.
 */
static bool
cache_list_visible(Oid relid)
{
	Oid			heapoid = IndexGetRelation(relid, true);

	if (!OidIsValid(heapoid))
		return false;			/* dropped meanwhile */
	return pg_class_aclcheck(heapoid, GetUserId(), ACL_SELECT) == ACLCHECK_OK ||
		object_ownercheck(RelationRelationId, relid, GetUserId());
}

/* streamhnsw_cache_list's columns; the last is last_used */
#define CACHE_LIST_COLS 16

/*
 * cache_list_row fills the columns of streamhnsw_cache_list's row for entry
 * e (the state's text is made later, with no lock held). Caller holds
 * cache_ctl->lock.
 */
static void
cache_list_row(CacheEntry *e, Datum *values)
{
	/* the bigint columns, in the function's order */
	int64		counts[] = {
		e->bytes, e->nodes, e->gpages, e->upages,
		pg_atomic_read_u64(&e->hits), pg_atomic_read_u64(&e->misses),
		e->builds, e->invalidations, e->refreshes, e->evictions,
		pg_atomic_read_u64(&e->insert_searches), e->outgrown
	};
	int			n = 0;

	values[n++] = ObjectIdGetDatum(e->relid);
	values[n++] = ObjectIdGetDatum(e->dbid);
	values[n++] = (Datum) 0;
	for (int k = 0; k < lengthof(counts); k++)
		values[n++] = Int64GetDatum(counts[k]);
	values[n++] = TimestampTzGetDatum((TimestampTz) pg_atomic_read_u64(&e->last_used));
	Assert(n == CACHE_LIST_COLS);
}

/*
 * streamhnsw_cache_list() returns one row per index the cache knows: its
 * state, the size of its copy and the counters; and one per dropped copy
 * that some backend still maps (state "dropped": its bytes still count
 * against the budget, cache_int.h's CacheDropped). Superusers and members
 * of pg_monitor or pg_read_all_stats see every database's; other roles
 * only this database's indexes on tables they may SELECT from (or indexes
 * they own). The registry is copied under its lock and filtered after,
 * since the privilege checks read the catalog.
 */
Datum
streamhnsw_cache_list(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	static const char *const states[] = {"", "none", "building", "ready", "refreshing",
	"dropped"};
	const int	dropped_state = 5;
	const int	maxrows = CACHE_MAX_ENTRIES + CACHE_MAX_DROPPED;
	bool		all = has_privs_of_role(GetUserId(), ROLE_PG_MONITOR) ||
		has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
	Datum	   (*rows)[CACHE_LIST_COLS] = palloc0(sizeof(Datum[CACHE_LIST_COLS]) * maxrows);
	Oid		   *relids = palloc(sizeof(Oid) * maxrows);
	uint8	   *state = palloc(maxrows);
	int			nrows = 0;

	InitMaterializedSRF(fcinfo, 0);
	if (!cache_registry_exists())
		return (Datum) 0;		/* no registry, no copies */
	cache_get_ctl();
	cache_sweep_dropped();
	cache_local_sweep();		/* what this backend maps of them, if it can */
	LWLockAcquire(&cache_ctl->lock, LW_SHARED);
	for (int i = 0; i < CACHE_MAX_ENTRIES; i++)
	{
		CacheEntry   *e = &cache_ctl->entries[i];
		Datum	   *values = rows[nrows];

		if (e->state == ENTRY_FREE || (!all && e->dbid != MyDatabaseId))
			continue;
		relids[nrows] = e->relid;
		state[nrows++] = e->state;
		cache_list_row(e, values);
	}
	for (int i = 0; i < CACHE_MAX_DROPPED; i++)
	{
		CacheDropped *d = &cache_ctl->dropped[i];
		Datum	   *values = rows[nrows];

		if (d->copy_id == 0 || (!all && d->dbid != MyDatabaseId))
			continue;
		relids[nrows] = d->relid;
		state[nrows++] = dropped_state;
		values[0] = ObjectIdGetDatum(d->relid);
		values[1] = ObjectIdGetDatum(d->dbid);
		values[3] = Int64GetDatum((int64) d->bytes);
		for (int c = 4; c < CACHE_LIST_COLS - 1; c++)
			values[c] = Int64GetDatum(0);
	}
	LWLockRelease(&cache_ctl->lock);

	for (int r = 0; r < nrows; r++)
	{
		bool		nulls[CACHE_LIST_COLS] = {0};

		/* a dropped copy's index may be gone: it shows to those who see all */
		if (!all && !cache_list_visible(relids[r]))
			continue;
		nulls[CACHE_LIST_COLS - 1] = state[r] == dropped_state;
		rows[r][2] = CStringGetTextDatum(states[state[r]]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, rows[r], nulls);
	}
	pfree(rows);
	return (Datum) 0;
}
