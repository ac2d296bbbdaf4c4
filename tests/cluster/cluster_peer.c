/* One process of the heterogeneous-cluster test (tests/cluster/cluster.sh): the
 * hub listens for attachments and checks which protocol every pair of contexts
 * uses; every other process attaches to it, registers its contexts and answers
 * probes. In the gateway mode the hub is also the gateway every other process
 * joins, and the run ends with a process killed. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nexus.h"

#define MAX_PROC 8
#define MAX_CTX 16
#define MAX_MOD 8
#define NAME 32
#define INFO 96
#define PHASE_SECONDS 40
#define LOSS_SECONDS 10
/* The gateway mode's loss phase: this process is killed, and a context of
 * that one (on the other host, reaching it only through the gateway) must
 * hear of it. */
#define VICTIM "B2"
#define WITNESS "A1"

/* What one process told the hub about itself. */
struct proc {
  char name[NAME];
  char host[NAME];
  char job[64]; /* the MPI job it is a rank of, "" if none */
  int nmods;
  char mod[MAX_MOD][16];      /* loaded modules, in preference order */
  char backend[MAX_MOD][128]; /* each module's backend string */
  int nctx;
  int first;   /* global index of its first context */
  nx_gp_t ctl; /* its initial context */
};

/* One process's state; the hub's part is used only by the hub. */
static struct {
  nx_mutex_t m;
  nx_cond_t c;
  int quit;
  int seen[MAX_CTX][MAX_CTX]; /* pings delivered here, by (from, to) */
  int gateway;                /* the gateway mode */
  int nlost;                  /* processes the error callback reported lost */
  uint64_t lost_ctx[MAX_PROC];
  int lost_err[MAX_PROC];
  nx_gp_t witness_target; /* the witness: the victim, once told to send */
  nx_gp_t witness_hub;
  /* hub only */
  int nproc;
  struct proc proc[MAX_PROC];
  int nctx;
  nx_gp_t ctx[MAX_CTX];
  int owner[MAX_CTX]; /* process index of each context */
  char name[MAX_CTX][NAME];
  char proto[MAX_CTX][MAX_CTX][16];
  char info[MAX_CTX][MAX_CTX][INFO];
  int results;
  int tallies;
  int delivered[MAX_CTX][MAX_CTX];
  int witnessed; /* the witness's report came */
  int32_t witness[5];
} st;

static void die(const char *who, const char *what, int r) {
  fprintf(stderr, "cluster_peer %s: %s: %s\n", who, what, nx_strerror(r));
  exit(1);
}

static void put_str(nx_buffer_t *b, const char *s, size_t n) {
  char tmp[256] = {0};
  snprintf(tmp, n < sizeof(tmp) ? n : sizeof(tmp), "%s", s);
  nx_put_char_array(b, tmp, n);
}

static int get_str(nx_buffer_t *b, char *s, size_t n) {
  int r = nx_get_char_array(b, s, n);
  s[n - 1] = '\0';
  return r;
}

static int index_ok(int32_t i) { return i >= 0 && i < MAX_CTX; }

/* What travels on each hop of a probe: the pair, and the protocol (and
 * what carries it underneath) the sender found for it. */
struct hop {
  int32_t from, to;
  char proto[16];
  char info[INFO];
};

/* Sends `h` to `dest`'s `handler`, followed by up to two gps. */
static int send_hop(const nx_gp_t *dest, const char *handler,
                    const struct hop *h, const nx_gp_t *gp1,
                    const nx_gp_t *gp2) {
  nx_buffer_t *out;
  int r = nx_rsr_init_name(&out, dest, handler, 512);
  if (r < 0)
    return r;
  nx_put_int32(out, h->from);
  nx_put_int32(out, h->to);
  put_str(out, h->proto, sizeof(h->proto));
  put_str(out, h->info, sizeof(h->info));
  if (gp1 != NULL)
    nx_put_gp(out, gp1);
  if (gp2 != NULL)
    nx_put_gp(out, gp2);
  return nx_rsr_send(out);
}

static int get_hop(nx_buffer_t *buf, struct hop *h) {
  if (nx_get_int32(buf, &h->from) < 0 || nx_get_int32(buf, &h->to) < 0 ||
      !index_ok(h->from) || !index_ok(h->to) ||
      get_str(buf, h->proto, sizeof(h->proto)) < 0 ||
      get_str(buf, h->info, sizeof(h->info)) < 0)
    return NX_EPROTO;
  return 0;
}

/* "probe" (every context): ask how `to` is reached from here, then ping it.
 * Carries from, to, the target's gp, our own gp and the hub's. */
static void on_probe(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  struct hop h = {0};
  nx_gp_t target = NX_GP_NULL, self = NX_GP_NULL, hub = NX_GP_NULL;
  if (nx_get_int32(buf, &h.from) == 0 && nx_get_int32(buf, &h.to) == 0 &&
      nx_get_gp(buf, &target) == 0 && nx_get_gp(buf, &self) == 0 &&
      nx_get_gp(buf, &hub) == 0) {
    const char *p = nx_gp_protocol(&target);
    snprintf(h.proto, sizeof(h.proto), "%s", p != NULL ? p : "none");
    nx_gp_protocol_info(&target, h.info, sizeof(h.info));
    int r = send_hop(&target, "ping", &h, &self, &hub);
    if (r < 0)
      fprintf(stderr, "cluster_peer: ping %d -> %d over %s: %s\n", h.from, h.to,
              h.proto, nx_strerror(r));
  }
  nx_gp_release(&target);
  nx_gp_release(&self);
  nx_gp_release(&hub);
}

