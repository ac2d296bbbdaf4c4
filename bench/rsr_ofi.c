/* Round trips between two processes at 8 B to 4 MiB over libfabric: RSRs over
 * the ofi module, copying and zero-copy, beside a raw fi_send/fi_recv
 * ping-pong on the same provider, measured in the same run, for shm and
 * tcp;ofi_rxm; at 1 and 4 MiB also both with receive placement, beside
 * Open MPI's ping-pong over its ofi MTL on the same provider (or Open
 * MPI's defaults where that MTL does not run). */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "bench_args.h"
#include "bench_util.h"
#include "nexus.h"

/* Usage: bench_rsr_ofi [--quick] [--provider NAME] [--size BYTES].
 * libfabric reads FI_PROVIDER once per process, so every measurement runs
 * in fresh processes: this program starts itself ("--measure SYSTEM SIZE
 * N") with FI_PROVIDER set, and that process starts its peer (a fork for
 * the raw ping-pong, "--child" for the RSRs). The main process never
 * touches libfabric or nexus. */

extern char **environ;

/* RSR_*: nx_put_bytes, copied out and in by the echo; ZC_*: zero copy,
 * nx_put_bytes_ref and nx_get_bytes_ptr, echoed by reference
 * (bench_echo_ref). PL_* and ZP_* are those with receive placement
 * (issue 40), from PLACED_MIN up: both processes name their receive
 * buffer (bench_place; BENCH_PLACE for the child), the module receives
 * the payload straight into it, the copying echo's and pong's nx_get_bytes
 * into that buffer copy nothing, and every ping and pong is checked
 * placed. OMPI is Open MPI's mpi_pingpong under mpirun (bench_mpi_run),
 * run by the driver itself. */
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
  OMPI,
  NSYSTEMS
};
static const char *const system_name[NSYSTEMS] = {
    "raw",       "rsr-thread", "rsr-poll",  "zc-thread", "zc-poll",
    "pl-thread", "pl-poll",    "zp-thread", "zp-poll",   "ompi"};
static const char *const system_label[NSYSTEMS] = {
    "raw fi_send/fi_recv, busy-polled",
    "RSR, progress thread",
    "RSR, NX_PROGRESS=poll",
    "zero copy, progress thread",
    "zero copy, NX_PROGRESS=poll",
    "placed, progress thread",
    "placed, NX_PROGRESS=poll",
    "zero copy placed, thread",
    "zero copy placed, poll",
    "Open MPI"};

#define PLACED_MIN (1 << 20)

#define MAX_PAYLOAD (4 << 20)
#define MAX_RUNS 9

static int quick;
static int runs = 5;
static char send_buf[MAX_PAYLOAD];
static char recv_buf[MAX_PAYLOAD];

static int iters_for(size_t size) {
  int n = size <= 4096      ? 10000
          : size <= 65536   ? 2000
          : size <= 1 << 20 ? 300
                            : 100;
  return quick ? n / 10 : n;
}

static void die_fi(const char *what, ssize_t rc) {
  bench_die(what, fi_strerror((int)(rc < 0 ? -rc : rc)));
}

/* 1. The anchor: fi_send and fi_recv on one endpoint per process, the
 * provider FI_PROVIDER names, found with the module's hints; each side
 * posts its receive before it sends and busy-polls the completion queue.
 * The payload lands straight in the receive buffer. */

struct raw {
  struct fi_info *info;
  struct fid_fabric *fabric;
  struct fid_domain *domain;
  struct fid_av *av;
  struct fid_cq *cq;
  struct fid_ep *ep;
  fi_addr_t peer;
  struct fi_context2 rctx, sctx;
  int received; /* the posted receive completed */
};

/* Reads completions; notes the receive's. */
static void raw_poll(struct raw *r) {
  struct fi_cq_entry e[8];
  ssize_t n = fi_cq_read(r->cq, e, 8);
  if (n == -FI_EAVAIL) {
    struct fi_cq_err_entry err = {0};
    fi_cq_readerr(r->cq, &err, 0);
    die_fi("raw completion", err.err);
  }
  for (ssize_t i = 0; i < n; i++)
    if (e[i].op_context == &r->rctx)
      r->received = 1;
}

