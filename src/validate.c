/*-------------------------------------------------------------------------
 *
 * validate.c
 *	  amvalidate: check that an operator class can drive a streamhnsw index.
 *
 * A valid class has exactly one operator, strategy 1, an ORDER BY operator
 * on the class's type returning float8 and sorted by a btree family; support
 * function 1 is the distance (type, type) -> float8 and must be the very
 * function of that operator, so that re-ranked distances equal the values
 * ORDER BY sorts on; functions 2 (metric) and 3 (element type) take and
 * return internal and must answer with values this library knows.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/amvalidate.h"
#include "access/htup_details.h"
#include "catalog/pg_am.h"
#include "catalog/pg_amop.h"
#include "catalog/pg_amproc.h"
#include "catalog/pg_language.h"
#include "catalog/pg_opclass.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/syscache.h"

#include "validate.h"
#include "vector.h"

#define INVALID(...) \
	do { \
		ereport(INFO, \
				(errcode(ERRCODE_INVALID_OBJECT_DEFINITION), \
				 errmsg(__VA_ARGS__))); \
		result = false; \
	} while (0)

static const char *const metric_symbols[] = {
	"streamhnsw_l2_metric", "streamhnsw_ip_metric", "streamhnsw_cosine_metric",
	"streamhnsw_l1_metric", "streamhnsw_hamming_metric", "streamhnsw_jaccard_metric", NULL
};
static const char *const type_symbols[] = {
	"streamhnsw_vector_type", "streamhnsw_halfvec_type", "streamhnsw_bit_type",
	"streamhnsw_sparsevec_type", NULL
};

/* The C symbol of a function of this library, or NULL. */
static char *
library_symbol(Oid procoid)
{
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(procoid));
	char	   *symbol = NULL;

	if (!HeapTupleIsValid(tup))
		return NULL;
	if (((Form_pg_proc) GETSTRUCT(tup))->prolang == ClanguageId)
	{
		bool		isnull;
		Datum		bin = SysCacheGetAttr(PROCOID, tup, Anum_pg_proc_probin, &isnull);

		if (!isnull && strstr(TextDatumGetCString(bin), "streamhnsw") != NULL)
			symbol = TextDatumGetCString(SysCacheGetAttr(PROCOID, tup, Anum_pg_proc_prosrc, &isnull));
	}
	ReleaseSysCache(tup);
	return symbol;
}

/*
 * is_library_function: is procoid a C function of this library whose symbol
 * is one of names? (Calling an unknown internal function to ask would not
 * be safe.)
 */
static bool
is_library_function(Oid procoid, const char *const *names)
{
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(procoid));
	bool		found = false;

	if (!HeapTupleIsValid(tup))
		return false;
	if (((Form_pg_proc) GETSTRUCT(tup))->prolang == ClanguageId)
	{
		bool		isnull;
		Datum		src = SysCacheGetAttr(PROCOID, tup, Anum_pg_proc_prosrc, &isnull);
		Datum		bin = SysCacheGetAttr(PROCOID, tup, Anum_pg_proc_probin, &isnull);

		if (!isnull && strstr(TextDatumGetCString(bin), "streamhnsw") != NULL)
		{
			char	   *symbol = TextDatumGetCString(src);

			for (int i = 0; names[i] != NULL; i++)
				if (strcmp(symbol, names[i]) == 0)
					found = true;
		}
	}
	ReleaseSysCache(tup);
	return found;
}

/*
 * validate_procs checks the class's support functions' numbers and
 * signatures, and fills procs[1..SHNSW_NPROCS] (InvalidOid if missing).
 */
