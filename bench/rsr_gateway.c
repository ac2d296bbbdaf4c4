/* Round trips through a gateway beside direct ones over the same module
 * (tcp), measured in the same run: what forwarding an RSR costs. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_args.h"
#include "bench_util.h"
#include "nexus.h"

/* Usage: bench_rsr_gateway [--quick] [--size BYTES] [--runs N].
 *
 * Four processes, all loading only the tcp module and all with their
 * progress thread (NX_PROGRESS=thread: three busy-polling processes would
 * fight over two cores):
 *   - S, this program: sends "ping" and times the "pong";
 *   - G, the gateway (NX_GATEWAY=1): forwards;
 *   - P, an echo that S reaches only through G, and that reaches S only
 *     through G;
 *   - D, an echo that S reaches directly: the anchor.
 * Both echoes are this program again ("--role peer|direct ..."), as is G
 * ("--role gateway ...").
 *
 * Keeping S and P apart without root or network namespaces, with the
 * tcp module's own rules (docs/tcp.md, "Descriptor"): a loopback address
 * is used only by a peer of the same host identity (NX_HOST_ID), and an
 * address only of a family the process has (it can open a socket of).
 * Of the two families, L is one whose loopback address this host has and
 * R one with a non-loopback address:
 *   - S: host "a", listens on L's loopback only, and has no R: a seccomp
 *     filter refuses its socket(R) with EAFNOSUPPORT, as on a host without
 *     that family;
 *   - G: host "a", listens on L's loopback and the R address;
 *   - P: host "b", listens on the R address only;
 *   - D: host "a", listens on L's loopback only.
 * S cannot use P's only address (family R), P cannot use S's (a loopback
 * address of another host), both use G's, and G reaches both; S and D
 * reach each other over L's loopback. The R address is this host's own, so
 * the kernel carries it over the loopback device as well: every hop is a
 * loopback TCP connection. Before timing, the program checks that the
 * routes are what they should be (nx_gp_protocol: "gw" to P, "tcp" to D
 * and G), and after each run through G that G's rsr_forwarded grew by two
 * per round trip (ping and pong), or it fails. */

#define NSIZES 5
#define MAX_PAYLOAD (4u << 20)
#define MAX_RUNS 15

static const size_t all_sizes[NSIZES] = {8, 1024, 65536, 1u << 20, 4u << 20};
static int quick;
static int runs = 5;
static char send_buf[MAX_PAYLOAD];
static char recv_buf[MAX_PAYLOAD];

static void die_nx(const char *what, int rc) {
  bench_die(what, nx_strerror(rc));
}

/* --- the addresses ------------------------------------------------------- */

struct plan {
  int deny;            /* S's missing family: R */
  char l_listen[64];   /* L's loopback, as NX_TCP_LISTEN takes it */
  char r_listen[64];   /* the R address */
  char gw_listen[128]; /* both */
};

/* Picks L and R from this host's addresses (getifaddrs): R = IPv4 when
 * the host has a non-loopback IPv4 address and ::1, else R = IPv6 when
 * it has a global IPv6 address (L then IPv4's 127.0.0.1). Returns 0, or
 * -1 with the reason in `why`. */