/* "ping" (every context): count the delivery, answer the sender. */
static void on_ping(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  struct hop h;
  nx_gp_t sender = NX_GP_NULL, hub = NX_GP_NULL;
  if (get_hop(buf, &h) == 0 && nx_get_gp(buf, &sender) == 0 &&
      nx_get_gp(buf, &hub) == 0) {
    nx_mutex_lock(&st.m);
    st.seen[h.from][h.to]++;
    nx_mutex_unlock(&st.m);
    send_hop(&sender, "pong", &h, &hub, NULL);
  }
  nx_gp_release(&sender);
  nx_gp_release(&hub);
}

/* "pong" (every context): the round trip is complete; tell the hub. */
static void on_pong(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  struct hop h;
  nx_gp_t hub = NX_GP_NULL;
  if (get_hop(buf, &h) == 0 && nx_get_gp(buf, &hub) == 0)
    send_hop(&hub, "result", &h, NULL, NULL);
  nx_gp_release(&hub);
}

/* "tally" (initial contexts): send the hub what was delivered here. */
static void on_tally(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  nx_gp_t hub = NX_GP_NULL;
  int32_t counts[MAX_CTX * MAX_CTX];
  nx_buffer_t *out;
  if (nx_get_gp(buf, &hub) == 0 &&
      nx_rsr_init_name(&out, &hub, "tallied", sizeof(counts) + 64) == 0) {
    nx_mutex_lock(&st.m);
    for (int i = 0; i < MAX_CTX; i++)
      for (int j = 0; j < MAX_CTX; j++)
        counts[i * MAX_CTX + j] = st.seen[i][j];
    nx_mutex_unlock(&st.m);
    nx_put_int32_array(out, counts, MAX_CTX * MAX_CTX);
    nx_rsr_send(out);
  }
  nx_gp_release(&hub);
}

static void on_quit(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  (void)buf;
  nx_mutex_lock(&st.m);
  st.quit = 1;
  nx_cond_broadcast(&st.c);
  nx_mutex_unlock(&st.m);
}

/* "die" (initial contexts, gateway mode): the victim of the loss phase. */
static void on_die(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  (void)buf;
  printf("killing myself with SIGKILL\n");
  fflush(stdout);
  kill(getpid(), SIGKILL);
}

/* "witness" (initial contexts, gateway mode): the victim's gp and the hub's;
 * the program thread sends (a handler must not wait for the news). */
static void on_witness(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  nx_gp_t target = NX_GP_NULL, hub = NX_GP_NULL;
  if (nx_get_gp(buf, &target) < 0 || nx_get_gp(buf, &hub) < 0) {
    nx_gp_release(&target);
    return;
  }
  nx_mutex_lock(&st.m);
  st.witness_target = target;
  st.witness_hub = hub;
  nx_cond_broadcast(&st.c);
  nx_mutex_unlock(&st.m);
}

/* The error callback (gateway mode): records every process reported lost
 * (handler 0, a context id whose low 32 bits are 0); drops it only logs,
 * as the default callback does. */
static void on_error(int err, uint64_t context, uint32_t handler, void *arg) {
  (void)arg;
  if (handler != 0 || (context & UINT32_MAX) != 0) {
    fprintf(stderr, "dropped an RSR for context %#llx handler %#x: %s\n",
            (unsigned long long)context, (unsigned)handler, nx_strerror(err));
    return;
  }
  nx_mutex_lock(&st.m);
  if (st.nlost < MAX_PROC) {
    st.lost_ctx[st.nlost] = context;
    st.lost_err[st.nlost] = err;
    st.nlost++;
  }
  nx_cond_broadcast(&st.c);
  nx_mutex_unlock(&st.m);
}

/* The code with which the error callback reported the process of `gp`
 * lost, waiting up to `seconds` for it; 0 if it did not. */
static int heard_lost(const nx_gp_t *gp, int seconds) {
  uint64_t proc = nx_gp_context(gp) & ~(uint64_t)UINT32_MAX;
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += seconds;
  int err = 0, timed_out = 0;
  nx_mutex_lock(&st.m);
  for (;;) {
    for (int i = 0; i < st.nlost && err == 0; i++)
      if (st.lost_ctx[i] == proc)
        err = st.lost_err[i];
    if (err != 0 || timed_out)
      break;
    timed_out = nx_cond_timedwait(&st.c, &st.m, &deadline) == NX_ETIMEDOUT;
  }
  nx_mutex_unlock(&st.m);
  return err;
}

/* The witness (gateway mode, a program thread): pings the killed process,
 * which it reaches only through the gateway, waits for the gateway's word
 * that it is lost, and pings it again. Reports to the hub whether it had
 * heard of the loss before (the code, or 0), the first send's result, the
 * code the error callback got, the second send's result, and whether
 * nx_gp_protocol now finds no route. */