static void raw_open(struct raw *r) {
  struct fi_info *hints = fi_allocinfo();
  hints->caps = FI_MSG;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode =
      FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  ssize_t rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &r->info);
  fi_freeinfo(hints);
  if (rc != 0)
    die_fi("fi_getinfo", rc);
  struct fi_av_attr av = {.type = FI_AV_TABLE};
  struct fi_cq_attr cq = {.format = FI_CQ_FORMAT_CONTEXT,
                          .wait_obj = FI_WAIT_NONE};
  if ((rc = fi_fabric(r->info->fabric_attr, &r->fabric, NULL)) != 0 ||
      (rc = fi_domain(r->fabric, r->info, &r->domain, NULL)) != 0 ||
      (rc = fi_av_open(r->domain, &av, &r->av, NULL)) != 0 ||
      (rc = fi_cq_open(r->domain, &cq, &r->cq, NULL)) != 0 ||
      (rc = fi_endpoint(r->domain, r->info, &r->ep, NULL)) != 0 ||
      (rc = fi_ep_bind(r->ep, &r->av->fid, 0)) != 0 ||
      (rc = fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV)) != 0 ||
      (rc = fi_enable(r->ep)) != 0)
    die_fi("opening the raw endpoint", rc);
}

static void raw_close(struct raw *r) {
  fi_close(&r->ep->fid);
  fi_close(&r->cq->fid);
  fi_close(&r->av->fid);
  fi_close(&r->domain->fid);
  fi_close(&r->fabric->fid);
  fi_freeinfo(r->info);
}

/* Writes our endpoint name to `out`, reads the peer's from `in`. */
static void raw_exchange(struct raw *r, int out, int in) {
  char name[512];
  size_t len = sizeof(name);
  ssize_t rc = fi_getname(&r->ep->fid, name, &len);
  if (rc != 0)
    die_fi("fi_getname", rc);
  uint32_t l = (uint32_t)len;
  if (write(out, &l, sizeof(l)) != sizeof(l) ||
      write(out, name, len) != (ssize_t)len)
    bench_die("writing the endpoint name", strerror(errno));
  char peer[512];
  if (bench_read_all(in, &l, sizeof(l)) < 0 || l > sizeof(peer) ||
      bench_read_all(in, peer, l) < 0)
    bench_die("reading the peer's endpoint name", "short read");
  if (fi_av_insert(r->av, peer, 1, &r->peer, 0, NULL) != 1)
    bench_die("fi_av_insert", "refused");
}

static void raw_post_recv(struct raw *r, size_t size) {
  ssize_t rc;
  r->received = 0;
  while ((rc = fi_recv(r->ep, recv_buf, size, NULL, FI_ADDR_UNSPEC,
                       &r->rctx)) == -FI_EAGAIN)
    raw_poll(r);
  if (rc != 0)
    die_fi("fi_recv", rc);
}

static void raw_send(struct raw *r, size_t size) {
  ssize_t rc;
  while ((rc = fi_send(r->ep, send_buf, size, NULL, r->peer, &r->sctx)) ==
         -FI_EAGAIN)
    raw_poll(r);
  if (rc != 0)
    die_fi("fi_send", rc);
}

/* Busy-polls until the posted receive completed (send completions are
 * read and dropped on the way). */
static void raw_wait_recv(struct raw *r) {
  while (!r->received)
    raw_poll(r);
}

static double raw_measure(size_t size, int warm, int n) {
  int p2c[2], c2p[2];
  if (pipe(p2c) < 0 || pipe(c2p) < 0)
    bench_die("pipe", strerror(errno));
  pid_t pid = fork();
  if (pid < 0)
    bench_die("fork", strerror(errno));
  struct raw r = {0};
  raw_open(&r);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    raw_exchange(&r, c2p[1], p2c[0]);
    raw_post_recv(&r, size);
    for (int i = 0; i < warm + n; i++) {
      raw_wait_recv(&r);
      raw_post_recv(&r, size);
      raw_send(&r, size);
    }
    /* Keep progressing until the parent got the last reply (ofi_rxm
     * moves large messages in progress calls, on both sides). */
    for (;;) {
      struct pollfd pfd = {.fd = p2c[0], .events = POLLIN};
      if (poll(&pfd, 1, 0) > 0)
        break;
      raw_poll(&r);
    }
    raw_close(&r);
    _exit(0);
  }
  raw_exchange(&r, p2c[1], c2p[0]);
  double t0 = 0;
  for (int i = -warm; i < n; i++) {
    if (i == 0)
      t0 = bench_now_us();
    raw_post_recv(&r, size);
    raw_send(&r, size);
    raw_wait_recv(&r);
  }
  double t = (bench_now_us() - t0) / n;
  char c = 0;
  if (write(p2c[1], &c, 1) < 0)
    bench_die("write", strerror(errno));
  waitpid(pid, NULL, 0);
  raw_close(&r);
  return t;
}

