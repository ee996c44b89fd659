/*-------------------------------------------------------------------------
 *
 * streamhnsw.c
 *	  Module entry point: library magic, _PG_init, and the extension's
 *	  informational SQL functions.
 *
 * The access method is spread over the other files of this directory;
 * src/README explains the layout.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "streamhnsw.h"

PG_MODULE_MAGIC_EXT(.name = "streamhnsw", .version = STREAMHNSW_VERSION);

void		_PG_init(void);

/*
 * _PG_init registers options and GUCs, picks the distance kernels and
 * installs the EXPLAIN and ExecutorStart hooks.
 */
void
_PG_init(void)
{
	shnsw_kernels_init(SHNSW_SIMD_AVX512);
	shnsw_cache_init();
	shnsw_init_options();
	shnsw_explain_init();
	shnsw_bound_init();
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