static int plan_addresses(struct plan *p, char *why, size_t len) {
  struct ifaddrs *list;
  if (getifaddrs(&list) < 0) {
    snprintf(why, len, "getifaddrs: %s", strerror(errno));
    return -1;
  }
  char v4[INET6_ADDRSTRLEN] = "", v6[INET6_ADDRSTRLEN] = "";
  int v6_loopback = 0;
  for (struct ifaddrs *i = list; i != NULL; i = i->ifa_next) {
    if (i->ifa_addr == NULL || !(i->ifa_flags & IFF_UP))
      continue;
    if (i->ifa_addr->sa_family == AF_INET) {
      const struct in_addr *a = &((struct sockaddr_in *)i->ifa_addr)->sin_addr;
      const uint8_t *b = (const uint8_t *)a;
      if (b[0] != 127 && b[0] != 0 && b[0] < 224 && v4[0] == '\0')
        inet_ntop(AF_INET, a, v4, sizeof(v4));
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      const struct in6_addr *a =
          &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
      if (IN6_IS_ADDR_LOOPBACK(a))
        v6_loopback = 1;
      else if (!IN6_IS_ADDR_LINKLOCAL(a) && !IN6_IS_ADDR_UNSPECIFIED(a) &&
               !IN6_IS_ADDR_MULTICAST(a) && !IN6_IS_ADDR_V4MAPPED(a) &&
               v6[0] == '\0')
        inet_ntop(AF_INET6, a, v6, sizeof(v6));
    }
  }
  freeifaddrs(list);
  if (v4[0] != '\0' && v6_loopback) {
    p->deny = AF_INET;
    snprintf(p->l_listen, sizeof(p->l_listen), "[::1]");
    snprintf(p->r_listen, sizeof(p->r_listen), "%s", v4);
  } else if (v6[0] != '\0') {
    p->deny = AF_INET6;
    snprintf(p->l_listen, sizeof(p->l_listen), "127.0.0.1");
    snprintf(p->r_listen, sizeof(p->r_listen), "[%s]", v6);
  } else {
    snprintf(why, len,
             "this host has no non-loopback address (%s), which the "
             "bench needs to keep the sender and the peer apart",
             v4[0] != '\0' ? "an IPv4 one but no ::1" : "IPv4 or IPv6");
    return -1;
  }
  snprintf(p->gw_listen, sizeof(p->gw_listen), "%s,%s", p->l_listen,
           p->r_listen);
  return 0;
}

/* S's missing family: a seccomp filter makes socket(family, ...) fail with
 * EAFNOSUPPORT, so that the tcp module finds the family absent. Returns 0,
 * or -1 with the reason in `why`. */
#if (defined(__x86_64__) || defined(__aarch64__)) &&                           \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#if defined(__x86_64__)
#define NATIVE_AUDIT_ARCH AUDIT_ARCH_X86_64
#else
#define NATIVE_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif
static int deny_family(int family, char *why, size_t len) {
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_AUDIT_ARCH, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      /* The low half of the first argument (little-endian). */
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
               offsetof(struct seccomp_data, args[0])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)family, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAFNOSUPPORT),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
      prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0) {
    snprintf(why, len, "cannot install a seccomp filter: %s", strerror(errno));
    return -1;
  }
  int fd = socket(family, SOCK_STREAM, 0);
  if (fd >= 0 || errno != EAFNOSUPPORT) {
    if (fd >= 0)
      close(fd);
    snprintf(why, len, "the seccomp filter did not take");
    return -1;
  }
  return 0;
}
#else
static int deny_family(int family, char *why, size_t len) {
  (void)family;
  snprintf(why, len, "the seccomp filter is written for x86-64 and arm64");
  return -1;
}
#endif

/* --- the children -------------------------------------------------------- */

/* Writes a gp to `fd` as bench_util's children do: format, length, bytes. */
static int write_gp(int fd, const nx_gp_t *gp) {
  nx_buffer_t *b;
  const void *bytes;
  size_t len;
  if (nx_buffer_create(64, &b) != 0)
    return -1;
  int r = -1;
  if (nx_put_gp(b, gp) == 0 && nx_buffer_bytes(b, &bytes, &len) == 0) {
    uint32_t head[2] = {(uint32_t)nx_buffer_format(b), (uint32_t)len};
    if (bench_write_all(fd, head, sizeof(head)) == 0 &&
        bench_write_all(fd, bytes, len) == 0)
      r = 0;
  }
  nx_buffer_release(b);
  return r;
}

/* Reads what write_gp wrote, without decoding it: the head and `bytes`
 * (at most `cap`). Returns the length, or -1. */
static long read_gp_bytes(int fd, uint32_t head[2], char *bytes, size_t cap) {
  if (bench_read_all(fd, head, 2 * sizeof(uint32_t)) < 0 || head[1] > cap ||
      bench_read_all(fd, bytes, head[1]) < 0)
    return -1;
  return (long)head[1];
}

static int decode_gp(const uint32_t head[2], const char *bytes, nx_gp_t *gp) {
  nx_buffer_t *b;
  int rc = nx_buffer_from_bytes(bytes, head[1], (int)head[0], &b);
  if (rc != 0)
    return rc;
  rc = nx_get_gp(b, gp);
  nx_buffer_release(b);
  return rc;
}

