/*-------------------------------------------------------------------------
 *
 * vector.c
 *	  pgvector values: what an index's operator class says about them,
 *	  validation, and conversion to the navigation form.
 *
 * pgvector's vector and halfvec share a layout: a 4-byte varlena header,
 * int16 dimensions, int16 unused, then float4 or IEEE half elements. We
 * read that layout directly (pgvector ships no headers) and never change
 * it: the exact vector stored in the index is the value's own image, so
 * re-ranking can hand it to the operator's function unchanged.
 *
 * PostgreSQL's bit(n) (bit_hamming_ops, bit_jaccard_ops): a 4-byte varlena
 * header, int32 bit length, then the bits packed 8 to a byte, first bit in
 * the high bit, the last byte's unused bits zero. Its navigation form is
 * its bytes as floats (0 .. 255), which the identity quantizer (lo 0,
 * scale 1) turns back into the very bytes: the code is the value.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/genam.h"
#include "catalog/pg_type_d.h"
#include "fmgr.h"
#include "utils/rel.h"

#include "format.h"
#include "kernels.h"
#include "kernels_sparse.h"
#include "vector.h"

typedef struct PgvectorHeader
{
	int32		vl_len_;
	int16		dim;
	int16		unused;
} PgvectorHeader;

#define PGVECTOR_DATA(v) ((const char *) (v) + sizeof(PgvectorHeader))

/* pgvector's sparsevec: indices (0-based, ascending), then the values */
typedef struct PgvectorSparseHeader
{
	int32		vl_len_;
	int32		dim;
	int32		nnz;
	int32		unused;
} PgvectorSparseHeader;

#define SPARSE_SIZE(nnz) ((int) sizeof(PgvectorSparseHeader) + 8 * (nnz))
#define SPARSE_INDICES(v) ((const int32 *) ((const char *) (v) + sizeof(PgvectorSparseHeader)))
#define SPARSE_VALUES(v, nnz) ((const float *) (SPARSE_INDICES(v) + (nnz)))

/* Metric and element-type support functions of the operator classes. */
PG_FUNCTION_INFO_V1(streamhnsw_l2_metric);
Datum
streamhnsw_l2_metric(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(SHNSW_METRIC_L2);
}

PG_FUNCTION_INFO_V1(streamhnsw_ip_metric);
Datum
streamhnsw_ip_metric(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(SHNSW_METRIC_IP);
}

PG_FUNCTION_INFO_V1(streamhnsw_cosine_metric);
Datum
streamhnsw_cosine_metric(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(SHNSW_METRIC_COSINE);
}

PG_FUNCTION_INFO_V1(streamhnsw_l1_metric);
Datum
streamhnsw_l1_metric(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(SHNSW_METRIC_L1);
}

PG_FUNCTION_INFO_V1(streamhnsw_hamming_metric);
Datum
streamhnsw_hamming_metric(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(SHNSW_METRIC_HAMMING);
}

PG_FUNCTION_INFO_V1(streamhnsw_jaccard_metric);
Datum
streamhnsw_jaccard_metric(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(SHNSW_METRIC_JACCARD);
}

PG_FUNCTION_INFO_V1(streamhnsw_bit_type);
Datum
streamhnsw_bit_type(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(SHNSW_ELEM_BIT);
}

PG_FUNCTION_INFO_V1(streamhnsw_sparsevec_type);
Datum
streamhnsw_sparsevec_type(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(SHNSW_ELEM_SPARSE);
}

PG_FUNCTION_INFO_V1(streamhnsw_vector_type);
Datum
streamhnsw_vector_type(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(SHNSW_ELEM_FLOAT4);
}

PG_FUNCTION_INFO_V1(streamhnsw_halfvec_type);
Datum
streamhnsw_halfvec_type(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(SHNSW_ELEM_FLOAT2);
}

/*
 * The value an operator class support function returns (it takes no
 * argument), checked to lie in [lo, hi]: what is called is a catalog
 * entry, so a bad value is an error, not an assertion.
 */
static int32
call_support(Relation index, uint16 procnum, int32 lo, int32 hi)
{
	FmgrInfo   *proc = index_getprocinfo(index, 1, procnum);
	int32		v = DatumGetInt32(FunctionCall1(proc, PointerGetDatum(NULL)));

	if (v < lo || v > hi)
		elog(ERROR, "streamhnsw: operator class support function %d returned %d", procnum, v);
	return v;
}

/* shnsw_index_metric asks the index's operator class (support function 2). */
ShnswMetric
shnsw_index_metric(Relation index)
{
	return (ShnswMetric) call_support(index, SHNSW_METRIC_PROC,
									  SHNSW_METRIC_L2, SHNSW_METRIC_LAST);
}

/* shnsw_index_elemtype asks the index's operator class (support function 3). */
ShnswElemType
shnsw_index_elemtype(Relation index)
{
	return (ShnswElemType) call_support(index, SHNSW_TYPE_PROC,
										SHNSW_ELEM_FLOAT4, SHNSW_ELEM_SPARSE);
}

