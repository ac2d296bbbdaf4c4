/* PVM message buffers: the buffer table, packing with counts and strides
 * (copied, or left in place until the send), unpacking in pieces of any
 * size, and the typed encoding that carries a buffer in an RSR. */
/* pvm_getmwid and pvm_setmwid are declared for PVM 3.3 programs only. */
#define PVM33COMPAT 1
#include <ctype.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "pvm_internal.h"

static const size_t kind_size[K_MAX] = {
    [K_I8] = 1,  [K_I16] = 2, [K_I32] = 4, [K_I64] = 8,
    [K_F32] = 4, [K_F64] = 8, [K_STR] = 1};

static int arena_grow(struct pvmbuf *b, size_t bytes, size_t *off);
static struct seg *seg_add(struct pvmbuf *b);
static void copy_strided(void *dst, size_t dstride, const void *src,
                         size_t sstride, size_t n, size_t esize);

/* Freed buffers kept for the next ones, with their arena and run table:
 * a message costs no malloc or free once the cache is warm (every send's
 * pvm_initsend, every arrival's decode, every pvm_freebuf). Each slot is
 * taken and filled with one atomic exchange, so the handlers' thread and
 * the program's may both use it without a lock. */
#define CACHE_SLOTS 4
#define CACHE_MAX_BYTES (64 << 10) /* a larger arena goes back to malloc */
static _Atomic(struct pvmbuf *) cache[CACHE_SLOTS];

static void buf_release(struct pvmbuf *b) {
  free(b->data);
  free(b->segs);
  free(b);
}

struct pvmbuf *nxpvmi_buf_new(int encoding) {
  struct pvmbuf *b = NULL;
  for (int i = 0; i < CACHE_SLOTS && b == NULL; i++)
    if (atomic_load_explicit(&cache[i], memory_order_relaxed) != NULL)
      b = atomic_exchange_explicit(&cache[i], NULL, memory_order_acquire);
  if (b != NULL) {
    char *data = b->data;
    struct seg *segs = b->segs;
    size_t cap = b->cap;
    int segcap = b->segcap;
    *b = (struct pvmbuf){
        .data = data, .cap = cap, .segs = segs, .segcap = segcap};
  } else if ((b = calloc(1, sizeof(*b))) == NULL) {
    return NULL;
  }
  b->encoding = encoding;
  return b;
}

void nxpvmi_buf_free(struct pvmbuf *b) {
  if (b == NULL)
    return;
  if (b->cap <= CACHE_MAX_BYTES && b->segcap <= 64)
    for (int i = 0; i < CACHE_SLOTS && b != NULL; i++)
      if (atomic_load_explicit(&cache[i], memory_order_relaxed) == NULL)
        b = atomic_exchange_explicit(&cache[i], b, memory_order_acq_rel);
  if (b != NULL)
    buf_release(b); /* the cache is full (or the slot was just filled) */
}

/* pvm_exit: the cache goes too, once nothing is freed after. */
void nxpvmi_buf_cache_drain(void) {
  for (int i = 0; i < CACHE_SLOTS; i++) {
    struct pvmbuf *b = atomic_exchange(&cache[i], NULL);
    if (b != NULL)
      buf_release(b);
  }
}

/* A copy with every run in its own arena (in-place runs read now), for a
 * message a task sends itself. */
struct pvmbuf *nxpvmi_buf_clone(const struct pvmbuf *b) {
  struct pvmbuf *c = nxpvmi_buf_new(b->encoding);
  if (c == NULL)
    return NULL;
  for (int i = 0; i < b->nseg; i++) {
    const struct seg *s = &b->segs[i];
    size_t ks = kind_size[s->kind], off;
    struct seg *t;
    if (arena_grow(c, s->count * ks, &off) < 0 || (t = seg_add(c)) == NULL) {
      nxpvmi_buf_free(c);
      return NULL;
    }
    *t = (struct seg){s->kind, s->count, off, NULL, 1, ks};
    if (s->ref == NULL)
      memcpy(c->data + off, b->data + s->off, s->count * ks);
    else
      copy_strided(c->data + off, 1, s->ref, (size_t)s->stride,
                   s->count * ks / s->isize, s->isize);
  }
  c->bytes = b->bytes;
  c->ctx = b->ctx;
  c->src = b->src;
  c->tag = b->tag;
  c->dst = b->dst;
  c->wid = b->wid;
  return c;
}

/* Gives the buffer the lowest free id. */
int nxpvmi_buf_register(struct pvmbuf *b) {
  for (int i = 0; i < nxpvm.nbufs; i++)
    if (nxpvm.bufs[i] == NULL) {
      nxpvm.bufs[i] = b;
      return b->id = i + 1;
    }
  int n = nxpvm.nbufs ? 2 * nxpvm.nbufs : 16;
  struct pvmbuf **t = realloc(nxpvm.bufs, (size_t)n * sizeof(*t));
  if (t == NULL)
    return PvmNoMem;
  memset(t + nxpvm.nbufs, 0, (size_t)(n - nxpvm.nbufs) * sizeof(*t));
  nxpvm.bufs = t;
  int id = nxpvm.nbufs;
  nxpvm.nbufs = n;
  nxpvm.bufs[id] = b;
  return b->id = id + 1;
}

