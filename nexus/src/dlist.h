/* Descriptor lists: the interned, reference-counted protocol descriptors a gp
 * carries, and the route each one resolves to. */
#ifndef NXI_DLIST_H
#define NXI_DLIST_H

#include "module.h"

struct nxi_route {
  struct nxi_module *mod;
  void *ep;
  atomic_int failed; /* the NX_E* code the endpoint died with, or 0 */
};

struct nxi_dlist {
  atomic_uint refs;
  uint64_t hash;
  struct nxi_dlist *next; /* intern chain */
  size_t len;
  uint8_t *blob; /* the wire encoding */
  int n;
  struct nx_desc desc[NXI_MAX_MODULES];
  char names[NXI_MAX_MODULES][NX_PROTO_NAME_MAX + 1];
  struct nxi_route *_Atomic route; /* cached protocol choice */
  _Atomic uint32_t proc;           /* process id part of its context ids */
  atomic_int failed;               /* its process is gone: the NX_E* why */
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
/* The protocol route to a destination; resolved once per list. */
int nxi_dlist_route(struct nxi_dlist *dl, struct nxi_route **out);
/* The modules are about to go: forgets every cached route. */
void nxi_dlist_finalize(void);

/* A module reported its endpoint `ep` dead: every route through it fails
 * from now on, and the program hears of each process it loses. */
void nxi_dlist_peer_failed(void *state, void *ep, int status);
/* Process `proc` ended (or was destroyed): RSRs to it fail with `status`. */
void nxi_dlist_proc_failed(uint32_t proc, int status);

#endif /* NXI_DLIST_H */
