/* The program the fault-injection tests run under nxrun (run_faults.py).
 *
 *   faults_peer flood COUNT SIZE HANDLER_US
 *     rank 0 sends COUNT RSRs of SIZE bytes to rank 1, whose handler takes
 *     HANDLER_US each, then "stop", and calls nx_finalize at once: it must
 *     return 0 (everything was handled). Rank 1 waits for "stop" and the
 *     whole flood (in any order), and checks that every RSR ran once.
 *   faults_peer flood COUNT SIZE HANDLER_US bound
 *     the same under a short NX_FINALIZE_MS: nx_finalize must return
 *     NX_ETIMEDOUT, without a crash, after reporting each RSR it could not
 *     confirm to the error callback (at most COUNT + 1 of them).
 *   faults_peer alltoall SHM COUNT [PAD]
 *     every rank sends COUNT numbered RSRs (each with PAD bytes more, 0 if
 *     not given) to every other, then "done" with the number it sent,
 *     and waits, for every rank that is alive, for its "done" and for
 *     that many of its RSRs (nexus keeps no order between two
 *     processes: "done" may overtake them; said on stderr). What happens is
 *     written to the shared file SHM (struct board): each sender's accepted
 *     RSRs, each handled one, the losses reported to each sender's error
 *     callback. The driver kills and stops ranks meanwhile and then checks
 *     the board: it survives the kill of any rank.
 *   faults_peer --gw MOD flood|alltoall ...
 *     the same with a gateway in the path (docs/design.md section 6,
 *     "Gateways"), under nxrun: rank 0 is the gateway (MOD, tcp and
 *     local; it sends nothing), odd ranks load MOD and local, even ranks
 *     tcp and local, so that an odd and an even rank share no module and
 *     reach each other only through rank 0. Every member joins it
 *     (nx_gateway_use) and sends it a gp to itself; rank 0 sends every
 *     member the others' gps, and stays until every member process has
 *     ended. flood: rank 1 floods rank 2 (through the gateway). alltoall:
 *     every member sends to every other member; SHM and COUNT as above.
 * Exit status: 0, or 1 with the failed expectation on stderr. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "expect.h"
#include "nexus.h"

#define MAX_RANKS 8
#define WAIT_S 120

/* The shared board (alltoall). handled[s][d][seq] counts runs of seq s->d. */
struct board {
  atomic_int pid[MAX_RANKS];
  atomic_uint accepted[MAX_RANKS][MAX_RANKS]; /* nx_rsr_send returned 0 */
  atomic_uint reported[MAX_RANKS][MAX_RANKS]; /* error callback, per RSR */
  atomic_int finalized[MAX_RANKS];            /* nx_finalize's result + 1000 */
  atomic_uint count;                          /* COUNT */
  atomic_uchar handled[];                     /* [s][d][seq] */
};
/* run_faults.py reads the board at these offsets. */
_Static_assert(offsetof(struct board, handled) == 580, "board layout");

/* Atomic: handlers and the error callback may read them (and find 0) while
 * main is still in nx_context_peers, which is given locals. */
static _Atomic int rank, nranks;
static nx_gp_t *peers;
static struct board *board;
static unsigned count;
static nx_mutex_t m;
static nx_cond_t c;
static int done_from[MAX_RANKS];
/* From each rank: the RSRs it said it sent ("done"), and those of them
 * handled here (each seq once). */
static atomic_uint done_sent[MAX_RANKS];
static atomic_uint seq_seen[MAX_RANKS];
static atomic_int dead[MAX_RANKS]; /* read by main without the mutex */
static _Atomic long flood_seen;
static unsigned char *flood_seq;
static int stopped;
static int ready_from[MAX_RANKS];
static atomic_long flood_reported;
static unsigned handler_us;
/* Gateway mode: the first member rank (1; 0 without a gateway), the
 * flood's sender and receiver, the members' pids (seen by the gateway),
 * and how many members said hello and have the table. */