struct pvmbuf *nxpvmi_buf_get(int id) {
  if (id < 1 || id > nxpvm.nbufs)
    return NULL;
  return nxpvm.bufs[id - 1];
}

static void buf_unregister(struct pvmbuf *b) {
  if (b->id > 0 && b->id <= nxpvm.nbufs)
    nxpvm.bufs[b->id - 1] = NULL;
  if (nxpvm.sbuf == b->id)
    nxpvm.sbuf = 0;
  if (nxpvm.rbuf == b->id)
    nxpvm.rbuf = 0;
}

void nxpvmi_buf_drop_all(void) {
  for (int i = 0; i < nxpvm.nbufs; i++)
    if (nxpvm.bufs[i] != NULL && !nxpvm.bufs[i]->queued)
      nxpvmi_buf_free(nxpvm.bufs[i]);
  free(nxpvm.bufs);
  nxpvm.bufs = NULL;
  nxpvm.nbufs = 0;
  while (nxpvm.qhead != NULL) {
    struct pvmbuf *b = nxpvm.qhead;
    nxpvm.qhead = b->next;
    nxpvmi_buf_free(b);
  }
  nxpvm.qtail = NULL;
}

/* Room for `bytes` more in the arena, 8-aligned; returns the offset. */
static int arena_grow(struct pvmbuf *b, size_t bytes, size_t *off) {
  size_t start = (b->len + 7) & ~(size_t)7;
  if (start + bytes > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < start + bytes)
      cap *= 2;
    char *d = realloc(b->data, cap);
    if (d == NULL)
      return PvmNoMem;
    b->data = d;
    b->cap = cap;
  }
  b->len = start + bytes;
  *off = start;
  return 0;
}

static struct seg *seg_add(struct pvmbuf *b) {
  if (b->nseg == b->segcap) {
    int cap = b->segcap ? 2 * b->segcap : 4;
    struct seg *s = realloc(b->segs, (size_t)cap * sizeof(*s));
    if (s == NULL)
      return NULL;
    b->segs = s;
    b->segcap = cap;
  }
  return &b->segs[b->nseg++];
}

static void copy_strided(void *dst, size_t dstride, const void *src,
                         size_t sstride, size_t n, size_t esize) {
  if (dstride == 1 && sstride == 1) {
    memcpy(dst, src, n * esize);
    return;
  }
  for (size_t i = 0; i < n; i++)
    memcpy((char *)dst + i * dstride * esize,
           (const char *)src + i * sstride * esize, esize);
}

/* Appends `n` elements of `kind` (each `esize` bytes; complex values are
 * two) taken every `stride` elements from `p` to the active send buffer. */
int nxpvmi_pack(int kind, const void *p, int n, int stride, size_t esize) {
  return nxpvmi_pack_into(nxpvmi_buf_get(nxpvm.sbuf), kind, p, n, stride,
                          esize);
}

/* The same into buffer `b`. */
int nxpvmi_pack_into(struct pvmbuf *b, int kind, const void *p, int n,
                     int stride, size_t esize) {
  if (b == NULL)
    return PvmNoBuf;
  if (n < 0 || stride < 1 || (p == NULL && n > 0))
    return PvmBadParam;
  if (n == 0)
    return PvmOk;
  size_t per = esize / kind_size[kind]; /* 2 for complex */
  size_t count = (size_t)n * per;
  if (b->encoding == PvmDataInPlace && kind != K_STR) {
    struct seg *s = seg_add(b);
    if (s == NULL)
      return PvmNoMem;
    *s = (struct seg){kind, count, 0, p, stride, esize};
    b->bytes += count * kind_size[kind];
    return PvmOk;
  }
  /* Extend the last segment when it is of the same kind and in the arena:
   * fewer headers on the wire, and unpacking does not care. */
  struct seg *last = b->nseg > 0 ? &b->segs[b->nseg - 1] : NULL;
  size_t bytes = count * kind_size[kind];
  size_t off;
  if (last != NULL && kind != K_STR && last->kind == kind &&
      last->ref == NULL &&
      last->off + last->count * kind_size[kind] == b->len) {
    if (b->len + bytes > b->cap) {
      size_t cap = b->cap ? b->cap : 64;
      while (cap < b->len + bytes)
        cap *= 2;
      char *d = realloc(b->data, cap);
      if (d == NULL)
        return PvmNoMem;
      b->data = d;
      b->cap = cap;
    }
    off = b->len;
    b->len += bytes;
    last->count += count;
  } else {
    if (arena_grow(b, bytes, &off) < 0)
      return PvmNoMem;
    struct seg *s = seg_add(b);
    if (s == NULL)
      return PvmNoMem;
    *s = (struct seg){kind, count, off, NULL, 1, esize};
  }
  copy_strided(b->data + off, 1, p, (size_t)stride, (size_t)n, esize);
  b->bytes += bytes;
  return PvmOk;
}

