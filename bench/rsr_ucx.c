/* Round trips between two processes at 8 B to 4 MiB over UCX: RSRs over the ucx
 * module, copying and zero-copy, beside a raw UCP active-message ping-pong,
 * measured in the same run; at 1 and 4 MiB also with receive placement,
 * beside Open MPI's ping-pong over UCX (pml ucx). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include "bench_args.h"
#include "bench_util.h"
#include "nexus.h"
#include "nexus/protocol.h"

/* Usage: bench_rsr_ucx [scale [runs]] or bench_rsr_ucx --quick. `scale`
 * multiplies the round trips per run (default 1: 20,000 at 8 B down to 250
 * at 4 MiB); --quick makes a tenth of them in 3 runs (a smoke test).
 * bench_rsr_ucx --raw-count N [--as-module] makes exactly N 8 B round trips
 * of the raw ping-pong below (after 50 to warm up) and nothing else, both
 * processes ending normally: what bench/count_rsr.py counts under
 * callgrind, runs of two lengths subtracted.
 *
 * Two raw anchors, each a ping-pong of UCP active messages with a header
 * of a frame header's size (NX_FRAME_HDR_SIZE) between this process and a
 * forked child, both busy-polling ucp_worker_progress:
 *   - "UCX defaults": endpoints without peer-failure handling, the fastest
 *     UCX offers here (shared memory, CMA for large messages);
 *   - "as the module": what the ucx module asks of UCX: peer-failure
 *     handling (UCP_ERR_HANDLING_MODE_PEER, shared memory allowed to report
 *     failures with UCX_MM_ERROR_HANDLING=y), a keepalive interval of 1 s,
 *     shared-memory FIFO elements of 256 bytes (UCX_MM_FIFO_ELEM_SIZE),
 *     receive buffers made 128 at a time (UCX_MM_RX_BUFS_GROW), only the
 *     shared-memory transports and self (UCX_TLS=sm,self, unless UCX_TLS is
 *     set: the module reaches only this host by default) and
 *     UCP_FEATURE_WAKEUP.
 * Then RSRs: "ping" to a child (this program, "--child") whose
 * non-threaded handler answers "pong" with the same bytes, the main thread
 * waiting in nx_cond_wait; with NX_PROGRESS=poll and with the progress
 * thread. The copying RSRs put the payload with nx_put_bytes and the echo
 * copies it out and in again; the zero-copy ones ("ping_ref", "pong_ref":
 * bench_send_ref, bench_echo_ref) put it by reference and read it in
 * place, the echo answering from the received buffer.
 * At 1 MiB and 4 MiB, the same two with receive placement (issue 40): both
 * ends name their receive buffer (bench_place, BENCH_PLACE for the child),
 * the ucx module fetches the payload straight into it, and every reply
 * checks that it was placed. "Placed" is the copying RSR so: the echo
 * reads the ping into the memory it was placed in (no copy) and answers
 * from there with nx_put_bytes, as the copying echo answers from its own
 * buffer. "Zero copy placed" is the zero-copy one so. Beside them Open
 * MPI's MPI_Send/MPI_Recv (mpi_pingpong under mpirun, pml ucx with any of
 * UCX's transports, else Open MPI's default when pml ucx cannot run),
 * once per run, its own median of 3 or 5. */

#define NSIZES 7
static const size_t sizes[NSIZES] = {8,     1024,     4096,    8192,
                                     65536, 1u << 20, 4u << 20};
static const int base_iters[NSIZES] = {20000, 20000, 20000, 20000,
                                       5000,  1000,  250};
#define MAX_PAYLOAD (4u << 20)
#define MAX_RUNS 15
#define HDR NX_FRAME_HDR_SIZE

static int scale = 1;
static int quick; /* a tenth of the round trips */
static int runs = 5;

/* BENCH_SIZE=<index into sizes>, for profiling one of them. */
static int size_wanted(int i) {
  const char *only = getenv("BENCH_SIZE");
  return only == NULL || atoi(only) == i;
}

static int iters(int i) {
  return quick ? base_iters[i] / 10 : base_iters[i] * scale;
}

