/* The Nexus paper's Figure 3 program on nexus: an array of doubles circulated
 * between two contexts by RSRs, with the handlers non-threaded, on a pooled
 * thread or on a new thread, over one chosen protocol module; the array
 * copied into and out of the buffers, as the paper's program did, or put by
 * reference and read in place (--zero-copy). */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../bench_args.h"
#include "fig3.h"
#include "nexus.h"

/* Usage: fig3_rsr --module M --kind K [--zero-copy] [--size N] [--iters N]
 *                 [--warm N] [--reps N]
 *   M: local (two in-process contexts); tcp, ucx or ofi (two processes:
 *      the peer is this program again, started with nx_context_create);
 *      mpi (the two ranks of `mpirun -np 2 fig3_rsr ...`).
 *   K: nonthreaded, threaded (a pooled thread) or new-thread.
 * The initiator sends "ping" with the array to the peer context, whose
 * handler unpacks it and sends it back in "pong"; pong unpacks it and
 * signals the initiator's main thread, which waits in nx_cond_wait (and so
 * drives progress itself). Both handlers are of kind K, as both halves of
 * a CC++ remote call returning the array would be. Both processes use
 * NX_PROTOCOLS=M,local, and the run is skipped (see fig3.h) when M did not
 * load or another protocol was chosen.
 *
 * --zero-copy: the program makes no copy of the array. The initiator puts
 * it by reference (nx_put_double_array_ref) and, before it may write the
 * array again, waits for the release callback as well as for the pong;
 * the peer's handler reads it in place (nx_get_double_array_ptr), retains
 * the received buffer and answers with the array put by reference from
 * there, the release callback releasing that buffer; pong reads it in
 * place and checks its ends (a last round trip copies it out, to check it
 * whole). The runtime may still copy where a module cannot send from
 * several places at once (iov_max in nexus/protocol.h). */

#define MAX_DOUBLES (FIG3_MAX_BYTES / sizeof(double))

enum { M_LOCAL, M_TCP, M_UCX, M_OFI, M_MPI, NMODULES };
static const char *const module_names[NMODULES] = {"local", "tcp", "ucx", "ofi",
                                                   "mpi"};
static const char *const kind_names[] = {"nonthreaded", "threaded",
                                         "new-thread"};
static const int kinds[] = {NX_HANDLER_NONTHREADED, NX_HANDLER_THREADED,
                            NX_HANDLER_NEW_THREAD};

static int module = -1;
static int kind_index = -1;
static int zero_copy;

/* The initiator's array, the peer's copy and the copy that came back; one
 * ping is in flight at a time, so each has one writer at a time. */
static double out_buf[MAX_DOUBLES];
static double peer_buf[MAX_DOUBLES];
static double back_buf[MAX_DOUBLES];

static nx_mutex_t m;
static nx_cond_t c;
static long done;     /* pongs received */
static long released; /* zero copy: pings whose array was released */
static int check_all; /* zero copy: pong copies the array out to check it */
static int quit;
static long bad;                         /* malformed pings or pongs */
static nx_gp_t reply_gp = NX_GP_NULL;    /* the peer answers here */
static nx_handler_id_t ping_id, pong_id; /* ids of "ping", "pong" */

static void die_nx(const char *what, int rc) {
  fig3_die("%s: %s", what, nx_strerror(rc));
}

/* Takes the count and the doubles out of `buf` into `dst`; returns the
 * count, or -1 for a malformed buffer. */
static long unpack_array(nx_buffer_t *buf, double *dst) {
  int64_t count;
  if (nx_get_int64(buf, &count) != 0 || count < 0 ||
      (uint64_t)count > MAX_DOUBLES ||
      nx_get_double_array(buf, dst, (size_t)count) != 0)
    return -1;
  return (long)count;
}

/* Sends "count" doubles of `src` to `handler` at `gp`. */
static int send_array(const nx_gp_t *gp, nx_handler_id_t handler,
                      const double *src, size_t count) {
  nx_buffer_t *b;
  int rc = nx_rsr_init(&b, gp, handler,
                       nx_sizeof_int64(1) + nx_sizeof_double(count));
  if (rc != 0)
    return rc;
  if ((rc = nx_put_int64(b, (int64_t)count)) != 0 ||
      (rc = nx_put_double_array(b, src, count)) != 0) {
    nx_buffer_release(b);
    return rc;
  }
  return nx_rsr_send(b);
}

/* Zero copy: the initiator's array may be written again. Runs inside
 * nx_rsr_send or on a runtime thread; holds the mutex only briefly, as the
 * handlers do. */
static void ping_released(void *arg, const void *v, int status) {
  (void)arg, (void)v;
  nx_mutex_lock(&m);
  released++;
  if (status != 0)
    bad++;
  nx_cond_signal(&c);
  nx_mutex_unlock(&m);
}

