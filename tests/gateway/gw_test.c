/* Gateways end to end (docs/design.md, "Gateways"), with real processes on
 * this host:
 *   A  loads one module, MOD (ucx or ofi), and local;
 *   B  loads tcp and local: A and B share no module;
 *   G  loads MOD, tcp and local and forwards (NX_GATEWAY=1);
 *   C  (this program, the checker) loads MOD, tcp and local; A, B and G
 *      join it with nx_attach.
 * Checked:
 *   1. A and B join G (nx_gateway_use) and get each other's gps through C;
 *      each finds the other reached through the gateway: nx_gp_protocol
 *      "gw", nx_gp_protocol_info "via gw (MOD) then tcp" (A) and "via gw
 *      (tcp) then MOD" (B).
 *   2. Each sends the other N numbered RSRs of 0 B to 1 MiB; the receiver
 *      checks that all arrive, once, in order, with their contents, and
 *      that nx_buffer_source names the sender's context. In the
 *      "dead-peer" runs they are sent with NX_RSR_ORDERED (GW_ORDERED=1,
 *      which the checker sets for A and B): the numbers pass the gateway.
 *   3. G's rsr_forwarded counts exactly those 2N RSRs.
 *   4. "dead-peer": B is killed. A's sends to B then fail, and A's error
 *      callback hears that B's process is lost (the gateway tells A).
 *      "dead-gateway": G is killed instead. A's sends to B then fail, and
 *      A hears that G's process is lost.
 * usage: gw_test MOD dead-peer|dead-gateway   (the checker)
 *        gw_test MOD ROLE URL                  (A, B, G: started by it)
 * Exit: 0 passed, 1 failed, 77 skipped (MOD is not loaded here). */
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nexus.h>

extern char **environ;

#define N 200
#define BIG (1 << 20)
#define TIMEOUT_S 30

static const char *mod;
static char role = 'C';
static int failures;

