/*-------------------------------------------------------------------------
 *
 * reach.c
 *	  The reachability walk-and-attach (reach.h). Pure code.
 *
 *-------------------------------------------------------------------------
 */
#include "port.h"
#include "reach.h"

/* The walk-and-attach loop (reach.h). */
int64_t
shnsw_reach_all(int64_t n, int64_t entry, const ShnswReachOps *ops, void *arg)
{
	int64_t		added = 0;

	ops->walk(arg, entry);
	for (int64_t i = 0; i < n; i++)
	{
		if (ops->done != NULL && ops->done(arg))
			break;
		shnsw_check_interrupts();
		if (ops->reached(arg, i))
			continue;
		if (ops->step != NULL)
			ops->step(arg, i);
		if (ops->attach(arg, i))
		{
			added++;
			ops->walk(arg, i);
		}
	}
	return added;
}
