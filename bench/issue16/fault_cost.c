/*
 * fault_cost.c: what a new process pays to touch a shared memory segment
 * another process filled, as a new backend pays for the shared graph image.
 *
 * Creates a POSIX shared memory object of SIZE_MB, fills it, then five
 * times forks a child that maps it and either (mode 0) reads NTOUCH random
 * 4 kB pages, taking a minor fault for each 64 kB window it touches first
 * (the kernel's fault-around maps 16 pages a fault), or (mode 1) first asks
 * the kernel to map the whole object (madvise MADV_POPULATE_READ, Linux
 * 5.14) and then reads the same pages.
 *
 *   cc -O2 -o fault_cost fault_cost.c && ./fault_cost 62 0 3000 && ./fault_cost 62 1 3000
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

static double
now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int
main(int argc, char **argv)
{
	size_t		size;
	int			mode,
				ntouch,
				fd;
	char	   *p;

	if (argc != 4)
	{
		fprintf(stderr, "usage: %s SIZE_MB MODE(0 fault, 1 populate) NTOUCH\n", argv[0]);
		return 2;
	}
	size = (size_t) atol(argv[1]) << 20;
	mode = atoi(argv[2]);
	ntouch = atoi(argv[3]);
	fd = shm_open("/shnsw_fault_cost", O_CREAT | O_RDWR, 0600);
	if (fd < 0 || ftruncate(fd, size) != 0)
	{
		perror("shm");
		return 1;
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	memset(p, 1, size);
	munmap(p, size);
	for (int run = 0; run < 5; run++)
	{
		pid_t		child = fork();

		if (child == 0)
		{
			double		t0,
						t1,
						t2;
			long		sum = 0;
			char	   *q = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);

			t0 = now_us();
			if (mode == 1 && madvise(q, size, MADV_POPULATE_READ) != 0)
				perror("madvise");
			t1 = now_us();
			srand(run + 1);
			for (int i = 0; i < ntouch; i++)
				sum += q[((size_t) rand() * 4096) % size];
			t2 = now_us();
			printf("populate %.0f us, %d random page reads %.0f us (%ld)\n",
				   t1 - t0, ntouch, t2 - t1, sum);
			fflush(stdout);
			_exit(0);
		}
		waitpid(child, NULL, 0);
	}
	shm_unlink("/shnsw_fault_cost");
	return 0;
}
