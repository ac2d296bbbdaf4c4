/* Zero-copy puts and gets: values an RSR buffer holds by reference until its
 * frame is sent (nx_put_*_ref), the frame's iovecs over them, the copy for a
 * module that sends from one place only, and the aligned copies a get in
 * place makes (docs/design.md, "Zero copy"). */
#include <stdlib.h>
#include <string.h>

#include "buffers/buf.h"

static struct nxi_refs *refs_get(struct nx_buffer *b) {
  if (b->xr == NULL) {
    b->xr = calloc(1, sizeof(*b->xr));
    if (b->xr != NULL)
      b->xr->status = NX_ECANCELED; /* until nx_rsr_send takes it */
  }
  return b->xr;
}

static int refs_push(struct nxi_refs *x, const struct nxi_ref *r) {
  if (x->n == x->cap) {
    uint32_t cap = x->cap != 0 ? x->cap * 2 : 4;
    struct nxi_ref *v = realloc(x->r, cap * sizeof(*v));
    if (v == NULL)
      return NX_ENOMEM;
    x->r = v;
    x->cap = cap;
  }
  x->r[x->n++] = *r;
  return 0;
}

int nxi_put_array_ref(struct nx_buffer *b, uint8_t tag, const void *v,
                      size_t size, size_t count, nx_release_fn fn, void *arg) {
  if (b == NULL || b->kind != NXI_BUF_SEND || fn == NULL ||
      (v == NULL && count != 0) || count > UINT32_MAX)
    return NX_EINVAL;
  if (count > (SIZE_MAX - 14) / size)
    return NX_ENOMEM;
  struct nxi_refs *x = refs_get(b);
  if (x == NULL)
    return NX_ENOMEM;
  /* Pad so that the elements start at a multiple of their size in the
   * payload: the receiver's payload starts at least 8-aligned (16 in
   * the core's memory, 8 in UCX's: frame_wrap). */
  size_t at = b->len + x->bytes + 6;
  size_t pad = (size - at % size) % size;
  size_t len = size * count;
  /* Held by reference unless the values must be converted (a foreign
   * format) or the frame would pass NX_FRAME_IOV_MAX iovecs: copied then. */
  int copy = nxi_buffer_swapped(b) || x->live == NX_BUFFER_REFS_MAX;
  int r = nxi_buffer_reserve(b, 6 + pad + (copy ? len : 0));
  if (r < 0)
    return r;
  struct nxi_ref ref = {.v = v, .fn = fn, .arg = arg};
  if (!copy && len != 0) {
    ref.p = v;
    ref.len = len;
  }
  r = refs_push(x, &ref);
  if (r < 0)
    return r;
  uint8_t *p = b->data + b->len;
  uint32_t n = (uint32_t)count;
  p[0] = (uint8_t)(tag | NXI_TAG_ARRAY | NXI_TAG_PADDED);
  nxi_copy_elems(p + 1, (const uint8_t *)&n, 4, 1, nxi_buffer_swapped(b));
  p[5] = (uint8_t)pad;
  memset(p + 6, 0, pad);
  b->len += 6 + pad;
  if (copy && len != 0) {
    nxi_copy_elems(b->data + b->len, v, size, count, nxi_buffer_swapped(b));
    b->len += len;
  }
  x->r[x->n - 1].at = b->len;
  if (ref.p != NULL) {
    x->live++;
    x->bytes += len;
  }
  size_t end = nxi_buffer_wire_len(b);
  nxi_buffer_tail_note(b, end - len, end);
  return 0;
}

void nxi_buffer_refs_iov(struct nx_buffer *b) {
  struct nxi_refs *x = b->xr;
  struct iovec *iov = x->iov;
  int n = 0;
  iov[n++] = (struct iovec){b->hdr, NX_FRAME_HDR_SIZE};
  size_t done = 0;
  for (uint32_t i = 0; i < x->n; i++) {
    const struct nxi_ref *r = &x->r[i];
    if (r->p == NULL)
      continue;
    if (r->at > done)
      iov[n++] = (struct iovec){b->data + done, r->at - done};
    iov[n++] = (struct iovec){(void *)r->p, r->len};
    done = r->at;
  }
  if (b->len > done)
    iov[n++] = (struct iovec){b->data + done, b->len - done};
  b->frame.iovs = iov;
  b->frame.iovcnt = n;
  b->frame.len = NX_FRAME_HDR_SIZE + b->len + x->bytes;
}

int nxi_buffer_flatten(struct nx_buffer *b) {
  struct nxi_refs *x = b->xr;
  if (x == NULL || x->n == 0)
    return 0;
  if (x->bytes != 0) {
    size_t total = b->len + x->bytes, cap = total;
    uint8_t *d =
        total > NXI_INLINE_MAX ? nxi_block_get(total, &cap) : malloc(total);
    if (d == NULL)
      return NX_ENOMEM;
    size_t from = 0, to = 0;
    for (uint32_t i = 0; i < x->n; i++) {
      const struct nxi_ref *r = &x->r[i];
      if (r->p == NULL)
        continue;
      nxi_copy(d + to, b->data + from, r->at - from);
      to += r->at - from;
      nxi_copy(d + to, r->p, r->len);
      to += r->len;
      from = r->at;
    }
    nxi_copy(d + to, b->data + from, b->len - from);
    if (b->data_heap)
      nxi_block_put(b->data, b->cap);
    b->data = d;
    b->data_heap = 1;
    b->cap = cap;
    b->len = total;
  }
  x->status = 0; /* copied: the program's memory is no longer read */
  nxi_buffer_refs_done(b);
  return 0;
}

void *nxi_buffer_side_copy(struct nx_buffer *b, const void *p, size_t len) {
  struct nxi_side *s = malloc(sizeof(*s) + len);
  if (s == NULL)
    return NULL;
  nxi_copy(s->data, p, len);
  s->next = b->side;
  b->side = s;
  return s->data;
}
