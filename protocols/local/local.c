/* The local protocol module: RSRs between contexts of the same process, handed
 * over without copying. */
#include <string.h>

#include "nexus/protocol.h"

/* The scope of a local descriptor is the process's identity: only this
 * process can reach it. There is one endpoint, the process itself. */

struct local {
  struct nx_endpoint self; /* the one endpoint: this process */
  const struct nx_core_api *core;
};

static struct local the_local;

static int local_init(const struct nx_core_api *core, void **state, char *why,
                      size_t why_len) {
  (void)why;
  (void)why_len;
  the_local.core = core;
  nx_endpoint_init(&the_local.self, core->process_uuid);
  *state = &the_local;
  return 0;
}

static void local_finalize(void *state) { (void)state; }

static int local_descriptor(void *state, struct nx_desc_buf *out) {
  struct local *l = state;
  out->scope_len = 16;
  memcpy(out->scope, l->core->process_uuid, 16);
  out->data_len = 0;
  return 0;
}

static int local_reachable(void *state, const struct nx_desc *peer) {
  struct local *l = state;
  if (peer->scope_len != 16 ||
      memcmp(peer->scope, l->core->process_uuid, 16) != 0)
    return NX_EUNREACH;
  return 0;
}

static int local_connect(void *state, const struct nx_desc *peer,
                         struct nx_endpoint **ep) {
  struct local *l = state;
  (void)peer;
  *ep = &l->self;
  return 0;
}

static void local_disconnect(void *state, struct nx_endpoint *ep) {
  (void)state;
  (void)ep;
}

static int local_send(void *state, struct nx_endpoint *ep, nx_frame_t *frame,
                      unsigned flags) {
  (void)ep;
  (void)flags;
  struct local *l = state;
  l->core->handover(frame);
  return 0;
}

static const char *local_backend_version(void *state) {
  (void)state;
  return "in-process hand-over";
}

NX_PROTOCOL_EXPORT const struct nx_protocol_ops nx_protocol_local = {
    .abi_version = NX_PROTOCOL_ABI_VERSION,
    .name = "local",
    .wire_version = 1,
    .cost = 0,
    .init = local_init,
    .finalize = local_finalize,
    .descriptor = local_descriptor,
    .reachable = local_reachable,
    .connect = local_connect,
    .disconnect = local_disconnect,
    .send = local_send,
    .progress = NULL, /* nothing to poll: sends hand over at once */
    .wait_fd = NULL,
    .backend_version = local_backend_version,
    .in_process = 1,
};