static void witness(nx_gp_t *target, nx_gp_t *hub) {
  struct hop h = {0};
  snprintf(h.proto, sizeof(h.proto), "witness");
  int32_t report[5];
  report[0] = heard_lost(target, 0);
  report[1] = send_hop(target, "ping", &h, hub, hub);
  report[2] = heard_lost(target, LOSS_SECONDS);
  report[3] = send_hop(target, "ping", &h, hub, hub);
  report[4] = nx_gp_protocol(target) == NULL;
  nx_buffer_t *out;
  if (nx_rsr_init_name(&out, hub, "witnessed", 64) == 0) {
    nx_put_int32_array(out, report, 5);
    nx_rsr_send(out);
  }
  nx_gp_release(target);
  nx_gp_release(hub);
}

/* Hub: adds a process and its contexts (called with st.m held). */
static void add_proc(const struct proc *p, const nx_gp_t *gps) {
  if (st.nproc == MAX_PROC || st.nctx + p->nctx > MAX_CTX) {
    fprintf(stderr, "cluster_peer hub: too many processes or contexts\n");
    return;
  }
  struct proc *q = &st.proc[st.nproc];
  *q = *p;
  q->first = st.nctx;
  for (int i = 0; i < p->nctx; i++) {
    st.ctx[st.nctx] = gps[i];
    st.owner[st.nctx] = st.nproc;
    snprintf(st.name[st.nctx], NAME, "%.20s.%d", p->name, i);
    st.nctx++;
  }
  st.nproc++;
  nx_cond_broadcast(&st.c);
}

/* "register" (hub): a process describes itself; see send_register. */
static void on_register(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  struct proc p;
  memset(&p, 0, sizeof(p));
  nx_gp_t gps[MAX_CTX];
  int32_t nmods = 0, nctx = 0;
  int ok = get_str(buf, p.name, NAME) == 0 && get_str(buf, p.host, NAME) == 0 &&
           get_str(buf, p.job, sizeof(p.job)) == 0 &&
           nx_get_int32(buf, &nmods) == 0 && nmods >= 0 && nmods <= MAX_MOD;
  for (int i = 0; ok && i < nmods; i++)
    ok =
        get_str(buf, p.mod[i], 16) == 0 && get_str(buf, p.backend[i], 128) == 0;
  ok = ok && nx_get_int32(buf, &nctx) == 0 && nctx >= 1 && nctx <= MAX_CTX;
  int got = 0;
  for (; ok && got < nctx; got++)
    ok = nx_get_gp(buf, &gps[got]) == 0;
  if (!ok) {
    fprintf(stderr, "cluster_peer hub: malformed registration\n");
    for (int i = 0; i < got; i++)
      nx_gp_release(&gps[i]);
    return;
  }
  p.nmods = nmods;
  p.nctx = nctx;
  nx_gp_copy(&gps[0], &p.ctl);
  nx_mutex_lock(&st.m);
  add_proc(&p, gps);
  nx_mutex_unlock(&st.m);
}

/* "result" (hub): one cell of the table. */
static void on_result(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  struct hop h;
  if (get_hop(buf, &h) < 0)
    return;
  nx_mutex_lock(&st.m);
  if (st.proto[h.from][h.to][0] != '\0')
    fprintf(stderr, "cluster_peer hub: second result for %d -> %d\n", h.from,
            h.to);
  snprintf(st.proto[h.from][h.to], sizeof(h.proto), "%s", h.proto);
  snprintf(st.info[h.from][h.to], INFO, "%s", h.info);
  st.results++;
  nx_cond_broadcast(&st.c);
  nx_mutex_unlock(&st.m);
}

/* "tallied" (hub): one process's deliveries. */
static void on_tallied(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int32_t counts[MAX_CTX * MAX_CTX];
  if (nx_get_int32_array(buf, counts, MAX_CTX * MAX_CTX) < 0)
    return;
  nx_mutex_lock(&st.m);
  for (int i = 0; i < MAX_CTX; i++)
    for (int j = 0; j < MAX_CTX; j++)
      st.delivered[i][j] += counts[i * MAX_CTX + j];
  st.tallies++;
  nx_cond_broadcast(&st.c);
  nx_mutex_unlock(&st.m);
}

/* "witnessed" (hub): the witness's report; see witness. */
static void on_witnessed(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int32_t report[5];
  if (nx_get_int32_array(buf, report, 5) < 0)
    return;
  nx_mutex_lock(&st.m);
  memcpy(st.witness, report, sizeof(report));
  st.witnessed++;
  nx_cond_broadcast(&st.c);
  nx_mutex_unlock(&st.m);
}

/* Who gets which handler: every context, initial contexts, the hub. */
enum { EVERY, INITIAL, HUB };

