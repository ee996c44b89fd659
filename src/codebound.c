/*-------------------------------------------------------------------------
 *
 * codebound.c
 *	  What an SQ8 code says about a node's exact distance: error bounds of
 *	  the navigation distance, residuals, and the classes of clamped values.
 *
 * Pure code. A scan (scan.c) returns a row only once no node it has not
 * re-ranked can be nearer; these bounds are what it measures that by.
 * Not to be confused with bound.c, the distance bound of a WHERE clause.
 *
 *-------------------------------------------------------------------------
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "codebound.h"
#include "kernels_bit.h"

/*
 * A bit index's code is the value itself (src/README, Bit vectors): the
 * navigation distance is exact, but for the float rounding of a Jaccard
 * distance (ours rounded once to float, pgvector's in double or float).
 */
static double
bit_err_abs(ShnswMetric metric)
{
	return metric == SHNSW_METRIC_JACCARD ? 2 * (double) FLT_EPSILON : 0.0;
}

/* The bit vector whose bytes nav holds (0 .. 255 each), into out. */
static void
bit_bytes(const float *nav, uint8_t *out, int dims)
{
	for (int i = 0; i < dims; i++)
		out[i] = (uint8_t) nav[i];
}

void
shnsw_codebound_prepare(ShnswCodeBound *b, ShnswMetric metric, bool unbounded,
						const float *nav, const float *lo, const float *scale, int dims,
						double residual)
{
	const double eps = FLT_EPSILON;
	double		sumsq = 0.0,
				sume = 0.0,
				sumr = 0.0,
				varsum = 0.0,
				sumabs = 0.0,
				mag = 0.0,
				rndsq = 0.0,
				rndabs = 0.0,
				qsq = 0.0,
				varmax = 0.0,
				varq = 0.0;

	if (shnsw_metric_is_bit(metric))
	{
		/* exact codes: no step, no residual, nothing clamped (res_range 0) */
		*b = (ShnswCodeBound) {.metric = metric, .dims = dims, .nav = nav, .lo = lo,
		.scale = scale, .err_abs = bit_err_abs(metric), .err_typ = bit_err_abs(metric)};
		return;
	}

	/*
	 * A code c stands for x' = lo + c * scale, |x_i - x'_i| <= scale_i / 2
	 * inside the trained range. Besides that half step, allow for float
	 * rounding: per dimension, of decoding and of the query's offsets
	 * (absolute, relative to the magnitudes involved), and of the sums
	 * (relative, growing with the number of dimensions), in both the
	 * navigation and the exact distance.
	 */
	for (int i = 0; i < dims; i++)
	{
		double		sc = scale[i];
		double		x0 = fabs(lo[i]),
					x1 = fabs(lo[i] + 255.0 * sc);
		double		xmax = x0 > x1 ? x0 : x1;	/* finite: no libm fmax call */
		double		r = 2 * eps * (xmax + fabs(nav[i]));
		double		e = sc / 2 + r;

		sumsq += e * e;
		sume += e;
		sumr += r;
		varsum += sc * sc / 12;
		sumabs += fabs(nav[i]) * e;
		mag += fabs(nav[i]) * xmax;
		rndsq += r * r;
		rndabs += fabs(nav[i]) * r;
		qsq += (double) nav[i] * nav[i];
		if (sc * sc / 12 > varmax)
			varmax = sc * sc / 12;
		varq += (double) nav[i] * nav[i] * sc * sc / 12;
	}
	b->metric = metric;
	b->unbounded = unbounded;
	b->sketched = false;
	b->dims = dims;
	b->nav = nav;
	b->lo = lo;
	b->scale = scale;
	b->err_rel = 2 * eps * (dims + 8);
	b->qnorm = sqrt(qsq);
	b->res_range = shnsw_clamp_unit(metric, scale, dims);
	if (metric == SHNSW_METRIC_L1)
	{
		/*
		 * L1 navigates on sum |q_i - x'_i|, and by the triangle inequality
		 * in each dimension the exact distance is within sum |x_i - x'_i|
		 * of it: every dimension off by its half step at worst.
		 */
		b->err_abs = sume;
	}
	else if (metric != SHNSW_METRIC_IP)
		b->err_abs = sqrt(sumsq);
	else
		b->err_abs = sumabs + b->err_rel * mag;

	/*
	 * The typical error. Rounding leaves x - x' = e with e_i about uniform
	 * on [-step_i / 2, step_i / 2], independent from one dimension to the
	 * next: var e_i = step_i^2 / 12. With u = (q - x') / |q - x'|,
	 * |q - x|^2 = |q - x'|^2 - 2 |q - x'| u.e + |e|^2 >= |q - x'|^2 -
	 * 2 |q - x'| u.e, and u.e has a variance of at most the largest
	 * step_i^2 / 12, so |q - x| >= sqrt(est) - 6 sd but with odds below
	 * 1e-8 (a sum of uniforms has lighter tails than the normal). Inner
	 * product: -q.x = -q.x' - q.e, var q.e = sum q_i^2 step_i^2 / 12. In
	 * 384 dimensions this is a fifth of the worst case (every dimension
	 * off by half a step at once, in the worst direction); in 3 it is
	 * larger, and the worst case stands.
	 *
	 * L1: with a = q - x', each dimension's term |a_i - e_i| - |a_i| is at
	 * least -sign(a_i) e_i (pointwise: it is exactly that when |a_i| is
	 * past e_i, and larger when the query lies inside the cell), so
	 * |q - x|_1 - est is at least a sum of independent uniforms of
	 * variance sum step_i^2 / 12: the same six deviations hold with the
	 * same odds. In 384 dimensions of equal steps that is a sixth of the
	 * worst case sum step_i / 2.
	 */
	if (metric == SHNSW_METRIC_L1)
		b->err_typ = SHNSW_CODEBOUND_SIGMAS * sqrt(varsum) + sumr;
	else if (metric != SHNSW_METRIC_IP)
		b->err_typ = SHNSW_CODEBOUND_SIGMAS * sqrt(varmax) + sqrt(rndsq);
	else
		b->err_typ = SHNSW_CODEBOUND_SIGMAS * sqrt(varq) + rndabs + b->err_rel * mag;
	b->err_typ = fmin(b->err_typ, b->err_abs);

	/*
	 * The largest actual residual |x - x'| of any node (kept on the
	 * metapage) is far below the worst case of every dimension off by half
	 * a step at once (0.63 of it on clustered 384-d data), and covers
	 * clamped values too: |q - x| >= |q - x'| - |x - x'| (decoding's
	 * rounding added); inner product: -q.x >= -q.x' - |q| |x - x'|.
	 */
	b->rnd_l2 = sqrt(rndsq);
	b->rnd_l1 = sumr;
	b->rnd_ip = rndabs;
	b->mag = mag;
	if (residual >= 0.0)
		shnsw_codebound_set_residual(b, residual);
}

