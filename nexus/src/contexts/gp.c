/* Global pointers: the public gp calls, their place in message buffers, and
 * which protocol one uses. */
#include <stdio.h>
#include <string.h>

#include "buffers/buf.h"
#include "contexts/context.h"
#include "modules/dlist.h"

int nx_gp_make(void *address, nx_gp_t *gp) {
  if (gp == NULL)
    return NX_EINVAL;
  if (!nxi_ready())
    return NX_ENOTINIT;
  nx_context_t *ctx = nx_context_self();
  struct nxi_dlist *self = atomic_load(&nxi_rt.self_dl);
  nxi_dlist_retain(self);
  gp->context = ctx->id;
  gp->address = (uint64_t)(uintptr_t)address;
  gp->protos = self;
  return 0;
}

int nx_gp_copy(const nx_gp_t *src, nx_gp_t *dst) {
  if (src == NULL || dst == NULL)
    return NX_EINVAL;
  if (src->protos != NULL)
    nxi_dlist_retain(src->protos);
  *dst = *src;
  return 0;
}

int nx_gp_release(nx_gp_t *gp) {
  if (gp == NULL)
    return NX_EINVAL;
  if (gp->protos != NULL)
    nxi_dlist_release(gp->protos);
  gp->context = 0;
  gp->address = 0;
  gp->protos = NULL;
  return 0;
}

int nx_gp_equal(const nx_gp_t *a, const nx_gp_t *b) {
  if (a == NULL || b == NULL)
    return 0;
  return a->context == b->context && a->address == b->address;
}

int nx_gp_is_null(const nx_gp_t *gp) { return gp == NULL || gp->context == 0; }

uint64_t nx_gp_context(const nx_gp_t *gp) {
  return gp != NULL ? gp->context : 0;
}

void *nx_gp_address(const nx_gp_t *gp) {
  return gp != NULL ? (void *)(uintptr_t)gp->address : NULL;
}

/* Through a gateway: "via gw (<how this process reaches it>) then <the
 * first module in the gateway's order that the destination also offers>"
 * (the gateway may choose another by cost; it does not say). */
static int via_info(struct nxi_dlist *dl, struct nxi_route *rt, char *buf,
                    size_t len) {
  struct nxi_route *hop;
  int r = nxi_dlist_route(rt->via, &hop);
  if (r < 0)
    return r;
  const char *then = "?";
  for (int i = 0; i < rt->via->n && then[0] == '?'; i++)
    for (int j = 0; j < dl->n; j++)
      if (strcmp(rt->via->names[i], dl->names[j]) == 0 &&
          strcmp(dl->names[j], NXI_GW_NAME) != 0 &&
          strcmp(dl->names[j], "local") != 0) {
        then = dl->names[j];
        break;
      }
  snprintf(buf, len, "via %s (%s) then %s", NXI_GW_NAME,
           hop->via != NULL ? NXI_GW_NAME : hop->mod->name, then);
  return 0;
}

int nx_gp_protocol_info(const nx_gp_t *gp, char *buf, size_t len) {
  if (gp == NULL || buf == NULL || len == 0)
    return NX_EINVAL;
  if (gp->protos == NULL || !nxi_ready())
    return NX_EUNREACH;
  struct nxi_route *rt;
  int r = nxi_dlist_route(gp->protos, &rt);
  if (r < 0)
    return r;
  if (rt->via != NULL)
    return via_info(gp->protos, rt, buf, len);
  if (rt->mod->ops->endpoint_info == NULL) {
    snprintf(buf, len, "%s", rt->mod->name);
    return NX_ENOTSUP;
  }
  return rt->mod->ops->endpoint_info(rt->mod->state, rt->ep, buf, len);
}

const char *nx_gp_protocol(const nx_gp_t *gp) {
  if (gp == NULL || gp->protos == NULL || !nxi_ready())
    return NULL;
  struct nxi_route *rt;
  if (nxi_dlist_route(gp->protos, &rt) < 0)
    return NULL;
  return rt->via != NULL ? NXI_GW_NAME : rt->mod->name;
}

/* Global pointers: tag, context and address in the buffer's byte order,
 * then the descriptor list in its own fixed (little-endian) encoding. */

size_t nx_sizeof_gp(const struct nx_gp *gp) {
  return 1 + 8 + 8 + (gp != NULL && gp->protos != NULL ? gp->protos->len : 1);
}

int nx_put_gp(nx_buffer_t *b, const struct nx_gp *gp) {
  if (!nxi_buffer_writable(b) || gp == NULL)
    return NX_EINVAL;
  size_t dlen = gp->protos != NULL ? gp->protos->len : 1;
  int r = nxi_buffer_reserve(b, 17 + dlen);
  if (r < 0)
    return r;
  uint8_t *p = b->data + b->len;
  p[0] = NXI_TAG_GP;
  nxi_copy_elems(p + 1, (const uint8_t *)&gp->context, 8, 1,
                 nxi_buffer_swapped(b));
  nxi_copy_elems(p + 9, (const uint8_t *)&gp->address, 8, 1,
                 nxi_buffer_swapped(b));
  if (gp->protos != NULL)
    memcpy(p + 17, gp->protos->blob, dlen);
  else
    p[17] = 0; /* a null gp: no descriptors */
  b->len += 17 + dlen;
  return 0;
}

int nx_get_gp(nx_buffer_t *b, struct nx_gp *gp) {
  if (b == NULL || gp == NULL || b->kind == NXI_BUF_SEND)
    return NX_EINVAL;
  size_t left = b->len - b->pos;
  if (left < 1)
    return NX_ERANGE;
  const uint8_t *p = b->data + b->pos;
  if (p[0] != NXI_TAG_GP)
    return NX_ETYPE;
  if (left < 18)
    return NX_ERANGE;
  size_t dlen;
  int r = nxi_dlist_parse_len(p + 17, left - 17, &dlen);
  if (r < 0)
    return r;
  struct nx_gp g;
  nxi_copy_elems((uint8_t *)&g.context, p + 1, 8, 1, nxi_buffer_swapped(b));
  nxi_copy_elems((uint8_t *)&g.address, p + 9, 8, 1, nxi_buffer_swapped(b));
  g.protos = NULL;
  if (p[17] != 0) {
    r = nxi_dlist_intern_proc(p + 17, dlen, nxi_ctxid_proc(g.context),
                              &g.protos);
    if (r < 0)
      return r;
  } else if (g.context != 0) {
    return NX_EPROTO; /* a gp to a context must say how to reach it */
  }
  b->pos += 17 + dlen;
  *gp = g;
  return 0;
}