/* Takes `n` elements of `kind` from the active receive buffer into `p`,
 * every `stride` elements, crossing packed runs as needed. */
int nxpvmi_unpack(int kind, void *p, int n, int stride, size_t esize) {
  return nxpvmi_unpack_from(nxpvmi_buf_get(nxpvm.rbuf), kind, p, n, stride,
                            esize);
}

/* The same from buffer `b`. */
int nxpvmi_unpack_from(struct pvmbuf *b, int kind, void *p, int n, int stride,
                       size_t esize) {
  if (b == NULL)
    return PvmNoBuf;
  if (n < 0 || stride < 1 || (p == NULL && n > 0))
    return PvmBadParam;
  size_t per = esize / kind_size[kind];
  size_t want = (size_t)n; /* in program elements */
  size_t done = 0;
  while (done < want) {
    if (b->rseg >= b->nseg)
      return PvmNoData;
    struct seg *s = &b->segs[b->rseg];
    if (s->kind != kind)
      return PvmNoData;
    size_t avail = (s->count - b->relem) / per;
    if (avail == 0)
      return PvmNoData;
    size_t take = want - done < avail ? want - done : avail;
    const char *src =
        s->ref != NULL ? s->ref : b->data + s->off + b->relem * kind_size[kind];
    copy_strided((char *)p + done * (size_t)stride * esize, (size_t)stride, src,
                 1, take, esize);
    done += take;
    b->relem += take * per;
    if (b->relem == s->count) {
      b->rseg++;
      b->relem = 0;
    }
  }
  return PvmOk;
}

static int put_run(nx_buffer_t *o, int kind, const void *v, size_t n) {
  switch (kind) {
  case K_I8: return nx_put_int8_array(o, v, n);
  case K_I16: return nx_put_int16_array(o, v, n);
  case K_I32: return nx_put_int32_array(o, v, n);
  case K_I64: return nx_put_int64_array(o, v, n);
  case K_F32: return nx_put_float_array(o, v, n);
  case K_F64: return nx_put_double_array(o, v, n);
  case K_STR: return nx_put_char_array(o, v, n);
  default: return NX_EINVAL;
  }
}

static int get_run(nx_buffer_t *in, int kind, void *v, size_t n) {
  switch (kind) {
  case K_I8: return nx_get_int8_array(in, v, n);
  case K_I16: return nx_get_int16_array(in, v, n);
  case K_I32: return nx_get_int32_array(in, v, n);
  case K_I64: return nx_get_int64_array(in, v, n);
  case K_F32: return nx_get_float_array(in, v, n);
  case K_F64: return nx_get_double_array(in, v, n);
  case K_STR: return nx_get_char_array(in, v, n);
  default: return NX_EINVAL;
  }
}

/* A buffer on the wire: its message context, the number of runs, then per
 * run its kind and
 * count in one u64 and the values as a typed nexus array, so the receiver
 * converts from the sender's format. In-place runs are read from the
 * program's memory now. */
int nxpvmi_encode(nx_buffer_t *o, const struct pvmbuf *b) {
  int rc = nx_put_int32(o, b->ctx);
  if (rc == 0)
    rc = nx_put_uint32(o, (uint32_t)b->nseg);
  for (int i = 0; rc == 0 && i < b->nseg; i++) {
    const struct seg *s = &b->segs[i];
    rc = nx_put_uint64(o, ((uint64_t)s->count << 8) | (uint64_t)s->kind);
    if (rc < 0)
      break;
    if (s->ref == NULL) {
      rc = put_run(o, s->kind, b->data + s->off, s->count);
    } else if (s->stride == 1) {
      rc = put_run(o, s->kind, s->ref, s->count);
    } else {
      /* An in-place strided run: gather its items now. */
      size_t is = s->isize;
      size_t items = s->count * kind_size[s->kind] / is;
      char *tmp = malloc(items * is);
      if (tmp == NULL)
        return NX_ENOMEM;
      for (size_t k = 0; k < items; k++)
        memcpy(tmp + k * is, (const char *)s->ref + k * (size_t)s->stride * is,
               is);
      rc = put_run(o, s->kind, tmp, s->count);
      free(tmp);
    }
  }
  return rc;
}

/* The inverse: a received RSR's runs, converted, into a new buffer. A
 * malformed message is refused (NX_EPROTO), never trusted. */