/* Zero copy: a reply's array pointed into the ping it answered, which may
 * go now. */
static void pong_released(void *arg, const void *v, int status) {
  (void)v, (void)status;
  nx_buffer_release(arg);
}

/* Sends "count" doubles at `src` to `handler` at `gp` by reference;
 * ping_released is called once they are no longer read. */
static int send_array_ref(const nx_gp_t *gp, nx_handler_id_t handler,
                          const double *src, size_t count) {
  nx_buffer_t *b;
  int rc = nx_rsr_init(&b, gp, handler, nx_sizeof_int64(1));
  if (rc != 0)
    return rc;
  if ((rc = nx_put_int64(b, (int64_t)count)) != 0 ||
      (rc = nx_put_double_array_ref(b, src, count, ping_released, NULL)) != 0) {
    nx_buffer_release(b);
    return rc;
  }
  return nx_rsr_send(b);
}

/* Zero copy: where the array in `buf` is; its count, or -1 for a
 * malformed buffer. */
static long array_in_place(nx_buffer_t *buf, const double **v) {
  int64_t count;
  if (nx_get_int64(buf, &count) != 0 || count < 0 ||
      (uint64_t)count > MAX_DOUBLES ||
      nx_get_double_array_ptr(buf, v, (size_t)count) != 0)
    return -1;
  return (long)count;
}

static void count_bad(void) {
  nx_mutex_lock(&m);
  bad++;
  done++; /* never leave the initiator waiting */
  nx_cond_signal(&c);
  nx_mutex_unlock(&m);
}

/* The peer: "hello" brings the gp to answer to (and is answered with an
 * empty pong, so the initiator knows the peer is set up); "ping" brings
 * the array back. */
static void on_hello(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  nx_gp_release(&reply_gp);
  if (nx_get_gp(buf, &reply_gp) != 0 ||
      send_array(&reply_gp, pong_id, peer_buf, 0) != 0)
    fprintf(stderr, "%s: the peer could not answer hello\n", fig3_prog);
}

/* Zero copy: answers with the array where it arrived. */
static void on_ping_ref(nx_buffer_t *buf) {
  const double *v;
  nx_buffer_t *b;
  long n = array_in_place(buf, &v);
  int rc = n < 0 ? NX_EPROTO : nx_buffer_retain(buf);
  if (rc != 0)
    goto err;
  if ((rc = nx_rsr_init(&b, &reply_gp, pong_id, nx_sizeof_int64(1))) != 0)
    goto err_retained;
  if ((rc = nx_put_int64(b, (int64_t)n)) != 0 ||
      (rc = nx_put_double_array_ref(b, v, (size_t)n, pong_released, buf)) != 0)
    goto err_buffer;
  /* From here pong_released releases `buf`, also when the send fails. */
  if ((rc = nx_rsr_send(b)) != 0)
    goto err;
  return;
err_buffer:
  nx_buffer_release(b);
err_retained:
  nx_buffer_release(buf);
err:
  fprintf(stderr, "%s: the peer could not answer a ping: %s\n", fig3_prog,
          nx_strerror(rc));
}

static void on_ping(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  if (zero_copy) {
    on_ping_ref(buf);
    return;
  }
  long n = unpack_array(buf, peer_buf);
  if (n < 0 || send_array(&reply_gp, pong_id, peer_buf, (size_t)n) != 0)
    fprintf(stderr, "%s: the peer could not answer a ping\n", fig3_prog);
}

static void on_quit(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr, (void)buf;
  nx_mutex_lock(&m);
  quit = 1;
  nx_cond_signal(&c);
  nx_mutex_unlock(&m);
}

/* Zero copy: the array came back unchanged (its ends; all of it when
 * check_all is set). */
static int pong_ref_ok(nx_buffer_t *buf) {
  const double *v;
  long n = array_in_place(buf, &v);
  if (n < 0)
    return 0;
  if (__atomic_load_n(&check_all, __ATOMIC_ACQUIRE)) {
    memcpy(back_buf, v, (size_t)n * sizeof(double));
    return 1;
  }
  return n == 0 || (v[0] == out_buf[0] && v[n - 1] == out_buf[n - 1]);
}

/* The initiator: "pong" brings the array back. */
static void on_pong(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  if (zero_copy ? !pong_ref_ok(buf) : unpack_array(buf, back_buf) < 0) {
    count_bad();
    return;
  }
  nx_mutex_lock(&m);
  done++;
  nx_cond_signal(&c);
  nx_mutex_unlock(&m);
}

static int register_peer(nx_context_t *ctx) {
  int rc;
  if ((rc = nx_handler_register(ctx, "hello", on_hello, NX_HANDLER_NONTHREADED,
                                NULL)) != 0 ||
      (rc = nx_handler_register(ctx, "ping", on_ping, kinds[kind_index],
                                NULL)) != 0 ||
      (rc = nx_handler_register(ctx, "quit", on_quit, NX_HANDLER_NONTHREADED,
                                NULL)) != 0)
    return rc;
  return 0;
}