static void on_hello(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  nx_gp_release(&bench_reply_gp);
  nx_get_gp(buf, &bench_reply_gp);
}

/* The echoes' "ping": answers "pong" with the same bytes (bench_echo). */
static void on_ping(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  bench_echo(buf, &bench_reply_gp, nx_handler_id("pong"), recv_buf,
             sizeof(recv_buf));
}

/* G as an application-level relay (the third row): "relay_to" brings P's gp
 * and S's; G's "ping" handler sends each ping on to P, its "pong" handler
 * each pong back to S. Same processes and routes as through the gateway,
 * with handlers instead of the core's forwarding. */
static nx_gp_t relay_peer, relay_back;

static void on_relay_to(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  nx_gp_release(&relay_peer);
  nx_gp_release(&relay_back);
  if (nx_get_gp(buf, &relay_peer) != 0 || nx_get_gp(buf, &relay_back) != 0)
    bench_die("G: relay_to", "malformed");
}

static void on_relay_ping(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  bench_echo(buf, &relay_peer, nx_handler_id("ping"), recv_buf,
             sizeof(recv_buf));
}

static void on_relay_pong(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  bench_echo(buf, &relay_back, nx_handler_id("pong"), recv_buf,
             sizeof(recv_buf));
}

/* G's "stats": answers "stats_reply" at the gp it brought with its
 * rsr_forwarded. */
static void on_stats(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  nx_gp_t to;
  nx_stats_t s;
  nx_buffer_t *out;
  if (nx_get_gp(buf, &to) != 0)
    return;
  if (nx_stats_get(&s) == 0 &&
      nx_rsr_init_name(&out, &to, "stats_reply", nx_sizeof_int64(1)) == 0) {
    nx_put_uint64(out, s.rsr_forwarded);
    nx_rsr_send(out);
  }
  nx_gp_release(&to);
}

/* A child: G ("gateway"), P ("peer": joins G first, whose gp comes
 * through `in`) or D ("direct"). Writes its gp to `out`, serves until
 * "quit" and finalizes. Returns the exit status. */
static int child_main(const char *role, int out, int in, pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int rc;
  if (getppid() != parent)
    return 1;
  if ((rc = nx_init(NULL, NULL)) != 0)
    die_nx("a child's nx_init", rc);
  bench_sync_init();
  nx_context_t *self = nx_context_self();
  nx_handler_register(self, "quit", bench_on_quit, NX_HANDLER_NONTHREADED,
                      NULL);
  if (strcmp(role, "gateway") == 0) {
    if ((rc = nx_gateway_enable()) != 0)
      die_nx("nx_gateway_enable", rc);
    nx_handler_register(self, "stats", on_stats, NX_HANDLER_NONTHREADED, NULL);
    nx_handler_register(self, "relay_to", on_relay_to, NX_HANDLER_NONTHREADED,
                        NULL);
    nx_handler_register(self, "ping", on_relay_ping, NX_HANDLER_NONTHREADED,
                        NULL);
    nx_handler_register(self, "pong", on_relay_pong, NX_HANDLER_NONTHREADED,
                        NULL);
  } else {
    nx_handler_register(self, "hello", on_hello, NX_HANDLER_NONTHREADED, NULL);
    nx_handler_register(self, "ping", on_ping, NX_HANDLER_NONTHREADED, NULL);
  }
  if (strcmp(role, "peer") == 0) {
    uint32_t head[2];
    static char bytes[8192];
    nx_gp_t gw;
    if (read_gp_bytes(in, head, bytes, sizeof(bytes)) < 0)
      bench_die("P: reading the gateway's gp", "short read");
    if ((rc = decode_gp(head, bytes, &gw)) != 0)
      die_nx("P: the gateway's gp", rc);
    if ((rc = nx_gateway_use(&gw)) != 0)
      die_nx("P: nx_gateway_use", rc);
    nx_gp_release(&gw);
  }
  nx_gp_t me;
  if ((rc = nx_gp_make(NULL, &me)) != 0)
    die_nx("nx_gp_make", rc);
  if (write_gp(out, &me) < 0)
    bench_die("writing the gp", NULL);
  close(out);
  nx_gp_release(&me);
  if (bench_serve_until_quit(parent) != 0)
    return 1;
  nx_gp_release(&bench_reply_gp);
  nx_gp_release(&relay_peer);
  nx_gp_release(&relay_back);
  return nx_finalize() == 0 ? 0 : 1;
}