static int gw, first, flood_src = 0, flood_dst = 1;
static int hellos, have_table;
static pid_t member_pid[MAX_RANKS];
static nx_gp_t member_gp[MAX_RANKS];

static void wait_until(int (*cond)(void)) {
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += WAIT_S;
  nx_mutex_lock(&m);
  while (!cond() && nx_cond_timedwait(&c, &m, &dl) == 0)
    ;
  int ok = cond();
  nx_mutex_unlock(&m);
  if (!ok) {
    fprintf(stderr, "rank %d: nothing came for %d s\n", rank, WAIT_S);
    exit(1);
  }
}

static int rank_of(uint64_t context) {
  for (int i = 0; i < nranks; i++)
    if ((nx_gp_context(&peers[i]) >> 32) == (context >> 32))
      return i;
  return -1;
}

/* Per RSR (handler != 0): a loss this process must hear of. Per process
 * (handler 0): a rank died. */
static void on_error(int err, uint64_t context, uint32_t handler, void *arg) {
  (void)err;
  (void)arg;
  /* peers is published under m (main, after nx_context_peers). */
  nx_mutex_lock(&m);
  int d = rank_of(context);
  nx_mutex_unlock(&m);
  if (d < 0)
    return;
  if (handler == 0) {
    nx_mutex_lock(&m);
    dead[d] = 1;
    /* With the gateway gone, the members across it are out of reach; a
     * send to one would report it lost (docs/design.md, "Gateways"), but
     * one that this process no longer sends to is never reported. */
    if (gw && d == 0)
      for (int i = 1; i < nranks; i++)
        if (i % 2 != rank % 2)
          dead[i] = 1;
    nx_cond_broadcast(&c);
    nx_mutex_unlock(&m);
  } else if (handler == nx_handler_id("flood") ||
             handler == nx_handler_id("stop")) {
    if (atomic_fetch_add(&flood_reported, 1) == 0) {
      /* What came before it, for a report that should not have come
       * (docs/design.md's known issues). */
      nx_stats_t st;
      int sr = nx_stats_get(&st);
      fprintf(stderr,
              "rank %d: first flood RSR to rank %d reported lost: %s "
              "(so far: %llu route fallbacks, %llu peer processes lost)\n",
              rank, d, nx_err_name(err),
              sr == 0 ? (unsigned long long)st.route_fallbacks : 0ull,
              sr == 0 ? (unsigned long long)st.peers_failed : 0ull);
    }
  } else if (board != NULL && handler == nx_handler_id("seq")) {
    if (atomic_fetch_add(&board->reported[rank][d], 1) == 0)
      fprintf(stderr, "rank %d: RSRs to rank %d reported lost: %s\n", rank, d,
              nx_err_name(err));
  }
}

static void on_seq(nx_context_t *ctx, void *a, nx_buffer_t *b) {
  (void)ctx;
  (void)a;
  uint32_t from, seq;
  if (nx_get_uint32(b, &from) < 0 || nx_get_uint32(b, &seq) < 0 ||
      from >= (uint32_t)nranks || seq >= count)
    return;
  size_t i = ((size_t)from * MAX_RANKS + (size_t)rank) * count + seq;
  if (atomic_fetch_add(&board->handled[i], 1) == 0 &&
      atomic_fetch_add(&seq_seen[from], 1) + 1 ==
          atomic_load(&done_sent[from])) {
    /* The last one came after "done": wake the wait. */
    nx_mutex_lock(&m);
    nx_cond_broadcast(&c);
    nx_mutex_unlock(&m);
  }
}

static void on_ready(nx_context_t *ctx, void *a, nx_buffer_t *b) {
  (void)ctx;
  (void)a;
  uint32_t from;
  if (nx_get_uint32(b, &from) == 0 && from < MAX_RANKS) {
    nx_mutex_lock(&m);
    ready_from[from] = 1;
    nx_cond_broadcast(&c);
    nx_mutex_unlock(&m);
  }
}

