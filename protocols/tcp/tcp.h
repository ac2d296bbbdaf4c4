/* The tcp protocol module's shared types: its state, peers, connections,
 * addresses and the hooks between its files. Each source file's functions
 * are in its own header (tcp_conn.h, tcp_addr.h); tcp.c, the ops table,
 * has none. */
#ifndef NX_PROTO_TCP_H
#define NX_PROTO_TCP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "nexus/protocol.h"
#include "nxu_auth.h"
#include "nxu_lock.h"
#include "nxu_uuid.h"

/* The files:
 *   tcp.c       the ops table, peers (one per remote process) and the send
 *               path, which any thread may take;
 *   tcp_conn.c  connections: connect, accept, handshake, reading frames,
 *               closing; driver only;
 *   tcp_addr.c  status conversion and addresses: NX_TCP_LISTEN, the
 *               listening sockets and the descriptor encoding.
 * Calls go one way, tcp.c -> tcp_conn.c -> tcp_addr.c (and tcp.c to
 * tcp_addr.c); the lower files reach the higher ones only through the
 * hooks in struct tcp.
 * "Driver only" means: called from progress() (or init/finalize), which the
 * core runs on one thread at a time. Only driver-only code touches the
 * module's epoll set. */

#define TCP_NAME "tcp"
#define TCP_COST 40
#define TCP_WIRE_VERSION 2 /* 2: the key no longer crosses the wire */

/* Descriptor data (docs/tcp.md): u8 version, u8 flags, 16-byte process
 * uuid, u8 count, then per address u8 family (4 or 6), u16 port (network
 * order), 4 or 16 address bytes (network order). */
#define TCP_DESC_VERSION 1
#define TCP_DESC_HEAD 19
#define TCP_MAX_ADDRS 16
#define TCP_UUID_SIZE 16

/* Handshake (docs/tcp.md), version 2: both sides prove they hold the
 * computation's key with an HMAC over both sides' fresh nonces
 * (nxu_auth.h); the key itself never crosses the wire.
 *   client hello:     "NXT1", u16 version (LE), client uuid, client nonce
 *   server challenge: "NXT1", u16 version, server uuid, server nonce,
 *                     server proof
 *   client proof:     client proof
 *   server answer:    "NXT1", u16 version, u16 status, server uuid
 * A proof is nxu_auth_mac(key, role, client nonce, server nonce, client
 * uuid | server uuid). Version 1 sent the key in the hello; such a peer is
 * refused with a version-1 answer GONE and a log line naming both
 * versions. */
#define TCP_MAGIC "NXT1"
#define TCP_HS_VERSION 2
#define TCP_HELLO_SIZE (4 + 2 + TCP_UUID_SIZE + NXU_NONCE_SIZE)
#define TCP_CHALLENGE_SIZE                                                     \
  (4 + 2 + TCP_UUID_SIZE + NXU_NONCE_SIZE + NXU_MAC_SIZE)
#define TCP_PROOF_SIZE NXU_MAC_SIZE
#define TCP_ANSWER_SIZE (4 + 2 + 2 + TCP_UUID_SIZE)
/* The first bytes of any version's hello: magic and version. */
#define TCP_HS_HEAD 6
enum tcp_answer {
  TCP_ANSWER_ACCEPT = 0, /* this connection carries the pair's frames */
  TCP_ANSWER_RETRY = 1,  /* refused: the connection I opened wins */
  TCP_ANSWER_GONE = 2    /* refused: you count as dead here, or as
                            already connected */
};

/* Accepted connections still in their handshake; more are closed at once. */
#define TCP_MAX_HANDSHAKING 128
/* Bytes read ahead of the current header or payload in one readv. */
#define TCP_STAGE_SIZE 65536
/* At most this many readv calls per connection per progress call. */
#define TCP_READ_ROUNDS 16
/* Frames one progress call delivers at most: about what the core
 * dispatches per round, so a peer that floods small frames fills its own
 * socket buffers, not our memory. */