/* 2. RSRs: "ping" carries the payload to the child's initial context,
 * whose non-threaded handler echoes it in "pong" to the gp it was given
 * once ("hello"); pong copies the payload out, as a receiver would, and
 * signals the main thread, which waits in nx_cond_wait. */

static size_t reply_size;
static long bad_replies;
static int placing; /* the parent places its pongs */
static nx_handler_id_t pong_id;

/* Under placement, a reply of NX_PLACE_MIN bytes or more that was not
 * placed is a wrong one. */
static void check_placed(nx_buffer_t *buf) {
  if (placing && reply_size >= NX_PLACE_MIN && nx_buffer_placement(buf) != 1)
    __atomic_add_fetch(&bad_replies, 1, __ATOMIC_RELAXED);
}

static void on_pong(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  check_placed(buf);
  if (nx_get_bytes(buf, recv_buf, reply_size) != 0)
    __atomic_add_fetch(&bad_replies, 1, __ATOMIC_RELAXED);
  bench_reply_arrived();
}

/* A zero-copy reply: read in place (bench_check_ref). */
static void on_pong_ref(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  check_placed(buf);
  if (bench_check_ref(buf, send_buf, reply_size) != 0)
    __atomic_add_fetch(&bad_replies, 1, __ATOMIC_RELAXED);
  bench_reply_arrived();
}

/* The child's: under BENCH_PLACE, a ping of NX_PLACE_MIN bytes or more
 * that was not placed (into recv_buf) is an error. */
static void on_ping(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  if (getenv("BENCH_PLACE") != NULL &&
      nx_buffer_remaining(buf) >= nx_sizeof_bytes(NX_PLACE_MIN) &&
      nx_buffer_placement(buf) != 1)
    bench_die("a ping", "not placed");
  bench_echo(buf, &bench_reply_gp, pong_id, recv_buf, sizeof(recv_buf));
}

static void die_nx(const char *what, int rc) {
  bench_die(what, nx_strerror(rc));
}

/* The zero-copy ping ("ping_ref", answered by bench_echo_ref in "pong_ref")
 * puts send_buf by reference: it never changes, so it may go again before
 * its release came; every release is waited for at the end. With `place`,
 * both processes place what they receive into their recv_buf. */
