/*-------------------------------------------------------------------------
 *
 * streamhnsw.c
 *	  Module entry point: library magic, _PG_init, the end-of-transaction
 *	  check of the search pool, and the extension's informational SQL
 *	  functions.
 *
 * The access method is spread over the other files of this directory;
 * src/README explains the layout.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#if PG_VERSION_NUM < 180000
#error "streamhnsw requires PostgreSQL 18 or later (read streams, asynchronous I/O)"
#endif

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "bound.h"
#include "cache.h"
#include "explain.h"
#include "kernels.h"
#include "options.h"
#include "search.h"

#define STREAMHNSW_VERSION "0.1.0"

PG_MODULE_MAGIC_EXT(.name = "streamhnsw", .version = STREAMHNSW_VERSION);

void		_PG_init(void);

/*
 * No search runs past its transaction: at its end, free the search pool if
 * a search that ended in an error still holds it (search.h). This is the
 * access method's, not host.c's, so that the host layer below the pure
 * code never calls back into it.
 */
static void
search_pool_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PREPARE)
		shnsw_search_pool_end_xact();
}

/*
 * _PG_init registers options and GUCs, picks the distance kernels,
 * installs the EXPLAIN and ExecutorStart hooks and the search pool's
 * transaction callback.
 */
void
_PG_init(void)
{
	shnsw_kernels_init(SHNSW_SIMD_AVX512);
	shnsw_cache_init();
	shnsw_cache_warm_init();
	shnsw_init_options();
	shnsw_explain_init();
	shnsw_bound_init();
	RegisterXactCallback(search_pool_xact_callback, NULL);
}

/*
 * streamhnsw_version() returns the version of the loaded library.
 */
PG_FUNCTION_INFO_V1(streamhnsw_version);
Datum
streamhnsw_version(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(STREAMHNSW_VERSION));
}

/*
 * streamhnsw_cpu_features() returns the SIMD features this CPU offers that
 * the library can dispatch to at run time, in a fixed order.
 */
PG_FUNCTION_INFO_V1(streamhnsw_cpu_features);
Datum
streamhnsw_cpu_features(PG_FUNCTION_ARGS)
{
	Datum		elems[4];
	int			n = 0;

	const ShnswCpuFeatures *cpu = shnsw_cpu_features();

	if (cpu->sse42)
		elems[n++] = CStringGetTextDatum("sse4.2");
	if (cpu->avx2)
		elems[n++] = CStringGetTextDatum("avx2");
	if (cpu->fma)
		elems[n++] = CStringGetTextDatum("fma");
	if (cpu->avx512f)
		elems[n++] = CStringGetTextDatum("avx512f");

	PG_RETURN_ARRAYTYPE_P(construct_array_builtin(elems, n, TEXTOID));
}
