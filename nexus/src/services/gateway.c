/* Gateways: a process that loads modules its peers do not share passes RSRs
 * between them (docs/design.md, "Gateways").
 *
 * A gateway (nx_gateway_enable, or NX_GATEWAY=1) marks its descriptor list
 * with an empty "gw" descriptor and keeps a table of its members. A member
 * (nx_gateway_use) registers with it, waits for the answer, and then adds
 * "gw" with the gateway's process id and list to its own list: a sender
 * that reaches none of the member's modules sends through the gateway
 * (dlist.c), and the gateway passes the frame on over its own route to the
 * member, untouched, without running a handler. When it cannot, it drops
 * the frame and tells the sender (named in the header's origin field) that
 * the destination is lost. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "buffers/buf.h"
#include "modules/dlist.h"
#include "engine/engine.h"
#include "rsr/fiber.h"
#include "buffers/frame.h"
#include "rsr/stages.h"
#include "services/gateway.h"
#include "services/ledger.h"
#include "rsr/send.h"
#include "base/trace.h"
#include "modules/module.h"

#define JOIN "nx.gw.join"     /* member -> gateway: u32 seq, gp to reply to */
#define JOINED "nx.gw.joined" /* gateway -> member: u32 seq, i32 status */
#define LOST "nx.gw.lost"     /* gateway -> sender: u32 process, i32 status */
#define JOIN_TIMEOUT_S 10

struct member {
  uint32_t proc;
  struct nxi_dlist *dl; /* a reference */
};

/* The member table, used by the driver (forward, on_join). */
static pthread_mutex_t members_lock = PTHREAD_MUTEX_INITIALIZER;
/* The rest: held by nx_gateway_use while it waits for the driver, so the
 * driver never takes it. */
static pthread_mutex_t gw_lock = PTHREAD_MUTEX_INITIALIZER;
static struct member *members; /* this gateway's */
static size_t nmembers, members_cap;
static int forwarding;                 /* this process is a gateway */
static uint32_t used[NXI_MAX_MODULES]; /* gateways this process joined */
static size_t nused;
/* nx_gateway_use waits for the answer on these (waiting drives progress,
 * also with NX_PROGRESS=poll); set once, kept across runs. */
static pthread_once_t join_once = PTHREAD_ONCE_INIT;
static nx_mutex_t join_m;
static nx_cond_t join_c;
static uint32_t join_seq;   /* under gw_lock */
static uint32_t joined_seq; /* under join_m, with joined_status */
static int joined_status;

static void join_sync_init(void) {
  nx_mutex_init(&join_m);
  nx_cond_init(&join_c);
}

/* A reference to the list member `proc` registered, or NULL. */
static struct nxi_dlist *member_get(uint32_t proc) {
  struct nxi_dlist *dl = NULL;
  pthread_mutex_lock(&members_lock);
  for (size_t i = 0; i < nmembers && dl == NULL; i++)
    if (members[i].proc == proc)
      nxi_dlist_retain(dl = members[i].dl);
  pthread_mutex_unlock(&members_lock);
  return dl;
}

static int member_add(uint32_t proc, struct nxi_dlist *dl) {
  pthread_mutex_lock(&members_lock);
  size_t i = 0;
  while (i < nmembers && members[i].proc != proc)
    i++;
  if (i == nmembers && nmembers == members_cap) {
    size_t cap = members_cap ? 2 * members_cap : 16;
    struct member *m = realloc(members, cap * sizeof(*m));
    if (m == NULL) {
      pthread_mutex_unlock(&members_lock);
      return NX_ENOMEM;
    }
    members = m;
    members_cap = cap;
  }
  nxi_dlist_retain(dl);
  if (i == nmembers)
    nmembers++;
  else
    nxi_dlist_release(members[i].dl); /* joined again: its newer list */
  members[i] = (struct member){proc, dl};
  pthread_mutex_unlock(&members_lock);
  return 0;
}