static bool
validate_procs(Oid opfamilyoid, Oid opcintype, const char *opclassname, Oid *procs)
{
	bool		result = true;
	CatCList   *proclist;

	proclist = SearchSysCacheList1(AMPROCNUM, ObjectIdGetDatum(opfamilyoid));
	for (int i = 0; i < proclist->n_members; i++)
	{
		Form_pg_amproc procform = (Form_pg_amproc) GETSTRUCT(&proclist->members[i]->tuple);
		bool		ok;

		if (procform->amproclefttype != opcintype || procform->amprocrighttype != opcintype)
			continue;
		switch (procform->amprocnum)
		{
			case SHNSW_DISTANCE_PROC:
				ok = check_amproc_signature(procform->amproc, FLOAT8OID, true,
											2, 2, opcintype, opcintype);
				break;
			case SHNSW_METRIC_PROC:
			case SHNSW_TYPE_PROC:
				ok = check_amproc_signature(procform->amproc, INTERNALOID, true,
											1, 1, INTERNALOID);
				break;
			default:
				INVALID("streamhnsw operator class \"%s\" contains function %s with invalid support number %d",
						opclassname, format_procedure(procform->amproc), procform->amprocnum);
				continue;
		}
		if (!ok)
			INVALID("streamhnsw operator class \"%s\" contains function %s with wrong signature for support number %d",
					opclassname, format_procedure(procform->amproc), procform->amprocnum);
		else
			procs[procform->amprocnum] = procform->amproc;
	}
	ReleaseSysCacheList(proclist);
	for (int p = 1; p <= SHNSW_NPROCS; p++)
		if (!OidIsValid(procs[p]))
			INVALID("streamhnsw operator class \"%s\" is missing support function %d",
					opclassname, p);
	return result;
}

/*
 * check_operator checks one operator of the family: one of the class's type
 * must be the ORDER BY operator (strategy 1), sorted by a btree family and
 * returning float8; sets *orderop to it if so.
 */
static bool
check_operator(Form_pg_amop oprform, Oid opcintype, const char *opclassname, Oid *orderop)
{
	bool		result = true;

	if (oprform->amoplefttype != opcintype || oprform->amoprighttype != opcintype)
		return true;			/* another type's: not the class's concern */
	if (oprform->amopstrategy != 1)
		INVALID("streamhnsw operator class \"%s\" contains operator %s with invalid strategy number %d",
				opclassname, format_operator(oprform->amopopr), oprform->amopstrategy);
	else if (oprform->amoppurpose != AMOP_ORDER ||
			 !OidIsValid(oprform->amopsortfamily) ||
			 get_opfamily_method(oprform->amopsortfamily) != BTREE_AM_OID)
		INVALID("streamhnsw operator class \"%s\" contains operator %s that is not an ORDER BY operator sorted by a btree family",
				opclassname, format_operator(oprform->amopopr));
	else if (!check_amop_signature(oprform->amopopr, FLOAT8OID, opcintype, opcintype))
		INVALID("streamhnsw operator class \"%s\" contains operator %s with wrong signature",
				opclassname, format_operator(oprform->amopopr));
	else
		*orderop = oprform->amopopr;
	return result;
}

/*
 * validate_operators checks the class's operators: one ORDER BY operator
 * (strategy 1) sorted by a btree family, returning float8; sets *orderop.
 */
static bool
validate_operators(Oid opfamilyoid, Oid opcintype, const char *opclassname, Oid *orderop)
{
	bool		result = true;
	CatCList   *oprlist = SearchSysCacheList1(AMOPSTRATEGY, ObjectIdGetDatum(opfamilyoid));

	for (int i = 0; i < oprlist->n_members; i++)
		if (!check_operator((Form_pg_amop) GETSTRUCT(&oprlist->members[i]->tuple),
							opcintype, opclassname, orderop))
			result = false;
	ReleaseSysCacheList(oprlist);
	if (!OidIsValid(*orderop))
		INVALID("streamhnsw operator class \"%s\" is missing its ORDER BY operator (strategy 1)",
				opclassname);
	return result;
}

/*
 * validate_agreement checks that the type function describes the indexed
 * type and the metric agrees with the distance the operator computes
 * (pgvector's function names say which).
 */
