/* libFuzzer target: the tcp module's handshake and stream reader
 * (protocols/tcp/tcp_conn.c), driven in-process: the runtime runs here with
 * the tcp module listening on loopback and no progress thread
 * (NX_PROGRESS=poll); each input is written to a new connection to it and
 * the module is polled until it closed the connection or read everything.
 * The first byte picks the mode: even, the input is the handshake itself
 * (any bytes); odd, a valid version-2 handshake (the key is known here)
 * comes first and the rest is the frame stream. The module may refuse and
 * drop, never crash, hang or leak. */
#include "fuzz.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nexus.h"
#include "nxu_auth.h"

static const uint8_t key[16] = {1, 2,  3,  4,  5,  6,  7,  8,
                                9, 10, 11, 12, 13, 14, 15, 16};
static uint16_t port;
static uint64_t conns;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  /* A free loopback port for the module to listen on. */
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 ||
      getsockname(s, (struct sockaddr *)&a, &len) < 0)
    abort();
  port = ntohs(a.sin_port);
  close(s);
  char listen[64];
  snprintf(listen, sizeof(listen), "127.0.0.1:%u", port);
  setenv("NX_TCP_LISTEN", listen, 1);
  setenv("NX_KEY", "0102030405060708090a0b0c0d0e0f10", 1);
  setenv("NX_PROTOCOLS", "tcp", 1);
  setenv("NX_PROGRESS", "poll", 1);
  setenv("NX_TCP_HANDSHAKE_MS", "50", 1);
  /* The payload is allocated when its header arrives: without a bound a
   * header alone reserves up to this machine's memory (NX_FRAME_MAX). */
  setenv("NX_FRAME_MAX", "1m", 1);
  if (nx_init(NULL, NULL) != 0)
    abort();
  return 0;
}

/* Polls the module until `fd` has `n` bytes to read into `out` (or it was
 * closed, or a bound on rounds). Returns 1 when all came. */
static int read_polling(int fd, uint8_t *out, size_t n) {
  size_t got = 0;
  for (int round = 0; round < 2000 && got < n; round++) {
    nx_poll();
    ssize_t r = recv(fd, out + got, n - got, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
      return 0;
    if (r > 0)
      got += (size_t)r;
  }
  return got == n;
}

/* A valid version-2 handshake as a client with a new identity. */
static int handshake(int fd) {
  uint8_t h[6 + 16 + NXU_NONCE_SIZE], ch[6 + 16 + NXU_NONCE_SIZE + 32], ids[32],
      proof[32], answer[24];
  memcpy(h, "NXT1", 4);
  h[4] = 2;
  h[5] = 0;
  conns++;
  memset(h + 6, 0xab, 16);
  memcpy(h + 6, &conns, sizeof(conns));
  memset(h + 22, 0x5a, NXU_NONCE_SIZE);
  if (send(fd, h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h) ||
      !read_polling(fd, ch, sizeof(ch)))
    return 0;
  memcpy(ids, h + 6, 16);
  memcpy(ids + 16, ch + 6, 16);
  if (nxu_auth_mac(key, 16, "client", h + 22, ch + 22, ids, 32, proof) != 0 ||
      send(fd, proof, sizeof(proof), MSG_NOSIGNAL) != (ssize_t)sizeof(proof))
    return 0;
  return read_polling(fd, answer, sizeof(answer)) && answer[6] == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 65536)
    return 0;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons(port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd < 0)
    abort();
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
    abort(); /* the module stopped listening */
  int ok = (data[0] & 1) ? handshake(fd) : 1;
  if (ok && size > 1)
    (void)send(fd, data + 1, size - 1, MSG_NOSIGNAL);
  shutdown(fd, SHUT_WR);
  /* Until the module closed its end (it reads to our EOF, or refuses). */
  char c;
  for (int round = 0; round < 5000; round++) {
    nx_poll();
    ssize_t r = recv(fd, &c, 1, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
      break;
  }
  close(fd);
  for (int i = 0; i < 4; i++)
    nx_poll();
  return 0;
}
