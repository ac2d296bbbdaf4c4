/* RSR round trips between two MPI ranks over the mpi module, copying and
 * zero-copy, and at 1 and 4 MiB both with receive placement, printed beside
 * raw MPI_Send/MPI_Recv ping-pongs measured in the same run. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_args.h"
#include "bench_util.h"
#include "nexus.h"

/* Usage: mpirun -np 2 bench_rsr_mpi [--quick] [--size BYTES]
 * (add --mca btl self,vader or self,tcp to choose Open MPI's transport).
 * The program initializes MPI itself (MPI_THREAD_MULTIPLE, which nexus
 * needs), so the raw ping-pong and nexus share one MPI: every run starts
 * nexus (nx_init, which reuses MPI), measures, and stops it again, and
 * the raw runs go between, with no nexus thread alive. The systems take
 * turns within each size, so a noisy stretch falls on all of them. */

/* RSR_*: nx_put_bytes, copied out and in by the echo; ZC_*: zero copy,
 * nx_put_bytes_ref and nx_get_bytes_ptr, echoed by reference
 * (bench_echo_ref). PL_* and ZP_* are those with receive placement
 * (issue 40), at 1 MiB and 4 MiB only: both ranks name their receive
 * buffer (bench_place), the module receives the payload straight into it,
 * the copying echo's and pong's nx_get_bytes into that buffer copy nothing,
 * and every ping and pong is checked placed. */
enum system {
  RAW,
  RSR_THREAD,
  RSR_POLL,
  ZC_THREAD,
  ZC_POLL,
  PL_THREAD,
  PL_POLL,
  ZP_THREAD,
  ZP_POLL,
  NSYSTEMS
};
static const char *const label[NSYSTEMS] = {
    "MPI_Send/MPI_Recv",           "RSR, progress thread",
    "RSR, NX_PROGRESS=poll",       "zero copy, progress thread",
    "zero copy, NX_PROGRESS=poll", "placed, progress thread",
    "placed, NX_PROGRESS=poll",    "zero copy placed, thread",
    "zero copy placed, poll"};

/* The placed rows are measured from this size up. */
#define PLACED_MIN (1 << 20)

#define MAX_PAYLOAD (4 << 20)
#define MAX_SIZES 5
#define MAX_RUNS 9

static int quick;
static int runs = 5;
static int rank;
static const char *phase = "MPI"; /* what runs now, for die() */
static char send_buf[MAX_PAYLOAD];
static char recv_buf[MAX_PAYLOAD];

static void die(const char *what, int rc) {
  fprintf(stderr, "bench_rsr_mpi (rank %d, %s): %s: %s\n", rank, phase, what,
          rc != 0 ? nx_strerror(rc) : "failed");
  MPI_Abort(MPI_COMM_WORLD, 1);
}

/* 1. The anchor: `size` bytes back and forth with blocking MPI_Send and
 * MPI_Recv on MPI_COMM_WORLD. */