/* Tells `origin` (if it is a member) that `proc` is lost with `status`. */
static void tell_lost(uint32_t origin, uint32_t proc, int status) {
  struct nxi_dlist *dl = origin != 0 ? member_get(origin) : NULL;
  if (dl == NULL)
    return;
  nx_gp_t to = nxi_initial_gp(origin, dl);
  nx_buffer_t *b;
  if (nx_rsr_init_name(&b, &to, LOST, 16) == 0) {
    nx_put_uint32(b, proc);
    nx_put_int32(b, status);
    nx_rsr_send(b);
  }
  nxi_dlist_release(dl);
}

/* The forward stage (rsr/stages.h) for a frame to a context of another process.
 */
static int forward(struct nx_buffer *b) {
  uint32_t proc = nxi_ctxid_proc(b->context);
  struct nxi_dlist *dl = member_get(proc);
  if (dl == NULL)
    return 0; /* not ours to pass on: dropped as for no such context */
  uint32_t origin = nxi_ctxid_proc(b->source);
  uint64_t context = b->context;
  uint32_t handler = b->handler;
  b->dl = dl;
  int ctl = b->hflags & NXI_FRAME_F_CTL;
  /* A payload the receiving module owns (frame_wrap) is copied out: the
   * next module may hold the frame past that module's finalize. */
  if (!ctl && nxi_tracing()) {
    struct nxi_route *rt = atomic_load(&dl->route);
    nxi_trace_event(NXT_HOP, 0, context, handler, nxi_buffer_wire_len(b),
                    rt != NULL && rt->mod != NULL ? nxi_module_index(rt->mod)
                                                  : 0xff,
                    0, 0, b->source);
  }
  int r = nxi_buffer_unwrap(b);
  if (r < 0)
    nxi_buffer_free(b); /* route_send takes the buffer, sent or not */
  else
    r = nxi_route_send(b, 0, 1);
  if (r < 0) {
    if (!ctl) /* the runtime's own messages are not the program's RSRs */
      nxi_drop(r, context, handler);
    tell_lost(origin, proc, r);
  }
  nxi_dlist_release(dl);
  return 1;
}

static void on_join(nx_context_t *ctx, void *address, nx_buffer_t *b) {
  (void)ctx;
  (void)address;
  uint32_t seq;
  nx_gp_t reply;
  if (nx_get_uint32(b, &seq) < 0 || nx_get_gp(b, &reply) < 0)
    return;
  int r = member_add(nxi_ctxid_proc(reply.context), reply.protos);
  nxi_log(1, NXI_GW_NAME, "process %#x joins this gateway: %s",
          (unsigned)nxi_ctxid_proc(reply.context),
          r < 0 ? nx_strerror(r) : "ok");
  nx_buffer_t *out;
  if (nx_rsr_init_name(&out, &reply, JOINED, 16) == 0) {
    nx_put_uint32(out, seq);
    nx_put_int32(out, r);
    nx_rsr_send(out);
  }
  nx_gp_release(&reply);
}

static void on_joined(nx_context_t *ctx, void *address, nx_buffer_t *b) {
  (void)ctx;
  (void)address;
  uint32_t seq;
  int32_t status;
  if (nx_get_uint32(b, &seq) < 0 || nx_get_int32(b, &status) < 0)
    return;
  nx_mutex_lock(&join_m);
  joined_status = status;
  joined_seq = seq;
  nx_cond_broadcast(&join_c);
  nx_mutex_unlock(&join_m);
}

static void on_lost(nx_context_t *ctx, void *address, nx_buffer_t *b) {
  (void)ctx;
  (void)address;
  uint32_t proc;
  int32_t status;
  if (nx_get_uint32(b, &proc) < 0 || nx_get_int32(b, &status) < 0 ||
      status >= 0)
    return;
  nxi_dlist_proc_failed(proc, status);
}

/* The gateway's stage (rsr/stages.h): registered while this process
 * forwards. */
static const struct nxi_gateway_stages gateway_stages = {.forward = forward};