static const struct {
  const char *name;
  nx_handler_fn fn;
  int who;
} handlers[] = {
    {"probe", on_probe, EVERY},       {"ping", on_ping, EVERY},
    {"pong", on_pong, EVERY},         {"tally", on_tally, INITIAL},
    {"quit", on_quit, INITIAL},       {"die", on_die, INITIAL},
    {"witness", on_witness, INITIAL}, {"register", on_register, HUB},
    {"result", on_result, HUB},       {"tallied", on_tallied, HUB},
    {"witnessed", on_witnessed, HUB},
};

/* Registers the handlers of level *arg and below (also the init function
 * of in-process contexts, with EVERY). */
static int register_handlers(nx_context_t *ctx, void *arg) {
  int level = *(const int *)arg;
  for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++) {
    if (handlers[i].who > level)
      continue;
    int r = nx_handler_register(ctx, handlers[i].name, handlers[i].fn,
                                NX_HANDLER_NONTHREADED, NULL);
    if (r < 0)
      return r;
  }
  return 0;
}

/* The initial context's handlers (the hub's also the hub's), then
 * `nlocal` in-process contexts; gps[0..nlocal] name them all. */
static void setup(const char *who, int hub, int nlocal, nx_gp_t *gps) {
  static const int every = EVERY;
  nx_mutex_init(&st.m);
  nx_cond_init(&st.c);
  int level = hub ? HUB : INITIAL;
  int r = register_handlers(nx_context_self(), &level);
  if (r < 0)
    die(who, "nx_handler_register", r);
  r = nx_gp_make(NULL, &gps[0]);
  if (r < 0)
    die(who, "nx_gp_make", r);
  for (int i = 1; i <= nlocal; i++) {
    r = nx_context_create_local(register_handlers, (void *)&every, &gps[i]);
    if (r < 0)
      die(who, "nx_context_create_local", r);
  }
}

/* This process's loaded modules in preference order, with backends. */
static void describe(struct proc *p, const char *name) {
  memset(p, 0, sizeof(*p));
  snprintf(p->name, NAME, "%s", name);
  const char *host = getenv("NX_HOST_ID");
  snprintf(p->host, NAME, "%s", host != NULL ? host : "");
  const char *job = getenv("PMIX_NAMESPACE");
  if (job == NULL)
    job = getenv("OMPI_MCA_ess_base_jobid");
  snprintf(p->job, sizeof(p->job), "%s", job != NULL ? job : "");
  /* Modules that did not load say why in this process's log. */
  for (int i = 0; i < nx_module_count(); i++) {
    nx_module_info_t mi;
    if (nx_module_info(i, &mi) == 0 && !mi.loaded)
      printf("%s: module %s skipped: %s\n", name, mi.name, mi.reason);
  }
  fflush(stdout);
  for (int rank = 0; rank < MAX_MOD; rank++)
    for (int i = 0; i < nx_module_count(); i++) {
      nx_module_info_t mi;
      if (nx_module_info(i, &mi) == 0 && mi.loaded && mi.rank == rank) {
        snprintf(p->mod[p->nmods], 16, "%s", mi.name);
        snprintf(p->backend[p->nmods], 128, "%s", mi.backend);
        p->nmods++;
      }
    }
}

static void send_register(const char *who, const nx_gp_t *hub,
                          const struct proc *p, const nx_gp_t *gps) {
  nx_buffer_t *b;
  int r = nx_rsr_init_name(&b, hub, "register", 4096);
  if (r < 0)
    die(who, "nx_rsr_init_name", r);
  put_str(b, p->name, NAME);
  put_str(b, p->host, NAME);
  put_str(b, p->job, sizeof(p->job));
  nx_put_int32(b, p->nmods);
  for (int i = 0; i < p->nmods; i++) {
    put_str(b, p->mod[i], 16);
    put_str(b, p->backend[i], 128);
  }
  nx_put_int32(b, p->nctx);
  for (int i = 0; i < p->nctx; i++)
    nx_put_gp(b, &gps[i]);
  r = nx_rsr_send(b);
  if (r < 0)
    die(who, "register", r);
}

/* Waits until *counter reaches target; 0, or -1 after PHASE_SECONDS. */
static int wait_for(int *counter, int target) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += PHASE_SECONDS;
  int r = 0;
  nx_mutex_lock(&st.m);
  while (*counter < target && r == 0)
    if (nx_cond_timedwait(&st.c, &st.m, &deadline) == NX_ETIMEDOUT)
      r = -1;
  nx_mutex_unlock(&st.m);
  return r;
}

static int has(const struct proc *p, const char *mod) {
  for (int i = 0; i < p->nmods; i++)
    if (strcmp(p->mod[i], mod) == 0)
      return 1;
  return 0;
}

static const char *backend_of(const struct proc *p, const char *mod) {
  for (int i = 0; i < p->nmods; i++)
    if (strcmp(p->mod[i], mod) == 0)
      return p->backend[i];
  return "";
}

/* Whether the ofi modules of a and b opened a rail they can share: shm
 * only within one host, any other by provider name (the backend string
 * lists the rails: "libfabric 1.17 tcp;ofi_rxm, shm"). */