/* The most dimensions (bits for bit) a column of elemtype may have. */
int
shnsw_max_dims(ShnswElemType elemtype)
{
	return elemtype == SHNSW_ELEM_FLOAT4 ? SHNSW_MAX_VECTOR_DIM :
		elemtype == SHNSW_ELEM_FLOAT2 ? SHNSW_MAX_HALFVEC_DIM :
		elemtype == SHNSW_ELEM_BIT ? SHNSW_MAX_BIT_DIM : SHNSW_MAX_SPARSE_DIM;
}

/* The type's name in messages. */
const char *
shnsw_elemtype_name(ShnswElemType elemtype)
{
	return elemtype == SHNSW_ELEM_FLOAT4 ? "vector" :
		elemtype == SHNSW_ELEM_FLOAT2 ? "halfvec" :
		elemtype == SHNSW_ELEM_BIT ? "bit" : "sparsevec";
}

/*
 * shnsw_index_dims returns the dimensions the indexed column declares,
 * raising an error if it declares none or more than we support. A bit
 * class takes bit(n) only: varbit's values vary in length (pgvector's
 * hnsw refuses it too).
 */
int
shnsw_index_dims(Relation index, ShnswElemType elemtype)
{
	Form_pg_attribute att = TupleDescAttr(RelationGetDescr(index), 0);
	int			dims = att->atttypmod;
	int			max = shnsw_max_dims(elemtype);

	if (elemtype == SHNSW_ELEM_BIT && att->atttypid != BITOID)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("type not supported for streamhnsw index"),
				 errhint("Index a bit(n) column (or an expression cast to bit(n)).")));
	if (dims < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("column does not have dimensions"),
				 errhint("Declare the column as %s(n) to index it with streamhnsw.",
						 shnsw_elemtype_name(elemtype))));
	if (dims > max)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("column cannot have more than %d dimensions for streamhnsw index", max)));
	return dims;
}

/*
 * Size of the varlena image of a vector of these dimensions; of a
 * sparsevec, the image of the most non-zero elements it may have (the
 * bound of its stored images, each of its own size: shnsw_vec_span).
 */
int
shnsw_vec_size(ShnswElemType elemtype, int dims)
{
	if (elemtype == SHNSW_ELEM_SPARSE)
		return SPARSE_SIZE(Min(dims, SHNSW_SPARSE_MAX_NNZ));
	if (elemtype == SHNSW_ELEM_BIT)
		return (int) sizeof(PgvectorHeader) + shnsw_nav_dims(elemtype, dims);
	return (int) sizeof(PgvectorHeader) + dims * (elemtype == SHNSW_ELEM_FLOAT4 ? 4 : 2);
}

/*
 * check_sparse checks a detoasted sparsevec: its size (its non-zero
 * elements'), its dimensions against the index's, finite values (sparsevec
 * input refuses the others).
 */
static struct varlena *
check_sparse(struct varlena *v, int dims)
{
	const PgvectorSparseHeader *h = (const PgvectorSparseHeader *) v;
	const float *x;

	if (VARSIZE(v) < sizeof(PgvectorSparseHeader) || h->nnz < 0 || h->nnz > h->dim ||
		VARSIZE(v) != (Size) SPARSE_SIZE(h->nnz))
		elog(ERROR, "streamhnsw: malformed sparsevec value");
	/* pgvector's sparsevec distance functions say the same */
	if (h->dim != dims)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("different sparsevec dimensions %d and %d", h->dim, dims)));
	x = SPARSE_VALUES(v, h->nnz);
	for (int i = 0; i < h->nnz; i++)
		if (!isfinite(x[i]))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg(isnan(x[i]) ? "NaN not allowed in sparsevec" : "infinite value not allowed in sparsevec")));
	return v;
}

/*
 * shnsw_stored_image returns the image a checked value v is stored as,
 * in vec_size bytes (shnsw_vec_size): the value itself; a sparsevec's
 * followed by zeros to fill them (a build's temporary files hold records of
 * one size), its varlena header still saying its own size, which is what
 * the index stores (shnsw_vec_span). Raises pgvector's error for a
 * sparsevec of more non-zero elements than an indexed one may have. The
 * result may be palloc'd.
 */
struct varlena *
shnsw_stored_image(struct varlena *v, ShnswElemType elemtype, int vec_size)
{
	const PgvectorSparseHeader *h = (const PgvectorSparseHeader *) v;
	struct varlena *img;

	if (elemtype != SHNSW_ELEM_SPARSE)
		return v;
	if (h->nnz > SHNSW_SPARSE_MAX_NNZ)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("sparsevec cannot have more than %d non-zero elements for streamhnsw index",
						SHNSW_SPARSE_MAX_NNZ)));
	if (VARSIZE(v) > (Size) vec_size)
		elog(ERROR, "streamhnsw: sparsevec of %d non-zero elements larger than the index's vectors",
			 h->nnz);
	img = palloc0(vec_size);
	memcpy(img, v, VARSIZE(v));
	return img;
}

