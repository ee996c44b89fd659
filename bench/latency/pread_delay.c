/*
 * pread_delay.c: an LD_PRELOAD library that emulates slow storage.
 *
 * Every pread/pread64/preadv/preadv2 (and their 64-bit aliases) on a file
 * whose path lies under a given directory (the cluster's base/) sleeps for a
 * set number of microseconds before doing the real read.  Reads elsewhere
 * (WAL, catalogs of other directories, shared libraries) are untouched.
 *
 * Configuration, from the environment of the server process:
 *
 *   SHNSW_PREAD_DIR       path prefix of the files to delay, e.g.
 *                         /tmp/x/data/base/  (default: any path containing
 *                         "/base/")
 *   SHNSW_PREAD_DELAY_US  delay in microseconds (default 0); used when no
 *                         control file is given
 *   SHNSW_PREAD_CTL       optional path of a control file (see struct
 *                         shim_ctl, 64 bytes): the benchmark maps it too, so
 *                         it can switch the delay on and off and change it
 *                         while the server runs, and read the counters of
 *                         delayed reads, bytes and sleep time.  The mapping is
 *                         made in the postmaster before it forks, so every
 *                         backend and I/O worker shares it.
 *
 * The path of a descriptor is found with readlink(/proc/self/fd/N) on each
 * call (about a microsecond, far below a storage read): PostgreSQL reuses
 * descriptor numbers for different files, so a cache keyed by the number
 * alone would be wrong.  Sleeps use a 1 µs timer slack (the default 50 µs
 * slack would add to every delay).
 *
 * With io_method=worker the reads happen in I/O worker processes, several at
 * once, so overlapping reads overlap their delays as they would on real
 * storage.
 *
 * Build: cc -O2 -shared -fPIC -o pread_delay.so pread_delay.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SHIM_MAGIC 0x53484e5357505244ULL	/* "SHNSWPRD" */

struct shim_ctl
{
	uint64_t	magic;
	int64_t		delay_us;		/* set by the controller */
	int64_t		enabled;		/* 0: pass through, count nothing */
	uint64_t	reads;			/* matching read calls (delayed or not) */
	uint64_t	bytes;			/* bytes those calls returned */
	uint64_t	sleep_ns;		/* total time slept */
	uint64_t	other_reads;	/* read calls on files outside the directory */
	uint64_t	pad;
	/*
	 * Storage busy time (a control file of at least 96 bytes): the time
	 * during which at least one delayed read was under way, and how many
	 * such busy periods began. busy_ns / delay is the number of injected
	 * latencies that did not overlap: the serial round trips storage saw,
	 * whatever the CPU did between them (a loaded machine stretches the
	 * gaps, not the busy time).
	 */
	uint64_t	busy_ns;
	uint64_t	bursts;
	int64_t		inflight;		/* delayed reads under way now */
	uint64_t	busy_start_ns;	/* when inflight last went from 0 to 1 */
	int32_t		lock;			/* spinlock over the four fields above */
	int32_t		pad2;
	uint64_t	pad3[3];
};

#define SHIM_CTL_V1_SIZE 64		/* a control file without the busy fields */

typedef ssize_t (*pread_fn) (int, void *, size_t, off_t);
typedef ssize_t (*preadv_fn) (int, const struct iovec *, int, off_t);
typedef ssize_t (*preadv2_fn) (int, const struct iovec *, int, off_t, int);

static pread_fn real_pread;
static pread_fn real_pread64;
static preadv_fn real_preadv;
static preadv_fn real_preadv64;
static preadv2_fn real_preadv2;
static preadv2_fn real_preadv64v2;

static struct shim_ctl *ctl;
static struct shim_ctl local_ctl;	/* used when there is no control file */
static int	ctl_has_busy;		/* the control file holds the busy fields */
static char prefix[4096];
static size_t prefix_len;

__attribute__((constructor))
static void
shim_init(void)
{
	const char *dir = getenv("SHNSW_PREAD_DIR");
	const char *delay = getenv("SHNSW_PREAD_DELAY_US");
	const char *ctlpath = getenv("SHNSW_PREAD_CTL");

	real_pread = (pread_fn) dlsym(RTLD_NEXT, "pread");
	real_pread64 = (pread_fn) dlsym(RTLD_NEXT, "pread64");
	real_preadv = (preadv_fn) dlsym(RTLD_NEXT, "preadv");
	real_preadv64 = (preadv_fn) dlsym(RTLD_NEXT, "preadv64");
	real_preadv2 = (preadv2_fn) dlsym(RTLD_NEXT, "preadv2");
	real_preadv64v2 = (preadv2_fn) dlsym(RTLD_NEXT, "preadv64v2");

	if (dir && *dir)
	{
		strncpy(prefix, dir, sizeof(prefix) - 1);
		prefix_len = strlen(prefix);
	}

	local_ctl.magic = SHIM_MAGIC;
	local_ctl.delay_us = delay ? atoll(delay) : 0;
	local_ctl.enabled = 1;
	ctl = &local_ctl;

	if (ctlpath && *ctlpath)
	{
		int			fd = open(ctlpath, O_RDWR | O_CLOEXEC);

		if (fd >= 0)
		{
			struct stat st;
			size_t		len = SHIM_CTL_V1_SIZE;
			void	   *p;

			/* an older control file is shorter: map only what it has */
			if (fstat(fd, &st) == 0 && st.st_size >= (off_t) sizeof(struct shim_ctl))
				len = sizeof(struct shim_ctl);
			p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			close(fd);
			if (p != MAP_FAILED &&
				((struct shim_ctl *) p)->magic == SHIM_MAGIC)
			{
				ctl = (struct shim_ctl *) p;
				ctl_has_busy = len == sizeof(struct shim_ctl);
			}
		}
	}

	/* Precise sleeps; inherited by every forked child. */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
}