#define TCP_DELIVER_MAX 64
/* Events one epoll_wait of progress takes at most. */
#define TCP_EVENTS_MAX 64
/* The hot connection (tcp.c, progress_round): read without epoll for at
 * most TCP_HOT_MAX - 1 rounds in a row, dropped after TCP_HOT_IDLE reads
 * that found nothing. */
#define TCP_HOT_MAX 8
#define TCP_HOT_IDLE 64
/* How long finalize keeps flushing queued frames. */
#define TCP_LINGER_MS 2000u

/* One address: family AF_INET or AF_INET6, port in host order, the address
 * bytes in network order (4 or 16 used). */
struct tcp_addr {
  int family;
  uint16_t port;
  uint8_t bytes[16];
};

/* A peer's descriptor, decoded and filtered to the addresses this process
 * can use, in the order to try them. */
struct tcp_desc {
  uint8_t uuid[TCP_UUID_SIZE];
  int naddr;
  struct tcp_addr addr[TCP_MAX_ADDRS];
};

struct tcp;

/* What an entry of the module's epoll set points at (epoll_event.data.ptr):
 * the first member of a listener and of a connection; the timer's entry
 * points at the tcp's own. */
enum tcp_src_kind { TCP_SRC_LISTENER, TCP_SRC_CONN, TCP_SRC_TIMER };
struct tcp_src {
  int kind;
};

struct tcp_listener {
  struct tcp_src src; /* first: TCP_SRC_LISTENER */
  int fd;
  int wildcard; /* bound to 0.0.0.0 or :: */
  struct tcp_addr addr;
  struct tcp *t;
};

/* Another process: the endpoint connect() returns, shared by every
 * destination in that process, and created too by an accepted connection.
 * Reference counted: one per connect(), per connection that points at it,
 * and while it waits for the driver's attention. */
struct tcp_peer {
  struct nx_endpoint base; /* first: its uuid, under tcp.peers_lock */
  nxu_lock_t lock;
  atomic_uint refs;

  /* Under `lock`: the send side. `fd` is the open connection's socket, or
   * -1; senders write to it directly when nothing is queued. */
  int fd;
  int dead;
  int error;                 /* errno a sender met writing, for the log */
  nx_frame_t *qhead, *qtail; /* module_data[0]: next; [1]: bytes sent */
  size_t qbytes;             /* unsent bytes in the queue */
  int naddr;
  struct tcp_addr addr[TCP_MAX_ADDRS];

  /* Waiting for the driver: set by whoever pushes it on tcp.attn_head. */
  atomic_int attn;
  struct tcp_peer *attn_next;
  atomic_int reported; /* peer_failed was called */

  /* Driver only. */
  struct tcp_conn *conn; /* the open connection (fd above is its socket) */
  struct tcp_conn *out;  /* our connection attempt, not yet answered */
};

enum tcp_conn_state {
  CONN_CONNECTING, /* client: TCP connect in progress */
  CONN_HELLO_SENT, /* client: waiting for the answer */
  CONN_WAIT_HELLO, /* server: waiting for the client's hello */
  CONN_WAIT_PEER,  /* client, refused: waiting for the peer to connect to us
                     (no socket; only the deadline runs) */
  CONN_OPEN,       /* carries frames */
  CONN_CLOSING     /* socket closed; freed at the end of progress */
};

/* One TCP connection (or, in CONN_WAIT_PEER, a placeholder for one). */
struct tcp_conn {
  struct tcp_src src; /* first: TCP_SRC_CONN */
  struct tcp *t;
  int fd; /* in the module's epoll set while >= 0 */
  int state;
  int next_addr;         /* client: index of the next address to try */
  struct tcp_peer *peer; /* holds a reference; NULL before the hello */
  uint32_t events;       /* EPOLLIN / EPOLLOUT asked for */
  uint64_t deadline;     /* nxu_now_ms() when the handshake times out; 0:
                            none (open, closing) */