/*
 * shnsw_check_vector detoasts a value and checks that it has the index's
 * dimensions (bits for bit) and only finite elements; returns the
 * detoasted value (which may be palloc'd).
 */
struct varlena *
shnsw_check_vector(Datum value, ShnswElemType elemtype, int dims)
{
	struct varlena *v = PG_DETOAST_DATUM(value);
	const PgvectorHeader *h = (const PgvectorHeader *) v;

	if (elemtype == SHNSW_ELEM_BIT)
	{
		int32		bits;

		memcpy(&bits, (const char *) v + VARHDRSZ, sizeof(bits));
		if (bits < 0 || bits > SHNSW_MAX_BIT_DIM ||
			VARSIZE(v) != (Size) shnsw_vec_size(elemtype, bits))
			elog(ERROR, "streamhnsw: malformed bit value");
		/* pgvector's hamming_distance and jaccard_distance say the same */
		if (bits != dims)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("different bit lengths %d and %d", bits, dims)));
		return v;
	}
	if (elemtype == SHNSW_ELEM_SPARSE)
		return check_sparse(v, dims);
	if (VARSIZE(v) != (Size) shnsw_vec_size(elemtype, h->dim))
		elog(ERROR, "streamhnsw: malformed %s value", shnsw_elemtype_name(elemtype));
	if (h->dim != dims)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("expected %d dimensions, not %d", dims, h->dim)));
	if (elemtype == SHNSW_ELEM_FLOAT4)
	{
		const float *x = (const float *) PGVECTOR_DATA(v);

		for (int i = 0; i < dims; i++)
			if (!isfinite(x[i]))
				ereport(ERROR,
						(errcode(ERRCODE_DATA_EXCEPTION),
						 errmsg(isnan(x[i]) ? "NaN not allowed in vector" : "infinite value not allowed in vector")));
	}
	else
	{
		const uint16 *x = (const uint16 *) PGVECTOR_DATA(v);

		for (int i = 0; i < dims; i++)
			if ((x[i] & 0x7C00) == 0x7C00)
				ereport(ERROR,
						(errcode(ERRCODE_DATA_EXCEPTION),
						 errmsg((x[i] & 0x03FF) ? "NaN not allowed in halfvec" : "infinite value not allowed in halfvec")));
	}
	return v;
}

/*
 * sparse_to_nav is shnsw_vector_to_nav of a sparsevec: its sketch
 * (kernels_sparse.h), normalized for cosine. A value that is not zero is
 * indexed under cosine even if its sketch is (its elements cancelled in
 * their buckets): it navigates as the first axis.
 */
static bool
sparse_to_nav(const struct varlena *v, ShnswMetric metric, int dims, float *nav)
{
	const PgvectorSparseHeader *h = (const PgvectorSparseHeader *) v;
	bool		zero = true;

	shnsw_sparse_sketch(SPARSE_INDICES(v), SPARSE_VALUES(v, h->nnz), h->nnz, h->dim, nav, dims);
	if (metric != SHNSW_METRIC_COSINE)
		return true;
	for (int i = 0; i < h->nnz && zero; i++)
		zero = SPARSE_VALUES(v, h->nnz)[i] == 0.0f;
	if (zero)
		return false;
	if (!shnsw_normalize(nav, dims))
	{
		memset(nav, 0, sizeof(float) * dims);
		nav[0] = 1.0f;
	}
	return true;
}

/*
 * shnsw_vector_to_nav converts a checked value to the float vector the graph
 * navigates on (normalized for cosine; a bit vector's bytes), of dims
 * navigation dimensions (shnsw_nav_dims). Returns false if the value cannot
 * be indexed: a zero vector under cosine, whose distance to anything is
 * NaN. (Under Jaccard a zero bit vector is at distance 1 from everything,
 * as pgvector has it, and indexed.)
 */
bool
shnsw_vector_to_nav(const struct varlena *v, ShnswElemType elemtype, ShnswMetric metric,
					int dims, float *nav)
{
	if (elemtype == SHNSW_ELEM_BIT)
	{
		const uint8 *bytes = (const uint8 *) PGVECTOR_DATA(v);

		for (int i = 0; i < dims; i++)
			nav[i] = (float) bytes[i];
	}
	else if (elemtype == SHNSW_ELEM_SPARSE)
		return sparse_to_nav(v, metric, dims, nav);
	else if (elemtype == SHNSW_ELEM_FLOAT4)
		memcpy(nav, PGVECTOR_DATA(v), sizeof(float) * dims);
	else
		shnsw_halves_to_floats((const uint16_t *) PGVECTOR_DATA(v), nav, dims);
	if (metric == SHNSW_METRIC_COSINE)
		return shnsw_normalize(nav, dims);
	return true;
}