static void on_done(nx_context_t *ctx, void *a, nx_buffer_t *b) {
  (void)ctx;
  (void)a;
  uint32_t from, sent;
  if (nx_get_uint32(b, &from) == 0 && nx_get_uint32(b, &sent) == 0 &&
      from < (uint32_t)nranks) {
    unsigned seen = atomic_load(&seq_seen[from]);
    if (seen < sent)
      fprintf(stderr,
              "rank %d: \"done\" from rank %u came before %u of its "
              "%u RSRs\n",
              rank, from, sent - seen, sent);
    nx_mutex_lock(&m);
    atomic_store(&done_sent[from], sent);
    done_from[from] = 1;
    nx_cond_broadcast(&c);
    nx_mutex_unlock(&m);
  }
}

static void on_flood(nx_context_t *ctx, void *a, nx_buffer_t *b) {
  (void)ctx;
  (void)a;
  uint32_t seq;
  if (nx_get_uint32(b, &seq) == 0 && seq < count) {
    flood_seq[seq]++;
    flood_seen++;
  }
  if (handler_us > 0) {
    struct timespec ts = {0, (long)handler_us * 1000};
    nanosleep(&ts, NULL);
  }
}

static void on_stop(nx_context_t *ctx, void *a, nx_buffer_t *b) {
  (void)ctx;
  (void)a;
  (void)b;
  nx_mutex_lock(&m);
  stopped = 1;
  nx_cond_broadcast(&c);
  nx_mutex_unlock(&m);
}

/* nexus promises no order between two processes: "stop" may overtake the
 * last RSRs of the flood. */
static int is_stopped(void) { return stopped && flood_seen >= (long)count; }
static int stopped_or_dead(void) { return stopped || dead[flood_src]; }

static int send_u32s(const nx_gp_t *to, const char *h, uint32_t a, uint32_t b,
                     size_t pad) {
  nx_buffer_t *buf;
  int r = nx_rsr_init_name(&buf, to, h, 16 + pad);
  if (r < 0)
    return r;
  if ((r = nx_put_uint32(buf, a)) == 0 && (r = nx_put_uint32(buf, b)) == 0 &&
      pad > 0) {
    static char zeros[1 << 16];
    r = nx_put_bytes(buf, zeros, pad < sizeof(zeros) ? pad : sizeof(zeros));
  }
  if (r < 0) {
    nx_buffer_release(buf);
    return r;
  }
  return nx_rsr_send(buf);
}

/* ---- A gateway in the path (--gw) ---- */

static void on_hello(nx_context_t *ctx, void *a, nx_buffer_t *b) {
  (void)ctx;
  (void)a;
  uint32_t from, pid;
  nx_gp_t gp;
  /* MAX_RANKS, not nranks: a hello may come before this process's
   * nx_context_peers has returned. */
  if (nx_get_uint32(b, &from) < 0 || nx_get_uint32(b, &pid) < 0 || from == 0 ||
      from >= MAX_RANKS || nx_get_gp(b, &gp) < 0)
    return;
  nx_mutex_lock(&m);
  member_pid[from] = (pid_t)pid;
  member_gp[from] = gp;
  hellos++;
  nx_cond_broadcast(&c);
  nx_mutex_unlock(&m);
}

/* The members' gps made after they joined: they carry the forwarding
 * descriptor; those nxrun handed out before do not. */
static void on_table(nx_context_t *ctx, void *a, nx_buffer_t *b) {
  (void)ctx;
  (void)a;
  nx_gp_t gp[MAX_RANKS];
  uint32_t n;
  if (nx_get_uint32(b, &n) < 0 || n > MAX_RANKS)
    return;
  for (uint32_t i = 1; i < n; i++)
    if (nx_get_gp(b, &gp[i]) < 0)
      return;
  /* main published peers and nranks under m after nx_context_peers. */
  nx_mutex_lock(&m);
  for (uint32_t i = 1; i < n && (int)i < nranks; i++) {
    nx_gp_release(&peers[i]);
    peers[i] = gp[i];
  }
  have_table = 1;
  nx_cond_broadcast(&c);
  nx_mutex_unlock(&m);
}