/* Is fd a file under the directory?  Preserves errno. */
static int
fd_matches(int fd)
{
	char		link[64];
	char		path[4096];
	ssize_t		n;
	int			save = errno;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	errno = save;
	if (n <= 0)
		return 0;
	path[n] = '\0';
	if (prefix_len > 0)
		return strncmp(path, prefix, prefix_len) == 0;
	return strstr(path, "/base/") != NULL;
}

static uint64_t
now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t) t.tv_sec * 1000000000ULL + (uint64_t) t.tv_nsec;
}

/* A delayed read begins (delta 1) or ends (-1): keep the busy time. */
static void
busy_change(int delta)
{
	uint64_t	now;

	if (!ctl_has_busy)
		return;
	now = now_ns();
	while (__atomic_exchange_n(&ctl->lock, 1, __ATOMIC_ACQUIRE))
		;
	if (delta > 0 && ctl->inflight++ == 0)
	{
		ctl->busy_start_ns = now;
		ctl->bursts++;
	}
	else if (delta < 0 && ctl->inflight > 0 && --ctl->inflight == 0)
		ctl->busy_ns += now - ctl->busy_start_ns;
	__atomic_store_n(&ctl->lock, 0, __ATOMIC_RELEASE);
}

/* Called before a read: returns 1 if this read is to be counted. */
static int
before_read(int fd)
{
	int64_t		delay_us;
	int			save;

	if (ctl == NULL || !__atomic_load_n(&ctl->enabled, __ATOMIC_RELAXED))
		return 0;
	if (!fd_matches(fd))
	{
		__atomic_fetch_add(&ctl->other_reads, 1, __ATOMIC_RELAXED);
		return 0;
	}
	delay_us = __atomic_load_n(&ctl->delay_us, __ATOMIC_RELAXED);
	if (delay_us > 0)
	{
		struct timespec start,
					end,
					ts;

		save = errno;
		busy_change(1);
		clock_gettime(CLOCK_MONOTONIC, &start);
		ts.tv_sec = delay_us / 1000000;
		ts.tv_nsec = (delay_us % 1000000) * 1000;
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
		clock_gettime(CLOCK_MONOTONIC, &end);
		__atomic_fetch_add(&ctl->sleep_ns,
						   (uint64_t) ((end.tv_sec - start.tv_sec) * 1000000000LL +
									   (end.tv_nsec - start.tv_nsec)),
						   __ATOMIC_RELAXED);
		errno = save;
		return 2;				/* delayed: after_read ends its busy time */
	}
	return 1;
}

static ssize_t
after_read(int counted, ssize_t r)
{
	if (counted)
	{
		if (counted == 2)
		{
			int			save = errno;

			busy_change(-1);
			errno = save;
		}
		__atomic_fetch_add(&ctl->reads, 1, __ATOMIC_RELAXED);
		if (r > 0)
			__atomic_fetch_add(&ctl->bytes, (uint64_t) r, __ATOMIC_RELAXED);
	}
	return r;
}

static void *
resolve(const char *name)
{
	void	   *p = dlsym(RTLD_NEXT, name);

	if (p == NULL)
	{
		errno = ENOSYS;
	}
	return p;
}

ssize_t
pread(int fd, void *buf, size_t count, off_t offset)
{
	int			c;

	if (!real_pread && !(real_pread = (pread_fn) resolve("pread")))
		return -1;
	c = before_read(fd);
	return after_read(c, real_pread(fd, buf, count, offset));
}

ssize_t
pread64(int fd, void *buf, size_t count, off_t offset)
{
	int			c;

	if (!real_pread64 && !(real_pread64 = (pread_fn) resolve("pread64")))
		return -1;
	c = before_read(fd);
	return after_read(c, real_pread64(fd, buf, count, offset));
}

ssize_t
preadv(int fd, const struct iovec *iov, int iovcnt, off_t offset)
{
	int			c;

	if (!real_preadv && !(real_preadv = (preadv_fn) resolve("preadv")))
		return -1;
	c = before_read(fd);
	return after_read(c, real_preadv(fd, iov, iovcnt, offset));
}

ssize_t
preadv64(int fd, const struct iovec *iov, int iovcnt, off_t offset)
{
	int			c;

	if (!real_preadv64 && !(real_preadv64 = (preadv_fn) resolve("preadv64")))
		return -1;
	c = before_read(fd);
	return after_read(c, real_preadv64(fd, iov, iovcnt, offset));
}

ssize_t
preadv2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags)
{
	int			c;

	if (!real_preadv2 && !(real_preadv2 = (preadv2_fn) resolve("preadv2")))
		return -1;
	c = before_read(fd);
	return after_read(c, real_preadv2(fd, iov, iovcnt, offset, flags));
}

ssize_t
preadv64v2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags)
{
	int			c;

	if (!real_preadv64v2 && !(real_preadv64v2 = (preadv2_fn) resolve("preadv64v2")))
		return -1;
	c = before_read(fd);
	return after_read(c, real_preadv64v2(fd, iov, iovcnt, offset, flags));
}