static int ofi_common_rail(const struct proc *a, const struct proc *b,
                           int same_host) {
  char rails[128];
  snprintf(rails, sizeof(rails), "%s", backend_of(a, "ofi"));
  const char *theirs = backend_of(b, "ofi");
  char *space = strchr(rails, ' ');
  space = space != NULL ? strchr(space + 1, ' ') : NULL; /* after version */
  if (space == NULL)
    return 0;
  char *save = NULL;
  for (char *t = strtok_r(space + 1, ", ", &save); t != NULL;
       t = strtok_r(NULL, ", ", &save))
    if ((same_host || strcmp(t, "shm") != 0) && strstr(theirs, t) != NULL)
      return 1;
  return 0;
}

/* The route the selection rules (docs/design.md section 6) give from a
 * context of `a` to one of `b`: the first module in a's preference order
 * that b also has and that reaches b by the topology. */
static const char *expected(int ai, int bi) {
  const struct proc *a = &st.proc[ai], *b = &st.proc[bi];
  int same_host = strcmp(a->host, b->host) == 0;
  int same_job = a->job[0] != '\0' && strcmp(a->job, b->job) == 0;
  for (int i = 0; i < a->nmods; i++) {
    const char *m = a->mod[i];
    if (!has(b, m))
      continue;
    if ((strcmp(m, "local") == 0 && ai == bi) ||
        (strcmp(m, "mpi") == 0 && same_job && ai != bi) ||
        (strcmp(m, "ucx") == 0 && same_host && ai != bi) ||
        (strcmp(m, "ofi") == 0 && ai != bi &&
         ofi_common_rail(a, b, same_host)) ||
        (strcmp(m, "tcp") == 0 && ai != bi))
      return m;
  }
  return "none";
}

/* The first module in the hub's preference order, other than local, that
 * process `bi` also loaded: where the gateway's info says it goes on. */
static const char *hub_onward(int bi) {
  for (int i = 0; i < st.proc[0].nmods; i++)
    if (strcmp(st.proc[0].mod[i], "local") != 0 &&
        has(&st.proc[bi], st.proc[0].mod[i]))
      return st.proc[0].mod[i];
  return "none";
}

/* The route in the gateway mode: a direct one as above; else, when `a`
 * reaches the hub (process 0, the gateway) directly and `b` joined it,
 * through the gateway, whose info must then read `info`. */
static const char *expected_gw(int ai, int bi, char *info, size_t len) {
  const char *direct = expected(ai, bi);
  info[0] = '\0';
  if (strcmp(direct, "none") != 0 || bi == 0)
    return direct;
  const char *to_gw = expected(ai, 0);
  if (strcmp(to_gw, "none") == 0)
    return "none";
  snprintf(info, len, "via gw (%s) then %s", to_gw, hub_onward(bi));
  return "gw";
}

/* ucx between processes of one host must run over shared memory. */
static int ucx_shared_memory(const char *info) {
  static const char *const shm[] = {"sysv", "posix", "cma", "xpmem", "knem"};
  for (size_t i = 0; i < sizeof(shm) / sizeof(shm[0]); i++)
    if (strstr(info, shm[i]) != NULL)
      return 1;
  return 0;
}

static void print_table(void) {
  int n = st.nctx;
  printf("\nprocesses (modules in preference order):\n");
  for (int p = 0; p < st.nproc; p++) {
    printf("  %-6s host=%-6s job=%-14s", st.proc[p].name, st.proc[p].host,
           st.proc[p].job[0] ? st.proc[p].job : "-");
    for (int i = 0; i < st.proc[p].nmods; i++)
      printf(" %s", st.proc[p].mod[i]);
    printf("\n");
  }
  printf("\nthe protocol an RSR from each context (row) to each other "
         "(column) took:\n%-7s",
         "");
  for (int y = 0; y < n; y++)
    printf(" %-6s", st.name[y]);
  printf("\n");
  for (int x = 0; x < n; x++) {
    printf("%-7s", st.name[x]);
    for (int y = 0; y < n; y++)
      printf(" %-6s", x == y ? "-" : st.proto[x][y]);
    printf("\n");
  }
}

/* What carries the routes underneath: each distinct answer of
 * nx_gp_protocol_info, with the first pair that gave it. */
static void print_underneath(void) {
  int n = st.nctx;
  printf("\nwhat carries them underneath (nx_gp_protocol_info):\n");
  for (int x = 0; x < n; x++)
    for (int y = 0; y < n; y++) {
      if (x == y)
        continue;
      int first = 1;
      for (int i = 0; i < n * n && first; i++) {
        int a = i / n, b = i % n;
        if (a * n + b >= x * n + y)
          break;
        if (a != b && strcmp(st.info[a][b], st.info[x][y]) == 0)
          first = 0;
      }
      if (first)
        printf("  %-6s -> %-6s %s\n", st.name[x], st.name[y], st.info[x][y]);
    }
}