/* 1. Raw UCP. */

struct raw {
  ucp_context_h ctx;
  ucp_worker_h worker;
  ucp_ep_h ep;
  int peer_mode; /* as the module: error mode PEER, keepalive, FIFO, wakeup */
  volatile int arrived;
  size_t len;
  char *buf;
};

static struct raw raw;

static void raw_fetched(void *req, ucs_status_t st, size_t len, void *ud) {
  (void)len, (void)ud;
  if (st != UCS_OK)
    bench_die("raw: rendezvous fetch failed", NULL);
  raw.arrived = 1;
  ucp_request_free(req);
}

static ucs_status_t raw_am(void *arg, const void *hdr, size_t hdr_len,
                           void *data, size_t len,
                           const ucp_am_recv_param_t *param) {
  (void)arg, (void)hdr, (void)hdr_len;
  raw.len = len;
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_DATATYPE,
        .cb.recv_am = raw_fetched,
        .datatype = ucp_dt_make_contig(1),
    };
    ucs_status_ptr_t r =
        ucp_am_recv_data_nbx(raw.worker, data, raw.buf, len, &p);
    if (UCS_PTR_IS_ERR(r))
      bench_die("raw: ucp_am_recv_data_nbx", NULL);
    if (r == NULL)
      raw.arrived = 1;
    return UCS_OK;
  }
  memcpy(raw.buf, data, len);
  raw.arrived = 1;
  return UCS_OK;
}

static void raw_sent(void *req, ucs_status_t st, void *ud) {
  (void)ud;
  if (st != UCS_OK)
    bench_die("raw: send failed", NULL);
  ucp_request_free(req);
}

static void raw_send(size_t len) {
  static char hdr[HDR];
  ucp_request_param_t p = {
      .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
      .cb.send = raw_sent,
  };
  ucs_status_ptr_t r = ucp_am_send_nbx(raw.ep, 0, hdr, HDR, raw.buf, len, &p);
  if (UCS_PTR_IS_ERR(r))
    bench_die("raw: ucp_am_send_nbx", NULL);
}

/* Not inlined: bench/count_rsr.py takes this loop out of its count by name
 * (its empty polls depend on timing) and puts raw_am back. */
static __attribute__((noinline)) void raw_wait(void) {
  while (!raw.arrived)
    ucp_worker_progress(raw.worker);
  raw.arrived = 0;
}

/* Sets up UCP and an endpoint to the other process, swapping worker
 * addresses through the pipes. */
static void raw_setup(int rfd, int wfd) {
  ucp_config_t *cfg;
  if (ucp_config_read(NULL, NULL, &cfg) != UCS_OK)
    bench_die("raw: ucp_config_read", NULL);
  if (raw.peer_mode) {
    ucp_config_modify(cfg, "MM_ERROR_HANDLING", "y");
    ucp_config_modify(cfg, "KEEPALIVE_INTERVAL", "1s");
    ucp_config_modify(cfg, "MM_FIFO_ELEM_SIZE", "256");
    ucp_config_modify(cfg, "MM_RX_BUFS_GROW", "128");
    const char *tls = getenv("UCX_TLS");
    if (tls == NULL || tls[0] == '\0')
      ucp_config_modify(cfg, "TLS", "sm,self"); /* this host only */
  }
  ucp_params_t pp = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                     .features = UCP_FEATURE_AM |
                                 (raw.peer_mode ? UCP_FEATURE_WAKEUP : 0)};
  if (ucp_init(&pp, cfg, &raw.ctx) != UCS_OK)
    bench_die("raw: ucp_init", NULL);
  ucp_config_release(cfg);
  ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                            .thread_mode = UCS_THREAD_MODE_SINGLE};
  if (ucp_worker_create(raw.ctx, &wp, &raw.worker) != UCS_OK)
    bench_die("raw: ucp_worker_create", NULL);
  ucp_am_handler_param_t hp = {
      .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                    UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
      .id = 0,
      .cb = raw_am,
      .flags = UCP_AM_FLAG_WHOLE_MSG,
  };
  if (ucp_worker_set_am_recv_handler(raw.worker, &hp) != UCS_OK)
    bench_die("raw: ucp_worker_set_am_recv_handler", NULL);
  ucp_address_t *addr;
  size_t len;
  if (ucp_worker_get_address(raw.worker, &addr, &len) != UCS_OK)
    bench_die("raw: ucp_worker_get_address", NULL);
  uint64_t l = len, ol;
  if (bench_write_all(wfd, &l, sizeof(l)) < 0 ||
      bench_write_all(wfd, addr, len) < 0 ||
      bench_read_all(rfd, &ol, sizeof(ol)) < 0 || ol > 65536)
    bench_die("raw: address exchange", NULL);
  char *other = malloc(ol);
  if (other == NULL || bench_read_all(rfd, other, ol) < 0)
    bench_die("raw: address exchange", NULL);
  ucp_worker_release_address(raw.worker, addr);
  ucp_ep_params_t ep = {
      .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
      .address = (ucp_address_t *)other,
      .err_mode = raw.peer_mode ? UCP_ERR_HANDLING_MODE_PEER
                                : UCP_ERR_HANDLING_MODE_NONE,
  };
  if (ucp_ep_create(raw.worker, &ep, &raw.ep) != UCS_OK)
    bench_die("raw: ucp_ep_create", NULL);
  free(other);
}