int nxpvmi_decode(nx_buffer_t *in, struct pvmbuf **out) {
  uint32_t nseg;
  int32_t ctx;
  int rc = nx_get_int32(in, &ctx);
  if (rc == 0)
    rc = nx_get_uint32(in, &nseg);
  if (rc < 0)
    return rc;
  if ((size_t)nseg > nx_buffer_remaining(in))
    return NX_EPROTO;
  struct pvmbuf *b = nxpvmi_buf_new(PvmDataDefault);
  if (b == NULL)
    return NX_ENOMEM;
  b->ctx = ctx;
  for (uint32_t i = 0; i < nseg; i++) {
    uint64_t h;
    rc = nx_get_uint64(in, &h);
    if (rc < 0)
      goto err;
    int kind = (int)(h & 0xff);
    size_t count = (size_t)(h >> 8);
    if (kind < K_I8 || kind >= K_MAX || count == 0 ||
        count > nx_buffer_remaining(in) / kind_size[kind]) {
      rc = NX_EPROTO;
      goto err;
    }
    size_t off;
    struct seg *s;
    if (arena_grow(b, count * kind_size[kind], &off) < 0 ||
        (s = seg_add(b)) == NULL) {
      rc = NX_ENOMEM;
      goto err;
    }
    *s = (struct seg){kind, count, off, NULL, 1, kind_size[kind]};
    rc = get_run(in, kind, b->data + off, count);
    if (rc < 0)
      goto err;
    b->bytes += count * kind_size[kind];
  }
  *out = b;
  return 0;
err:
  nxpvmi_buf_free(b);
  return rc;
}

/* ---- the PVM calls ---- */

int pvm_mkbuf(int encoding) {
  if (encoding != PvmDataDefault && encoding != PvmDataRaw &&
      encoding != PvmDataInPlace)
    return nxpvmi_err("pvm_mkbuf", PvmBadParam);
  struct pvmbuf *b = nxpvmi_buf_new(encoding);
  if (b == NULL)
    return nxpvmi_err("pvm_mkbuf", PvmNoMem);
  int id = nxpvmi_buf_register(b);
  if (id < 0) {
    nxpvmi_buf_free(b);
    return nxpvmi_err("pvm_mkbuf", id);
  }
  return id;
}

int pvm_freebuf(int bufid) {
  struct pvmbuf *b = nxpvmi_buf_get(bufid);
  if (bufid < 0)
    return nxpvmi_err("pvm_freebuf", PvmBadParam);
  if (b == NULL)
    return nxpvmi_err("pvm_freebuf", PvmNoSuchBuf);
  if (b->queued) {
    /* A probed message that was never received: take it out of the queue. */
    nx_mutex_lock(&nxpvm.m);
    struct pvmbuf **pp = &nxpvm.qhead, *prev = NULL;
    while (*pp != NULL && *pp != b)
      prev = *pp, pp = &(*pp)->next;
    if (*pp == b) {
      *pp = b->next;
      if (nxpvm.qtail == b)
        nxpvm.qtail = prev;
    }
    nx_mutex_unlock(&nxpvm.m);
  }
  buf_unregister(b);
  nxpvmi_buf_free(b);
  return PvmOk;
}

int pvm_initsend(int encoding) {
  if (encoding != PvmDataDefault && encoding != PvmDataRaw &&
      encoding != PvmDataInPlace)
    return nxpvmi_err("pvm_initsend", PvmBadParam);
  if (nxpvm.sbuf > 0)
    pvm_freebuf(nxpvm.sbuf);
  int id = pvm_mkbuf(encoding);
  if (id < 0)
    return id;
  nxpvm.sbuf = id;
  return id;
}

int pvm_getsbuf(void) { return nxpvm.sbuf; }
int pvm_getrbuf(void) { return nxpvm.rbuf; }

int pvm_setsbuf(int bufid) {
  if (bufid < 0 || (bufid > 0 && nxpvmi_buf_get(bufid) == NULL))
    return nxpvmi_err("pvm_setsbuf", bufid < 0 ? PvmBadParam : PvmNoSuchBuf);
  int old = nxpvm.sbuf;
  nxpvm.sbuf = bufid;
  return old;
}

int pvm_setrbuf(int bufid) {
  if (bufid < 0 || (bufid > 0 && nxpvmi_buf_get(bufid) == NULL))
    return nxpvmi_err("pvm_setrbuf", bufid < 0 ? PvmBadParam : PvmNoSuchBuf);
  int old = nxpvm.rbuf;
  nxpvm.rbuf = bufid;
  struct pvmbuf *b = nxpvmi_buf_get(bufid);
  if (b != NULL && b->queued) {
    /* Made active: it leaves the receive queue. */
    nx_mutex_lock(&nxpvm.m);
    struct pvmbuf **pp = &nxpvm.qhead, *prev = NULL;
    while (*pp != NULL && *pp != b)
      prev = *pp, pp = &(*pp)->next;
    if (*pp == b) {
      *pp = b->next;
      if (nxpvm.qtail == b)
        nxpvm.qtail = prev;
    }
    b->queued = 0;
    nx_mutex_unlock(&nxpvm.m);
  }
  return old;
}

