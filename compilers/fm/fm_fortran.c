/* The Fortran binding's entry points: one routine per operation for every
 * intrinsic type, kind and rank, reading the value's type, shape and strides
 * from its Fortran 2018 descriptor (ISO_Fortran_binding.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ISO_Fortran_binding.h>

#include "fm_internal.h"

/* What a descriptor holds, in fm's terms. */
struct view {
  int type;   /* FM_TYPE_* */
  size_t len; /* characters per element (character types), else 1 */
  size_t n;   /* elements */
  size_t es;  /* bytes per element */
  int contig;
};

static int type_of(CFI_type_t t, size_t *kind_out) {
  int base = t & CFI_type_mask;
  size_t kind = (size_t)(t - base) >> CFI_type_kind_shift;
  *kind_out = kind;
  switch (base) {
  case CFI_type_Integer:
    switch (kind) {
    case 1: return FM_TYPE_INT8;
    case 2: return FM_TYPE_INT16;
    case 4: return FM_TYPE_INT32;
    case 8: return FM_TYPE_INT64;
    case 16: return FM_TYPE_INT128;
    }
    break;
  case CFI_type_Logical:
    switch (kind) {
    case 1: return FM_TYPE_LOGICAL1;
    case 2: return FM_TYPE_LOGICAL2;
    case 4: return FM_TYPE_LOGICAL4;
    case 8: return FM_TYPE_LOGICAL8;
    case 16: return FM_TYPE_LOGICAL16;
    }
    break;
  case CFI_type_Real:
    switch (kind) {
    case 4: return FM_TYPE_FLOAT;
    case 8: return FM_TYPE_DOUBLE;
    case 10: return FM_TYPE_REAL10;
    case 16: return FM_TYPE_REAL16;
    }
    break;
  case CFI_type_Complex:
    switch (kind) {
    case 4: return FM_TYPE_COMPLEX4;
    case 8: return FM_TYPE_COMPLEX8;
    case 10: return FM_TYPE_COMPLEX10;
    case 16: return FM_TYPE_COMPLEX16;
    }
    break;
  case CFI_type_Character:
    switch (kind) {
    case 1: return FM_TYPE_CHAR;
    case 4: return FM_TYPE_UCS4;
    }
    break;
  case CFI_type_struct: return FM_TYPE_PORT; /* checked by size below */
  }
  return 0;
}

/* Reads a descriptor: FM_ETYPE for a type libfm does not carry (a derived
 * type other than a port, a pointer), FM_EINVAL for a port array. */
static int view_of(const CFI_cdesc_t *d, struct view *v) {
  size_t kind;
  if (d == NULL || (d->base_addr == NULL && d->rank == 0))
    return FM_EINVAL;
  v->type = type_of(d->type, &kind);
  v->es = d->elem_len;
  v->len = 1;
  if (v->type == 0)
    return FM_ETYPE;
  if (fmi_type_is_char(v->type)) {
    v->len = d->elem_len / fm_type_size(v->type);
    if (v->len * fm_type_size(v->type) != d->elem_len)
      return FM_ETYPE;
  } else if (d->elem_len != fm_type_size(v->type)) {
    return FM_ETYPE; /* a derived type that is not a port */
  }
  if (v->type == FM_TYPE_PORT && d->rank != 0)
    return FM_EINVAL;
  v->n = 1;
  v->contig = 1;
  size_t stride = d->elem_len;
  for (int r = 0; r < d->rank; r++) {
    size_t ext = d->dim[r].extent > 0 ? (size_t)d->dim[r].extent : 0;
    if (ext > 1 && (size_t)d->dim[r].sm != stride)
      v->contig = 0;
    stride *= ext;
    v->n *= ext;
  }
  if (v->n == 0)
    v->contig = 1;
  return 0;
}

/* Copies every element between the descriptor's memory and `flat`
 * (contiguous, in array element order): gathers when `to_flat`, else
 * scatters. */