/* Checks every pair; prints each failure and a summary; returns failures. */
static int check_all(void) {
  int n = st.nctx, bad = 0;
  int used[6] = {0};
  static const char *const names[6] = {"local", "mpi", "ofi",
                                       "tcp",   "ucx", "gw"};
  printf("\n");
  for (int x = 0; x < n; x++)
    for (int y = 0; y < n; y++) {
      if (x == y)
        continue;
      int px = st.owner[x], py = st.owner[y];
      char via[INFO];
      const char *want =
          st.gateway ? expected_gw(px, py, via, sizeof(via)) : expected(px, py);
      const char *got = st.proto[x][y];
      for (int k = 0; k < 6; k++)
        used[k] += strcmp(got, names[k]) == 0;
      if (strcmp(want, got) != 0) {
        printf("FAIL %s -> %s: %s, expected %s (%s)\n", st.name[x], st.name[y],
               got[0] ? got : "no answer", want, st.info[x][y]);
        bad++;
      } else if (strcmp(got, "gw") == 0 && strcmp(via, st.info[x][y]) != 0) {
        printf(
            "FAIL %s -> %s: through the gateway as \"%s\", expected \"%s\"\n",
            st.name[x], st.name[y], st.info[x][y], via);
        bad++;
      }
      /* The gateway mode's ofi runs within host A only: over shm. */
      if (st.gateway && strcmp(got, "ofi") == 0 &&
          strncmp(st.info[x][y], "shm ", 4) != 0) {
        printf("FAIL %s -> %s: ofi within a host not over shm (%s)\n",
               st.name[x], st.name[y], st.info[x][y]);
        bad++;
      }
      if (strcmp(got, "ucx") == 0 && !ucx_shared_memory(st.info[x][y])) {
        printf("FAIL %s -> %s: ucx not over shared memory (%s)\n", st.name[x],
               st.name[y], st.info[x][y]);
        bad++;
      }
      if (st.delivered[x][y] != 1) {
        printf("FAIL %s -> %s: ping delivered %d times\n", st.name[x],
               st.name[y], st.delivered[x][y]);
        bad++;
      }
    }
  printf("protocols used:");
  for (int k = 0; k < 6; k++)
    if (used[k] > 0)
      printf(" %s", names[k]);
  printf("\npairs: %d, failures: %d\n", n * (n - 1), bad);
  return bad;
}

/* Gateway mode: the gateway (the hub) passed on exactly the pings and
 * pongs that went through it: a ping x -> y over "gw", and its pong y -> x
 * over "gw". Nothing else goes through it (probes, results, tallies and
 * registrations all go between the hub and one process, directly). */
static int check_forwarded(void) {
  int n = st.nctx, pairs = 0;
  uint64_t want = 0;
  for (int x = 0; x < n; x++)
    for (int y = 0; y < n; y++)
      if (x != y) {
        pairs += strcmp(st.proto[x][y], "gw") == 0;
        want += strcmp(st.proto[x][y], "gw") == 0;
        want += strcmp(st.proto[y][x], "gw") == 0;
      }
  nx_stats_t s;
  if (nx_stats_get(&s) < 0)
    return 1;
  printf("through the gateway: %d of %d pairs; RSRs it forwarded: %llu "
         "(expected %llu: a ping and a pong per such pair)\n",
         pairs, n * (n - 1), (unsigned long long)s.rsr_forwarded,
         (unsigned long long)want);
  if (s.rsr_forwarded != want) {
    printf("FAIL the gateway forwarded %llu RSRs, expected %llu\n",
           (unsigned long long)s.rsr_forwarded, (unsigned long long)want);
    return 1;
  }
  return 0;
}

static int find_proc(const char *name) {
  for (int p = 0; p < st.nproc; p++)
    if (strcmp(st.proc[p].name, name) == 0)
      return p;
  return -1;
}

/* Gateway mode, at the end: the victim kills itself with SIGKILL; once the
 * gateway (which reaches it directly) hears of it, the witness, which
 * reaches it only through the gateway, sends to it (see witness). The
 * gateway drops that frame, forwarding nothing, and tells the witness. */