int pvm_bufinfo(int bufid, int *bytes, int *msgtag, int *tid) {
  if (bufid <= 0)
    return nxpvmi_err("pvm_bufinfo", PvmBadParam);
  struct pvmbuf *b = nxpvmi_buf_get(bufid);
  if (b == NULL)
    return nxpvmi_err("pvm_bufinfo", PvmNoSuchBuf);
  if (bytes != NULL)
    *bytes = (int)b->bytes;
  if (msgtag != NULL)
    *msgtag = b->tag;
  if (tid != NULL)
    *tid = b->src;
  return PvmOk;
}

#define PK(name, ctype, kind)                                                  \
  int pvm_pk##name(ctype *xp, int nitem, int stride) {                         \
    int rc = nxpvmi_pack(kind, xp, nitem, stride, sizeof(ctype));              \
    return rc < 0 ? nxpvmi_err("pvm_pk" #name, rc) : rc;                       \
  }                                                                            \
  int pvm_upk##name(ctype *xp, int nitem, int stride) {                        \
    int rc = nxpvmi_unpack(kind, xp, nitem, stride, sizeof(ctype));            \
    return rc < 0 ? nxpvmi_err("pvm_upk" #name, rc) : rc;                      \
  }

PK(byte, char, K_I8)
PK(short, short, K_I16)
PK(ushort, unsigned short, K_I16)
PK(int, int, K_I32)
PK(uint, unsigned int, K_I32)
PK(long, long, K_I64)
PK(ulong, unsigned long, K_I64)
PK(float, float, K_F32)
PK(double, double, K_F64)

/* A complex is two floats (two doubles): one item of twice the size. */
int pvm_pkcplx(float *xp, int nitem, int stride) {
  int rc = nxpvmi_pack(K_F32, xp, nitem, stride, 2 * sizeof(float));
  return rc < 0 ? nxpvmi_err("pvm_pkcplx", rc) : rc;
}
int pvm_upkcplx(float *xp, int nitem, int stride) {
  int rc = nxpvmi_unpack(K_F32, xp, nitem, stride, 2 * sizeof(float));
  return rc < 0 ? nxpvmi_err("pvm_upkcplx", rc) : rc;
}
int pvm_pkdcplx(double *xp, int nitem, int stride) {
  int rc = nxpvmi_pack(K_F64, xp, nitem, stride, 2 * sizeof(double));
  return rc < 0 ? nxpvmi_err("pvm_pkdcplx", rc) : rc;
}
int pvm_upkdcplx(double *xp, int nitem, int stride) {
  int rc = nxpvmi_unpack(K_F64, xp, nitem, stride, 2 * sizeof(double));
  return rc < 0 ? nxpvmi_err("pvm_upkdcplx", rc) : rc;
}

/* A string is one run of its characters and the NUL, so pvm_upkstr knows
 * where it ends. */
int pvm_pkstr(char *sp) {
  if (sp == NULL)
    return nxpvmi_err("pvm_pkstr", PvmBadParam);
  int rc = nxpvmi_pack(K_STR, sp, (int)strlen(sp) + 1, 1, 1);
  return rc < 0 ? nxpvmi_err("pvm_pkstr", rc) : rc;
}

int pvm_upkstr(char *sp) {
  struct pvmbuf *b = nxpvmi_buf_get(nxpvm.rbuf);
  if (b == NULL)
    return nxpvmi_err("pvm_upkstr", PvmNoBuf);
  if (sp == NULL)
    return nxpvmi_err("pvm_upkstr", PvmBadParam);
  if (b->rseg >= b->nseg || b->segs[b->rseg].kind != K_STR || b->relem != 0)
    return nxpvmi_err("pvm_upkstr", PvmNoData);
  struct seg *s = &b->segs[b->rseg];
  memcpy(sp, b->data + s->off, s->count);
  sp[s->count - 1] = '\0';
  b->rseg++;
  return PvmOk;
}

/* Typed helpers for psend/precv and the collectives. */
int nxpvmi_type_size(int t) {
  switch (t) {
  case PVM_BYTE: return 1;
  case PVM_SHORT:
  case PVM_USHORT: return (int)sizeof(short);
  case PVM_INT:
  case PVM_UINT: return (int)sizeof(int);
  case PVM_FLOAT: return (int)sizeof(float);
  case PVM_CPLX: return 2 * (int)sizeof(float);
  case PVM_DOUBLE: return (int)sizeof(double);
  case PVM_DCPLX: return 2 * (int)sizeof(double);
  case PVM_LONG:
  case PVM_ULONG: return (int)sizeof(long);
  default: return 0;
  }
}