static void copy_elems(const CFI_cdesc_t *d, const struct view *v, char *flat,
                       int to_flat) {
  CFI_index_t idx[CFI_MAX_RANK] = {0};
  for (size_t k = 0; k < v->n; k++) {
    char *p = d->base_addr;
    for (int r = 0; r < d->rank; r++)
      p += idx[r] * d->dim[r].sm;
    if (to_flat)
      memcpy(flat + k * v->es, p, v->es);
    else
      memcpy(p, flat + k * v->es, v->es);
    for (int r = 0; r < d->rank; r++) {
      if (++idx[r] < d->dim[r].extent)
        break;
      idx[r] = 0;
    }
  }
}

/* The values as one contiguous block: the variable itself, or a gathered
 * copy the caller frees (*tmp). */
static int flat_in(const CFI_cdesc_t *d, const struct view *v,
                   const void **flat, void **tmp) {
  *tmp = NULL;
  if (v->contig) {
    *flat = d->base_addr;
    return 0;
  }
  if ((*tmp = malloc(v->n * v->es)) == NULL)
    return FM_ENOMEM;
  copy_elems(d, v, *tmp, 1);
  *flat = *tmp;
  return 0;
}

/* Writes `flat` (n elements) into the variable. */
static void flat_out(CFI_cdesc_t *d, const struct view *v, const void *flat) {
  if (v->contig)
    memcpy(d->base_addr, flat, v->n * v->es);
  else
    copy_elems(d, v, (char *)(uintptr_t)flat, 0);
}

static int etype(int r) { return r == NX_ETYPE ? FM_ETYPE : r; }

/* Fills `to` (tn characters of `csize` bytes) from `from` (fn characters):
 * cut, or padded with blanks. */
static void chars_fit(char *to, size_t tn, const char *from, size_t fn,
                      size_t csize) {
  size_t k = fn < tn ? fn : tn;
  memcpy(to, from, k * csize);
  for (size_t i = k; i < tn; i++) {
    if (csize == 1) {
      to[i] = ' ';
    } else {
      uint32_t blank = ' ';
      memcpy(to + i * csize, &blank, csize);
    }
  }
}

static int value_put(nx_buffer_t *b, const CFI_cdesc_t *d,
                     const struct view *v) {
  if (v->type == FM_TYPE_PORT)
    return fm_put_port(b, d->base_addr);
  const void *flat;
  void *tmp;
  int r = fmi_value_head_put(b, v->type, v->n, (uint32_t)v->len);
  if (r == 0)
    r = flat_in(d, v, &flat, &tmp);
  if (r == 0) {
    r = fmi_units_put(b, v->type, flat, v->n * v->len);
    free(tmp);
  }
  return r;
}

static int value_get(nx_buffer_t *b, CFI_cdesc_t *d, const struct view *v) {
  if (v->type == FM_TYPE_PORT)
    return etype(fm_get_port(b, d->base_addr));
  int t;
  uint64_t n;
  uint32_t len;
  int r = fmi_value_head_get(b, &t, &n, &len);
  if (r != 0)
    return etype(r);
  if (t != v->type)
    return FM_ETYPE;
  int chars = fmi_type_is_char(t);
  /* Every unit takes at least a byte: more cannot be in the buffer. A
   * value of no units (a zero-size array, a character(len=0)) may be the
   * last thing in it. */
  size_t left = nx_buffer_remaining(b);
  if (n != 0 && len != 0 && (n > left || len > left || n * len > left))
    return NX_EPROTO;
  if (!chars && n != v->n)
    return FM_ETYPE;
  /* A character scalar takes the whole value; an array, element by
   * element, each cut or padded. */
  if (chars && d->rank == 0) {
    len = (uint32_t)(n * len);
    n = 1;
  }
  if (chars && n != v->n)
    return FM_ETYPE;
  size_t cs = fm_type_size(t);
  if (!chars && v->contig)
    return etype(fmi_units_get(b, t, d->base_addr, v->n));
  void *in = malloc(n * len * cs + 1);
  void *flat = chars ? malloc(v->n * v->es + 1) : in;
  if (in == NULL || flat == NULL) {
    free(in);
    if (flat != in)
      free(flat);
    return FM_ENOMEM;
  }
  r = etype(fmi_units_get(b, t, in, n * len));
  if (r == 0 && chars)
    for (size_t k = 0; k < n; k++)
      chars_fit((char *)flat + k * v->es, v->len, (char *)in + k * len * cs,
                len, cs);
  if (r == 0)
    flat_out(d, v, flat);
  if (flat != in)
    free(flat);
  free(in);
  return r;
}