static double rsr_measure(const char *mode, int zc, int place, size_t size,
                          int warm, int n) {
  setenv("NX_PROGRESS", mode, 1);
  setenv("NX_PROTOCOLS", "ofi,local", 1);
  if (place)
    setenv("BENCH_PLACE", "1", 1);
  else
    unsetenv("BENCH_PLACE");
  placing = place;
  struct bench_child child;
  bench_child_spawn(&child, NULL);
  int rc = nx_init(NULL, NULL);
  if (rc != 0)
    die_nx("nx_init", rc);
  bench_sync_init();
  reply_size = size;
  nx_handler_register(nx_context_self(), "pong", on_pong,
                      NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(nx_context_self(), "pong_ref", on_pong_ref,
                      NX_HANDLER_NONTHREADED, NULL);
  if (place) {
    bench_place_into(recv_buf, sizeof(recv_buf));
    nx_handler_set_place(nx_context_self(), "pong", bench_place);
    nx_handler_set_place(nx_context_self(), "pong_ref", bench_place);
  }
  bench_child_connect(&child, "ofi");
  nx_handler_id_t ping = nx_handler_id("ping");
  nx_handler_id_t ping_ref = nx_handler_id("ping_ref");
  double t0 = 0;
  for (int i = -warm; i < n; i++) {
    if (i == 0)
      t0 = bench_now_us();
    if (zc) {
      long want = bench_next_reply();
      if ((rc = bench_send_ref(&child.gp, ping_ref, send_buf, size)) != 0)
        die_nx("a zero-copy ping", rc);
      bench_wait_replies(want, 10);
      continue;
    }
    nx_buffer_t *b;
    if ((rc = nx_rsr_init(&b, &child.gp, ping, nx_sizeof_bytes(size))) != 0 ||
        (rc = nx_put_bytes(b, send_buf, size)) != 0)
      die_nx("ping", rc);
    long want = bench_next_reply();
    if ((rc = nx_rsr_send(b)) != 0)
      die_nx("nx_rsr_send", rc);
    bench_wait_replies(want, 10);
  }
  double t = (bench_now_us() - t0) / n;
  bench_wait_released(10);
  if (bad_replies > 0)
    bench_die("replies", "of the wrong size or contents, or not placed");
  bench_child_stop(&child);
  nx_finalize();
  return t;
}

/* 3. The driver: one fresh process per measurement. */

/* Runs "--measure" with FI_PROVIDER=`prov`; returns microseconds per round
 * trip, or NAN with the reason in `why`. */
static double measure(const char *prov, int sys, size_t size, char *why,
                      size_t why_len) {
  int fds[2];
  if (pipe(fds) < 0)
    bench_die("pipe", strerror(errno));
  char size_arg[32], n_arg[32];
  snprintf(size_arg, sizeof(size_arg), "%zu", size);
  snprintf(n_arg, sizeof(n_arg), "%d", iters_for(size));
  char *argv[] = {"/proc/self/exe", "--measure", (char *)system_name[sys],
                  size_arg,         n_arg,       NULL};
  setenv("FI_PROVIDER", prov, 1);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0)
    bench_die("posix_spawn", strerror(rc));
  char out[128] = "";
  size_t len = 0;
  ssize_t r;
  while (len < sizeof(out) - 1 &&
         (r = read(fds[0], out + len, sizeof(out) - 1 - len)) != 0) {
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      break;
    len += (size_t)r;
  }
  out[len] = '\0';
  close(fds[0]);
  int status;
  waitpid(pid, &status, 0);
  double us;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
      sscanf(out, "%lf", &us) != 1) {
    snprintf(why, why_len, "the measurement failed (see stderr)");
    return NAN;
  }
  return us;
}

/* 4. Open MPI on the same provider: its ofi MTL (pml cm), told to take
 * `prov` (Open MPI 4.1 leaves shm and tcp out unless told), or Open MPI's
 * defaults from the first time that MTL fails on it. */

struct ompi {
  struct bench_mpi mpi;
  int found;         /* mpi_pingpong is built */
  int fallback;      /* the ofi MTL did not run: Open MPI's defaults */
  char mtl_why[256]; /* why it did not */
};

static double ompi_measure(struct ompi *o, const char *prov, size_t size) {
  const char *const mtl[] = {
      "--mca", "pml", "cm",    "--mca",
      "mtl",   "ofi", "--mca", "mtl_ofi_provider_include",
      prov,    NULL};
  double usec = NAN;
  setenv("FI_PROVIDER", prov, 1);
  if (o->found && !o->fallback &&
      bench_mpi_run(&o->mpi, mtl, &size, &usec, 1, quick) != 0) {
    snprintf(o->mtl_why, sizeof(o->mtl_why), "%s", o->mpi.why);
    o->mpi.why[0] = '\0';
    o->fallback = 1;
  }
  if (o->fallback)
    bench_mpi_run(&o->mpi, NULL, &size, &usec, 1, quick);
  return usec;
}

static const char usage[] =
    "usage: bench_rsr_ofi [--quick] [--provider shm|tcp] [--size BYTES]\n"
    "  RSR round trips over the ofi module between two processes beside a "
    "raw\n"
    "  libfabric ping-pong, per provider (default shm and tcp), 8 B to 4 "
    "MiB;\n"
    "  from 1 MiB up also with receive placement, beside Open MPI's ofi MTL "
    "on\n"
    "  the provider (mpirun); prints the medians, the ratios and the "
    "goals.\n"
    "  --quick      3 runs\n"
    "  --provider   one provider\n"
    "  --size       one payload size in bytes (at most 4 MiB)\n";