static int all_hello(void) { return hellos == nranks - 1; }
static int got_table(void) { return have_table; }

/* Rank 0: hands out the table, then forwards until every member process
 * has ended (a member's nx_finalize needs the gateway for its last
 * confirmations), then finalizes. */
static int gateway_serve(void) {
  wait_until(all_hello);
  /* NXT_GW_LATE=<rank> (run_faults.py gw-killgw-late): that member's
   * table goes 300 ms after the others', so the others' first RSRs reach
   * it before it has their lists. */
  const char *late = getenv("NXT_GW_LATE");
  for (int d = 1; d < nranks; d++) {
    nx_buffer_t *buf;
    if (late != NULL && d == atoi(late)) {
      struct timespec pause = {0, 300 * 1000 * 1000};
      nanosleep(&pause, NULL);
    }
    int r = nx_rsr_init_name(&buf, &peers[d], "table", 4096);
    if (r == 0) {
      r = nx_put_uint32(buf, (uint32_t)nranks);
      for (int i = 1; i < nranks && r == 0; i++)
        r = nx_put_gp(buf, &member_gp[i]);
      if (r == 0)
        r = nx_rsr_send(buf);
      else
        nx_buffer_release(buf);
    }
    if (r < 0 && r != NX_EPEERDEAD) {
      fprintf(stderr, "gateway: table to %d: %s\n", d, nx_err_name(r));
      return r;
    }
  }
  struct timespec tick = {0, 10 * 1000 * 1000};
  for (int waited = 0; waited < WAIT_S * 100; waited++) {
    int left = 0;
    for (int i = 1; i < nranks; i++)
      left += kill(member_pid[i], 0) == 0 || errno != ESRCH;
    if (left == 0)
      break;
    nanosleep(&tick, NULL);
  }
  nx_stats_t st;
  nx_stats_get(&st);
  for (int i = 1; i < nranks; i++)
    nx_gp_release(&member_gp[i]);
  int r = nx_finalize();
  printf("gateway: forwarded %llu RSRs, nx_finalize %s\n",
         (unsigned long long)st.rsr_forwarded, r == 0 ? "0" : nx_err_name(r));
  return r;
}

/* A member: joins the gateway, says hello with a gp made after joining,
 * and waits for the table. */
static int gateway_join(void) {
  int r = nx_gateway_use(&peers[0]);
  if (r < 0) {
    fprintf(stderr, "rank %d: nx_gateway_use: %s\n", rank, nx_err_name(r));
    return r;
  }
  nx_gp_t me;
  nx_buffer_t *buf;
  NXT_EXPECT(nx_gp_make(NULL, &me) == 0, -1);
  NXT_EXPECT(nx_rsr_init_name(&buf, &peers[0], "hello", 4096) == 0, -1);
  NXT_EXPECT(nx_put_uint32(buf, (uint32_t)rank) == 0 &&
                 nx_put_uint32(buf, (uint32_t)getpid()) == 0 &&
                 nx_put_gp(buf, &me) == 0,
             -1);
  nx_gp_release(&me);
  NXT_EXPECT(nx_rsr_send(buf) == 0, -1);
  wait_until(got_table);
  /* The other side's members are reached through the gateway only. */
  for (int d = 1; d < nranks; d++) {
    if (d == rank)
      continue;
    const char *p = nx_gp_protocol(&peers[d]);
    int crosses = d % 2 != rank % 2;
    if (p == NULL || (strcmp(p, "gw") == 0) != crosses) {
      fprintf(stderr, "rank %d: rank %d is reached over %s\n", rank, d,
              p != NULL ? p : "nothing");
      return -1;
    }
    char info[128];
    if (rank == 1 && nx_gp_protocol_info(&peers[d], info, sizeof(info)) >= 0)
      printf("rank 1 reaches rank %d over %s\n", d, info);
  }
  return 0;
}

