/* libFuzzer target: the tcp module's handshake and stream reader
 * (protocols/tcp/tcp_conn.c), driven in-process. The module's own sources
 * are compiled into this program (tests/fuzz/meson.build): the code under
 * test is the module's, reached through its ops table and its accept
 * function; only the transport underneath is cheaper than TCP.
 *
 * Set up once: the runtime (local module, no progress thread), one tcp
 * module instance whose core API is the core's with a quiet log, and a
 * listening Unix stream socket the module accepts from as it accepts from
 * its TCP listeners. Then one real version-2 handshake (the key is known
 * here), with a frame in the same write as the proof, checks that the
 * harness speaks the protocol and that such a connection opens.
 *
 * Per input, a new connection accepted by the module's accept function;
 * the first byte picks the mode:
 *   even: the rest is the handshake itself (any bytes);
 *   odd:  the rest is the frame stream on a connection opened as the end
 *         of a successful handshake opens it (the handshake costs three
 *         HMACs, a random nonce and three round trips, several times the
 *         parsing; the fuzzer cannot change any of it).
 * Then our end is shut (EOF) and the module driven until it closed the
 * connection: it reads to the EOF, a frame budget per call, or refuses
 * earlier. Nothing is kept from one input to the next but the module
 * instance, with no connection.
 * It may refuse and drop, never crash, hang or leak. */
#include "fuzz.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "buffers/buf.h"
#include "buffers/frame.h"
#include "nexus.h"
#include "nxu_auth.h"
#include "runtime/core_api.h"
#include "tcp_conn.h"

extern const struct nx_protocol_ops nx_protocol_tcp;

static const uint8_t key[16] = {1, 2,  3,  4,  5,  6,  7,  8,
                                9, 10, 11, 12, 13, 14, 15, 16};
static struct nx_core_api api;
static struct tcp *t;
static struct tcp_listener listener;
static struct sockaddr_un addr;
static socklen_t addr_len;
static uint64_t conns;
static atomic_ulong bad_peers;

/* The module logs every refused peer at level 0: one line per input would
 * cost more than the parsing. Counted instead. */
static void quiet_log(int level, const char *module, const char *fmt, ...) {
  (void)level;
  (void)module;
  (void)fmt;
}

static void quiet_bad_peer(const char *module, const char *why) {
  (void)module;
  (void)why;
  atomic_fetch_add(&bad_peers, 1);
}

static int connect_new(void);
static int handshake(int fd, const uint8_t *more, size_t more_len);
static void end(int fd);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  setenv("NX_KEY", "0102030405060708090a0b0c0d0e0f10", 1);
  setenv("NX_PROTOCOLS", "local", 1);
  setenv("NX_PROGRESS", "poll", 1);
  /* The module's own TCP listener stays idle: loopback, any port. */
  setenv("NX_TCP_LISTEN", "127.0.0.1:0", 1);
  /* The payload is allocated when its header arrives: without a bound a
   * header alone reserves up to this machine's memory (NX_FRAME_MAX). */
  setenv("NX_FRAME_MAX", "1m", 1);
  NXT_ASSERT(nx_init(NULL, NULL) == 0);
  api = nxi_core_api;
  api.log = quiet_log;
  api.bad_peer = quiet_bad_peer;
  void *state;
  char why[256] = "";
  int r = nx_protocol_tcp.init(&api, &state, why, sizeof(why));
  if (r != 0)
    fprintf(stderr, "fuzz_tcp_stream: tcp init: %s\n", why);
  NXT_ASSERT(r == 0);
  t = state;
  /* An abstract Unix socket: nothing on the file system to clean up. */
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  addr.sun_family = AF_UNIX;
  int n = snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1,
                   "nexus-fuzz-tcp-%d", (int)getpid());
  addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
  NXT_ASSERT(fd >= 0);
  NXT_ASSERT(bind(fd, (struct sockaddr *)&addr, addr_len) == 0);
  NXT_ASSERT(listen(fd, 16) == 0);
  listener.src.kind = TCP_SRC_LISTENER;
  listener.fd = fd;
  listener.t = t;

  /* One real handshake, a frame (to no context here) right after the
   * proof: the connection must open and the frame arrive. */
  uint8_t h[NX_FRAME_HDR_SIZE];
  struct nxi_frame_hdr f = {.fmt = nxi_format_native(),
                            .handler = 1,
                            .context = 1,
                            .address = 0,
                            .len = 0};
  nxi_frame_hdr_encode(h, &f);
  unsigned long dropped = atomic_load(&nxi_rt.drop_no_context);
  fd = connect_new();
  /* The handshake opens the connection. */
  NXT_ASSERT(handshake(fd, h, sizeof(h)));
  NXT_ASSERT(t->conns->state == CONN_OPEN);
  end(fd);
  nx_poll();
  /* The frame after the handshake arrived (and was dropped: no context). */
  NXT_ASSERT(atomic_load(&nxi_rt.drop_no_context) == dropped + 1);
  NXT_ASSERT(atomic_load(&bad_peers) == 0);
  return 0;
}

