/* The control channel between a launcher (nxrun, or a process calling nx_context_create) and a process context it started. */
#ifndef NXI_CTL_H
#define NXI_CTL_H

#include <stddef.h>
#include <stdint.h>

/* For a child started with fork/exec: one AF_UNIX SOCK_SEQPACKET socket
 * pair, the child finding its end in NX_CTL_FD. For a child a module
 * started (the mpi module's MPI_Comm_spawn): the module's channel, the
 * intercommunicator. struct nxi_chan hides which. Messages (integers
 * little-endian):
 *   READY     1, u64 context, u64 address, u32 len, descriptor list
 *   PEERS     2, u32 rank (UINT32_MAX: not among them), u32 count,
 *             count x (u64 context, u64 address, u32 len, descriptor list)
 *   DESTROY   3
 *   EXECFAIL  4, i32 errno          (child, when exec failed)
 *   PEER_DEAD 5, u64 context        (a peer process ended) */
enum {
  NXI_CTL_READY = 1,
  NXI_CTL_PEERS = 2,
  NXI_CTL_DESTROY = 3,
  NXI_CTL_EXECFAIL = 4,
  NXI_CTL_PEER_DEAD = 5
};

#define NXI_CTL_MAX (256 * 1024)

/* One peer in a PEERS message, pointing into the message. */
struct nxi_ctl_peer {
  uint64_t context;
  uint64_t address;
  uint32_t len;
  const uint8_t *blob;
};

struct nxi_module;

/* A control channel: a socket (fd >= 0) or a module's channel (mod, ctl). */
struct nxi_chan {
  int fd;
  struct nxi_module *mod;
  void *ctl;
};

/* The same four operations on either kind. recv returns a message's
 * length, 0 when the peer is gone (or the channel was shut down), or a
 * negative code (NX_ETIMEDOUT after timeout_ms, -1: forever). shutdown
 * makes a recv waiting on another thread return; close ends the channel
 * (NX_CTL_ABANDON: the peer failed, do not wait for it). */
int nxi_chan_send(struct nxi_chan *ch, const void *msg, size_t len);
long nxi_chan_recv(struct nxi_chan *ch, uint8_t *buf, int timeout_ms);
void nxi_chan_shutdown(struct nxi_chan *ch);
void nxi_chan_close(struct nxi_chan *ch, unsigned flags);

/* Sends one message; returns 0 or a negative code. */
int nxi_ctl_send(int fd, const void *msg, size_t len);
/* Receives one message into buf (NXI_CTL_MAX bytes); returns its length,
 * 0 at end of file, or a negative code. Waits at most timeout_ms (-1:
 * forever). */
long nxi_ctl_recv(int fd, uint8_t *buf, int timeout_ms);
/* Writes this process's initial context as one peer entry; returns its
 * length, 0 if it does not fit in cap. */
size_t nxi_ctl_self_entry(uint8_t *p, size_t cap);
/* Builds a READY message for this process into buf; returns its length. */
size_t nxi_ctl_ready_msg(uint8_t *buf, size_t cap);
/* Parses a READY message. */
int nxi_ctl_parse_ready(const uint8_t *msg, size_t len,
                        struct nxi_ctl_peer *out);
/* Parses the peer at *off of a PEERS message and advances *off. */
int nxi_ctl_parse_peer(const uint8_t *msg, size_t len, size_t *off,
                       struct nxi_ctl_peer *out);

#endif /* NXI_CTL_H */