static int flood(int argc, char **argv) {
  NXT_EXPECT((argc == 5 || argc == 6) && nranks == 2 + first, 1);
  int bound = argc == 6 && strcmp(argv[5], "bound") == 0;
  size_t size = (size_t)atoi(argv[3]);
  if (rank == flood_src) {
    for (unsigned i = 0; i < count; i++)
      NXT_EXPECT(send_u32s(&peers[flood_dst], "flood", i, 0, size) == 0, 1);
    NXT_EXPECT(send_u32s(&peers[flood_dst], "stop", 0, 0, 0) == 0, 1);
    int r = nx_finalize();
    long reported = atomic_load(&flood_reported);
    printf("rank %d: sent %u, nx_finalize: %s, %ld reported lost\n", rank,
           count, r == 0 ? "0" : nx_err_name(r), reported);
    if (bound) {
      NXT_EXPECT(r == NX_ETIMEDOUT, 1);
      NXT_EXPECT(reported > 0 && reported <= (long)count + 1, 1);
      return 0;
    }
    NXT_EXPECT(r == 0 && reported == 0, 1);
    return 0;
  }
  if (bound) {
    /* Rank 0 leaves with most of the flood unhandled here. */
    wait_until(stopped_or_dead);
    printf("rank %d: %ld handled before rank %d left\n", rank, flood_seen,
           flood_src);
    nx_finalize();
    return 0;
  }
  wait_until(is_stopped);
  long twice = 0, missing = 0;
  for (unsigned i = 0; i < count; i++) {
    twice += flood_seq[i] > 1;
    missing += flood_seq[i] == 0;
  }
  nx_stats_t st;
  nx_stats_get(&st);
  printf("rank %d: %ld handled, %ld missing, %ld twice (dropped: %llu no "
         "handler, %llu no context, %llu bad)\n",
         rank, flood_seen, missing, twice,
         (unsigned long long)st.drop_no_handler,
         (unsigned long long)st.drop_no_context,
         (unsigned long long)st.drop_bad_frame);
  NXT_EXPECT(missing == 0 && twice == 0, 1);
  NXT_EXPECT(nx_finalize() == 0, 1);
  return 0;
}

static int all_done(void) {
  for (int i = first; i < nranks; i++)
    if (i != rank && !dead[i] &&
        (!done_from[i] ||
         atomic_load(&seq_seen[i]) < atomic_load(&done_sent[i])))
      return 0;
  return 1;
}

/* A rank killed before it said "ready" is waited for no longer. */
static int all_ready(void) {
  for (int i = first; i < nranks; i++)
    if (i != rank && !ready_from[i] && !dead[i])
      return 0;
  return 1;
}