/* What a progress call of the module's driver does. */
static void drive(void) { nx_protocol_tcp.progress(t, NULL); }

/* Reads exactly `n` bytes the module sent, driving it in between. Returns 1
 * when all came, 0 when it closed the connection or sent less. */
static int recv_exact(int fd, uint8_t *out, size_t n) {
  size_t got = 0;
  for (int round = 0; round < 8 && got < n; round++) {
    drive();
    ssize_t r = recv(fd, out + got, n - got, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
      return 0;
    if (r > 0)
      got += (size_t)r;
  }
  return got == n;
}

/* A valid version-2 handshake as a client with a new identity; `more`
 * goes in the same write as the proof. */
static int handshake(int fd, const uint8_t *more, size_t more_len) {
  uint8_t h[TCP_HELLO_SIZE], ch[TCP_CHALLENGE_SIZE], ids[2 * TCP_UUID_SIZE],
      proof[TCP_PROOF_SIZE + 64], answer[TCP_ANSWER_SIZE];
  NXT_ASSERT(more_len <= sizeof(proof) - TCP_PROOF_SIZE);
  memcpy(h, TCP_MAGIC, 4);
  h[4] = TCP_HS_VERSION;
  h[5] = 0;
  conns++;
  memset(h + 6, 0xab, TCP_UUID_SIZE);
  memcpy(h + 6, &conns, sizeof(conns));
  memset(h + 6 + TCP_UUID_SIZE, 0x5a, NXU_NONCE_SIZE);
  if (send(fd, h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h) ||
      !recv_exact(fd, ch, sizeof(ch)))
    return 0;
  memcpy(ids, h + 6, TCP_UUID_SIZE);
  memcpy(ids + TCP_UUID_SIZE, ch + 6, TCP_UUID_SIZE);
  if (nxu_auth_mac(key, sizeof(key), "client", h + 6 + TCP_UUID_SIZE,
                   ch + 6 + TCP_UUID_SIZE, ids, sizeof(ids), proof) != 0)
    return 0;
  memcpy(proof + TCP_PROOF_SIZE, more, more_len);
  size_t n = TCP_PROOF_SIZE + more_len;
  if (send(fd, proof, n, MSG_NOSIGNAL) != (ssize_t)n)
    return 0;
  return recv_exact(fd, answer, sizeof(answer)) && answer[6] == 0;
}

/* A new connection, accepted by the module's accept function. */
static int connect_new(void) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  NXT_ASSERT(fd >= 0);
  NXT_ASSERT(connect(fd, (struct sockaddr *)&addr, addr_len) == 0);
  tcp_conn_accept(&listener);
  NXT_ASSERT(t->conns != NULL); /* it accepted */
  return fd;
}

/* Opens the accepted connection for frames as the end of a successful
 * handshake does (proof_received in tcp_conn.c): the connection gets its
 * peer (a new identity), leaves the handshake count and carries frames. */
static void open_as_accepted(void) {
  uint8_t uuid[TCP_UUID_SIZE];
  conns++;
  memset(uuid, 0xcd, sizeof(uuid));
  memcpy(uuid, &conns, sizeof(conns));
  struct tcp_conn *c = t->conns;
  struct tcp_peer *p = t->peer_get(t, uuid);
  NXT_ASSERT(p != NULL);
  c->peer = p;
  t->handshaking--;
  t->peer_open(t, p, c);
}

/* Drives the module until it closed every connection. One that never
 * closes after our EOF hangs: abort. */
static void drive_until_closed(void) {
  for (int round = 0; t->conns != NULL; round++) {
    NXT_ASSERT(round <= 100000);
    drive();
  }
}

/* Writes the input, driving the module whenever the socket is full; stops
 * when the module closed its end. */
static void send_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t r = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r < 0 && errno != EAGAIN && errno != EINTR)
      return;
    if (r < 0) {
      drive();
      continue;
    }
    p += r;
    n -= (size_t)r;
  }
}

static void end(int fd) {
  shutdown(fd, SHUT_WR);
  drive_until_closed();
  close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 65536)
    return 0;
  int fd = connect_new();
  if (data[0] & 1)
    open_as_accepted();
  send_all(fd, data + 1, size - 1);
  end(fd);
  /* Frames it delivered: the core drops them (no such context). */
  nx_poll();
  return 0;
}