extern char **environ;

struct child {
  const char *role;
  pid_t pid;
  int out; /* its gp comes through here */
  int in;  /* P: the gateway's gp goes through here */
  nx_gp_t gp;
};

/* Starts this program as `role` with the environment of this one except
 * for NX_HOST_ID, NX_TCP_LISTEN and NX_GATEWAY, which it gets from `host`,
 * `listen` and `gateway`. */
static void child_spawn(struct child *ch, const char *role, const char *host,
                        const char *listen, int gateway) {
  int out[2], in[2];
  if (pipe(out) < 0 || pipe(in) < 0)
    bench_die("pipe", strerror(errno));
  char out_arg[16], in_arg[16], parent_arg[16];
  snprintf(out_arg, sizeof(out_arg), "%d", out[1]);
  snprintf(in_arg, sizeof(in_arg), "%d", in[0]);
  snprintf(parent_arg, sizeof(parent_arg), "%d", (int)getpid());
  char *argv[] = {"/proc/self/exe", "--role",   (char *)role, out_arg,
                  in_arg,           parent_arg, NULL};
  size_t n = 0;
  while (environ[n] != NULL)
    n++;
  char **env = calloc(n + 4, sizeof(char *));
  char host_var[64], listen_var[160];
  if (env == NULL)
    bench_die("calloc", NULL);
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "NX_HOST_ID=", 11) != 0 &&
        strncmp(environ[i], "NX_TCP_LISTEN=", 14) != 0 &&
        strncmp(environ[i], "NX_GATEWAY=", 11) != 0)
      env[k++] = environ[i];
  snprintf(host_var, sizeof(host_var), "NX_HOST_ID=%s", host);
  snprintf(listen_var, sizeof(listen_var), "NX_TCP_LISTEN=%s", listen);
  env[k++] = host_var;
  env[k++] = listen_var;
  if (gateway)
    env[k++] = "NX_GATEWAY=1";
  int rc = posix_spawn(&ch->pid, argv[0], NULL, NULL, argv, env);
  free(env);
  if (rc != 0)
    bench_die("posix_spawn", strerror(rc));
  close(out[1]);
  close(in[0]);
  ch->role = role;
  ch->out = out[0];
  ch->in = in[1];
  nx_gp_t null = NX_GP_NULL;
  ch->gp = null;
}

static void child_stop(struct child *ch) {
  nx_buffer_t *b;
  if (nx_rsr_init_name(&b, &ch->gp, "quit", 0) == 0)
    nx_rsr_send(b);
  int status;
  if (waitpid(ch->pid, &status, 0) < 0 || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0)
    fprintf(stderr, "bench_rsr_gateway: the %s child ended badly\n", ch->role);
  nx_gp_release(&ch->gp);
}

/* --- S ------------------------------------------------------------------- */

static long bad_replies;
static size_t reply_size;
static uint64_t forwarded; /* G's rsr_forwarded, from "stats_reply" */

static void on_pong(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  size_t n = reply_size;
  /* The payload is send_buf's 0x5a bytes: its ends are checked and cleared
   * for the next reply, so that a frame the gateway garbled shows. */
  if (nx_get_bytes(buf, recv_buf, n) != 0 || recv_buf[0] != 0x5a ||
      recv_buf[n - 1] != 0x5a)
    bad_replies++; /* read by the main thread after bench_wait_replies */
  recv_buf[0] = recv_buf[n - 1] = 0;
  bench_reply_arrived();
}

static void on_stats_reply(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  uint64_t v = 0;
  nx_get_uint64(buf, &v);
  forwarded = v;
  bench_reply_arrived();
}

/* G's rsr_forwarded now. */
static uint64_t gateway_forwarded(const nx_gp_t *gw, const nx_gp_t *me) {
  nx_buffer_t *b;
  int rc;
  long want = bench_next_reply();
  if ((rc = nx_rsr_init_name(&b, gw, "stats", nx_sizeof_gp(me))) != 0 ||
      (rc = nx_put_gp(b, me)) != 0 || (rc = nx_rsr_send(b)) != 0)
    die_nx("asking the gateway for its stats", rc);
  bench_wait_replies(want, 10);
  return forwarded;
}