#define CHECK(c, ...)                                                          \
  do {                                                                         \
    if (!(c)) {                                                                \
      fprintf(stderr, "gw_test %c: FAILED %s:%d: %s: ", role, __FILE__,        \
              __LINE__, #c);                                                   \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      failures++;                                                              \
    }                                                                          \
  } while (0)

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* Waits until *flag is non-zero; 0 on time out. */
static int wait_flag(atomic_int *flag, int seconds) {
  for (int i = 0; i < seconds * 1000; i++) {
    if (atomic_load(flag))
      return 1;
    sleep_ms(1);
  }
  return atomic_load(flag) != 0;
}

/* The payload of RSR i: its size and bytes follow from i. */
static size_t size_of(int i) {
  return i % 50 == 49 ? BIG : (size_t)(i * 37) % 4096;
}
static uint8_t byte_of(int i, size_t k) { return (uint8_t)(i * 7 + k * 13); }

/* ---- A, B and G ---- */

static nx_gp_t checker, gateway, peer;
static atomic_int have_gateway, have_peer, go_phase;
static atomic_int received, out_of_order, bad_contents, wrong_source;
static atomic_uint_fast64_t source; /* nx_buffer_source of the first "seq" */
static _Atomic uint32_t lost_procs[8];
static atomic_int nlost, lost_code;

static void on_error(int err, uint64_t ctx, uint32_t handler, void *arg) {
  (void)arg;
  if (handler == 0 && (uint32_t)ctx == 0) {
    int n = atomic_fetch_add(&nlost, 1);
    if (n < 8)
      atomic_store(&lost_procs[n], (uint32_t)(ctx >> 32));
    atomic_store(&lost_code, err);
  }
}

static int heard_lost(uint64_t ctx) {
  for (int i = 0; i < atomic_load(&nlost) && i < 8; i++)
    if (atomic_load(&lost_procs[i]) == (uint32_t)(ctx >> 32))
      return 1;
  return 0;
}

static void on_gateway(nx_context_t *c, void *a, nx_buffer_t *b) {
  (void)c, (void)a;
  if (nx_get_gp(b, &gateway) == 0)
    atomic_store(&have_gateway, 1);
}

static void on_peer(nx_context_t *c, void *a, nx_buffer_t *b) {
  (void)c, (void)a;
  if (nx_get_gp(b, &peer) == 0)
    atomic_store(&have_peer, 1);
}

static void on_go(nx_context_t *c, void *a, nx_buffer_t *b) {
  (void)c, (void)a;
  int32_t phase;
  if (nx_get_int32(b, &phase) == 0)
    atomic_store(&go_phase, phase);
}

static void on_seq(nx_context_t *c, void *a, nx_buffer_t *b) {
  (void)c, (void)a;
  int32_t i;
  uint32_t len;
  static uint8_t data[BIG];
  if (nx_get_int32(b, &i) < 0 || nx_get_uint32(b, &len) < 0 ||
      len != size_of(i) || nx_get_bytes(b, data, len) < 0) {
    atomic_fetch_add(&bad_contents, 1);
    return;
  }
  if (i != atomic_load(&received))
    atomic_fetch_add(&out_of_order, 1);
  /* The gateway passes the sender's context on in the header: every RSR
   * names the same one, checked against the peer's gp at the end (this
   * may run before that gp arrived). */
  uint_fast64_t none = 0, src = nx_buffer_source(b);
  if (!atomic_compare_exchange_strong(&source, &none, src) && none != src)
    atomic_fetch_add(&wrong_source, 1);
  for (size_t k = 0; k < len; k++)
    if (data[k] != byte_of(i, k)) {
      atomic_fetch_add(&bad_contents, 1);
      break;
    }
  atomic_fetch_add(&received, 1);
}

static void on_ask(nx_context_t *c, void *a, nx_buffer_t *b) {
  (void)c, (void)a, (void)b;
  nx_stats_t s;
  nx_buffer_t *out;
  if (nx_stats_get(&s) == 0 &&
      nx_rsr_init_name(&out, &checker, "forwarded", 16) == 0) {
    nx_put_uint64(out, s.rsr_forwarded);
    nx_rsr_send(out);
  }
}

static void say(const char *handler, const char *text, int32_t value) {
  nx_buffer_t *b;
  if (nx_rsr_init_name(&b, &checker, handler, 256) == 0) {
    nx_put_int8(b, (int8_t)role);
    nx_put_int32(b, value);
    nx_put_uint32(b, (uint32_t)strlen(text));
    nx_put_bytes(b, text, strlen(text));
    nx_rsr_send(b);
  }
}

static int send_seq(int i) {
  static uint8_t data[BIG];
  size_t len = size_of(i);
  for (size_t k = 0; k < len; k++)
    data[k] = byte_of(i, k);
  nx_buffer_t *b;
  int r = nx_rsr_init_name(&b, &peer, "seq", len + 32);
  if (r < 0)
    return r;
  nx_put_int32(b, i);
  nx_put_uint32(b, (uint32_t)len);
  nx_put_bytes(b, data, len);
  const char *o = getenv("GW_ORDERED");
  return nx_rsr_send_flags(b, o != NULL && o[0] == '1' ? NX_RSR_ORDERED : 0);
}

static int member(const char *url) {
  nx_context_t *self = nx_context_self();
  nx_handler_register(self, "gateway", on_gateway, NX_HANDLER_NONTHREADED,
                      NULL);
  nx_handler_register(self, "peer", on_peer, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "go", on_go, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "seq", on_seq, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "ask", on_ask, NX_HANDLER_NONTHREADED, NULL);
  nx_error_cb_set(on_error, NULL);
  int r = nx_attach(url, &checker);
  if (r < 0) {
    fprintf(stderr, "gw_test %c: nx_attach: %s\n", role, nx_strerror(r));
    return 1;
  }
  nx_gp_t me;
  nx_gp_make(NULL, &me);
  nx_buffer_t *b;
  nx_rsr_init_name(&b, &checker, "hello", 256);
  nx_put_int8(b, (int8_t)role);
  nx_put_gp(b, &me);
  nx_rsr_send(b);
  nx_gp_release(&me);
  if (role == 'G') {
    wait_flag(&go_phase, 600); /* until told to quit (or killed) */
    return 0;
  }

  /* 1. Join the gateway; gps made from now on carry it. */
  CHECK(wait_flag(&have_gateway, TIMEOUT_S), "no gateway gp");
  CHECK((r = nx_gateway_use(&gateway)) == 0, "nx_gateway_use: %s",
        nx_strerror(r));
  CHECK(nx_gateway_use(&gateway) == 0, "joining again");
  CHECK(nx_gateway_use(&checker) == NX_ENOTSUP, "the checker is no gateway");
  CHECK(nx_gateway_use(NULL) == NX_EINVAL, "NULL");
  nx_gp_make(NULL, &me);
  CHECK(nx_gateway_use(&me) == NX_EINVAL, "a gp to this process");
  nx_rsr_init_name(&b, &checker, "member", 256);
  nx_put_int8(b, (int8_t)role);
  nx_put_gp(b, &me);
  nx_rsr_send(b);
  nx_gp_release(&me);

  CHECK(wait_flag(&have_peer, TIMEOUT_S), "no peer gp");
  const char *proto = nx_gp_protocol(&peer);
  char info[128] = "", want[128];
  nx_gp_protocol_info(&peer, info, sizeof(info));
  snprintf(want, sizeof(want), "via gw (%s) then %s", role == 'A' ? mod : "tcp",
           role == 'A' ? "tcp" : mod);
  CHECK(proto != NULL && strcmp(proto, "gw") == 0, "protocol %s",
        proto ? proto : "(none)");
  CHECK(strcmp(info, want) == 0, "info \"%s\", expected \"%s\"", info, want);
  printf("gw_test %c: peer reached %s: %s\n", role, proto ? proto : "-", info);

  /* 2. N numbered RSRs each way, through the gateway. */
  for (int i = 0; i < N; i++)
    CHECK((r = send_seq(i)) == 0, "send %d: %s", i, nx_strerror(r));
  for (int i = 0; i < TIMEOUT_S * 100 && atomic_load(&received) < N; i++)
    sleep_ms(10);
  CHECK(atomic_load(&received) == N, "received %d of %d",
        atomic_load(&received), N);
  CHECK(atomic_load(&out_of_order) == 0, "%d out of order",
        atomic_load(&out_of_order));
  CHECK(atomic_load(&bad_contents) == 0, "%d with bad contents",
        atomic_load(&bad_contents));
  CHECK(atomic_load(&wrong_source) == 0 &&
            atomic_load(&source) == nx_gp_context(&peer),
        "nx_buffer_source %#llx (%d others), the sender's context %#llx",
        (unsigned long long)atomic_load(&source), atomic_load(&wrong_source),
        (unsigned long long)nx_gp_context(&peer));
  say("done", info, failures);

  /* 4. The peer (or the gateway) is killed: A's sends to B fail, and A
   *    hears which process was lost. */
  while (atomic_load(&go_phase) == 0)
    sleep_ms(1);
  int phase = atomic_load(&go_phase);
  if (role == 'A' && (phase == 2 || phase == 3)) {
    /* Sends are accepted until the loss is known here; then they fail. */
    r = 0;
    for (int i = 0; i < TIMEOUT_S * 100 && r == 0; i++) {
      r = send_seq(0);
      if (r == 0)
        sleep_ms(10);
    }
    const nx_gp_t *dead = phase == 2 ? &peer : &gateway;
    CHECK(r < 0, "sends to B still succeed");
    /* The report runs on the thread that found the loss, which may be
     * another than this one, whose send already failed: it comes soon. */
    for (int i = 0; i < TIMEOUT_S * 100 && !heard_lost(nx_gp_context(dead));
         i++)
      sleep_ms(10);
    CHECK(heard_lost(nx_gp_context(dead)),
          "the error callback did not hear "
          "that %s was lost (%d reports)",
          phase == 2 ? "B" : "G", atomic_load(&nlost));
    printf("gw_test A: send to B: %s; heard %d process(es) lost, last with "
           "%s\n",
           nx_strerror(r), atomic_load(&nlost),
           nx_strerror(atomic_load(&lost_code)));
    say("lost", nx_strerror(r), failures ? 1 : r);
  }
  while (atomic_load(&go_phase) != 9)
    sleep_ms(1);
  return failures != 0;
}

/* ---- the checker ---- */

static nx_gp_t gps[3];     /* A, B, G: to their initial contexts */
static nx_gp_t members[2]; /* A, B: after joining the gateway */
static atomic_int hellos, joined, done, lost_said, have_forwarded;
static atomic_int done_failures;
static atomic_int lost_result;
static _Atomic uint64_t forwarded;

static int index_of(int8_t r) { return r == 'A' ? 0 : r == 'B' ? 1 : 2; }

static void on_hello(nx_context_t *c, void *a, nx_buffer_t *b) {
  (void)c, (void)a;
  int8_t r;
  if (nx_get_int8(b, &r) == 0 && nx_get_gp(b, &gps[index_of(r)]) == 0)
    atomic_fetch_add(&hellos, 1);
}

static void on_member(nx_context_t *c, void *a, nx_buffer_t *b) {
  (void)c, (void)a;
  int8_t r;
  if (nx_get_int8(b, &r) == 0 && nx_get_gp(b, &members[index_of(r)]) == 0)
    atomic_fetch_add(&joined, 1);
}

static void on_said(nx_context_t *c, void *a, nx_buffer_t *b, atomic_int *count,
                    atomic_int *value) {
  (void)c, (void)a;
  int8_t r;
  int32_t v;
  uint32_t n;
  char text[160] = "";
  if (nx_get_int8(b, &r) < 0 || nx_get_int32(b, &v) < 0 ||
      nx_get_uint32(b, &n) < 0 || n >= sizeof(text) ||
      nx_get_bytes(b, text, n) < 0)
    return;
  printf("gw_test C: %c says %d (%s)\n", r, v, text);
  atomic_fetch_add(value, v);
  atomic_fetch_add(count, 1);
}

static void on_done(nx_context_t *c, void *a, nx_buffer_t *b) {
  on_said(c, a, b, &done, &done_failures);
}

static void on_lost(nx_context_t *c, void *a, nx_buffer_t *b) {
  on_said(c, a, b, &lost_said, &lost_result);
}

static void on_forwarded(nx_context_t *c, void *a, nx_buffer_t *b) {
  (void)c, (void)a;
  uint64_t v;
  if (nx_get_uint64(b, &v) == 0) {
    atomic_store(&forwarded, v);
    atomic_store(&have_forwarded, 1);
  }
}

static pid_t start(const char *self, char r, const char *url) {
  char protos[64], arg[2] = {r, 0};
  snprintf(protos, sizeof(protos), "NX_PROTOCOLS=%s",
           r == 'A'   ? "%s,local"
           : r == 'B' ? "tcp,local"
                      : "%s,tcp,local");
  char tmp[64];
  snprintf(tmp, sizeof(tmp), protos, mod);
  size_t n = 0;
  while (environ[n] != NULL)
    n++;
  char **env = calloc(n + 3, sizeof(*env));
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "NX_PROTOCOLS=", 13) != 0 &&
        strncmp(environ[i], "NX_GATEWAY=", 11) != 0)
      env[k++] = environ[i];
  env[k++] = tmp;
  if (r == 'G')
    env[k++] = "NX_GATEWAY=1";
  char *argv[] = {(char *)self, (char *)mod, arg, (char *)url, NULL};
  pid_t pid;
  int e = posix_spawn(&pid, self, NULL, NULL, argv, env);
  free(env);
  return e == 0 ? pid : -1;
}