int main(int argc, char **argv) {
  bench_name = "bench_rsr_ofi";
  pong_id = nx_handler_id("pong");
  bench_child_place_mem = recv_buf; /* the child's pings, under BENCH_PLACE */
  bench_child_place_len = sizeof(recv_buf);
  int child = bench_child_run(argc, argv, on_ping);
  if (child >= 0)
    return child;
  if (argc == 5 && strcmp(argv[1], "--measure") == 0) {
    size_t size = strtoul(argv[3], NULL, 10);
    int n = atoi(argv[4]);
    if (size > MAX_PAYLOAD || n <= 0)
      return bench_bad_arg("bench_rsr_ofi", argv[3], "a bad --measure", usage);
    memset(send_buf, 0x5a, size);
    int warm = n / 10 > 100 ? 100 : n / 10 + 1;
    int sys = -1;
    for (int s = 0; s < OMPI; s++)
      if (strcmp(argv[2], system_name[s]) == 0)
        sys = s;
    if (sys < 0)
      return bench_bad_arg("bench_rsr_ofi", argv[2], "no such system", usage);
    double t;
    if (sys == RAW) {
      t = raw_measure(size, warm, n);
    } else {
      int poll =
          sys == RSR_POLL || sys == ZC_POLL || sys == PL_POLL || sys == ZP_POLL;
      int zc = sys == ZC_THREAD || sys == ZC_POLL || sys >= ZP_THREAD;
      t = rsr_measure(poll ? "poll" : "thread", zc, sys >= PL_THREAD, size,
                      warm, n);
    }
    printf("%.4f\n", t);
    return 0;
  }
  size_t sizes[5] = {8, 1024, 65536, 1 << 20, 4 << 20};
  int nsizes = 5;
  const char *provs[2] = {"shm", "tcp;ofi_rxm"};
  int nprovs = 2;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
      runs = 3;
    } else if (strcmp(argv[i], "--provider") == 0 && i + 1 < argc) {
      i++;
      provs[0] = strcmp(argv[i], "tcp") == 0 ? "tcp;ofi_rxm" : argv[i];
      nprovs = 1;
    } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
      char *end;
      sizes[0] = strtoul(argv[++i], &end, 10);
      nsizes = 1;
      if (*end != '\0' || sizes[0] > MAX_PAYLOAD)
        return bench_bad_arg("bench_rsr_ofi", argv[i], "not a size in range",
                             usage);
    } else if (bench_is_help(argv[i])) {
      return bench_help(usage);
    } else {
      return bench_bad_arg("bench_rsr_ofi", argv[i], NULL, usage);
    }
  }
  /* Both RSR processes of a measurement: one computation, one key. */
  bench_set_key();
  printf("RSR round trips over the ofi module vs raw libfabric ping-pong "
         "(%s)\n",
         quick ? "quick" : "full");
  for (int pi = 0; pi < nprovs; pi++) {
    const char *prov = provs[pi];
    printf("\n== FI_PROVIDER=%s\n", prov);
    double ratio8[NSYSTEMS], ratio1m[NSYSTEMS], ratio4m[NSYSTEMS];
    double bw1m[NSYSTEMS], bw4m[NSYSTEMS]; /* Open MPI's time over theirs */
    for (int s = 0; s < NSYSTEMS; s++)
      ratio8[s] = ratio1m[s] = ratio4m[s] = bw1m[s] = bw4m[s] = NAN;
    struct ompi ompi = {{{0}, {0}}, 0, 0, {0}};
    bench_mpi_find(&ompi.mpi);
    ompi.found = ompi.mpi.why[0] == '\0';
    int available = 1;
    for (int si = 0; si < nsizes && available; si++) {
      size_t size = sizes[si];
      double v[NSYSTEMS][MAX_RUNS];
      char why[160] = "";
      /* Interleaved: each run measures every system once, so a slow
       * moment of the machine hurts them alike. */
      int nsys = size >= PLACED_MIN ? NSYSTEMS : PL_THREAD;
      for (int run = 0; run < runs && available; run++)
        for (int s = 0; s < nsys; s++) {
          v[s][run] = s == OMPI ? ompi_measure(&ompi, prov, size)
                                : measure(prov, s, size, why, sizeof(why));
          if (isnan(v[s][run]) && s == RAW) {
            printf("  not available: %s\n", why);
            available = 0;
            break;
          }
        }
      if (!available)
        break;
      char label[32];
      bench_size_label(size, label, sizeof(label));
      printf("\n%s: %d round trips per run, median of %d runs (fastest)\n",
             label, iters_for(size), runs);
      double med[NSYSTEMS], best[NSYSTEMS];
      for (int s = 0; s < nsys; s++)
        med[s] = bench_median(v[s], runs, &best[s]);
      for (int s = 0; s < nsys; s++) {
        const char *lab = s != OMPI       ? system_label[s]
                          : ompi.fallback ? "Open MPI, its defaults"
                                          : "Open MPI, ofi MTL";
        if (s == OMPI && isnan(med[s])) {
          printf("  %-34s not available (%s)\n", lab, ompi.mpi.why);
          continue;
        }
        printf("  %-34s %9.2f us (%9.2f)", lab, med[s], best[s]);
        if (s != RAW)
          printf("  %6.2fx raw (fastest %.2fx)", med[s] / med[RAW],
                 best[s] / best[RAW]);
        if (s >= PL_THREAD && s < OMPI)
          printf("  %6.2fx Open MPI", med[s] / med[OMPI]);
        printf("\n");
        if (s >= PL_THREAD && s < OMPI && size == 1 << 20)
          bw1m[s] = med[OMPI] / med[s];
        if (s >= PL_THREAD && s < OMPI && size == 4 << 20)
          bw4m[s] = med[OMPI] / med[s];
        if (size == 8)
          ratio8[s] = med[s] / med[RAW];
        if (size == 1 << 20)
          ratio1m[s] = med[s] / med[RAW];
        if (size == 4 << 20)
          ratio4m[s] = med[s] / med[RAW];
      }
    }
    if (!available)
      continue;
    printf("\n  goals (RSR / raw):\n");
    for (int s = RSR_THREAD; s <= RSR_POLL; s++) {
      if (!isnan(ratio8[s]))
        printf("    8 B   %-28s %6.2fx  (goal 1.3x: %s)\n", system_label[s],
               ratio8[s], ratio8[s] <= 1.3 ? "met" : "NOT met");
      if (!isnan(ratio1m[s]))
        printf("    1 MiB %-28s %6.2fx  (goal 1.1x: %s)\n", system_label[s],
               ratio1m[s], ratio1m[s] <= 1.1 ? "met" : "NOT met");
    }
    printf("  zero copy (RSR / raw): goal: within 1.1x of raw at 1 MiB and "
           "4 MiB\n");
    for (int s = ZC_THREAD; s <= ZC_POLL; s++) {
      if (!isnan(ratio1m[s]))
        printf("    1 MiB %-28s %6.2fx  %s\n", system_label[s], ratio1m[s],
               ratio1m[s] <= 1.1 ? "met" : "NOT met");
      if (!isnan(ratio4m[s]))
        printf("    4 MiB %-28s %6.2fx  %s\n", system_label[s], ratio4m[s],
               ratio4m[s] <= 1.1 ? "met" : "NOT met");
    }
    if (ompi.fallback)
      printf("  Open MPI's ofi MTL did not run on %s (%s): Open MPI's "
             "defaults instead\n",
             prov, ompi.mtl_why);
    printf("  receive placement: Open MPI's time over the placed rows' "
           "(their bandwidth over Open MPI's; no goal for ofi)\n");
    for (int s = PL_THREAD; s < OMPI; s++) {
      if (!isnan(bw1m[s]))
        printf("    1 MiB %-28s %6.2fx\n", system_label[s], bw1m[s]);
      if (!isnan(bw4m[s]))
        printf("    4 MiB %-28s %6.2fx\n", system_label[s], bw4m[s]);
    }
  }
  return 0;
}
