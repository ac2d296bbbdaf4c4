/* Control channels of either kind (chan.h), and this process's own entry in
 * their messages. */
#include "processes/chan.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "contexts/context.h"
#include "modules/dlist.h"

int nxi_chan_accept(int fd, int *rest) {
  *rest = 0;
  for (;;) {
    int c = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c >= 0)
      return c;
    if (errno == EINTR || errno == ECONNABORTED)
      continue;
    *rest = errno != EAGAIN && errno != EWOULDBLOCK;
    return -1;
  }
}

int nxi_chan_send(struct nxi_chan *ch, const void *msg, size_t len) {
  if (ch->fd >= 0)
    return ch->stream ? nxi_ctl_send_stream(ch->fd, msg, len)
                      : nxi_ctl_send(ch->fd, msg, len);
  return ch->mod->launch->ctl_send(ch->mod->state, ch->ctl, msg, len);
}

long nxi_chan_recv(struct nxi_chan *ch, uint8_t *buf, int timeout_ms) {
  if (ch->fd >= 0)
    return ch->stream
               ? nxi_ctl_recv_stream(ch->fd, buf, NXI_CTL_MAX, timeout_ms)
               : nxi_ctl_recv(ch->fd, buf, timeout_ms);
  return ch->mod->launch->ctl_recv(ch->mod->state, ch->ctl, buf, NXI_CTL_MAX,
                                   timeout_ms);
}

/* A module's channel has nothing to shut down: its waits are sliced and the
 * waiter checks its own stop flag. */
void nxi_chan_shutdown(struct nxi_chan *ch) {
  if (ch->fd >= 0)
    shutdown(ch->fd, SHUT_RDWR);
}

void nxi_chan_close(struct nxi_chan *ch, unsigned flags) {
  if (ch->fd >= 0)
    close(ch->fd);
  else if (ch->mod != NULL)
    ch->mod->launch->ctl_close(ch->mod->state, ch->ctl, flags);
  ch->fd = -1;
  ch->stream = 0;
  ch->mod = NULL;
  ch->ctl = NULL;
}

size_t nxi_chan_self_entry(uint8_t *p, size_t cap) {
  nx_context_t *ctx = nxi_rt.initial;
  struct nxi_dlist *self = atomic_load(&nxi_rt.self_dl); /* read once */
  return nxi_ctl_put_peer(p, cap, ctx->id, (uint64_t)(uintptr_t)ctx->data,
                          self->blob, self->len);
}

int nxi_chan_peer_gp(const struct nxi_ctl_peer *p, nx_gp_t *gp) {
  struct nxi_dlist *dl;
  int r =
      nxi_dlist_intern_proc(p->blob, p->len, nxi_ctxid_proc(p->context), &dl);
  if (r < 0)
    return r;
  gp->context = p->context;
  gp->address = p->address;
  gp->protos = dl;
  return 0;
}