static int type_kind(int t) {
  switch (t) {
  case PVM_BYTE: return K_I8;
  case PVM_SHORT:
  case PVM_USHORT: return K_I16;
  case PVM_INT:
  case PVM_UINT: return K_I32;
  case PVM_FLOAT:
  case PVM_CPLX: return K_F32;
  case PVM_DOUBLE:
  case PVM_DCPLX: return K_F64;
  case PVM_LONG:
  case PVM_ULONG: return K_I64;
  default: return 0;
  }
}

int nxpvmi_pack_type(int datatype, const void *p, int n) {
  int k = type_kind(datatype);
  if (k == 0)
    return PvmBadParam;
  return nxpvmi_pack(k, p, n, 1, (size_t)nxpvmi_type_size(datatype));
}

int nxpvmi_unpack_type(int datatype, void *p, int n) {
  int k = type_kind(datatype);
  if (k == 0)
    return PvmBadParam;
  return nxpvmi_unpack(k, p, n, 1, (size_t)nxpvmi_type_size(datatype));
}

/* ---- message info, messages inside messages, formatted packing ---- */

int pvm_getminfo(int bufid, struct pvmminfo *info) {
  if (bufid <= 0 || info == NULL)
    return nxpvmi_err("pvm_getminfo", PvmBadParam);
  struct pvmbuf *b = nxpvmi_buf_get(bufid);
  if (b == NULL)
    return nxpvmi_err("pvm_getminfo", PvmNoSuchBuf);
  *info = (struct pvmminfo){.len = (int)b->bytes,
                            .ctx = b->ctx,
                            .tag = b->tag,
                            .wid = b->wid,
                            .enc = b->encoding,
                            .crc = 0,
                            .src = b->src,
                            .dst = b->dst};
  return PvmOk;
}

/* Sets what PVM lets a program set: context, tag, wait id, source and
 * destination (the length and encoding follow the contents). */
int pvm_setminfo(int bufid, struct pvmminfo *info) {
  if (bufid <= 0 || info == NULL)
    return nxpvmi_err("pvm_setminfo", PvmBadParam);
  struct pvmbuf *b = nxpvmi_buf_get(bufid);
  if (b == NULL)
    return nxpvmi_err("pvm_setminfo", PvmNoSuchBuf);
  b->ctx = info->ctx;
  b->tag = info->tag;
  b->wid = info->wid;
  b->src = info->src;
  b->dst = info->dst;
  return PvmOk;
}

int pvm_getmwid(int bufid) {
  struct pvmbuf *b = nxpvmi_buf_get(bufid);
  if (bufid < 0)
    return nxpvmi_err("pvm_getmwid", PvmBadParam);
  return b == NULL ? nxpvmi_err("pvm_getmwid", PvmNoSuchBuf) : b->wid;
}

int pvm_setmwid(int bufid, int wid) {
  struct pvmbuf *b = nxpvmi_buf_get(bufid);
  if (bufid < 0)
    return nxpvmi_err("pvm_setmwid", PvmBadParam);
  if (b == NULL)
    return nxpvmi_err("pvm_setmwid", PvmNoSuchBuf);
  b->wid = wid;
  return PvmOk;
}

/* The header a packed message carries, in ints, before its runs' kinds and
 * counts and then the runs themselves. */
enum {
  MH_LEN,
  MH_CTX,
  MH_TAG,
  MH_WID,
  MH_ENC,
  MH_CRC,
  MH_SRC,
  MH_DST,
  MH_NSEG,
  MH_N
};

/* Appends message `bufid`'s runs (and, with `header`, its header) to the
 * active send buffer. In-place runs are read now, through a copy. */
static int pack_message(const char *fn, int bufid, int header) {
  struct pvmbuf *sb = nxpvmi_buf_get(nxpvm.sbuf);
  struct pvmbuf *m = nxpvmi_buf_get(bufid);
  if (bufid <= 0)
    return nxpvmi_err(fn, PvmBadParam);
  if (m == NULL)
    return nxpvmi_err(fn, PvmNoSuchBuf);
  if (sb == NULL)
    return nxpvmi_err(fn, PvmNoBuf);
  if (m == sb)
    return nxpvmi_err(fn, PvmBadParam);
  struct pvmbuf *c = nxpvmi_buf_clone(m);
  if (c == NULL)
    return nxpvmi_err(fn, PvmNoMem);
  int rc = PvmOk;
  if (header) {
    int h[MH_N] = {
        [MH_LEN] = (int)m->bytes, [MH_CTX] = m->ctx,      [MH_TAG] = m->tag,
        [MH_WID] = m->wid,        [MH_ENC] = m->encoding, [MH_SRC] = m->src,
        [MH_DST] = m->dst,        [MH_NSEG] = c->nseg};
    rc = nxpvmi_pack_into(sb, K_I32, h, MH_N, 1, sizeof(int));
    for (int i = 0; rc == 0 && i < c->nseg; i++) {
      int kc[2] = {c->segs[i].kind, (int)c->segs[i].count};
      rc = nxpvmi_pack_into(sb, K_I32, kc, 2, 1, sizeof(int));
    }
  }
  for (int i = 0; rc == 0 && i < c->nseg; i++) {
    const struct seg *s = &c->segs[i];
    size_t ks = kind_size[s->kind];
    if (s->count > (size_t)0x7fffffff)
      rc = PvmOverflow;
    else
      rc =
          nxpvmi_pack_into(sb, s->kind, c->data + s->off, (int)s->count, 1, ks);
  }
  nxpvmi_buf_free(c);
  return rc < 0 ? nxpvmi_err(fn, rc) : PvmOk;
}

