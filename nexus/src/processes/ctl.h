/* The control channel between a launcher (nxrun, or a process calling
 * nx_context_create) and a process context it started: its messages and their
 * encoding, shared by the core and nxrun. */
#ifndef NXI_CTL_H
#define NXI_CTL_H

#include <stddef.h>
#include <stdint.h>

/* For a child started with fork/exec: one AF_UNIX SOCK_SEQPACKET socket
 * pair, the child finding its end in NX_CTL_FD. For a child started
 * through PMIx (PMIx_Spawn): a TCP connection the child makes back to its
 * creator, named in NX_CTL_TCP, messages framed by their length. For a
 * child a module started (the mpi module's MPI_Comm_spawn): the module's
 * channel (chan.h hides which). Messages (integers little-endian):
 *   READY     1, one peer entry (this process's initial context)
 *   PEERS     2, u32 rank (UINT32_MAX: not among them), u32 count,
 *             count peer entries
 *   DESTROY   3
 *   (4 is not used: a failed exec was told on the channel before
 *   parent.c started children with posix_spawn, which returns it)
 *   PEER_DEAD 5, u64 context        (a peer process ended)
 *   JOIN      6, one peer entry     (child, after READY: a module joined
 *                                    late; the entry's list is its list now)
 * A peer entry: u64 context, u64 address, u32 len, descriptor list.
 * JOIN goes only to a creator that set NX_CTL_LATE=1 in the child's
 * environment (parent.c); nxrun does not, and its children load every
 * module before READY. */
enum {
  NXI_CTL_READY = 1,
  NXI_CTL_PEERS = 2,
  NXI_CTL_DESTROY = 3,
  NXI_CTL_PEER_DEAD = 5,
  NXI_CTL_JOIN = 6
};

#define NXI_CTL_MAX (256 * 1024)
#define NXI_CTL_ENTRY_HEAD 20 /* a peer entry's bytes before its list */
#define NXI_CTL_PEERS_HEAD 9  /* a PEERS message's bytes before its entries */
#define NXI_CTL_PEER_DEAD_LEN 9
/* DESTROY: the type, the creator's process id (u32 LE) and how many of the
 * child's RSRs it handled (u64 LE per route generation, ledger.h). */
#define NXI_CTL_DESTROY_LEN (5 + 8 * 8)

/* One peer entry, pointing into the message. */
struct nxi_ctl_peer {
  uint64_t context;
  uint64_t address;
  uint32_t len;
  const uint8_t *blob;
};

/* Sends one message on a socket; returns 0 or a negative code. */
int nxi_ctl_send(int fd, const void *msg, size_t len);
/* Receives one message into buf (NXI_CTL_MAX bytes); returns its length,
 * 0 at end of file, or a negative code. Waits at most timeout_ms (-1:
 * forever). */
long nxi_ctl_recv(int fd, uint8_t *buf, int timeout_ms);
/* The same on a stream socket (a TCP channel to a process started through
 * PMIx, which may run on another host): each message is a u32 length and
 * its bytes, received into `buf` of `cap` bytes. A length above
 * NXI_CTL_MAX or `cap` is NX_EPROTO. Once a message has
 * begun, its rest is waited for at most timeout_ms more (10 s when
 * timeout_ms is -1). */
int nxi_ctl_send_stream(int fd, const void *msg, size_t len);
long nxi_ctl_recv_stream(int fd, uint8_t *buf, size_t cap, int timeout_ms);
/* What a stream socket has of its next message, without waiting (for a
 * caller whose loop says when it is readable): its bytes go to `rx`
 * (4 + NXI_CTL_MAX bytes: the length, then the message), *have counting
 * them, and nothing past that message is read. Returns the message's
 * length once it is whole (at rx + 4; *have back to 0), NX_EAGAIN while
 * it is not, 0 when the peer closed before it began, NX_EPROTO for a
 * length of 0 or above NXI_CTL_MAX or a message cut short, NX_EIO. */
long nxi_ctl_recv_stream_part(int fd, uint8_t *rx, size_t *have);

/* Writes a peer entry at `p`; returns its length, 0 if it does not fit in
 * `cap`. */
size_t nxi_ctl_put_peer(uint8_t *p, size_t cap, uint64_t context,
                        uint64_t address, const uint8_t *blob, size_t len);
/* Parses the peer entry at *off and advances *off (NX_EPROTO). */
int nxi_ctl_parse_peer(const uint8_t *msg, size_t len, size_t *off,
                       struct nxi_ctl_peer *out);
/* Parses a READY message. */
int nxi_ctl_parse_ready(const uint8_t *msg, size_t len,
                        struct nxi_ctl_peer *out);
/* Parses a JOIN message. */
int nxi_ctl_parse_join(const uint8_t *msg, size_t len,
                       struct nxi_ctl_peer *out);
/* Writes a PEERS message's head; its entries follow at
 * NXI_CTL_PEERS_HEAD. */
void nxi_ctl_put_peers_head(uint8_t *buf, uint32_t rank, uint32_t count);
/* Parses a PEERS message's head; entries start at NXI_CTL_PEERS_HEAD. */
int nxi_ctl_parse_peers_head(const uint8_t *msg, size_t len, uint32_t *rank,
                             uint32_t *count);
/* Writes a PEER_DEAD message (NXI_CTL_PEER_DEAD_LEN bytes). */
void nxi_ctl_put_peer_dead(uint8_t *buf, uint64_t context);
int nxi_ctl_parse_peer_dead(const uint8_t *msg, size_t len, uint64_t *context);

#endif /* NXI_CTL_H */