static void raw_teardown(void) {
  ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                           .flags = UCP_EP_CLOSE_FLAG_FORCE};
  ucs_status_ptr_t r = ucp_ep_close_nbx(raw.ep, &p);
  if (r != NULL && !UCS_PTR_IS_ERR(r)) {
    while (ucp_request_check_status(r) == UCS_INPROGRESS)
      ucp_worker_progress(raw.worker);
    ucp_request_free(r);
  }
  ucp_worker_destroy(raw.worker);
  ucp_cleanup(raw.ctx);
}

/* One launch: fills t[size][run] with microseconds per round trip, after
 * a tenth as many to warm up. */
static void bench_raw(int peer_mode, double t[NSIZES][MAX_RUNS], int run) {
  int p2c[2], c2p[2];
  if (pipe(p2c) < 0 || pipe(c2p) < 0)
    bench_die("pipe", NULL);
  raw.peer_mode = peer_mode;
  raw.arrived = 0;
  raw.buf = malloc(sizes[NSIZES - 1]);
  if (raw.buf == NULL)
    bench_die("malloc", NULL);
  memset(raw.buf, 1, sizes[NSIZES - 1]);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0)
    bench_die("fork", NULL);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(1);
    raw_setup(p2c[0], c2p[1]);
    /* Echo whatever comes, until killed. */
    for (;;) {
      raw_wait();
      raw_send(raw.len);
    }
  }
  raw_setup(c2p[0], p2c[1]);
  for (int s = 0; s < NSIZES; s++) {
    for (int w = 1; w >= 0 && size_wanted(s); w--) {
      int n = w ? iters(s) / 10 + 1 : iters(s);
      double t0 = bench_now_us();
      for (int i = 0; i < n; i++) {
        raw_send(sizes[s]);
        raw_wait();
      }
      if (!w)
        t[s][run] = (bench_now_us() - t0) / n;
    }
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  raw_teardown();
  free(raw.buf);
  close(p2c[0]), close(p2c[1]), close(c2p[0]), close(c2p[1]);
}

/* --raw-count: `n` round trips at 8 B after COUNT_WARM, in the way
 * bench_raw makes them. The child echoes exactly as many and then waits
 * for a byte on the pipe before it tears down: nothing is in flight when
 * either side closes, and both exit normally, so that callgrind writes
 * both profiles. */
#define COUNT_WARM 50