static int local_peer_init(nx_context_t *ctx, void *arg) {
  (void)arg;
  return register_peer(ctx);
}

/* Sends one ping (a hello when `me` is given) and waits for its pong and,
 * with zero copy, for the release of the array it put, so that the array
 * may be written once this returns. */
static void round_trip(const nx_gp_t *peer, size_t count, const nx_gp_t *me) {
  nx_mutex_lock(&m);
  long want = done + 1;
  long want_released = zero_copy && me == NULL ? released + 1 : released;
  nx_mutex_unlock(&m);
  int rc;
  if (me != NULL) {
    nx_buffer_t *b;
    if ((rc = nx_rsr_init_name(&b, peer, "hello", nx_sizeof_gp(me))) != 0 ||
        (rc = nx_put_gp(b, me)) != 0 || (rc = nx_rsr_send(b)) != 0)
      die_nx("hello", rc);
  } else if ((rc = zero_copy
                       ? send_array_ref(peer, ping_id, out_buf, count)
                       : send_array(peer, ping_id, out_buf, count)) != 0) {
    die_nx("ping", rc);
  }
  nx_mutex_lock(&m);
  while (done < want || released < want_released)
    nx_cond_wait(&c, &m);
  nx_mutex_unlock(&m);
}

struct ping {
  const nx_gp_t *peer;
  size_t count;
};

static void ping_once(void *arg) {
  const struct ping *p = arg;
  round_trip(p->peer, p->count, NULL);
}

/* Skips the run unless the module loaded. */
static void require_module(void) {
  for (int i = 0; i < nx_module_count(); i++) {
    nx_module_info_t info;
    if (nx_module_info(i, &info) == 0 &&
        strcmp(info.name, module_names[module]) == 0) {
      if (info.loaded)
        return;
      fig3_skip("module %s did not load: %s", info.name, info.reason);
    }
  }
  fig3_skip("module %s was not found", module_names[module]);
}

/* The peer of a process run: serves until the initiator destroys it. */
static int peer_main(void) {
  int rc = nx_init(NULL, NULL);
  if (rc != 0)
    die_nx("nx_init (peer)", rc);
  if ((rc = register_peer(nx_context_self())) != 0)
    die_nx("registering the peer's handlers", rc);
  rc = nx_context_serve();
  nx_gp_release(&reply_gp);
  nx_finalize();
  return rc == 0 ? 0 : 1;
}

/* Rank 1 of an mpi run: serves until rank 0 sends "quit". */
static void mpi_peer_wait(void) {
  nx_mutex_lock(&m);
  while (!quit)
    nx_cond_wait(&c, &m);
  nx_mutex_unlock(&m);
}

static const char usage[] =
    "usage: fig3_rsr --module local|tcp|ucx|ofi|mpi "
    "--kind nonthreaded|threaded|new-thread\n"
    "                [--zero-copy] [--size BYTES] [--iters N] [--warm N] "
    "[--reps N]\n"
    "                [--max-ms N]\n"
    "  The Figure 3 ping-pong: RSRs to a peer context over one module, "
    "with one\n"
    "  kind of handler; prints one result line (bench/run reads it).\n"
    "  --zero-copy   payloads by reference\n"
    "  --size     bytes per message, a multiple of 8 (default 8)\n"
    "  --iters    round trips per rep (default 1000)\n"
    "  --warm     round trips before timing (default 100)\n"
    "  --reps     timed reps (default 1)\n"
    "  --max-ms   stop a rep after this many ms (default 1000)\n";

static int lookup(const char *s, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (strcmp(s, names[i]) == 0)
      return i;
  return -1;
}