/* `warm` round trips, then `n` timed ones, to `to`; returns microseconds
 * per timed round trip. */
static double round_trips(const nx_gp_t *to, size_t size, int warm, int n) {
  nx_handler_id_t ping = nx_handler_id("ping");
  reply_size = size;
  double t0 = 0;
  for (int i = -warm; i < n; i++) {
    if (i == 0)
      t0 = bench_now_us();
    nx_buffer_t *b;
    int rc;
    if ((rc = nx_rsr_init(&b, to, ping, nx_sizeof_bytes(size))) != 0 ||
        (rc = nx_put_bytes(b, send_buf, size)) != 0)
      die_nx("ping", rc);
    long want = bench_next_reply();
    if ((rc = nx_rsr_send(b)) != 0)
      die_nx("nx_rsr_send", rc);
    /* The first one under a limit: a wrong route shows as no reply. */
    bench_wait_replies(want, i == -warm ? 10 : 0);
  }
  double t = (bench_now_us() - t0) / n;
  if (bad_replies > 0)
    bench_die("replies", "of the wrong size or contents");
  return t;
}

static void expect_protocol(const char *what, const nx_gp_t *gp,
                            const char *want) {
  const char *p = nx_gp_protocol(gp);
  char info[256] = "";
  nx_gp_protocol_info(gp, info, sizeof(info));
  printf("route S -> %s: %s (%s)\n", what, p != NULL ? p : "none", info);
  if (p == NULL || strcmp(p, want) != 0) {
    char msg[128];
    snprintf(msg, sizeof(msg), "S reaches %s over %s, not %s", what,
             p != NULL ? p : "nothing", want);
    bench_die(msg, NULL);
  }
}

static void say_hello(const nx_gp_t *to, const nx_gp_t *me) {
  nx_buffer_t *b;
  int rc;
  if ((rc = nx_rsr_init_name(&b, to, "hello", nx_sizeof_gp(me))) != 0 ||
      (rc = nx_put_gp(b, me)) != 0 || (rc = nx_rsr_send(b)) != 0)
    die_nx("hello", rc);
}

static double load_average(void) {
  double load = -1;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f != NULL) {
    if (fscanf(f, "%lf", &load) != 1)
      load = -1;
    fclose(f);
  }
  return load;
}

static const char usage[] =
    "usage: bench_rsr_gateway [--quick] [--size BYTES] [--runs N]\n"
    "  Round trips through a gateway beside direct ones, over tcp, in one "
    "run:\n"
    "  what forwarding an RSR costs; prints the rows and the goals (or a "
    "SKIP\n"
    "  line where the host cannot run it).\n"
    "  --quick   3 runs\n"
    "  --size    one payload size in bytes (at most 4 MiB)\n"
    "  --runs    runs of each row, at most 15\n";