static void count_raw(int peer_mode, long n) {
  int p2c[2], c2p[2];
  if (pipe(p2c) < 0 || pipe(c2p) < 0)
    bench_die("pipe", NULL);
  raw.peer_mode = peer_mode;
  raw.arrived = 0;
  raw.buf = calloc(1, 64);
  if (raw.buf == NULL)
    bench_die("malloc", NULL);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0)
    bench_die("fork", NULL);
  char done = 0;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(1);
    raw_setup(p2c[0], c2p[1]);
    for (long i = 0; i < COUNT_WARM + n; i++) {
      raw_wait();
      raw_send(raw.len);
    }
    if (bench_read_all(p2c[0], &done, 1) < 0)
      _exit(1);
    raw_teardown();
    _exit(0);
  }
  raw_setup(c2p[0], p2c[1]);
  for (long i = 0; i < COUNT_WARM + n; i++) {
    raw_send(8);
    raw_wait();
  }
  int status;
  if (bench_write_all(p2c[1], &done, 1) < 0 || waitpid(pid, &status, 0) < 0 ||
      !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    bench_die("raw: the echoing child failed", NULL);
  raw_teardown();
  free(raw.buf);
  printf("raw UCP AM round trips: %ld (%s)\n", n,
         peer_mode ? "as the module" : "UCX defaults");
}

/* The cost of copying the payload once (cache-hot): an RSR copies it at
 * each end (nx_put_bytes), the raw ping-pong never. */
static double bench_memcpy(size_t n) {
  static char a[MAX_PAYLOAD], b[MAX_PAYLOAD];
  int reps = (int)(((size_t)64 << 20) / (n + 64)) + 1;
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    double t0 = bench_now_us();
    for (int i = 0; i < reps; i++) {
      memcpy(b, a, n);
      __asm__ volatile("" ::: "memory");
      a[i % n]++;
    }
    double t = (bench_now_us() - t0) / reps;
    if (t < best)
      best = t;
  }
  return best;
}

/* 2. RSRs. */

static char payload[MAX_PAYLOAD + 64];
/* Where placed payloads go, in either process. */
static char placed[MAX_PAYLOAD];
static size_t reply_size;
static long bad_replies;
static int placing; /* this launch places its replies */

/* Under placement, a reply of NX_PLACE_MIN bytes or more that was not
 * placed is a wrong one. */
static void check_placed(nx_buffer_t *buf) {
  if (placing && reply_size >= NX_PLACE_MIN && nx_buffer_placement(buf) != 1)
    __atomic_add_fetch(&bad_replies, 1, __ATOMIC_RELAXED);
}

static void on_pong(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  check_placed(buf);
  bench_reply_arrived();
}

/* A zero-copy reply: read in place (bench_check_ref). */
static void on_pong_ref(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  if (bench_check_ref(buf, payload, reply_size) != 0)
    __atomic_add_fetch(&bad_replies, 1, __ATOMIC_RELAXED);
  check_placed(buf);
  bench_reply_arrived();
}

/* Answers with as many bytes, from its own buffer: the one copy a reply
 * costs (nx_put_bytes), as the ping cost one at the other end. A placed
 * ping (BENCH_PLACE) is read into the memory it was placed in, which
 * copies nothing, and answered from there; one of NX_PLACE_MIN bytes or
 * more that was not placed is an error. */
static void on_ping(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  uint64_t n = 0;
  nx_buffer_t *out;
  if (nx_get_uint64(buf, &n) != 0 || n > MAX_PAYLOAD)
    bench_die("a bad ping", NULL);
  const char *from = payload;
  if (getenv("BENCH_PLACE") != NULL && n >= NX_PLACE_MIN) {
    if (nx_buffer_placement(buf) != 1 || nx_get_bytes(buf, placed, n) != 0)
      bench_die("a ping", "not placed");
    from = placed;
  }
  if (nx_rsr_init_name(&out, &bench_reply_gp, "pong", n + 16) != 0 ||
      nx_put_uint64(out, n) != 0 || (n > 0 && nx_put_bytes(out, from, n)) ||
      nx_rsr_send(out) != 0)
    bench_die("cannot answer a ping", NULL);
}

/* A copying ping: the size, then the payload copied in. */
static int send_copy(const nx_gp_t *to, nx_handler_id_t ping, size_t n) {
  nx_buffer_t *b;
  int rc = nx_rsr_init(&b, to, ping, n + 16);
  if (rc != 0)
    return rc;
  if ((rc = nx_put_uint64(b, n)) != 0 || (rc = nx_put_bytes(b, payload, n))) {
    nx_buffer_release(b);
    return rc;
  }
  return nx_rsr_send(b);
}

