/* MPI_Send/MPI_Recv ping-pong between ranks 0 and 1, the anchor that RSR round
 * trips are compared with (run it under mpirun with the BTL to measure). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_args.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static const char usage[] =
    "usage: mpirun -np 2 mpi_pingpong [--quick] [BYTES...]\n"
    "  MPI_Send/MPI_Recv round trips between ranks 0 and 1, at each size "
    "in\n"
    "  bytes (default 8 1024 65536 1048576); rank 0 prints the median "
    "times.\n"
    "  --quick   3 runs of each size instead of 5\n";

int main(int argc, char **argv) {
  /* Sizes from the command line (bytes), or the usual four: read before
   * MPI_Init, so that --help and a bad argument need no MPI job. */
  size_t sizes[32] = {8, 1024, 65536, 1048576};
  int nsizes = 4;
  int quick = 0, given = 0;
  for (int i = 1; i < argc; i++) {
    char *end;
    if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
      continue;
    }
    if (bench_is_help(argv[i]))
      return bench_help(usage);
    if (argv[i][0] == '-')
      return bench_bad_arg("mpi_pingpong", argv[i], NULL, usage);
    unsigned long long v = strtoull(argv[i], &end, 10);
    if (argv[i][0] < '0' || argv[i][0] > '9' || *end != '\0' || given == 32)
      return bench_bad_arg(
          "mpi_pingpong", argv[i],
          given == 32 ? "more than 32 sizes" : "not a size in bytes", usage);
    sizes[given++] = (size_t)v; /* the sizes given replace the usual four */
  }
  if (given > 0)
    nsizes = given;
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0)
      fprintf(stderr, "mpi_pingpong: run with exactly 2 ranks\n");
    MPI_Finalize();
    return 2;
  }
  size_t max = 0;
  for (int i = 0; i < nsizes; i++)
    if (sizes[i] > max)
      max = sizes[i];
  char *buf = calloc(1, max > 0 ? max : 1);
  const int reps = quick ? 3 : 5;
  if (rank == 0)
    printf("# MPI_Send/MPI_Recv round trip, median of %d runs\n"
           "# bytes  usec\n",
           reps);
  for (int s = 0; s < nsizes; s++) {
    size_t n = sizes[s];
    int iters = n <= 4096 ? 20000 : n <= 65536 ? 2000 : 200;
    if (quick)
      iters /= 10;
    double t[16];
    for (int r = 0; r < reps; r++) {
      for (int i = -iters / 10 - 1; i < iters; i++) {
        if (i == 0) {
          MPI_Barrier(MPI_COMM_WORLD);
          t[r] = MPI_Wtime();
        }
        if (rank == 0) {
          MPI_Send(buf, (int)n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
          MPI_Recv(buf, (int)n, MPI_BYTE, 1, 0, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(buf, (int)n, MPI_BYTE, 0, 0, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
          MPI_Send(buf, (int)n, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        }
      }
      t[r] = (MPI_Wtime() - t[r]) / iters * 1e6;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    if (rank == 0)
      printf("%zu %.3f\n", n, t[reps / 2]);
  }
  free(buf);
  MPI_Finalize();
  return 0;
}