/* Hands a result to the caller's stat, or stops on an error nobody asked
 * about, as the Fortran routines do. */
static void done(int r, int *stat, const char *what) {
  if (stat != NULL) {
    *stat = r;
  } else if (r != 0) {
    fprintf(stderr, "fm: %s: %s\n", what, fm_strerror(r));
    fflush(stderr);
    exit(1);
  }
}

/* type(fm_msg) in Fortran. */
static int is_msg(const CFI_cdesc_t *d) {
  const struct fm_f_msg *m = d->base_addr;
  return d->rank == 0 && (d->type & CFI_type_mask) == CFI_type_struct &&
         d->elem_len == sizeof(struct fm_f_msg) && m != NULL &&
         m->tag == FM_F_MSG_TAG;
}

/* fm_send waits for nexus to be done with values it put by reference:
 * Fortran may change the array as soon as the send returns. */
struct ref_wait {
  nx_mutex_t m;
  nx_cond_t c;
  int done;
};

static void ref_released(void *arg, const void *v, int status) {
  struct ref_wait *w = arg;
  (void)v;
  (void)status; /* a failed RSR is reported as for any RSR */
  nx_mutex_lock(&w->m);
  w->done = 1;
  nx_cond_signal(&w->c);
  nx_mutex_unlock(&w->m);
}

/* A large contiguous value, put by reference and sent: 1 when the type
 * cannot go by reference (nothing was put), else the send's result, once
 * nexus no longer reads the array. */
static int send_by_ref(fm_port_t *out, nx_buffer_t *b, const CFI_cdesc_t *d,
                       const struct view *v) {
  struct ref_wait w;
  nx_mutex_init(&w.m);
  nx_cond_init(&w.c);
  w.done = 0;
  int r = fmi_value_head_put(b, v->type, v->n, (uint32_t)v->len);
  if (r == 0)
    r = fmi_units_put_ref(b, v->type, d->base_addr, v->n * v->len, ref_released,
                          &w);
  if (r == 0) {
    r = fm_send_end(b); /* the buffer is the runtime's now, sent or not */
    nx_mutex_lock(&w.m);
    while (!w.done)
      nx_cond_wait(&w.c, &w.m);
    nx_mutex_unlock(&w.m);
  } else {
    fm_send_abort(out, b);
  }
  nx_cond_destroy(&w.c);
  nx_mutex_destroy(&w.m);
  return r;
}

/* Contiguous values of at least fm_zerocopy_min bytes go by reference. */
static int ref_min_ok(size_t bytes) {
  size_t min = fmi_zerocopy_min();
  return min > 0 && bytes >= min;
}

void fm_f_send(fm_port_t *out, CFI_cdesc_t *d, int *stat) {
  struct view v;
  nx_buffer_t *b;
  int r = view_of(d, &v);
  int ref = r == 0 && v.contig && v.type != FM_TYPE_PORT &&
            ref_min_ok(v.n * v.es) && v.type != FM_TYPE_REAL10 &&
            v.type != FM_TYPE_COMPLEX10;
  if (r == 0)
    r = fm_send_begin(out, 32 + (ref ? 0 : v.n * v.es), &b);
  if (r == 0 && ref && (r = send_by_ref(out, b, d, &v)) != 1) {
    done(r, stat, "fm_send");
    return;
  }
  if (r == 1) /* no reference put for this type: copy */
    r = fm_send_begin(out, 32 + v.n * v.es, &b);
  if (r == 0) {
    r = value_put(b, d, &v);
    if (r != 0)
      fm_send_abort(out, b);
    else
      r = fm_send_end(b);
  }
  done(r, stat, "fm_send");
}