int main(int argc, char **argv) {
  fig3_prog = "fig3_rsr";
  struct fig3_opts o = {
      .size = 8, .iters = 1000, .warm = 100, .reps = 1, .max_ms = 1000};
  int peer = 0;
  for (int i = 1; i < argc; i++) {
    int r = fig3_common_option(argc, argv, &i, &o);
    if (r < 0) {
      fputs(usage, stderr);
      return 2;
    }
    if (r > 0)
      continue;
    if (strcmp(argv[i], "--peer") == 0) {
      peer = 1;
    } else if (strcmp(argv[i], "--zero-copy") == 0) {
      zero_copy = 1;
    } else if (strcmp(argv[i], "--module") == 0 && i + 1 < argc) {
      module = lookup(argv[++i], module_names, NMODULES);
      if (module < 0)
        return bench_bad_arg(fig3_prog, argv[i], "not a module", usage);
    } else if (strcmp(argv[i], "--kind") == 0 && i + 1 < argc) {
      kind_index = lookup(argv[++i], kind_names, 3);
      if (kind_index < 0)
        return bench_bad_arg(fig3_prog, argv[i], "not a kind", usage);
    } else if (bench_is_help(argv[i])) {
      return bench_help(usage);
    } else {
      return bench_bad_arg(fig3_prog, argv[i], NULL, usage);
    }
  }
  if (module < 0 || kind_index < 0)
    return bench_bad_arg(fig3_prog, module < 0 ? "--module" : "--kind",
                         "is needed", usage);
  nx_mutex_init(&m);
  nx_cond_init(&c);
  ping_id = nx_handler_id("ping");
  pong_id = nx_handler_id("pong");
  if (peer)
    return peer_main();

  char protocols[32];
  snprintf(protocols, sizeof(protocols), "%s%s", module_names[module],
           module == M_LOCAL ? "" : ",local");
  setenv("NX_PROTOCOLS", protocols, 1);
  int rc = nx_init(NULL, NULL);
  if (rc != 0)
    die_nx("nx_init", rc);
  require_module();
  nx_context_t *self = nx_context_self();
  if ((rc = nx_handler_register(self, "pong", on_pong, kinds[kind_index],
                                NULL)) != 0)
    die_nx("registering pong", rc);

  nx_gp_t peer_gp = NX_GP_NULL, *mpi_gps = NULL;
  int mpi_count = 0;
  if (module == M_LOCAL) {
    if ((rc = nx_context_create_local(local_peer_init, NULL, &peer_gp)) != 0)
      die_nx("nx_context_create_local", rc);
  } else if (module == M_MPI) {
    int rank = -1;
    if ((rc = register_peer(self)) != 0)
      die_nx("registering the peer's handlers", rc);
    if ((rc = nx_context_peers(&mpi_gps, &mpi_count, &rank)) != 0)
      die_nx("nx_context_peers", rc);
    if (mpi_count != 2)
      fig3_die("run under mpirun -np 2 (%d ranks)", mpi_count);
    if (rank == 1) {
      mpi_peer_wait();
      for (int i = 0; i < mpi_count; i++)
        nx_gp_release(&mpi_gps[i]);
      free(mpi_gps);
      nx_gp_release(&reply_gp);
      nx_finalize();
      return 0;
    }
    peer_gp = mpi_gps[1];
  } else {
    char self_path[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self_path, sizeof(self_path) - 1);
    if (len <= 0)
      fig3_die("readlink /proc/self/exe failed");
    self_path[len] = '\0';
    char *peer_argv[] = {"fig3_rsr",
                         "--peer",
                         "--module",
                         (char *)module_names[module],
                         "--kind",
                         (char *)kind_names[kind_index],
                         zero_copy ? "--zero-copy" : NULL,
                         NULL};
    nx_node_t node;
    if ((rc = nx_node_self(&node)) != 0 ||
        (rc = nx_context_create(&node, self_path, peer_argv, &peer_gp)) != 0)
      die_nx("nx_context_create", rc);
  }
  const char *proto = nx_gp_protocol(&peer_gp);
  if (proto == NULL || strcmp(proto, module_names[module]) != 0)
    fig3_skip("the peer is reached over %s, not %s",
              proto != NULL ? proto : "nothing", module_names[module]);

  for (size_t i = 0; i < MAX_DOUBLES; i++)
    out_buf[i] = (double)i * 0.5;
  size_t count = o.size / sizeof(double);
  nx_gp_t me;
  if ((rc = nx_gp_make(NULL, &me)) != 0)
    die_nx("nx_gp_make", rc);
  round_trip(&peer_gp, 0, &me);
  struct ping ping = {&peer_gp, count};
  fig3_measure(&o, ping_once, &ping);
  if (zero_copy) {
    /* One more round trip, with the array copied out to be checked. */
    __atomic_store_n(&check_all, 1, __ATOMIC_RELEASE);
    ping_once(&ping);
  }
  if (bad > 0)
    fig3_die("%ld malformed pongs", bad);
  if (count > 0 && memcmp(back_buf, out_buf, count * sizeof(double)) != 0)
    fig3_die("the array came back changed");

  if (module == M_MPI) {
    nx_buffer_t *b;
    if ((rc = nx_rsr_init_name(&b, &peer_gp, "quit", 0)) != 0 ||
        (rc = nx_rsr_send(b)) != 0)
      die_nx("quit", rc);
    for (int i = 0; i < mpi_count; i++)
      nx_gp_release(&mpi_gps[i]);
    free(mpi_gps);
  } else {
    if ((rc = nx_context_destroy(&peer_gp)) != 0)
      die_nx("nx_context_destroy", rc);
    nx_gp_release(&peer_gp);
  }
  nx_gp_release(&me);
  nx_gp_release(&reply_gp);
  return nx_finalize() == 0 ? 0 : 1;
}
