/* The Open MPI anchor of bench_alltoall --scale: under `mpirun -np N`, every
 * rank sends MSGS messages of 8 B to every other rank and receives the N-1
 * times MSGS it is sent, as bench_alltoall's ranks do with RSRs. It goes in
 * windows of WINDOW rounds (a round: one message to every other rank): the
 * window's receives posted (MPI_ANY_SOURCE), its sends made with MPI_Isend,
 * one MPI_Waitall for both. Measured on 2 cores at 16 ranks, windows of 4,
 * 16, 64 and 2,000 rounds (all at once) took 0.081, 0.038, 0.064 and 4.7 s:
 * 16 is the default. Rank 0 prints "N seconds rate", the time from a
 * barrier before the first send to one after the last receive. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_args.h"

static const char usage[] =
    "usage: mpirun -np N mpi_alltoall [MSGS [WINDOW]]   (N >= 2)\n"
    "  Every rank sends MSGS (default 2000) messages of 8 B to every other\n"
    "  rank, WINDOW (default 16) rounds at a time; rank 0 prints the time\n"
    "  and the message rate. The anchor of bench_alltoall --scale.\n";

/* The positive number `arg`, or 0 when it is not one. */
static int count_arg(const char *arg) {
  char *end;
  long v = strtol(arg, &end, 10);
  return arg[0] >= '0' && arg[0] <= '9' && *end == '\0' && v > 0 &&
                 v <= 1000000000
             ? (int)v
             : 0;
}

int main(int argc, char **argv) {
  /* The arguments are read before MPI_Init, so that --help and a bad one
   * need no MPI job. */
  int msgs = 2000, window = 16;
  for (int i = 1; i < argc; i++) {
    if (bench_is_help(argv[i]))
      return bench_help(usage);
    int v = count_arg(argv[i]);
    if (v == 0 || i > 2)
      return bench_bad_arg("mpi_alltoall", argv[i],
                           argv[i][0] == '-' ? NULL
                           : i > 2           ? "one argument too many"
                                             : "not a positive count",
                           usage);
    if (i == 1)
      msgs = v;
    else
      window = v;
  }
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n < 2) {
    if (rank == 0)
      fprintf(stderr, "mpi_alltoall: run with 2 ranks or more\n%s", usage);
    MPI_Finalize();
    return 2;
  }
  size_t per = (size_t)window * (size_t)(n - 1);
  double *in = malloc(per * sizeof(double));
  MPI_Request *req = malloc(2 * per * sizeof(MPI_Request));
  if (in == NULL || req == NULL) {
    fprintf(stderr, "mpi_alltoall: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  double out = rank;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int r = 0; r < msgs; r += window) {
    int w = msgs - r < window ? msgs - r : window;
    int k = 0;
    for (int i = 0; i < w; i++)
      for (int j = 1; j < n; j++, k++)
        MPI_Irecv(&in[k], 1, MPI_DOUBLE, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD,
                  &req[k]);
    for (int i = 0; i < w; i++)
      for (int j = 1; j < n; j++)
        MPI_Isend(&out, 1, MPI_DOUBLE, (rank + j) % n, 0, MPI_COMM_WORLD,
                  &req[k++]);
    MPI_Waitall(k, req, MPI_STATUSES_IGNORE);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime() - t0;
  if (rank == 0)
    printf("%d %.4f %.0f\n", n, t, (double)msgs * n * (n - 1) / t);
  free(req);
  free(in);
  MPI_Finalize();
  return 0;
}