static int loss_phase(const nx_gp_t *hub) {
  int v = find_proc(VICTIM), w = find_proc(WITNESS);
  if (v < 0 || w < 0) {
    printf("FAIL loss phase: no process %s or %s\n", VICTIM, WITNESS);
    return 1;
  }
  nx_stats_t before, after;
  nx_buffer_t *b;
  int r = nx_rsr_init_name(&b, &st.proc[v].ctl, "die", 8);
  if (r == 0)
    r = nx_rsr_send(b);
  int err = r < 0 ? 0 : heard_lost(&st.proc[v].ctl, LOSS_SECONDS);
  if (err == 0) {
    printf("FAIL loss phase: the gateway did not hear %s die within %d s "
           "(%s)\n",
           VICTIM, LOSS_SECONDS, nx_strerror(r));
    return 1;
  }
  printf("\nloss phase: %s killed itself with SIGKILL; the gateway heard: "
         "%s\n",
         VICTIM, nx_strerror(err));
  nx_stats_get(&before);
  r = nx_rsr_init_name(&b, &st.proc[w].ctl, "witness", 512);
  if (r == 0) {
    nx_put_gp(b, &st.proc[v].ctl);
    nx_put_gp(b, hub);
    r = nx_rsr_send(b);
  }
  if (r < 0 || wait_for(&st.witnessed, 1) < 0) {
    printf("FAIL loss phase: no report from %s (%s)\n", WITNESS,
           nx_strerror(r));
    return 1;
  }
  nx_stats_get(&after);
  const int32_t *rep = st.witness;
  printf("%s -> %s: heard before sending: %s; first send: %s; error "
         "callback: %s; second send: %s; nx_gp_protocol afterwards: %s\n",
         WITNESS, VICTIM, rep[0] ? nx_strerror(rep[0]) : "no",
         nx_strerror(rep[1]), rep[2] ? nx_strerror(rep[2]) : "nothing",
         nx_strerror(rep[3]), rep[4] ? "NULL" : "a route");
  printf("forwarded by the gateway meanwhile: %llu\n",
         (unsigned long long)(after.rsr_forwarded - before.rsr_forwarded));
  int bad = 0;
  /* The witness may hear of the loss before it sends: its ledger asks the
   * victim, through the gateway, about RSRs of the pair exchange it has
   * not seen confirmed (docs/design.md section 9), and the gateway answers
   * that it is lost. Then its first send fails at once. */
  if (rep[0] != 0) {
    printf("%s heard of the loss before it sent (its ledger's question)\n",
           WITNESS);
    if (rep[1] >= 0) {
      printf("FAIL %s's first send was accepted after the loss\n", WITNESS);
      bad++;
    }
  } else if (rep[1] != 0) {
    printf("FAIL %s's first send failed; it goes to the gateway\n", WITNESS);
    bad++;
  }
  if (rep[2] == 0) {
    printf("FAIL %s's error callback did not report %s lost within %d s\n",
           WITNESS, VICTIM, LOSS_SECONDS);
    bad++;
  }
  if (rep[3] >= 0) {
    printf("FAIL %s's send after the loss was accepted\n", WITNESS);
    bad++;
  }
  if (!rep[4]) {
    printf("FAIL %s still finds a route to %s\n", WITNESS, VICTIM);
    bad++;
  }
  if (after.rsr_forwarded != before.rsr_forwarded) {
    printf("FAIL the gateway forwarded to a dead process\n");
    bad++;
  }
  return bad > 0;
}

/* The hub: listens, waits for nproc-1 other processes, probes every pair,
 * collects the deliveries, checks, and tells everyone to quit. */
static int run_hub(const char *urlfile, int nproc, const char *name,
                   int nlocal) {
  nx_gp_t gps[MAX_CTX];
  setup("hub", 1, nlocal, gps);
  if (st.gateway)
    nx_error_cb_set(on_error, NULL);
  const char *url;
  int r = nx_attach_listen(&url);
  if (r < 0)
    die("hub", "nx_attach_listen", r);
  struct proc me;
  describe(&me, name);
  me.nctx = nlocal + 1;
  nx_gp_copy(&gps[0], &me.ctl);
  nx_mutex_lock(&st.m);
  add_proc(&me, gps);
  nx_mutex_unlock(&st.m);

  char tmp[512];
  snprintf(tmp, sizeof(tmp), "%s.tmp", urlfile);
  FILE *f = fopen(tmp, "w");
  if (f == NULL || fprintf(f, "%s\n", url) < 0 || fclose(f) != 0 ||
      rename(tmp, urlfile) != 0) {
    fprintf(stderr, "cluster_peer hub: cannot write %s\n", urlfile);
    return 1;
  }
  printf("hub: listening at %s\n", url);
  fflush(stdout);

  int failed = 0;
  if (wait_for(&st.nproc, nproc) < 0) {
    fprintf(stderr, "cluster_peer hub: only %d of %d processes registered\n",
            st.nproc, nproc);
    failed = 1;
  }
  int n = st.nctx;
  for (int x = 0; !failed && x < n; x++)
    for (int y = 0; y < n; y++) {
      if (x == y)
        continue;
      nx_buffer_t *b;
      r = nx_rsr_init_name(&b, &st.ctx[x], "probe", 1024);
      if (r == 0) {
        nx_put_int32(b, x);
        nx_put_int32(b, y);
        nx_put_gp(b, &st.ctx[y]);
        nx_put_gp(b, &st.ctx[x]);
        nx_put_gp(b, &gps[0]);
        r = nx_rsr_send(b);
      }
      if (r < 0) {
        fprintf(stderr, "cluster_peer hub: probe to %s: %s\n", st.name[x],
                nx_strerror(r));
        failed = 1;
      }
    }
  if (!failed && wait_for(&st.results, n * (n - 1)) < 0) {
    fprintf(stderr, "cluster_peer hub: %d of %d round trips completed\n",
            st.results, n * (n - 1));
    failed = 1;
  }
  /* Every round trip is complete: ask each process what it delivered. */
  for (int p = 0; !failed && p < st.nproc; p++) {
    nx_buffer_t *b;
    if (nx_rsr_init_name(&b, &st.proc[p].ctl, "tally", 128) == 0) {
      nx_put_gp(b, &gps[0]);
      nx_rsr_send(b);
    }
  }
  if (!failed && wait_for(&st.tallies, st.nproc) < 0) {
    fprintf(stderr, "cluster_peer hub: %d of %d tallies came\n", st.tallies,
            st.nproc);
    failed = 1;
  }
  int completed = !failed;
  print_table();
  print_underneath();
  if (check_all() > 0)
    failed = 1;
  if (st.gateway && completed && check_forwarded() > 0)
    failed = 1;
  fflush(stdout);
  if (st.gateway && completed && loss_phase(&gps[0]) > 0)
    failed = 1;
  fflush(stdout);

  for (int p = 1; p < st.nproc; p++) {
    nx_buffer_t *b;
    if (st.gateway && completed && strcmp(st.proc[p].name, VICTIM) == 0)
      continue; /* killed */
    if (nx_rsr_init_name(&b, &st.proc[p].ctl, "quit", 8) == 0)
      nx_rsr_send(b);
  }
  for (int i = 0; i < st.nctx; i++)
    nx_gp_release(&st.ctx[i]);
  for (int p = 0; p < st.nproc; p++)
    nx_gp_release(&st.proc[p].ctl);
  return failed;
}

