/* An ordinary MPI program, run by Open MPI over UCX (pml ucx, osc ucx) on emulated devices:
 * two-sided ping-pong at 8 B (eager), 64 KiB and 4 MiB (rendezvous) with every byte
 * checked, an allreduce, and one-sided MPI_Put / MPI_Get / MPI_Fetch_and_op into the other
 * rank's window. Rank 0 prints "mpi story: N ranks, F failures". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, size, failures = 0;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	size_t sizes[] = {8, 65536, 4 << 20};
	for (int s = 0; s < 3; s++) {
		size_t n = sizes[s];
		uint8_t *buf = malloc(n);
		for (int it = 0; it < 20; it++) {
			if (rank == 0) {
				for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)(i * 7 + it);
				MPI_Send(buf, (int)n, MPI_BYTE, 1, it, MPI_COMM_WORLD);
				MPI_Recv(buf, (int)n, MPI_BYTE, 1, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				for (size_t i = 0; i < n; i++)
					if (buf[i] != (uint8_t)(i * 7 + it + 1)) { failures++; break; }
			} else {
				MPI_Recv(buf, (int)n, MPI_BYTE, 0, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)(buf[i] + 1);
				MPI_Send(buf, (int)n, MPI_BYTE, 0, it, MPI_COMM_WORLD);
			}
		}
		free(buf);
	}
	long mine = rank + 1, sum = 0;
	MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	if (sum != (long)size * (size + 1) / 2) failures++;
	/* one-sided: put, get and fetch-and-op into the other rank's window */
	uint64_t *win_mem;
	MPI_Win win;
	MPI_Win_allocate(1024 * sizeof(uint64_t), sizeof(uint64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &win_mem, &win);
	for (int i = 0; i < 1024; i++) win_mem[i] = 0;
	MPI_Win_fence(0, win);
	uint64_t src[1024], back[1024];
	for (int i = 0; i < 1024; i++) src[i] = ((uint64_t)rank << 32) | i;
	int peer = (rank + 1) % size;
	MPI_Put(src, 1024, MPI_UINT64_T, peer, 0, 1024, MPI_UINT64_T, win);
	MPI_Win_fence(0, win);
	MPI_Get(back, 1024, MPI_UINT64_T, peer, 0, 1024, MPI_UINT64_T, win);
	MPI_Win_fence(0, win);
	for (int i = 0; i < 1024; i++) if (back[i] != src[i]) { failures++; break; }
	uint64_t one = 1, old = 0;
	MPI_Win_lock_all(0, win);
	for (int i = 0; i < 100; i++) {
		MPI_Fetch_and_op(&one, &old, MPI_UINT64_T, 0, 1023, MPI_SUM, win);
		MPI_Win_flush(0, win);
	}
	MPI_Win_unlock_all(win);
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0 && win_mem[1023] != ((uint64_t)(size - 1) << 32 | 1023) + 100ull * size) {
		fprintf(stderr, "fetch-and-op total %#lx\n", (unsigned long)win_mem[1023]);
		failures++;
	}
	MPI_Win_free(&win);
	int all = 0;
	MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0) printf("mpi story: %d ranks, %d failures\n", size, all);
	MPI_Finalize();
	return all != 0;
}