static double raw_run(size_t size, int warm, int n) {
  double t0 = 0;
  for (int i = -warm; i < n; i++) {
    if (i == 0) {
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = bench_now_us();
    }
    if (rank == 0) {
      MPI_Send(send_buf, (int)size, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
      MPI_Recv(recv_buf, (int)size, MPI_BYTE, 1, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(recv_buf, (int)size, MPI_BYTE, 0, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      MPI_Send(recv_buf, (int)size, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
    }
  }
  return (bench_now_us() - t0) / n;
}

/* 2. RSRs: "ping" carries the payload to rank 1's initial context, whose
 * non-threaded handler echoes it in "pong" to rank 0's; pong copies the
 * payload out, as a receiver would, and signals rank 0's main thread,
 * which waits in nx_cond_wait (and so drives progress itself). */

static size_t reply_size;
static long bad_replies;
static int placing; /* this run places its pings and pongs */
static nx_gp_t *peers;
static nx_handler_id_t ping_id, pong_id, ping_ref_id, pong_ref_id;

/* Under placement, a payload of NX_PLACE_MIN bytes or more that was not
 * placed is an error. */
static void check_placed(nx_buffer_t *buf) {
  if (placing && reply_size >= NX_PLACE_MIN && nx_buffer_placement(buf) != 1)
    die("a ping or pong was not placed", 0);
}

static void on_pong(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  check_placed(buf);
  nx_get_bytes(buf, recv_buf, reply_size);
  bench_reply_arrived();
}

static void on_ping(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  check_placed(buf);
  bench_echo(buf, &peers[0], pong_id, recv_buf, sizeof(recv_buf));
}

/* Zero copy: rank 1 answers from the received buffer by reference, rank 0
 * reads the reply in place (bench_echo_ref, bench_check_ref). */
static void on_ping_ref(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  check_placed(buf);
  bench_echo_ref(buf, &peers[0], pong_ref_id);
}

static void on_pong_ref(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  check_placed(buf);
  if (bench_check_ref(buf, send_buf, reply_size) != 0)
    __atomic_add_fetch(&bad_replies, 1, __ATOMIC_RELAXED);
  bench_reply_arrived();
}

/* With `zc`, rank 0 puts send_buf by reference: it never changes, so it
 * may go again before its release came; every release is waited for at
 * the end. With `place`, both ranks place what their handlers receive
 * into recv_buf. */
static double rsr_run(const char *mode, int zc, int place, size_t size,
                      int warm, int n) {
  setenv("NX_PROGRESS", mode, 1);
  phase = mode;
  placing = place;
  int rc = nx_init(NULL, NULL);
  if (rc != 0)
    die("nx_init", rc);
  bench_sync_init();
  reply_size = size;
  ping_id = nx_handler_id("ping");
  pong_id = nx_handler_id("pong");
  ping_ref_id = nx_handler_id("ping_ref");
  pong_ref_id = nx_handler_id("pong_ref");
  nx_context_t *self = nx_context_self();
  nx_handler_register(self, "ping", on_ping, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "pong", on_pong, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "ping_ref", on_ping_ref, NX_HANDLER_NONTHREADED,
                      NULL);
  nx_handler_register(self, "pong_ref", on_pong_ref, NX_HANDLER_NONTHREADED,
                      NULL);
  nx_handler_register(self, "quit", bench_on_quit, NX_HANDLER_NONTHREADED,
                      NULL);
  if (place) {
    bench_place_into(recv_buf, sizeof(recv_buf));
    nx_handler_set_place(self, "ping", bench_place);
    nx_handler_set_place(self, "pong", bench_place);
    nx_handler_set_place(self, "ping_ref", bench_place);
    nx_handler_set_place(self, "pong_ref", bench_place);
  }
  int count = 0, me = -1;
  if ((rc = nx_context_peers(&peers, &count, &me)) != 0)
    die("nx_context_peers", rc);
  if (count != 2 || me != rank)
    die("nx_context_peers: not the 2 ranks of this job", 0);
  const char *proto = nx_gp_protocol(&peers[1 - rank]);
  if (proto == NULL || strcmp(proto, "mpi") != 0) {
    fprintf(stderr,
            "bench_rsr_mpi: the other rank is reached over %s, "
            "not mpi\n",
            proto != NULL ? proto : "nothing");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  /* Rank 1's ping handler answers to `peers`, which must be set before
   * the first ping comes. */
  MPI_Barrier(MPI_COMM_WORLD);
  double t = 0;
  if (rank == 1) {
    /* Serve until rank 0 says quit. */
    bench_serve_until_quit(0);
  } else {
    double t0 = 0;
    for (int i = -warm; i < n; i++) {
      if (i == 0)
        t0 = bench_now_us();
      if (zc) {
        long want = bench_next_reply();
        if ((rc = bench_send_ref(&peers[1], ping_ref_id, send_buf, size)) != 0)
          die("a zero-copy ping", rc);
        bench_wait_replies(want, 0);
        continue;
      }
      nx_buffer_t *b;
      if ((rc = nx_rsr_init(&b, &peers[1], ping_id, nx_sizeof_bytes(size))) !=
              0 ||
          (rc = nx_put_bytes(b, send_buf, size)) != 0)
        die("ping", rc);
      long want = bench_next_reply();
      if ((rc = nx_rsr_send(b)) != 0)
        die("nx_rsr_send", rc);
      bench_wait_replies(want, 0);
    }
    t = (bench_now_us() - t0) / n;
    bench_wait_released(10);
    if (bad_replies > 0)
      die("zero-copy replies of the wrong size or contents", 0);
    nx_buffer_t *b;
    if ((rc = nx_rsr_init_name(&b, &peers[1], "quit", 8)) != 0 ||
        (rc = nx_rsr_send(b)) != 0)
      die("quit", rc);
  }
  for (int i = 0; i < count; i++)
    nx_gp_release(&peers[i]);
  free(peers);
  peers = NULL;
  /* Both ranks finalize together: the quit RSR has arrived once rank 1
   * gets here, and the barrier keeps rank 0 from leaving before. First
   * each waits, driving progress, until what it sent was handled. The
   * other answers only while it drives progress too, and under
   * NX_PROGRESS=poll MPI_Barrier does not: the rank whose flush ends first
   * polls in the barrier until the other's has ended too (docs/design.md
   * section 9). */
  if ((rc = nx_flush(30000)) != 0)
    die("nx_flush", rc);
  MPI_Request barrier;
  MPI_Ibarrier(MPI_COMM_WORLD, &barrier);
  for (int done = 0; !done;) {
    MPI_Test(&barrier, &done, MPI_STATUS_IGNORE);
    if (!done)
      nx_poll();
  }
  if ((rc = nx_finalize()) != 0)
    die("nx_finalize", rc);
  return t;
}

static void goal(const char *what, double rsr, double raw, double limit) {
  double ratio = rsr / raw;
  printf("    %-34s %6.2fx  %s\n", what, ratio,
         ratio <= limit ? "met" : "NOT met");
}

static const char usage[] =
    "usage: mpirun -np 2 bench_rsr_mpi [--quick] [--size BYTES]\n"
    "  RSR round trips over the mpi module between ranks 0 and 1 beside\n"
    "  MPI_Send/MPI_Recv in the same job, 8 B to 4 MiB, copying and zero "
    "copy,\n"
    "  from 1 MiB up also with receive placement; prints the medians, the\n"
    "  ratios and the goals.\n"
    "  --quick   3 runs\n"
    "  --size    one payload size in bytes (at most 4 MiB)\n";

int main(int argc, char **argv) {
  /* The arguments are read before MPI_Init, so that --help and a bad one
   * need no MPI job. */
  size_t sizes[MAX_SIZES] = {8, 1024, 65536, 1 << 20, 4 << 20};
  int nsizes = MAX_SIZES;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
      runs = 3;
    } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
      char *end;
      unsigned long long v = strtoull(argv[++i], &end, 10);
      if (*end != '\0' || v == 0 || v > MAX_PAYLOAD)
        return bench_bad_arg("bench_rsr_mpi", argv[i], "not a size in range",
                             usage);
      sizes[0] = (size_t)v;
      nsizes = 1;
    } else if (bench_is_help(argv[i])) {
      return bench_help(usage);
    } else {
      return bench_bad_arg("bench_rsr_mpi", argv[i], NULL, usage);
    }
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2 || provided < MPI_THREAD_SERIALIZED) {
    if (rank == 0)
      fprintf(stderr, "bench_rsr_mpi: needs exactly 2 ranks and "
                      "MPI_THREAD_SERIALIZED or better\n");
    MPI_Finalize();
    return 2;
  }
  /* Only the mpi module between the ranks; local for a rank's own. */
  setenv("NX_PROTOCOLS", "mpi,local", 1);
  memset(send_buf, 0x5a, sizeof(send_buf));
  if (rank == 0)
    printf("round trips between 2 MPI ranks (%s); the systems take turns "
           "within each size\n",
           provided == MPI_THREAD_MULTIPLE ? "MPI_THREAD_MULTIPLE"
                                           : "MPI_THREAD_SERIALIZED");
  double med8[NSYSTEMS], med1m[NSYSTEMS], med4m[NSYSTEMS];
  for (int s = 0; s < NSYSTEMS; s++)
    med8[s] = med1m[s] = med4m[s] = NAN;
  for (int z = 0; z < nsizes; z++) {
    size_t sz = sizes[z];
    int n = bench_iters(sz, quick), warm = n / 10 + 1;
    double v[NSYSTEMS][MAX_RUNS];
    int nsys = sz >= PLACED_MIN ? NSYSTEMS : PL_THREAD;
    for (int r = 0; r < runs; r++) {
      v[RAW][r] = raw_run(sz, warm, n);
      for (int s = RSR_THREAD; s < nsys; s++) {
        int poll =
            s == RSR_POLL || s == ZC_POLL || s == PL_POLL || s == ZP_POLL;
        int zc = s == ZC_THREAD || s == ZC_POLL || s >= ZP_THREAD;
        v[s][r] =
            rsr_run(poll ? "poll" : "thread", zc, s >= PL_THREAD, sz, warm, n);
      }
    }
    if (rank != 0)
      continue;
    double med[NSYSTEMS], best[NSYSTEMS];
    for (int s = 0; s < NSYSTEMS; s++)
      med[s] = best[s] = NAN;
    for (int s = 0; s < nsys; s++)
      med[s] = bench_median(v[s], runs, &best[s]);
    char lab[32];
    bench_size_label(sz, lab, sizeof(lab));
    printf("\n%s: %d round trips per run, median of %d runs (fastest)\n", lab,
           n, runs);
    for (int s = 0; s < nsys; s++) {
      printf("  %-28s %9.2f us (%9.2f)", label[s], med[s], best[s]);
      if (s != RAW)
        printf("  %6.2fx MPI", med[s] / med[RAW]);
      printf("\n");
    }
    fflush(stdout);
    if (sz == 8)
      memcpy(med8, med, sizeof(med));
    if (sz == 1 << 20)
      memcpy(med1m, med, sizeof(med));
    if (sz == 4 << 20)
      memcpy(med4m, med, sizeof(med));
  }
  if (rank == 0) {
    printf("\ngoals:\n");
    if (!isnan(med8[RAW])) {
      printf("  8 B: RSR within 1.3x of MPI_Send/MPI_Recv\n");
      goal(label[RSR_THREAD], med8[RSR_THREAD], med8[RAW], 1.3);
      goal(label[RSR_POLL], med8[RSR_POLL], med8[RAW], 1.3);
    }
    if (!isnan(med1m[RAW])) {
      printf("  1 MiB: RSR within 1.1x of MPI_Send/MPI_Recv\n");
      goal(label[RSR_THREAD], med1m[RSR_THREAD], med1m[RAW], 1.1);
      goal(label[RSR_POLL], med1m[RSR_POLL], med1m[RAW], 1.1);
    }
    if (!isnan(med1m[RAW]) || !isnan(med4m[RAW]))
      printf("  zero copy: goal: within 1.1x of raw at 1 MiB and 4 MiB\n");
    for (int s = ZC_THREAD; s <= ZC_POLL; s++) {
      char what[64];
      if (!isnan(med1m[RAW])) {
        snprintf(what, sizeof(what), "1 MiB %s", label[s]);
        goal(what, med1m[s], med1m[RAW], 1.1);
      }
      if (!isnan(med4m[RAW])) {
        snprintf(what, sizeof(what), "4 MiB %s", label[s]);
        goal(what, med4m[s], med4m[RAW], 1.1);
      }
    }
  }
  if (rank == 0 && (!isnan(med1m[PL_THREAD]) || !isnan(med4m[PL_THREAD]))) {
    /* No goal of issue 40 names the mpi module: its bandwidth beside
     * MPI's, for the table. */
    printf("  receive placement: MPI_Send/MPI_Recv's time over the placed "
           "rows' (their bandwidth over MPI's; no goal)\n");
    for (int s = PL_THREAD; s < NSYSTEMS; s++) {
      if (!isnan(med1m[s]))
        printf("    1 MiB %-28s %6.2fx\n", label[s], med1m[RAW] / med1m[s]);
      if (!isnan(med4m[s]))
        printf("    4 MiB %-28s %6.2fx\n", label[s], med4m[RAW] / med4m[s]);
    }
  }
  MPI_Finalize();
  return 0;
}