  uint8_t hs_in[TCP_CHALLENGE_SIZE]; /* handshake bytes read so far */
  size_t hs_in_len;
  uint8_t hs_out[TCP_HELLO_SIZE]; /* client: hello bytes still to write */
  size_t hs_out_len, hs_out_off;
  /* The handshake's second half: server, hello in and challenge sent,
   * waiting for the proof; client, proof sent, waiting for the answer. */
  int hs_proved;
  uint8_t nonce_c[NXU_NONCE_SIZE], nonce_s[NXU_NONCE_SIZE];
  uint8_t ids[2 * TCP_UUID_SIZE]; /* client uuid, server uuid */

  uint8_t hdr[NX_FRAME_HDR_SIZE]; /* the frame header being read */
  size_t hdr_len;
  nx_frame_t *rx; /* the frame whose payload is being read */
  size_t rx_off;
  int rx_lead; /* rx's iov[1] is its lead: the tail's place comes next */
  /* Read-ahead left over when the delivery budget ran out; consumed before
   * the socket is read again. */
  uint8_t *left;
  size_t left_len, left_off;

  struct tcp_conn *prev, *next; /* tcp.conns */
};

/* The module's state, one per nx_init. */
struct tcp {
  const struct nx_core_api *core;
  /* The core's batch while tcp_progress runs, else NULL (frame_deliver):
   * where a frame read in full goes (tcp_conn.c). */
  nx_frame_batch_t *batch;
  /* The module's epoll set (what wait_fd returns): every listening socket
   * and connection socket, and `timer_fd`, a timerfd armed for the
   * earliest handshake deadline (`timer_at`, ms; 0: not armed). */
  int epfd;
  struct tcp_src timer_src;
  int timer_fd;
  uint64_t timer_at;
  int ipv4_ok, ipv6_ok;
  size_t queue_max;
  unsigned handshake_ms;

  int nlisten;
  struct tcp_listener listen[TCP_MAX_ADDRS];
  int nadvert; /* the addresses in our descriptor */
  struct tcp_addr advert[TCP_MAX_ADDRS];

  pthread_mutex_t peers_lock;
  struct nxu_uuid_table peers;
  /* Peers that need the driver (a stack; each entry holds a reference). */
  struct tcp_peer *_Atomic attn_head;

  /* Driver only. */
  struct tcp_conn *conns;
  int handshaking;      /* accepted connections before their hello */
  int events;           /* work done in the current progress call */
  int finalizing;       /* in finalize: no more deliveries or reports */
  int budget;           /* frames this progress call may still deliver */
  int nleft;            /* connections holding read-ahead */
  int nclosed;          /* connections in CONN_CLOSING, to free */
  uint8_t *stage;       /* TCP_STAGE_SIZE bytes of read-ahead */
  struct tcp_conn *hot; /* the connection that delivered last (driver) */
  int hot_streak, hot_idle;
  char version[64];

  /* Hooks tcp_init installs: how the files below tcp.c reach what is
   * above them, so that the files form no circle (tcp.c -> tcp_conn.c ->
   * tcp_addr.c). tcp_conn.c reaches the peers (tcp.c) through the peer_
   * ones; the listening sockets of tcp_addr.c need none (tcp.c's
   * progress hands their events to tcp_conn_accept). Each peer_ hook is
   * documented at its implementation, tcp_peer_<name> in tcp.c. */
  struct tcp_peer *(*peer_get)(struct tcp *t, const uint8_t *uuid);
  void (*peer_release)(struct tcp *t, struct tcp_peer *p);
  void (*peer_open)(struct tcp *t, struct tcp_peer *p, struct tcp_conn *c);
  void (*peer_flush)(struct tcp *t, struct tcp_peer *p);
  void (*peer_fail)(struct tcp *t, struct tcp_peer *p, const char *why);
};

#define TCP_LOG(t, level, ...) (t)->core->log((level), TCP_NAME, __VA_ARGS__)

#endif /* NX_PROTO_TCP_H */