void
shnsw_codebound_set_residual(ShnswCodeBound *b, double residual)
{
	residual = residual * (1 + 1e-6) + 1e-12;
	if (shnsw_metric_is_bit(b->metric))
		b->err_abs = bit_err_abs(b->metric);	/* exact codes: no residual */
	else if (b->metric == SHNSW_METRIC_L1)
		b->err_abs = residual + b->rnd_l1;	/* residual: |x - x'|_1 */
	else if (b->metric != SHNSW_METRIC_IP)
		b->err_abs = residual + b->rnd_l2;
	else
		b->err_abs = b->qnorm * (1 + (double) FLT_EPSILON) * residual + b->rnd_ip +
			b->err_rel * b->mag;
}

/*
 * |x - x'| of a value and its decoded code (excess false), or the norm of
 * what the difference exceeds half a step by, past encoding's float
 * rounding (excess true): one loop for the two, as they must decode alike.
 */
static double
code_error(ShnswMetric metric, const float *lo, const float *scale, const float *v,
		   const uint8_t *code, int dims, bool excess)
{
	double		sum = 0.0;

	if (shnsw_metric_is_bit(metric))
		return 0.0;
	for (int i = 0; i < dims; i++)
	{
		double		x = (double) lo[i] + (double) code[i] * (double) scale[i];
		double		e = fabs((double) v[i] - x);

		if (excess)
		{
			/* the float rounding of encoding: of v - lo, and of its quotient */
			double		tol = 2 * FLT_EPSILON * (fabs((double) v[i]) + fabs(x) + 256.0 * scale[i]);

			e -= (double) scale[i] / 2;
			if (e <= tol)
				continue;
		}
		sum += metric == SHNSW_METRIC_L1 ? e : e * e;
	}
	if (sum == 0.0 && excess)
		return 0.0;
	if (metric != SHNSW_METRIC_L1)
		sum = sqrt(sum);
	/* double rounding of the sums, upwards (the bound rounds it up again) */
	return sum * (1 + 1e-9) + 1e-12;
}