int pvm_pkmesg(int bufid) { return pack_message("pvm_pkmesg", bufid, 1); }

int pvm_pkmesgbody(int bufid) {
  return pack_message("pvm_pkmesgbody", bufid, 0);
}

/* Takes a message packed by pvm_pkmesg out of the active receive buffer
 * into a new buffer, and returns its id. */
int pvm_upkmesg(void) {
  struct pvmbuf *rb = nxpvmi_buf_get(nxpvm.rbuf);
  if (rb == NULL)
    return nxpvmi_err("pvm_upkmesg", PvmNoBuf);
  int h[MH_N];
  int rc = nxpvmi_unpack_from(rb, K_I32, h, MH_N, 1, sizeof(int));
  if (rc < 0)
    return nxpvmi_err("pvm_upkmesg", rc);
  if (h[MH_NSEG] < 0 || (size_t)h[MH_NSEG] > rb->bytes)
    return nxpvmi_err("pvm_upkmesg", PvmBadMsg);
  struct pvmbuf *m =
      nxpvmi_buf_new(h[MH_ENC] == PvmDataInPlace ? PvmDataRaw : h[MH_ENC]);
  int *kc = malloc(2 * (size_t)h[MH_NSEG] * sizeof(int) + 1);
  if (m == NULL || kc == NULL) {
    rc = PvmNoMem;
    goto err;
  }
  rc = nxpvmi_unpack_from(rb, K_I32, kc, 2 * h[MH_NSEG], 1, sizeof(int));
  for (int i = 0; rc == 0 && i < h[MH_NSEG]; i++) {
    int kind = kc[2 * i], count = kc[2 * i + 1];
    size_t off;
    struct seg *s;
    if (kind < K_I8 || kind >= K_MAX || count <= 0 ||
        (size_t)count * kind_size[kind] > rb->bytes) {
      rc = PvmBadMsg;
      break;
    }
    if (arena_grow(m, (size_t)count * kind_size[kind], &off) < 0 ||
        (s = seg_add(m)) == NULL) {
      rc = PvmNoMem;
      break;
    }
    *s = (struct seg){kind, (size_t)count, off, NULL, 1, kind_size[kind]};
    rc = nxpvmi_unpack_from(rb, kind, m->data + off, count, 1, kind_size[kind]);
    m->bytes += (size_t)count * kind_size[kind];
  }
  if (rc < 0)
    goto err;
  free(kc);
  m->ctx = h[MH_CTX];
  m->tag = h[MH_TAG];
  m->wid = h[MH_WID];
  m->src = h[MH_SRC];
  m->dst = h[MH_DST];
  rc = nxpvmi_buf_register(m);
  if (rc < 0) {
    nxpvmi_buf_free(m);
    return nxpvmi_err("pvm_upkmesg", rc);
  }
  return rc;
err:
  free(kc);
  nxpvmi_buf_free(m);
  return nxpvmi_err("pvm_upkmesg", rc);
}

/* One conversion of a pvm_packf/pvm_unpackf format: `%[*|n][.*|.n][hlu]c`
 * with c one of c d f x s. A count or a stride makes the argument an
 * address; without either, pvm_packf takes a value. */
struct fmtconv {
  int cnt, std, isv, h, l;
  char c;
};

static const char *fmt_next(const char *p, va_list *ap, struct fmtconv *f) {
  *f = (struct fmtconv){.cnt = 1, .std = 1, .isv = 1};
  if (*p == '*') {
    f->cnt = va_arg(*ap, int);
    f->isv = 0;
    p++;
  } else if (isdigit((unsigned char)*p)) {
    f->cnt = (int)strtol(p, (char **)&p, 10);
    f->isv = 0;
  }
  if (*p == '.') {
    f->isv = 0;
    p++;
    if (*p == '*') {
      f->std = va_arg(*ap, int);
      p++;
    } else if (isdigit((unsigned char)*p)) {
      f->std = (int)strtol(p, (char **)&p, 10);
    }
  }
  for (;; p++) {
    if (*p == 'h')
      f->h = 1;
    else if (*p == 'l')
      f->l = 1;
    else if (*p != 'u')
      break;
  }
  f->c = *p;
  return *p != '\0' ? p + 1 : p;
}