/* Receive placement pays only for large payloads; the placed rows are
 * measured at 1 MiB and 4 MiB. */
static int placed_size(int i) { return sizes[i] >= (1u << 20); }

/* One launch, as bench_raw, of copying RSRs or, when `zc` is set,
 * zero-copy ones; with `place`, both ends place the payloads (only the
 * sizes placed_size names are measured). */
static void bench_rsr(const char *mode, int zc, int place,
                      double t[NSIZES][MAX_RUNS], int run) {
  setenv("NX_PROGRESS", mode, 1);
  if (place)
    setenv("BENCH_PLACE", "1", 1);
  else
    unsetenv("BENCH_PLACE");
  placing = place;
  struct bench_child child;
  bench_child_spawn(&child, NULL);
  if (nx_init(NULL, NULL) != 0)
    bench_die("nx_init (is the ucx module built?)", NULL);
  bench_sync_init();
  nx_handler_register(nx_context_self(), "pong", on_pong,
                      NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(nx_context_self(), "pong_ref", on_pong_ref,
                      NX_HANDLER_NONTHREADED, NULL);
  if (place) {
    bench_place_into(placed, sizeof(placed));
    nx_handler_set_place(nx_context_self(), "pong", bench_place);
    nx_handler_set_place(nx_context_self(), "pong_ref", bench_place);
  }
  bench_child_connect(&child, "ucx");
  nx_handler_id_t ping = nx_handler_id("ping");
  nx_handler_id_t ping_ref = nx_handler_id("ping_ref");
  int rc;
  for (int s = 0; s < NSIZES; s++) {
    reply_size = sizes[s];
    for (int w = 1; w >= 0 && size_wanted(s) && (!place || placed_size(s));
         w--) {
      int n = w ? iters(s) / 10 + 1 : iters(s);
      double t0 = bench_now_us();
      for (int i = 0; i < n; i++) {
        long want = bench_next_reply();
        /* The zero-copy payload never changes, so it may go again before
         * its release came; every release is waited for at the end. */
        if ((rc = zc ? bench_send_ref(&child.gp, ping_ref, payload, sizes[s])
                     : send_copy(&child.gp, ping, sizes[s])) != 0)
          bench_die("a ping", nx_strerror(rc));
        bench_wait_replies(want, 0);
      }
      if (!w)
        t[s][run] = (bench_now_us() - t0) / n;
    }
  }
  bench_wait_released(10);
  if (bad_replies > 0)
    bench_die("replies", place ? "of the wrong size or contents, or not placed"
                               : "of the wrong size or contents");
  bench_child_stop(&child);
  nx_finalize();
  unsetenv("BENCH_PLACE");
}

/* 3. Open MPI: mpi_pingpong under mpirun at the placed sizes, over UCX
 * (pml ucx; Open MPI 4.1 selects it only for network transports unless
 * told that any will do), or with Open MPI's defaults when pml ucx cannot
 * run here. Fills t[size][run] at the placed sizes. */

static struct bench_mpi ompi;
static const char *ompi_label = "Open MPI, pml ucx";
static int ompi_found;    /* mpi_pingpong is built */
static int ompi_fallback; /* pml ucx failed: Open MPI's defaults */
static char ompi_ucx_why[256];

static void bench_ompi(double t[NSIZES][MAX_RUNS], int run) {
  static const char *const ucx[] = {
      "--mca",           "pml", "ucx", "--mca", "pml_ucx_tls", "any", "--mca",
      "pml_ucx_devices", "any", NULL};
  size_t want[NSIZES];
  double usec[NSIZES];
  int idx[NSIZES], n = 0;
  for (int s = 0; s < NSIZES; s++)
    if (placed_size(s) && size_wanted(s)) {
      idx[n] = s;
      want[n++] = sizes[s];
    }
  if (n == 0)
    return;
  if (ompi_found && !ompi_fallback &&
      bench_mpi_run(&ompi, ucx, want, usec, n, quick) != 0) {
    /* mpi_pingpong is there but pml ucx did not run: Open MPI's
     * defaults from now on. */
    snprintf(ompi_ucx_why, sizeof(ompi_ucx_why), "%s", ompi.why);
    ompi.why[0] = '\0';
    ompi_fallback = 1;
    ompi_label = "Open MPI, its defaults";
  }
  if (ompi_fallback)
    bench_mpi_run(&ompi, NULL, want, usec, n, quick);
  for (int i = 0; i < n; i++)
    t[idx[i]][run] = usec[i];
}

static const char usage[] =
    "usage: bench_rsr_ucx [SCALE [RUNS]] | bench_rsr_ucx --quick\n"
    "       bench_rsr_ucx --raw-count N [--as-module]\n"
    "  Round trips between two processes at 8 B to 4 MiB over UCX: RSRs "
    "over\n"
    "  the ucx module, copying and zero-copy, beside raw UCP "
    "active-message\n"
    "  ping-pongs, in one run, and at 1 and 4 MiB both with receive "
    "placement\n"
    "  beside Open MPI over UCX (mpirun, pml ucx); prints the medians, the\n"
    "  ratios and the goals.\n"
    "  SCALE     multiplies the round trips per run (default 1)\n"
    "  RUNS      runs of each row, at most 15 (default 5)\n"
    "  --quick   a tenth of the round trips in 3 runs\n"
    "  --raw-count N  only N 8 B round trips of the raw UCP ping-pong, "
    "UCX\n"
    "            defaults or (--as-module) set up as the module, for "
    "callgrind\n"
    "            (bench/count_rsr.py)\n";

/* The positive number `arg`, or 0 when it is not one. */
static int count_arg(const char *arg) {
  char *end;
  long v = strtol(arg, &end, 10);
  return arg[0] >= '0' && arg[0] <= '9' && *end == '\0' && v > 0 && v <= 1000000
             ? (int)v
             : 0;
}

int main(int argc, char **argv) {
  bench_name = "bench_rsr_ucx";
  bench_child_place_mem = placed; /* where the child's pings are placed */
  bench_child_place_len = sizeof(placed);
  int child = bench_child_run(argc, argv, on_ping);
  if (child >= 0)
    return child;
  for (int i = 1; i < argc; i++)
    if (bench_is_help(argv[i]))
      return bench_help(usage);
  if (argc == 2 && strcmp(argv[1], "--quick") == 0) {
    quick = 1;
    runs = 3;
  } else if (argc > 1 && strcmp(argv[1], "--raw-count") == 0) {
    int n = argc > 2 ? count_arg(argv[2]) : 0;
    if (n == 0)
      return bench_bad_arg("bench_rsr_ucx", argc > 2 ? argv[2] : argv[1],
                           "not a positive number of round trips", usage);
    if (argc > 4 || (argc == 4 && strcmp(argv[3], "--as-module") != 0))
      return bench_bad_arg("bench_rsr_ucx", argv[argc > 4 ? 4 : 3],
                           argc > 4 ? "one argument too many" : NULL, usage);
    count_raw(argc == 4, n);
    return 0;
  } else {
    for (int i = 1; i < argc; i++) {
      int v = count_arg(argv[i]);
      if (v == 0 || i > 2 || (i == 2 && v > MAX_RUNS))
        return bench_bad_arg("bench_rsr_ucx", argv[i],
                             argv[i][0] == '-' ? NULL
                             : i > 2           ? "one argument too many"
                             : i == 2          ? "not a number of runs, 1-15"
                                               : "not a positive scale",
                             usage);
      if (i == 1)
        scale = v;
      else
        runs = v;
    }
  }
  setenv("NX_PROTOCOLS", "ucx", 1); /* both processes: ucx only */
  unsetenv("NX_UCX_QUEUE_MAX");
  enum {
    RAW_DEFAULT,
    RAW_MODULE,
    RSR_POLL,
    RSR_THREAD,
    ZC_POLL,
    ZC_THREAD,
    PL_POLL, /* from here: at 1 MiB and 4 MiB only (placed_size) */
    PL_THREAD,
    ZP_POLL,
    ZP_THREAD,
    OMPI,
    NSYS
  };
  const char *label[NSYS] = {"raw UCP AM, UCX defaults",
                             "raw UCP AM, as the module",
                             "RSR, NX_PROGRESS=poll",
                             "RSR, progress thread",
                             "zero copy, NX_PROGRESS=poll",
                             "zero copy, progress thread",
                             "placed, NX_PROGRESS=poll",
                             "placed, progress thread",
                             "zero copy placed, poll",
                             "zero copy placed, thread",
                             NULL};
  static double t[NSYS][NSIZES][MAX_RUNS];
  bench_mpi_find(&ompi);
  ompi_found = ompi.why[0] == '\0';
  /* BENCH_ONLY=<system number>, for profiling one of them. */
  const char *only = getenv("BENCH_ONLY");
  int one = only != NULL ? atoi(only) : -1;
  /* Each run launches every system in turn (fresh processes, UCP
   * contexts and endpoints), so that a noisy stretch of the machine, and
   * UCX's shared memory that is fast in one launch and slow in the next,
   * fall on all of them alike. */
  for (int r = 0; r < runs; r++) {
    if (one < 0 || one == RAW_DEFAULT)
      bench_raw(0, t[RAW_DEFAULT], r);
    if (one < 0 || one == RAW_MODULE)
      bench_raw(1, t[RAW_MODULE], r);
    if (one < 0 || one == RSR_POLL)
      bench_rsr("poll", 0, 0, t[RSR_POLL], r);
    if (one < 0 || one == RSR_THREAD)
      bench_rsr("thread", 0, 0, t[RSR_THREAD], r);
    if (one < 0 || one == ZC_POLL)
      bench_rsr("poll", 1, 0, t[ZC_POLL], r);
    if (one < 0 || one == ZC_THREAD)
      bench_rsr("thread", 1, 0, t[ZC_THREAD], r);
    if (one < 0 || one == PL_POLL)
      bench_rsr("poll", 0, 1, t[PL_POLL], r);
    if (one < 0 || one == PL_THREAD)
      bench_rsr("thread", 0, 1, t[PL_THREAD], r);
    if (one < 0 || one == ZP_POLL)
      bench_rsr("poll", 1, 1, t[ZP_POLL], r);
    if (one < 0 || one == ZP_THREAD)
      bench_rsr("thread", 1, 1, t[ZP_THREAD], r);
    if (one < 0 || one == OMPI)
      bench_ompi(t[OMPI], r);
  }
  label[OMPI] = ompi_label;

  printf("round trip between two processes over UCX %s (%u-byte header + "
         "payload), median of %d runs, one launch each, the systems taking "
         "turns (fastest); ratios of medians\n",
         ucp_get_version_string(), NX_FRAME_HDR_SIZE, runs);
  printf("RSR: nx_put_bytes, copied out and in by the echo; zero copy: "
         "nx_put_bytes_ref, read in place (nx_get_bytes_ptr), echoed by "
         "reference\n");
  printf("placed: the same with receive placement at both ends, at 1 MiB "
         "and 4 MiB, beside %s (mpi_pingpong, its own median)\n",
         ompi_label);
  if (ompi_fallback)
    printf("Open MPI's pml ucx did not run here (%s): Open MPI's defaults "
           "instead\n",
           ompi_ucx_why);
  double zc_ratio[NSIZES][2];
  /* Open MPI's bandwidth over the zero-copy placed rows', per size. */
  double bw_ratio[NSIZES][2];
  double small[NSYS] = {0}; /* the 8 B medians, for its goals */
  for (int s = 0; s < NSIZES; s++) {
    if (!size_wanted(s))
      continue;
    char size[32];
    bench_size_label(sizes[s], size, sizeof(size));
    printf("\n%s, %d round trips per run\n", size, iters(s));
    /* All medians first: the placed rows' ratios need Open MPI's. */
    double med[NSYS], best[NSYS];
    for (int k = 0; k < NSYS; k++)
      med[k] = best[k] = NAN;
    for (int k = 0; k < NSYS; k++)
      if (k < PL_POLL || placed_size(s))
        med[k] = bench_median(t[k][s], runs, &best[k]);
    for (int k = 0; k < NSYS; k++) {
      if (k >= PL_POLL && !placed_size(s))
        continue;
      if (one >= 0 && one != k)
        continue;
      if (k == OMPI && isnan(med[k])) {
        printf("  %-28s not available (%s)\n", label[k], ompi.why);
        continue;
      }
      printf("  %-28s %9.3f us (%9.3f)", label[k], med[k], best[k]);
      if (k >= RAW_MODULE && one < 0)
        printf("  %5.2fx defaults", med[k] / med[RAW_DEFAULT]);
      if (k >= RSR_POLL && one < 0)
        printf("  %5.2fx as the module", med[k] / med[RAW_MODULE]);
      if (k >= PL_POLL && k < OMPI && one < 0)
        printf("  %5.2fx Open MPI", med[k] / med[OMPI]);
      printf("\n");
      if (k >= ZC_POLL && k <= ZC_THREAD)
        zc_ratio[s][k - ZC_POLL] = med[k] / med[RAW_MODULE];
      if (k >= ZP_POLL && k <= ZP_THREAD)
        bw_ratio[s][k - ZP_POLL] = med[OMPI] / med[k];
      if (sizes[s] == 8)
        small[k] = med[k];
    }
    printf("  %-28s %9.3f us\n", "memcpy of the payload, once",
           bench_memcpy(sizes[s]));
  }
  printf("\ngoals: RSR within 1.3x of raw UCP at 8 B, 1.1x at 1 MiB\n");
  if (one >= 0)
    return 0;
  if (small[RAW_DEFAULT] > 0) {
    /* Issue 26's: over UCX's defaults, and the module's UCX settings
     * alone (the raw anchor set up as the module sets UCP up). */
    for (int k = RSR_POLL; k <= RSR_THREAD; k++) {
      double r = bench_two_places(small[k] / small[RAW_DEFAULT]);
      printf("  8 B    %-28s %6.2fx  %-7s (over raw UCP AM, UCX defaults: "
             "<= 1.3x)\n",
             label[k], r, r <= 1.3 ? "met" : "NOT met");
    }
    double r = bench_two_places(small[RAW_MODULE] / small[RAW_DEFAULT]);
    printf("  8 B    %-28s %6.2fx  %-7s (the module's UCX set-up over UCX's "
           "defaults: <= 1.05x)\n",
           label[RAW_MODULE], r, r <= 1.05 ? "met" : "NOT met");
  }
  printf("zero copy (over raw UCP AM, as the module): goal: within 1.1x of "
         "raw at 1 MiB and 4 MiB\n");
  for (int s = 0; s < NSIZES; s++) {
    if (sizes[s] < (1u << 20) || !size_wanted(s))
      continue;
    char size[32];
    bench_size_label(sizes[s], size, sizeof(size));
    for (int k = ZC_POLL; k <= ZC_THREAD; k++)
      printf("  %-6s %-28s %6.2fx  %s\n", size, label[k],
             zc_ratio[s][k - ZC_POLL],
             bench_two_places(zc_ratio[s][k - ZC_POLL]) <= 1.1 ? "met"
                                                               : "NOT met");
  }
  printf("receive placement (issue 40): goal: zero copy + placed >= 1.2x "
         "Open MPI's bandwidth at 1 MiB and 4 MiB (%s)\n",
         ompi_label);
  for (int s = 0; s < NSIZES; s++) {
    if (!placed_size(s) || !size_wanted(s))
      continue;
    char size[32];
    bench_size_label(sizes[s], size, sizeof(size));
    for (int k = ZP_POLL; k <= ZP_THREAD; k++) {
      double r = bw_ratio[s][k - ZP_POLL];
      if (isnan(r))
        printf("  %-6s %-28s not measured (Open MPI: %s)\n", size, label[k],
               ompi.why);
      else
        printf("  %-6s %-28s %6.2fx Open MPI's bandwidth  %s\n", size, label[k],
               r, bench_two_places(r) >= 1.2 ? "met" : "NOT met");
    }
  }
  return 0;
}