static bool
validate_agreement(Oid opcintype, const char *opclassname, const Oid *procs)
{
	bool		result = true;
	char	   *typsym = library_symbol(procs[SHNSW_TYPE_PROC]);
	char	   *metsym = library_symbol(procs[SHNSW_METRIC_PROC]);
	char	   *typname = format_type_be(opcintype);
	char	   *distname = get_func_name(procs[SHNSW_DISTANCE_PROC]);
	const char *want_type = strcmp(typname, "halfvec") == 0 ? "streamhnsw_halfvec_type"
		: strcmp(typname, "vector") == 0 ? "streamhnsw_vector_type"
		: strcmp(typname, "bit") == 0 ? "streamhnsw_bit_type"
		: strcmp(typname, "sparsevec") == 0 ? "streamhnsw_sparsevec_type" : NULL;
	const char *want_metric = NULL;

	if (distname != NULL)
	{
		if (strcmp(distname, "l2_distance") == 0)
			want_metric = "streamhnsw_l2_metric";
		else if (strstr(distname, "negative_inner_product") != NULL)
			want_metric = "streamhnsw_ip_metric";
		else if (strcmp(distname, "cosine_distance") == 0)
			want_metric = "streamhnsw_cosine_metric";
		else if (strcmp(distname, "l1_distance") == 0)
			want_metric = "streamhnsw_l1_metric";
		else if (strcmp(distname, "hamming_distance") == 0)
			want_metric = "streamhnsw_hamming_metric";
		else if (strcmp(distname, "jaccard_distance") == 0)
			want_metric = "streamhnsw_jaccard_metric";
	}
	if (want_type == NULL || strcmp(typsym, want_type) != 0)
		INVALID("streamhnsw operator class \"%s\": support function 3 %s does not describe type %s",
				opclassname, format_procedure(procs[SHNSW_TYPE_PROC]), typname);
	if (want_metric == NULL || strcmp(metsym, want_metric) != 0)
		INVALID("streamhnsw operator class \"%s\": support function 2 %s does not match distance function %s",
				opclassname, format_procedure(procs[SHNSW_METRIC_PROC]),
				format_procedure(procs[SHNSW_DISTANCE_PROC]));
	return result;
}

/*
 * shnsw_validate is amvalidate: reports (INFO) every problem of the
 * operator class and returns false if there is one.
 */
bool
shnsw_validate(Oid opclassoid)
{
	bool		result = true;
	HeapTuple	classtup;
	Form_pg_opclass classform;
	Oid			opfamilyoid;
	Oid			opcintype;
	char	   *opclassname;
	Oid			procs[SHNSW_NPROCS + 1] = {0};
	Oid			orderop = InvalidOid;

	classtup = SearchSysCache1(CLAOID, ObjectIdGetDatum(opclassoid));
	if (!HeapTupleIsValid(classtup))
		elog(ERROR, "cache lookup failed for operator class %u", opclassoid);
	classform = (Form_pg_opclass) GETSTRUCT(classtup);
	opfamilyoid = classform->opcfamily;
	opcintype = classform->opcintype;
	opclassname = NameStr(classform->opcname);

	/* support functions */
	result &= validate_procs(opfamilyoid, opcintype, opclassname, procs);

	/* operators */
	result &= validate_operators(opfamilyoid, opcintype, opclassname, &orderop);

	/* re-ranking must compute exactly what ORDER BY sorts on */
	if (OidIsValid(orderop) && OidIsValid(procs[SHNSW_DISTANCE_PROC]) &&
		get_opcode(orderop) != procs[SHNSW_DISTANCE_PROC])
		INVALID("streamhnsw operator class \"%s\": support function 1 %s is not the function of operator %s",
				opclassname, format_procedure(procs[SHNSW_DISTANCE_PROC]), format_operator(orderop));

	/* the metric and type functions must be this library's own */
	if (OidIsValid(procs[SHNSW_METRIC_PROC]) &&
		!is_library_function(procs[SHNSW_METRIC_PROC], metric_symbols))
		INVALID("streamhnsw operator class \"%s\": support function 2 %s is not a streamhnsw metric function",
				opclassname, format_procedure(procs[SHNSW_METRIC_PROC]));
	if (OidIsValid(procs[SHNSW_TYPE_PROC]) &&
		!is_library_function(procs[SHNSW_TYPE_PROC], type_symbols))
		INVALID("streamhnsw operator class \"%s\": support function 3 %s is not a streamhnsw type function",
				opclassname, format_procedure(procs[SHNSW_TYPE_PROC]));

	/*
	 * They must also agree with the class (checked once the functions are
	 * known to be this library's).
	 */
	if (result)
		result = validate_agreement(opcintype, opclassname, procs);

	ReleaseSysCache(classtup);
	return result;
}