double
shnsw_code_residual(ShnswMetric metric, const float *lo, const float *scale, const float *v,
					const uint8_t *code, int dims)
{
	return code_error(metric, lo, scale, v, code, dims, false);
}

double
shnsw_code_excess(ShnswMetric metric, const float *lo, const float *scale, const float *v,
				  const uint8_t *code, int dims)
{
	return code_error(metric, lo, scale, v, code, dims, true);
}

double
shnsw_clamp_unit(ShnswMetric metric, const float *scale, int dims)
{
	double		half = 0.0;

	if (shnsw_metric_is_bit(metric))
		return 0.0;				/* codes are exact: nothing is clamped */
	for (int i = 0; i < dims; i++)
		half += metric == SHNSW_METRIC_L1 ? (double) scale[i] / 2 :
			(double) scale[i] * scale[i] / 4;
	return metric == SHNSW_METRIC_L1 ? half : sqrt(half);
}

double
shnsw_clamp_class_limit(int k, double unit)
{
	return unit * exp2((k - 20) / 4.0);
}

uint8_t
shnsw_clamp_flags(double excess, double unit)
{
	if (!(excess > 0.0))
		return 0;
	for (int k = 1; k < SHNSW_NODE_CLAMP_CLASSES; k++)
	{
		/* (a class limit a hair below the excess is not enough) */
		if (excess * (1 + 1e-6) <= shnsw_clamp_class_limit(k, unit))
			return SHNSW_NODE_CLAMPED | (uint8_t) (k << SHNSW_NODE_CLAMP_SHIFT);
	}
	return SHNSW_NODE_CLAMPED;
}

float
shnsw_clamp_distance(ShnswMetric nav_metric, float d, double slack)
{
	double		x;
	float		f;

	if (nav_metric == SHNSW_METRIC_IP)
		x = (double) d - slack;
	else if (nav_metric == SHNSW_METRIC_L1 || shnsw_metric_is_bit(nav_metric))
		x = fmax((double) d - slack, 0.0);
	else
	{
		x = sqrt(fmax((double) d, 0.0)) - slack;
		x = x > 0.0 ? x * x : 0.0;
	}
	f = (float) x;
	if ((double) f > x)
		f = nextafterf(f, -INFINITY);
	return f;
}

double
shnsw_codebound_upper(const ShnswCodeBound *b, double est)
{
	double		base;

	if (b->sketched)
		return INFINITY;

	switch (b->metric)
	{
		case SHNSW_METRIC_L2:
			base = sqrt(fmax(est, 0.0)) + b->err_abs;
			break;
		case SHNSW_METRIC_COSINE:
			if (b->unbounded)
				return INFINITY;
			base = sqrt(fmax(est, 0.0)) + b->err_abs;
			base += b->err_rel * base;
			return base * base / 2 + b->err_rel;
		default:
			/* inner product and L1 navigate in the exact distance's units */
			base = est + b->err_abs;
			break;
	}
	return base + b->err_rel * fabs(base);
}