static int alltoall(int argc, char **argv) {
  NXT_EXPECT((argc == 4 || argc == 5) && nranks <= MAX_RANKS, 1);
  size_t pad = argc == 5 ? (size_t)atoi(argv[4]) : 0;
  int fd = open(argv[2], O_RDWR);
  NXT_EXPECT(fd >= 0, 1);
  count = (unsigned)atoi(argv[3]);
  size_t len = sizeof(struct board) + (size_t)MAX_RANKS * MAX_RANKS * count;
  board = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  NXT_EXPECT(board != MAP_FAILED, 1);
  atomic_store(&board->pid[rank], (int)getpid());
  if (gw && rank == 0) {
    int r = gateway_serve();
    atomic_store(&board->finalized[0], 1000 + r);
    return r == 0 ? 0 : 1;
  }
  if (gw)
    NXT_EXPECT(gateway_join() == 0, 1);
  /* Every rank knows its rank before a "seq" reaches it. */
  for (int d = first; d < nranks; d++)
    if (d != rank)
      NXT_EXPECT(send_u32s(&peers[d], "ready", (uint32_t)rank, 0, 0) == 0, 1);
  wait_until(all_ready);
  /* Interleaved: every pair carries traffic while faults come. */
  for (unsigned seq = 0; seq < count; seq++)
    for (int d = first; d < nranks; d++) {
      if (d == rank || dead[d])
        continue;
      int r = send_u32s(&peers[d], "seq", (uint32_t)rank, seq, pad);
      if (r == 0)
        atomic_fetch_add(&board->accepted[rank][d], 1);
      else if (r != NX_EPEERDEAD && r != NX_EUNREACH) {
        fprintf(stderr, "rank %d: send to %d: %s\n", rank, d, nx_err_name(r));
        return 1;
      }
    }
  for (int d = first; d < nranks; d++)
    if (d != rank && !dead[d])
      send_u32s(&peers[d], "done", (uint32_t)rank,
                atomic_load(&board->accepted[rank][d]), 0);
  wait_until(all_done);
  int r = nx_finalize();
  atomic_store(&board->finalized[rank], 1000 + r);
  printf("rank %d: nx_finalize %s\n", rank, r == 0 ? "0" : nx_err_name(r));
  return r == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "--gw") == 0) {
    /* Each rank's modules, before nx_init reads them (nxrun sets
     * NX_RANK). */
    const char *r = getenv("NX_RANK");
    int me = r != NULL ? atoi(r) : -1;
    char protos[64];
    snprintf(protos, sizeof(protos), "%s%s",
             me == 0 || me % 2 == 1 ? argv[2] : "tcp",
             me == 0 ? ",tcp,local" : ",local");
    NXT_EXPECT(me >= 0 && setenv("NX_PROTOCOLS", protos, 1) == 0, 1);
    if (me == 0)
      NXT_EXPECT(setenv("NX_GATEWAY", "1", 1) == 0, 1);
    gw = first = 1;
    flood_src = 1;
    flood_dst = 2;
    argv[2] = argv[0];
    argv += 2;
    argc -= 2;
  }
  if (argc < 2) {
    fprintf(stderr, "usage: faults_peer [--gw MOD] flood|alltoall ...\n");
    return 2;
  }
  NXT_EXPECT(nx_init(&argc, &argv) == 0, 1);
  nx_mutex_init(&m);
  nx_cond_init(&c);
  nx_context_t *self = nx_context_self();
  nx_handler_register(self, "seq", on_seq, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "done", on_done, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "ready", on_ready, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "flood", on_flood, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "stop", on_stop, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "hello", on_hello, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "table", on_table, NX_HANDLER_NONTHREADED, NULL);
  flood_seq = calloc(1 << 20, 1);
  NXT_EXPECT(nx_error_cb_set(on_error, NULL) == 0, 1);
  /* Before the peers exist: their first RSRs may come at once. */
  if (strcmp(argv[1], "flood") == 0 && argc >= 5) {
    count = (unsigned)atoi(argv[2]);
    handler_us = (unsigned)atoi(argv[4]);
    NXT_EXPECT(count <= (1u << 20), 1);
  }
  nx_gp_t *all = NULL;
  int n_all = 0, me = -1;
  NXT_EXPECT(nx_context_peers(&all, &n_all, &me) == 0, 1);
  /* Published under m to the handlers and the error callback that take it
   * (on_table, on_error); the error callback, set above, may run while
   * nx_context_peers does. */
  nx_mutex_lock(&m);
  peers = all;
  rank = me;
  nranks = n_all;
  nx_mutex_unlock(&m);
  if (strcmp(argv[1], "flood") == 0) {
    if (gw && rank == 0)
      return gateway_serve() == 0 ? 0 : 1;
    if (gw)
      NXT_EXPECT(gateway_join() == 0, 1);
    return flood(argc, argv);
  }
  if (strcmp(argv[1], "alltoall") == 0)
    return alltoall(argc, argv);
  fprintf(stderr, "unknown mode %s\n", argv[1]);
  return 2;
}