/* Any other process: attach, register, serve until told to quit. Under
 * mpirun, nx_context_peers (the mpi module's job_peers) names the ranks
 * first, and the rank goes into the process name. In the gateway mode it
 * joins the hub's gateway first: only gps made after that carry it. */
static int run_member(const char *url, const char *name, int nlocal) {
  char who[NAME];
  snprintf(who, sizeof(who), "%s", name);
  nx_gp_t gps[MAX_CTX];
  nx_gp_t hub = NX_GP_NULL;
  int r;
  if (st.gateway) {
    if ((r = nx_attach(url, &hub)) < 0)
      die(who, "nx_attach", r);
    if ((r = nx_gateway_use(&hub)) < 0)
      die(who, "nx_gateway_use", r);
    const char *p = nx_gp_protocol(&hub);
    printf("%s: joined the gateway, reached over %s\n", who,
           p != NULL ? p : "none");
  }
  setup(who, 0, nlocal, gps);
  if (st.gateway)
    nx_error_cb_set(on_error, NULL);
  if (getenv("OMPI_COMM_WORLD_SIZE") != NULL) {
    nx_gp_t *peers = NULL;
    int count = 0, rank = -1;
    int r = nx_context_peers(&peers, &count, &rank);
    if (r < 0)
      die(who, "nx_context_peers", r);
    snprintf(who, sizeof(who), "%.20s%d", name, rank);
    for (int i = 0; i < count; i++) {
      const char *p = nx_gp_protocol(&peers[i]);
      printf("%s: nx_context_peers: rank %d of %d reached over %s\n", who, i,
             count,
             i == rank   ? "(self)"
             : p != NULL ? p
                         : "none");
      nx_gp_release(&peers[i]);
    }
    free(peers);
    fflush(stdout);
  }
  if (!st.gateway && (r = nx_attach(url, &hub)) < 0)
    die(who, "nx_attach", r);
  struct proc me;
  describe(&me, who);
  me.nctx = nlocal + 1;
  send_register(who, &hub, &me, gps);

  int quit = 0;
  for (int i = 0; i < 3 * PHASE_SECONDS && !quit; i++) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 1;
    nx_gp_t target = NX_GP_NULL, back = NX_GP_NULL;
    nx_mutex_lock(&st.m);
    if (!st.quit && nx_gp_is_null(&st.witness_target))
      nx_cond_timedwait(&st.c, &st.m, &deadline);
    quit = st.quit;
    target = st.witness_target;
    back = st.witness_hub;
    memset(&st.witness_target, 0, sizeof(st.witness_target));
    memset(&st.witness_hub, 0, sizeof(st.witness_hub));
    nx_mutex_unlock(&st.m);
    if (!nx_gp_is_null(&target))
      witness(&target, &back);
  }
  nx_gp_release(&hub);
  for (int i = 0; i <= nlocal; i++)
    nx_gp_release(&gps[i]);
  if (!quit)
    fprintf(stderr, "cluster_peer %s: never told to quit\n", who);
  return quit ? 0 : 1;
}

int main(int argc, char **argv) {
  /* cluster_peer hub URLFILE NPROC NAME NLOCAL [gateway]
   * cluster_peer member URL NAME NLOCAL [gateway] */
  st.gateway = argc > 5 && strcmp(argv[argc - 1], "gateway") == 0;
  int args = argc - st.gateway;
  int hub = args == 6 && strcmp(argv[1], "hub") == 0;
  int member = args == 5 && strcmp(argv[1], "member") == 0;
  if (!hub && !member) {
    fprintf(stderr,
            "usage: cluster_peer hub URLFILE NPROC NAME NLOCAL [gateway]\n"
            "       cluster_peer member URL NAME NLOCAL [gateway]\n");
    return 2;
  }
  int nlocal = atoi(argv[args - 1]);
  if (nlocal < 0 || nlocal >= MAX_CTX / 2)
    return 2;
  int r = nx_init(&argc, &argv);
  if (r < 0)
    die(argv[hub ? 4 : 3], "nx_init", r);
  int rc = hub ? run_hub(argv[2], atoi(argv[3]), argv[4], nlocal)
               : run_member(argv[2], argv[3], nlocal);
  r = nx_finalize();
  if (r < 0)
    die(argv[hub ? 4 : 3], "nx_finalize", r);
  return rc;
}