void fm_f_receive(fm_port_t *in, CFI_cdesc_t *d, int *stat) {
  struct view v;
  nx_buffer_t *b;
  if (d != NULL && is_msg(d)) {
    struct fm_f_msg *m = d->base_addr;
    m->p = NULL;
    done(fm_receive(in, &m->p), stat, "fm_receive");
    return;
  }
  int r = view_of(d, &v);
  /* A contiguous array may take its values where they arrive: then
   * value_get's get into it copies nothing (fm.c, "Receive placement"). */
  if (r == 0 &&
      (r = fmi_receive_into(in, v.type, v.contig ? d->base_addr : NULL, v.n,
                            &b)) == 0) {
    r = value_get(b, d, &v);
    fm_msg_free(b);
  }
  done(r, stat, "fm_receive");
}

void fm_f_put(struct fm_f_msg *m, CFI_cdesc_t *d, int *stat) {
  struct view v;
  int r = m == NULL || m->p == NULL ? FM_EINVAL : view_of(d, &v);
  if (r == 0)
    r = value_put(m->p, d, &v);
  done(r, stat, "fm_put");
}

void fm_f_get(struct fm_f_msg *m, CFI_cdesc_t *d, int *stat) {
  struct view v;
  int r = m == NULL || m->p == NULL ? FM_EINVAL : view_of(d, &v);
  if (r == 0)
    r = value_get(m->p, d, &v);
  done(r, stat, "fm_get");
}

void fm_f_arg(fm_args_t **a, CFI_cdesc_t *d, const int *intent, int *stat) {
  struct view v;
  int in = intent != NULL ? *intent : FM_IN;
  int r = a == NULL || *a == NULL ? FM_EINVAL : view_of(d, &v);
  if (r == 0 && v.type == FM_TYPE_PORT) {
    r = in == FM_IN ? fm_args_add_port(*a, d->base_addr) : FM_EINVAL;
  } else if (r == 0 && v.contig) {
    r = fm_args_add(*a, v.type, d->base_addr, v.n * v.len, in);
  } else if (r == 0) {
    /* A section is gathered; it cannot take values back. */
    const void *flat;
    void *tmp;
    r = in != FM_IN ? FM_EINVAL : flat_in(d, &v, &flat, &tmp);
    if (r == 0) {
      r = fm_args_add(*a, v.type, tmp, v.n * v.len, in);
      free(tmp);
    }
  }
  done(r, stat, "fm_arg");
}

/* Process side: argument *i (from 1) and the variable, both checked. The
 * variable takes the argument (get) or gives it its value (set). */
static int arg_move(fm_args_t *args, const int *i, CFI_cdesc_t *d, int set) {
  struct view v;
  int type;
  size_t count;
  if (args == NULL || i == NULL)
    return FM_EINVAL;
  void *data = fm_args_data(args, *i - 1, &type, &count);
  if (data == NULL)
    return FM_EINVAL;
  int r = view_of(d, &v);
  if (r != 0)
    return r;
  if (type != v.type)
    return FM_ETYPE;
  if (type == FM_TYPE_PORT)
    return set ? FM_EINVAL : fm_moveport(data, d->base_addr);
  size_t cs = fm_type_size(type);
  if (fmi_type_is_char(type) && d->rank == 0) { /* cut or padded */
    if (set)
      chars_fit(data, count, d->base_addr, v.len, cs);
    else
      chars_fit(d->base_addr, v.len, data, count, cs);
    return 0;
  }
  if (count != v.n * v.len)
    return FM_ETYPE;
  if (!set) {
    flat_out(d, &v, data);
    return 0;
  }
  const void *flat;
  void *tmp;
  if ((r = flat_in(d, &v, &flat, &tmp)) == 0) {
    memcpy(data, flat, v.n * v.es);
    free(tmp);
  }
  return r;
}

void fm_f_arg_get(fm_args_t *args, const int *i, CFI_cdesc_t *d, int *stat) {
  done(arg_move(args, i, d, 0), stat, "fm_arg_get");
}

void fm_f_arg_set(fm_args_t *args, const int *i, CFI_cdesc_t *d, int *stat) {
  done(arg_move(args, i, d, 1), stat, "fm_arg_set");
}
