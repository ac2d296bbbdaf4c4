/* Descriptor lists: the interned, reference-counted protocol descriptors a gp
 * carries, and the route each one resolves to. */
#ifndef NXI_DLIST_H
#define NXI_DLIST_H

#include "modules/module.h"

/* The name of a gateway's descriptors: with no data, "this process
 * forwards"; with data (u32 LE process id, then that gateway's own list),
 * "reach this process through that gateway". No module may be named so. */
#define NXI_GW_NAME "gw"

/* The most one descriptor takes in a list's encoding. */
#define NXI_DESC_MAX_LEN                                                       \
  (1 + NX_PROTO_NAME_MAX + 2 + 1 + NX_DESC_SCOPE_MAX + 2 + NX_DESC_DATA_MAX)

/* Generations a frame header has room for (ledger.h). */
#define NXI_ROUTE_GEN_MAX 7u

struct nxi_route {
  struct nxi_module *mod;  /* NULL for a route through a gateway */
  struct nx_endpoint *ep;  /* NULL for a route through a gateway */
  struct nxi_dlist *via;   /* the gateway's list (a reference), or NULL */
  struct nxi_route *older; /* routes this one replaced (freed with the list) */
  int didx;                /* the descriptor it came from */
  int alts;                /* candidates left to fall back to */
  unsigned gen;            /* routes of its list that failed before it (0-7):
                            * its frames carry it (ledger.h) */
  unsigned epoch;          /* candidates changed this often before it was
                            * chosen (dlist.c, route_epoch) */
  atomic_int failed;       /* the NX_E* code the endpoint failed with, or 0 */
};

struct nxi_dlist {
  atomic_uint refs;
  uint64_t hash;
  struct nxi_dlist *next; /* intern chain */
  size_t len;
  uint8_t *blob; /* the wire encoding */
  /* Descriptors: those of `blob`, then those its process gained after it
   * was interned (nxi_dlist_gain: a module that joined late), which
   * `blob` does not carry. The count grows after the entry is written. */
  _Atomic int n;
  struct nx_desc desc[NXI_MAX_MODULES];
  char names[NXI_MAX_MODULES][NX_PROTO_NAME_MAX + 1];
  uint8_t *gained; /* the gained descriptors' bytes (a chain of blocks) */
  struct nxi_route *_Atomic route; /* cached protocol choice */
  _Atomic uint32_t proc;           /* process id part of its context ids */
  atomic_int failed;               /* its process is gone: the NX_E* why */
  atomic_uint broken;              /* descriptors whose route failed */
  atomic_uint gen_next;            /* the generation of its next route */
};

/* Interns the encoding `blob` (checked first: NX_EPROTO, NX_ERANGE) and
 * returns a reference. */
int nxi_dlist_intern(const uint8_t *blob, size_t len, struct nxi_dlist **out);
/* The same for a list of the process `proc`: records whose it is, so its
 * death fails the list. */
int nxi_dlist_intern_proc(const uint8_t *blob, size_t len, uint32_t proc,
                          struct nxi_dlist **out);
void nxi_dlist_retain(struct nxi_dlist *dl);
void nxi_dlist_release(struct nxi_dlist *dl);
/* The length of the encoding at `p`, checked against `avail`. */
int nxi_dlist_parse_len(const uint8_t *p, size_t avail, size_t *len);
/* Builds and interns this process's list: one descriptor per loaded
 * module, in order of preference. */
int nxi_dlist_self(uint32_t proc, struct nxi_dlist **out);
/* The protocol route to a destination: resolved at the first use, replaced
 * by the next candidate when it failed (and the destination was not found
 * dead). Returns 0, or the code the destination is unreachable with. */
int nxi_dlist_route(struct nxi_dlist *dl, struct nxi_route **out);
/* The route's send failed with `status` (not a full queue): marks it
 * failed so that the next nxi_dlist_route falls back. Returns 1 if it may
 * (the status is not the program's fault), 0 if not. */
int nxi_route_fail(struct nxi_route *rt, int status);
/* A gp to process `proc`'s initial context (index 1, where the runtime's
 * own handlers are registered), over `dl` (not a reference of its own). */
static inline nx_gp_t nxi_initial_gp(uint32_t proc, struct nxi_dlist *dl) {
  return (nx_gp_t){nxi_ctxid(proc, 1), 0, dl};
}

/* The gateway descriptor of `dl` with no data: its process forwards. */
int nxi_dlist_is_gateway(const struct nxi_dlist *dl);
/* This process's list gains a descriptor `name` with `data`: gps made
 * from now on carry it (older lists are kept until nxi_dlist_finalize). */
int nxi_dlist_self_add(const char *name, const uint8_t *data, size_t len);
/* The same for a loaded module's own descriptor (one that joined late). */
int nxi_dlist_self_add_module(const struct nxi_module *m);
/* Process `proc` says its list is now `blob` (a module of it joined
 * late): every interned list of that process gains the descriptors of
 * `blob` it lacks, as candidates (NX_EPROTO, NX_ERANGE: a bad list). */
int nxi_dlist_gain(uint32_t proc, const uint8_t *blob, size_t len);
/* Routes are chosen again where a better candidate has appeared since
 * (a module that joined here, or descriptors a list gained): of the
 * lists of process `proc`, or of every list when `proc` is 0. The new
 * route takes the next generation; the old one is not failed (what was
 * sent on it still arrives, and is counted in its own generation).
 * Returns how many routes it replaced. */
int nxi_dlist_upgrade(uint32_t proc);
/* The modules are about to go: forgets every cached route and the
 * earlier lists of this process. */
void nxi_dlist_finalize(void);

/* A module reported its endpoint `ep` dead: every route through it fails
 * from now on, and the program hears of each process it loses. Only the
 * first report of an endpoint counts (its `failed` word). */
void nxi_dlist_peer_failed(struct nx_endpoint *ep, int status);
/* Falls back now on the routes that failed with candidates left (called by
 * the driver when nxi_dlist_fallbacks_due). Returns how many it tried. */
int nxi_dlist_fallbacks(void);
extern atomic_int nxi_dlist_fallback_due;
/* One relaxed load: the driver asks every poll round. */
static inline int nxi_dlist_fallbacks_due(void) {
  return atomic_load_explicit(&nxi_dlist_fallback_due, memory_order_relaxed);
}
/* A list of process `proc`'s that is alive (a reference), or NULL: the
 * ledger's way back to a process that sent here but never asked. */
struct nxi_dlist *nxi_dlist_of_proc(uint32_t proc);
/* Process `proc` ended (or was destroyed): RSRs to it fail with `status`. */
void nxi_dlist_proc_failed(uint32_t proc, int status);
/* The route layer's stages (docs/design.md, "Stages"), registered by
 * reliability (services/confirm.c) at nx_init; NULL entries (or no table)
 * do nothing.
 *  - lost: once per process found lost, before the program hears of it:
 *    the RSRs reliability held for it are reported.
 *  - rerouted: a route to process `proc` failed with `status` and another
 *    replaced it: the RSRs sent on the failed one (generation `gen`) may
 *    be lost with it, and reliability finds out which.
 *  - known: a list of process `proc` is interned (nxi_dlist_intern_proc):
 *    reliability keeps one as its way back to a process that sent here. */
struct nxi_route_stages {
  void (*lost)(uint32_t proc, int status);
  void (*rerouted)(uint32_t proc, unsigned gen, int status);
  void (*known)(uint32_t proc, struct nxi_dlist *dl);
};
void nxi_route_stages_set(const struct nxi_route_stages *s);

#endif /* NXI_DLIST_H */