static void tell(const nx_gp_t *to, const char *handler, const nx_gp_t *gp,
                 int32_t phase) {
  nx_buffer_t *b;
  if (nx_rsr_init_name(&b, to, handler, 256) < 0)
    return;
  if (gp != NULL)
    nx_put_gp(b, gp);
  else
    nx_put_int32(b, phase);
  nx_rsr_send(b);
}

static int check(const char *self, const char *mode) {
  char protos[64];
  snprintf(protos, sizeof(protos), "%s,tcp,local", mod);
  setenv("NX_PROTOCOLS", protos, 1);
  unsetenv("NX_GATEWAY");
  setenv("GW_ORDERED", strcmp(mode, "dead-peer") == 0 ? "1" : "0", 1);
  if (nx_init(NULL, NULL) < 0) {
    printf("SKIPPED: nx_init with NX_PROTOCOLS=%s failed (module %s not "
           "installed?)\n",
           protos, mod);
    return 77;
  }
  for (int i = 0; i < nx_module_count(); i++) {
    nx_module_info_t m;
    if (nx_module_info(i, &m) == 0 && strcmp(m.name, mod) == 0 && !m.loaded) {
      printf("SKIPPED: module %s did not load: %s\n", mod, m.reason);
      nx_finalize();
      return 77;
    }
  }
  nx_context_t *me = nx_context_self();
  nx_handler_register(me, "hello", on_hello, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(me, "member", on_member, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(me, "done", on_done, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(me, "lost", on_lost, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(me, "forwarded", on_forwarded, NX_HANDLER_NONTHREADED,
                      NULL);
  const char *url;
  if (nx_attach_listen(&url) < 0)
    return 1;
  pid_t pid[3];
  pid[2] = start(self, 'G', url);
  pid[0] = start(self, 'A', url);
  pid[1] = start(self, 'B', url);
  for (int i = 0; i < TIMEOUT_S * 100 && atomic_load(&hellos) < 3; i++)
    sleep_ms(10);
  CHECK(atomic_load(&hellos) == 3, "%d of 3 processes joined",
        atomic_load(&hellos));
  if (failures == 0) {
    tell(&gps[0], "gateway", &gps[2], 0);
    tell(&gps[1], "gateway", &gps[2], 0);
    for (int i = 0; i < TIMEOUT_S * 100 && atomic_load(&joined) < 2; i++)
      sleep_ms(10);
    CHECK(atomic_load(&joined) == 2, "%d of 2 joined the gateway",
          atomic_load(&joined));
  }
  if (failures == 0) {
    tell(&gps[0], "peer", &members[1], 0);
    tell(&gps[1], "peer", &members[0], 0);
    for (int i = 0; i < TIMEOUT_S * 200 && atomic_load(&done) < 2; i++)
      sleep_ms(10);
    CHECK(atomic_load(&done) == 2, "%d of 2 finished the exchange",
          atomic_load(&done));
    CHECK(atomic_load(&done_failures) == 0, "A and B found %d failures",
          atomic_load(&done_failures));
    /* 3. Exactly the 2N numbered RSRs went through the gateway. */
    tell(&gps[2], "ask", NULL, 0);
    for (int i = 0; i < TIMEOUT_S * 100 && !atomic_load(&have_forwarded); i++)
      sleep_ms(10);
    CHECK(atomic_load(&forwarded) == 2 * N, "gateway forwarded %llu, not %d",
          (unsigned long long)atomic_load(&forwarded), 2 * N);
  }
  if (failures == 0) {
    /* 4. Kill B (dead-peer) or G (dead-gateway); A must hear of it. */
    int victim = strcmp(mode, "dead-gateway") == 0 ? 2 : 1;
    kill(pid[victim], SIGKILL);
    waitpid(pid[victim], NULL, 0);
    pid[victim] = -1;
    tell(&gps[0], "go", NULL, victim == 1 ? 2 : 3);
    for (int i = 0; i < TIMEOUT_S * 200 && atomic_load(&lost_said) < 1; i++)
      sleep_ms(10);
    CHECK(atomic_load(&lost_said) == 1, "A did not report");
    CHECK(atomic_load(&lost_result) < 0, "A's sends to B still succeed: %d",
          atomic_load(&lost_result));
  }
  /* Quit: every live process ends with its own verdict. */
  for (int i = 0; i < 3; i++)
    if (pid[i] > 0)
      tell(&gps[i], "go", NULL, 9);
  for (int i = 0; i < 3; i++) {
    if (pid[i] <= 0)
      continue;
    int st = 0, waited = 0;
    for (int t = 0; t < 1000 && !waited; t++) {
      waited = waitpid(pid[i], &st, WNOHANG) == pid[i];
      if (!waited)
        sleep_ms(10);
    }
    if (!waited) {
      kill(pid[i], SIGKILL);
      waitpid(pid[i], &st, 0);
    }
    CHECK(waited && WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "process %c ended with status %#x", "ABG"[i], st);
  }
  for (int i = 0; i < 3; i++)
    nx_gp_release(&gps[i]);
  for (int i = 0; i < 2; i++)
    nx_gp_release(&members[i]);
  nx_finalize();
  printf("gw_test: %s (%s, %s)\n", failures ? "FAILED" : "passed", mod, mode);
  return failures != 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 3) {
    fprintf(stderr, "usage: %s MOD dead-peer|dead-gateway\n", argv[0]);
    return 2;
  }
  mod = argv[1];
  if (argc == 3)
    return check(argv[0], argv[2]);
  role = argv[2][0];
  prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the checker */
  int r = nx_init(NULL, NULL);
  if (r < 0) {
    fprintf(stderr, "gw_test %c: nx_init: %s\n", role, nx_strerror(r));
    return 1;
  }
  r = member(argv[3]);
  nx_gp_release(&checker);
  nx_gp_release(&gateway);
  nx_gp_release(&peer);
  nx_finalize();
  return r;
}