int pvm_packf(const char *fmt, ...) {
  if (fmt == NULL)
    return nxpvmi_err("pvm_packf", PvmBadParam);
  va_list ap;
  va_start(ap, fmt);
  const char *p = fmt;
  int rc = PvmOk;
  if (p[0] == '%' && p[1] == '+') {
    rc = pvm_initsend(va_arg(ap, int));
    p += 2;
  }
  if (rc >= 0 && nxpvmi_buf_get(nxpvm.sbuf) == NULL)
    rc = PvmNoBuf;
  while (rc >= 0 && *p != '\0') {
    if (*p++ != '%')
      continue;
    struct fmtconv f;
    p = fmt_next(p, &ap, &f);
    char c;
    short h;
    int n;
    long l;
    float fl;
    double d;
    switch (f.c) {
    case 'c':
      c = f.isv ? (char)va_arg(ap, int) : 0;
      rc = nxpvmi_pack(K_I8, f.isv ? &c : va_arg(ap, char *), f.cnt, f.std, 1);
      break;
    case 'd':
      if (f.l) {
        l = f.isv ? va_arg(ap, long) : 0;
        rc = nxpvmi_pack(K_I64, f.isv ? &l : va_arg(ap, long *), f.cnt, f.std,
                         sizeof(long));
      } else if (f.h) {
        h = f.isv ? (short)va_arg(ap, int) : 0;
        rc = nxpvmi_pack(K_I16, f.isv ? &h : va_arg(ap, short *), f.cnt, f.std,
                         sizeof(short));
      } else {
        n = f.isv ? va_arg(ap, int) : 0;
        rc = nxpvmi_pack(K_I32, f.isv ? &n : va_arg(ap, int *), f.cnt, f.std,
                         sizeof(int));
      }
      break;
    case 'f':
      if (f.l) {
        d = f.isv ? va_arg(ap, double) : 0;
        rc = nxpvmi_pack(K_F64, f.isv ? &d : va_arg(ap, double *), f.cnt, f.std,
                         sizeof(double));
      } else {
        fl = f.isv ? (float)va_arg(ap, double) : 0;
        rc = nxpvmi_pack(K_F32, f.isv ? &fl : va_arg(ap, float *), f.cnt, f.std,
                         sizeof(float));
      }
      break;
    case 'x': /* complex values are always passed by address */
      if (f.l)
        rc = nxpvmi_pack(K_F64, va_arg(ap, double *), f.cnt, f.std,
                         2 * sizeof(double));
      else
        rc = nxpvmi_pack(K_F32, va_arg(ap, float *), f.cnt, f.std,
                         2 * sizeof(float));
      break;
    case 's': rc = pvm_pkstr(va_arg(ap, char *)); break;
    default: rc = PvmBadParam;
    }
  }
  va_end(ap);
  return rc < 0 ? nxpvmi_err("pvm_packf", rc) : PvmOk;
}

int pvm_unpackf(const char *fmt, ...) {
  if (fmt == NULL)
    return nxpvmi_err("pvm_unpackf", PvmBadParam);
  va_list ap;
  va_start(ap, fmt);
  const char *p = fmt;
  int rc = nxpvmi_buf_get(nxpvm.rbuf) == NULL ? PvmNoBuf : PvmOk;
  while (rc >= 0 && *p != '\0') {
    if (*p++ != '%')
      continue;
    struct fmtconv f;
    p = fmt_next(p, &ap, &f);
    switch (f.c) {
    case 'c':
      rc = nxpvmi_unpack(K_I8, va_arg(ap, char *), f.cnt, f.std, 1);
      break;
    case 'd':
      if (f.l)
        rc = nxpvmi_unpack(K_I64, va_arg(ap, long *), f.cnt, f.std,
                           sizeof(long));
      else if (f.h)
        rc = nxpvmi_unpack(K_I16, va_arg(ap, short *), f.cnt, f.std,
                           sizeof(short));
      else
        rc = nxpvmi_unpack(K_I32, va_arg(ap, int *), f.cnt, f.std, sizeof(int));
      break;
    case 'f':
      if (f.l)
        rc = nxpvmi_unpack(K_F64, va_arg(ap, double *), f.cnt, f.std,
                           sizeof(double));
      else
        rc = nxpvmi_unpack(K_F32, va_arg(ap, float *), f.cnt, f.std,
                           sizeof(float));
      break;
    case 'x':
      if (f.l)
        rc = nxpvmi_unpack(K_F64, va_arg(ap, double *), f.cnt, f.std,
                           2 * sizeof(double));
      else
        rc = nxpvmi_unpack(K_F32, va_arg(ap, float *), f.cnt, f.std,
                           2 * sizeof(float));
      break;
    case 's': rc = pvm_upkstr(va_arg(ap, char *)); break;
    default: rc = PvmBadParam;
    }
  }
  va_end(ap);
  return rc < 0 ? nxpvmi_err("pvm_unpackf", rc) : PvmOk;
}