int main(int argc, char **argv) {
  bench_name = "bench_rsr_gateway";
  if (argc == 6 && strcmp(argv[1], "--role") == 0)
    return child_main(argv[2], atoi(argv[3]), atoi(argv[4]),
                      (pid_t)atoi(argv[5]));
  size_t sizes[NSIZES];
  int nsizes = NSIZES;
  memcpy(sizes, all_sizes, sizeof(sizes));
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
      runs = 3;
    } else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = atoi(argv[++i]);
      if (runs <= 0 || runs > MAX_RUNS)
        return bench_bad_arg("bench_rsr_gateway", argv[i],
                             "not a number of runs in range", usage);
    } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
      char *end;
      unsigned long long v = strtoull(argv[++i], &end, 10);
      if (*end != '\0' || v == 0 || v > MAX_PAYLOAD)
        return bench_bad_arg("bench_rsr_gateway", argv[i],
                             "not a size in range", usage);
      sizes[0] = (size_t)v;
      nsizes = 1;
    } else if (bench_is_help(argv[i])) {
      return bench_help(usage);
    } else {
      return bench_bad_arg("bench_rsr_gateway", argv[i], NULL, usage);
    }
  }

  struct plan plan;
  char why[256];
  if (plan_addresses(&plan, why, sizeof(why)) < 0) {
    printf("SKIP: bench_rsr_gateway: %s\n", why);
    return 0;
  }
  bench_set_key();
  setenv("NX_PROTOCOLS", "tcp", 1); /* every process: tcp only */
  setenv("NX_PROGRESS", "thread", 1);
  signal(SIGPIPE, SIG_IGN);
  memset(send_buf, 0x5a, sizeof(send_buf));

  /* G first: P needs its gp to join it. */
  struct child gw, peer, direct;
  child_spawn(&gw, "gateway", "a", plan.gw_listen, 1);
  child_spawn(&direct, "direct", "a", plan.l_listen, 0);
  child_spawn(&peer, "peer", "b", plan.r_listen, 0);
  uint32_t gw_head[2];
  static char gw_bytes[8192];
  if (read_gp_bytes(gw.out, gw_head, gw_bytes, sizeof(gw_bytes)) < 0 ||
      bench_write_all(peer.in, gw_head, sizeof(gw_head)) < 0 ||
      bench_write_all(peer.in, gw_bytes, gw_head[1]) < 0)
    bench_die("passing the gateway's gp on to P", "a child died");

  /* S: after the children, which must not inherit the filter. */
  setenv("NX_HOST_ID", "a", 1);
  setenv("NX_TCP_LISTEN", plan.l_listen, 1);
  unsetenv("NX_GATEWAY");
  if (deny_family(plan.deny, why, sizeof(why)) < 0) {
    printf("SKIP: bench_rsr_gateway: %s\n", why);
    kill(gw.pid, SIGKILL), kill(peer.pid, SIGKILL), kill(direct.pid, SIGKILL);
    waitpid(gw.pid, NULL, 0), waitpid(peer.pid, NULL, 0);
    waitpid(direct.pid, NULL, 0);
    return 0;
  }
  const char *deny_name = plan.deny == AF_INET ? "IPv4" : "IPv6";
  printf("round trips from S to an echo over the tcp module, "
         "NX_PROGRESS=thread: direct (S <-> D over %s) and through a "
         "gateway (S -> G over %s, G -> P over %s, and back the same way); "
         "the two take turns within each size; load average %.2f\n",
         plan.l_listen, plan.l_listen, plan.r_listen, load_average());
  printf("S has no %s (a seccomp filter refuses the socket) and P another "
         "host identity: neither reaches the other directly, both reach G\n",
         deny_name);

  int rc;
  if ((rc = nx_init(NULL, NULL)) != 0)
    die_nx("nx_init (is the tcp module built?)", rc);
  bench_sync_init();
  nx_context_t *self = nx_context_self();
  nx_handler_register(self, "pong", on_pong, NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(self, "stats_reply", on_stats_reply,
                      NX_HANDLER_NONTHREADED, NULL);
  if ((rc = decode_gp(gw_head, gw_bytes, &gw.gp)) != 0)
    die_nx("the gateway's gp", rc);
  expect_protocol("G", &gw.gp, "tcp");
  if ((rc = nx_gateway_use(&gw.gp)) != 0)
    die_nx("S: nx_gateway_use", rc);
  struct child *echoes[2] = {&direct, &peer};
  for (int i = 0; i < 2; i++) {
    uint32_t head[2];
    static char bytes[8192];
    if (read_gp_bytes(echoes[i]->out, head, bytes, sizeof(bytes)) < 0)
      bench_die("reading a child's gp", "short read");
    if ((rc = decode_gp(head, bytes, &echoes[i]->gp)) != 0)
      die_nx("a child's gp", rc);
  }
  expect_protocol("D", &direct.gp, "tcp");
  expect_protocol("P", &peer.gp, "gw");
  nx_gp_t me; /* made after joining G: P reaches it through G */
  if ((rc = nx_gp_make(NULL, &me)) != 0)
    die_nx("nx_gp_make", rc);
  say_hello(&direct.gp, &me);
  say_hello(&peer.gp, &me);
  {
    nx_buffer_t *b;
    if ((rc = nx_rsr_init_name(&b, &gw.gp, "relay_to", 2 * 4096)) != 0 ||
        (rc = nx_put_gp(b, &peer.gp)) != 0 || (rc = nx_put_gp(b, &me)) != 0 ||
        (rc = nx_rsr_send(b)) != 0)
      die_nx("relay_to", rc);
  }

  struct {
    size_t size;
    double med[3], best[3];
  } res[NSIZES];
  enum { DIRECT, GW, RELAY };
  static const char *const label[3] = {"direct, tcp",
                                       "through a gateway, tcp + tcp",
                                       "through a relay handler in G"};
  for (int z = 0; z < nsizes; z++) {
    size_t size = sizes[z];
    int n = bench_iters(size, quick), warm = n / 10 + 1;
    double v[3][MAX_RUNS];
    for (int r = 0; r < runs; r++) {
      /* Rotate which goes first, so that none always follows another's
       * idle peer. */
      for (int k = 0; k < 3; k++) {
        int s = (k + r) % 3;
        if (s == DIRECT) {
          v[DIRECT][r] = round_trips(&direct.gp, size, warm, n);
          continue;
        }
        if (s == RELAY) {
          /* P answers G, whose handlers pass pings and pongs on. */
          say_hello(&peer.gp, &gw.gp);
          uint64_t before = gateway_forwarded(&gw.gp, &me);
          v[RELAY][r] = round_trips(&gw.gp, size, warm, n);
          uint64_t after = gateway_forwarded(&gw.gp, &me);
          say_hello(&peer.gp, &me);
          /* The hellos to P go through G, but before `before` (on the same
           * route as the "stats" that reads it) and after `after`. */
          if (after - before != 0) {
            fprintf(stderr,
                    "bench_rsr_gateway: G forwarded %llu RSRs while relaying, "
                    "not 0\n",
                    (unsigned long long)(after - before));
            exit(1);
          }
          continue;
        }
        uint64_t before = gateway_forwarded(&gw.gp, &me);
        v[GW][r] = round_trips(&peer.gp, size, warm, n);
        uint64_t after = gateway_forwarded(&gw.gp, &me);
        if (after - before != 2 * (uint64_t)(warm + n)) {
          fprintf(stderr,
                  "bench_rsr_gateway: G forwarded %llu RSRs for %d round "
                  "trips, not %d\n",
                  (unsigned long long)(after - before), warm + n,
                  2 * (warm + n));
          exit(1);
        }
      }
    }
    res[z].size = size;
    for (int s = 0; s < 3; s++)
      res[z].med[s] = bench_median(v[s], runs, &res[z].best[s]);
    char lab[32];
    bench_size_label(size, lab, sizeof(lab));
    printf("\n%s: %d round trips per run, median of %d runs (fastest)\n", lab,
           n, runs);
    printf("%-56s%10s%12s\n", "", "/direct", "-direct");
    for (int s = 0; s < 3; s++) {
      printf("  %-30s %9.2f us (%9.2f)", label[s], res[z].med[s],
             res[z].best[s]);
      if (s != DIRECT)
        printf("%9.2fx%9.2f us", res[z].med[s] / res[z].med[DIRECT],
               res[z].med[s] - res[z].med[DIRECT]);
      printf("\n");
    }
    printf("  gateway / relay handler: %.2fx\n",
           res[z].med[GW] / res[z].med[RELAY]);
    printf("  G forwarded 2 RSRs per round trip through it, as it should\n");
    fflush(stdout);
  }

  child_stop(&peer);
  child_stop(&direct);
  child_stop(&gw);
  nx_gp_release(&me);
  nx_finalize();

  if (nsizes < NSIZES)
    return 0; /* a narrowed run: no goals */
  printf("\ngoals: through a gateway within 2.2x of direct at 8 B, 1.2x at "
         "1 MiB\n");
  for (int z = 0; z < nsizes; z++) {
    double limit = res[z].size == 8 ? 2.2 : res[z].size == 1 << 20 ? 1.2 : 0;
    if (limit == 0)
      continue;
    char lab[32];
    bench_size_label(res[z].size, lab, sizeof(lab));
    double ratio = res[z].med[GW] / res[z].med[DIRECT];
    printf("  %-6s through a gateway / direct %6.2fx  %s (goal %.1fx)\n", lab,
           ratio, ratio <= limit ? "met" : "NOT met", limit);
  }
  return 0;
}