int nx_gateway_enable(void) {
  if (!nxi_ready())
    return NX_ENOTINIT;
  pthread_mutex_lock(&gw_lock);
  int r = 0;
  if (!forwarding) {
    r = nx_handler_register(nxi_rt.initial, JOIN, on_join,
                            NX_HANDLER_NONTHREADED, NULL);
    if (r == 0)
      r = nxi_dlist_self_add(NXI_GW_NAME, NULL, 0);
    if (r == 0) {
      nxi_gateway_stages_set(&gateway_stages);
      forwarding = 1;
      nxi_log(1, NXI_GW_NAME, "this process forwards RSRs for its members");
    }
  }
  pthread_mutex_unlock(&gw_lock);
  return r;
}

int nx_gateway_use(const nx_gp_t *gw) {
  if (gw == NULL || gw->context == 0 || gw->protos == NULL)
    return NX_EINVAL;
  if (!nxi_ready())
    return NX_ENOTINIT;
  uint32_t gproc = nxi_ctxid_proc(gw->context);
  if (gproc == nxi_rt.proc_id)
    return NX_EINVAL;
  if (!nxi_dlist_is_gateway(gw->protos))
    return NX_ENOTSUP; /* its process does not forward */
  if (nxi_in_handler())
    return NX_EBUSY; /* the answer needs the progress this handler holds */
  pthread_mutex_lock(&gw_lock);
  int r = 0;
  for (size_t i = 0; i < nused; i++)
    if (used[i] == gproc)
      goto out; /* joined already */
  if (nused == NXI_MAX_MODULES) {
    r = NX_EBUSY;
    goto out;
  }
  r = nx_handler_register(nxi_rt.initial, JOINED, on_joined,
                          NX_HANDLER_NONTHREADED, NULL);
  if (r == 0)
    r = nx_handler_register(nxi_rt.initial, LOST, on_lost,
                            NX_HANDLER_NONTHREADED, NULL);
  if (r < 0)
    goto out;
  /* Register, and wait for the gateway's answer: once this returns, any gp
   * made here can be used through it. */
  pthread_once(&join_once, join_sync_init);
  uint32_t seq = ++join_seq; /* nx_gateway_use calls are serialized */
  struct nxi_dlist *self = atomic_load(&nxi_rt.self_dl);
  nxi_dlist_retain(self);
  nx_gp_t me = nxi_initial_gp(nxi_rt.proc_id, self);
  nx_gp_t to = nxi_initial_gp(gproc, gw->protos); /* where JOIN is registered */
  nx_buffer_t *b;
  r = nx_rsr_init_name(&b, &to, JOIN, 64 + self->len);
  if (r == 0 && (r = nx_put_uint32(b, seq)) == 0 &&
      (r = nx_put_gp(b, &me)) == 0)
    r = nx_rsr_send(b);
  else if (r == 0)
    nx_buffer_release(b);
  nx_gp_release(&me);
  if (r < 0)
    goto out;
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += JOIN_TIMEOUT_S;
  nx_mutex_lock(&join_m);
  while (joined_seq != seq &&
         (r = nx_cond_timedwait(&join_c, &join_m, &deadline)) == 0)
    ;
  if (joined_seq == seq)
    r = joined_status;
  nx_mutex_unlock(&join_m);
  if (r < 0)
    goto out;
  /* "Reach me through this gateway": its process id, then its list. */
  uint8_t *data = malloc(4 + gw->protos->len);
  if (data == NULL) {
    r = NX_ENOMEM;
    goto out;
  }
  nxu_le32(data, gproc);
  memcpy(data + 4, gw->protos->blob, gw->protos->len);
  r = nxi_dlist_self_add(NXI_GW_NAME, data, 4 + gw->protos->len);
  free(data);
  if (r == 0)
    used[nused++] = gproc;
out:
  pthread_mutex_unlock(&gw_lock);
  return r;
}

void nxi_gateway_finalize(void) {
  nxi_gateway_stages_set(NULL);
  pthread_mutex_lock(&members_lock);
  for (size_t i = 0; i < nmembers; i++)
    nxi_dlist_release(members[i].dl);
  free(members);
  members = NULL;
  nmembers = members_cap = 0;
  pthread_mutex_unlock(&members_lock);
  pthread_mutex_lock(&gw_lock);
  forwarding = 0;
  nused = 0;
  pthread_mutex_unlock(&gw_lock);
}