double
shnsw_codebound_lower(const ShnswCodeBound *b, double est)
{
	double		base;

	if (b->sketched)
		return -INFINITY;

	switch (b->metric)
	{
		case SHNSW_METRIC_L2:
			/* est = |q - x'|^2; |q - x| >= sqrt(est) - |x - x'| */
			base = sqrt(fmax(est, 0.0));
			break;
		case SHNSW_METRIC_COSINE:
			if (b->unbounded)
				return -INFINITY;

			/*
			 * est = |qn - x'|^2 for the normalized query and row; for unit
			 * vectors the cosine distance is |qn - xn|^2 / 2, and |qn - xn|
			 * >= sqrt(est) - |xn - x'|. The sums' rounding is absolute here
			 * (pgvector computes 1 - similarity), err_rel of it.
			 */
			base = sqrt(fmax(est, 0.0));
			base = fmax(base - b->err_abs - b->err_rel * base, 0.0);
			return base * base / 2 - b->err_rel;
		default:

			/*
			 * inner product: est = -q.x'; -q.x >= est - sum |q_i| |x_i -
			 * x'_i|. L1: est = |q - x'|_1; |q - x|_1 >= est - |x - x'|_1.
			 */
			base = est;
			break;
	}
	return base - b->err_abs - b->err_rel * fabs(base);
}

bool
shnsw_code_at_edge(ShnswMetric metric, const uint8_t *code, int dims)
{
	if (shnsw_metric_is_bit(metric))
		return false;
	return memchr(code, 0, dims) != NULL || memchr(code, 255, dims) != NULL;
}

/* shnsw_codebound_code of a bit index: the exact distance, less its rounding */
static double
codebound_bit_code(const ShnswCodeBound *b, const uint8_t *code)
{
	uint8_t		q[SHNSW_BIT_MAX_BYTES];
	double		d;

	bit_bytes(b->nav, q, b->dims);
	if (b->metric == SHNSW_METRIC_HAMMING)
		d = shnsw_bit_xor_count(q, code, b->dims);
	else
		d = shnsw_bit_jaccard(q, shnsw_bit_count(q, b->dims), code, b->dims);
	return shnsw_codebound_lower(b, d);
}

double
shnsw_codebound_code(const ShnswCodeBound *b, const uint8_t *code)
{
	const double eps = FLT_EPSILON;
	double		sum = 0.0,
				mag = 0.0;

	if ((b->metric == SHNSW_METRIC_COSINE && b->unbounded) || b->sketched)
		return -INFINITY;
	if (shnsw_metric_is_bit(b->metric))
		return codebound_bit_code(b, code);
	for (int i = 0; i < b->dims; i++)
	{
		double		sc = b->scale[i];
		double		x = (double) b->lo[i] + code[i] * sc;
		double		xmax = fmax(fabs(b->lo[i]), fabs(b->lo[i] + 255.0 * sc));
		double		q = b->nav[i];
		double		e = sc / 2 + 2 * eps * (xmax + fabs(q));
		double		lo = code[i] == 0 ? -INFINITY : x - e;
		double		hi = code[i] == 255 ? INFINITY : x + e;

		if (b->metric == SHNSW_METRIC_IP)
		{
			/* the least -q_i x_i over [lo, hi] */
			if (q > 0)
				sum += isinf(hi) ? -INFINITY : -q * hi;
			else if (q < 0)
				sum += isinf(lo) ? -INFINITY : -q * lo;
			mag += fabs(q) * xmax;
		}
		else
		{
			/* the distance from q_i to [lo, hi] */
			double		g = q < lo ? lo - q : q > hi ? q - hi : 0.0;

			sum += b->metric == SHNSW_METRIC_L1 ? g : g * g;
		}
	}
	if (b->metric == SHNSW_METRIC_IP)
		return sum - b->err_rel * (fabs(sum) + mag);
	if (b->metric != SHNSW_METRIC_L1)
		sum = sqrt(sum);
	sum = fmax(sum - b->err_rel * sum, 0.0);
	if (b->metric == SHNSW_METRIC_COSINE)
		return sum * sum / 2 - b->err_rel;
	return sum;
}
