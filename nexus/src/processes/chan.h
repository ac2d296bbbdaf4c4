/* A control channel of either kind: a socket (fork/exec children, nxrun;
 * a TCP stream for children started through PMIx) or a module's launcher
 * channel (MPI_Comm_spawn children). */
#ifndef NXI_CHAN_H
#define NXI_CHAN_H

#include "processes/ctl.h"
#include "modules/module.h"

struct nxi_chan {
  int fd;                 /* >= 0: a socket */
  int stream;             /* ... a stream socket (ctl.h: NX_CTL_TCP) */
  struct nxi_module *mod; /* else the module's channel `ctl` */
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

/* For a listener on the process layer's loop (attach's, a PMIx child's
 * port back): the next connection waiting on the non-blocking listening
 * socket `fd`, non-blocking and close-on-exec; or -1 when none waits now,
 * with *rest set when accept4 ran out of descriptors or memory (the socket
 * stays readable: the caller rests a while, or its loop would spin). */
int nxi_chan_accept(int fd, int *rest);

/* This process's initial context as a peer entry (ctl.h); 0 if it does not
 * fit in `cap`. */
size_t nxi_chan_self_entry(uint8_t *p, size_t cap);
/* A gp from a peer entry: interns its descriptor list. */
int nxi_chan_peer_gp(const struct nxi_ctl_peer *p, nx_gp_t *gp);

#endif /* NXI_CHAN_H */
