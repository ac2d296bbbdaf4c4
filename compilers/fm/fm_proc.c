/* libfm processes: the registry, argument lists, process blocks (an RSR
 * "fm.run" per process call, "fm.done" back) and virtual computers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_internal.h"

#define NAME_MAX_LEN 64
#define MAX_PROCESSES 256
#define MAX_DIMS 4

/* ---- registry ----------------------------------------------------------
 * Filled before fm_init (a child context serves from inside fm_init), by
 * the program's one thread: no lock. */
static struct {
  char name[NAME_MAX_LEN];
  fm_process_fn fn;
} registry[MAX_PROCESSES];
static int nregistry;

int fm_register(const char *name, fm_process_fn fn) {
  if (name == NULL || fn == NULL || name[0] == '\0' ||
      strlen(name) >= NAME_MAX_LEN)
    return FM_EINVAL;
  for (int i = 0; i < nregistry; i++)
    if (strcmp(registry[i].name, name) == 0) {
      registry[i].fn = fn;
      return 0;
    }
  if (nregistry == MAX_PROCESSES)
    return FM_ENOMEM;
  snprintf(registry[nregistry].name, NAME_MAX_LEN, "%s", name);
  registry[nregistry++].fn = fn;
  return 0;
}

static fm_process_fn lookup(const char *name) {
  for (int i = 0; i < nregistry; i++)
    if (strcmp(registry[i].name, name) == 0)
      return registry[i].fn;
  return NULL;
}

/* ---- arguments --------------------------------------------------------- */

struct fm_arg {
  int type, intent;
  size_t count;
  void *caller; /* where out/inout values go back (caller side) */
  void *data;   /* our copy */
};

struct fm_args {
  int n, cap;
  struct fm_arg *a;
};

static size_t type_size(int type) { return fm_type_size(type); }

int fm_args_create(fm_args_t **args) {
  if (args == NULL)
    return FM_EINVAL;
  *args = calloc(1, sizeof(**args));
  return *args ? 0 : FM_ENOMEM;
}

static struct fm_arg *arg_new(fm_args_t *args) {
  if (args->n == args->cap) {
    int cap = args->cap ? args->cap * 2 : 4;
    struct fm_arg *n = realloc(args->a, (size_t)cap * sizeof(*n));
    if (n == NULL)
      return NULL;
    args->a = n;
    args->cap = cap;
  }
  struct fm_arg *a = &args->a[args->n];
  memset(a, 0, sizeof(*a));
  return a;
}

int fm_args_add(fm_args_t *args, int type, void *data, size_t count,
                int intent) {
  size_t es = type_size(type);
  if (args == NULL || es == 0 || type == FM_TYPE_PORT ||
      (data == NULL && count > 0) || intent < FM_IN || intent > FM_INOUT ||
      count > ((size_t)1 << 31) / es)
    return FM_EINVAL;
  struct fm_arg *a = arg_new(args);
  if (a == NULL)
    return FM_ENOMEM;
  a->data = malloc(count * es + 1);
  if (a->data == NULL)
    return FM_ENOMEM;
  if (count > 0)
    memcpy(a->data, data, count * es); /* copy in, now */
  a->type = type;
  a->intent = intent;
  a->count = count;
  a->caller = data;
  args->n++;
  return 0;
}

int fm_args_add_port(fm_args_t *args, fm_port_t *port) {
  if (args == NULL || port == NULL)
    return FM_EINVAL;
  if (fm_port_kind(port) == FM_UNDEFINED)
    return FM_EUNDEFINED;
  struct fm_arg *a = arg_new(args);
  if (a == NULL)
    return FM_ENOMEM;
  a->data = malloc(sizeof(fm_port_t));
  if (a->data == NULL)
    return FM_ENOMEM;
  fm_moveport(port, a->data);
  a->type = FM_TYPE_PORT;
  a->intent = FM_IN;
  a->count = 1;
  args->n++;
  return 0;
}

int fm_args_free(fm_args_t *args) {
  if (args == NULL)
    return FM_EINVAL;
  for (int i = 0; i < args->n; i++)
    free(args->a[i].data);
  free(args->a);
  free(args);
  return 0;
}

void *fm_args_data(fm_args_t *args, int i, int *type, size_t *count) {
  if (args == NULL || i < 0 || i >= args->n)
    return NULL;
  if (type != NULL)
    *type = args->a[i].type;
  if (count != NULL)
    *count = args->a[i].count;
  return args->a[i].data;
}

int fm_args_count(const fm_args_t *args) {
  return args == NULL ? FM_EINVAL : args->n;
}

static int values_put(nx_buffer_t *b, struct fm_arg *a) {
  if (a->type == FM_TYPE_PORT)
    return fm_put_port(b, a->data);
  return fmi_units_put(b, a->type, a->data, a->count);
}

static int values_get(nx_buffer_t *b, struct fm_arg *a) {
  if (a->type == FM_TYPE_PORT)
    return fm_get_port(b, a->data);
  return fmi_units_get(b, a->type, a->data, a->count);
}

/* Copy in: every argument's kind and values (ports move). */
static int args_put(nx_buffer_t *b, fm_args_t *args) {
  int r = nx_put_int32(b, args->n);
  for (int i = 0; i < args->n && r == 0; i++) {
    struct fm_arg *a = &args->a[i];
    r = nx_put_int32(b, a->type);
    if (r == 0)
      r = nx_put_int32(b, a->intent);
    if (r == 0)
      r = nx_put_uint64(b, a->count);
    if (r == 0)
      r = values_put(b, a);
  }
  return r;
}

static int args_get(nx_buffer_t *b, fm_args_t **out) {
  int32_t n;
  fm_args_t *args;
  int r = nx_get_int32(b, &n);
  if (r != 0)
    return r;
  if (n < 0 || n > 4096)
    return NX_EPROTO;
  if ((r = fm_args_create(&args)) != 0)
    return r;
  for (int32_t i = 0; i < n && r == 0; i++) {
    int32_t type, intent;
    uint64_t count;
    if ((r = nx_get_int32(b, &type)) || (r = nx_get_int32(b, &intent)) ||
        (r = nx_get_uint64(b, &count)))
      break;
    size_t es = type_size(type);
    if (es == 0 || count > nx_buffer_remaining(b) + 1) {
      r = NX_EPROTO;
      break;
    }
    struct fm_arg *a = arg_new(args);
    if (a == NULL || (a->data = calloc(count ? count : 1, es)) == NULL) {
      r = FM_ENOMEM;
      break;
    }
    a->type = type;
    a->intent = intent;
    a->count = count;
    args->n++;
    r = values_get(b, a);
  }
  if (r != 0) {
    fm_args_free(args);
    return r;
  }
  *out = args;
  return 0;
}

/* Copy back: the out/inout values, in order. */
static int outs_put(nx_buffer_t *b, fm_args_t *args) {
  int r = 0;
  for (int i = 0; i < args->n && r == 0; i++)
    if (args->a[i].intent & FM_OUT && args->a[i].type != FM_TYPE_PORT)
      r = values_put(b, &args->a[i]);
  return r;
}

static int outs_get(nx_buffer_t *b, fm_args_t *args) {
  int r = 0;
  for (int i = 0; i < args->n && r == 0; i++)
    if (args->a[i].intent & FM_OUT && args->a[i].type != FM_TYPE_PORT)
      r = values_get(b, &args->a[i]);
  return r;
}

/* ---- virtual computers -------------------------------------------------- */

struct fm_processors {
  int kind; /* enum fm_placement */
  int ndims;
  int dims[MAX_DIMS];
  int n;
  nx_node_t *nodes; /* FM_PLACE_PROCESS: one per processor */
  int owns_nodes;
};

static _Thread_local fm_processors_t *self_vc;

int fm_processors_create(const char *spec, int ndims, const int *dims,
                         fm_processors_t **vc) {
  if (spec == NULL || dims == NULL || vc == NULL || ndims < 1 ||
      ndims > MAX_DIMS)
    return FM_EINVAL;
  int n = 1;
  for (int i = 0; i < ndims; i++) {
    if (dims[i] < 1 || n > 4096 / dims[i])
      return FM_EINVAL;
    n *= dims[i];
  }
  fm_processors_t *v = calloc(1, sizeof(*v));
  if (v == NULL)
    return FM_ENOMEM;
  v->ndims = ndims;
  memcpy(v->dims, dims, (size_t)ndims * sizeof(int));
  v->n = n;
  if (strcmp(spec, "threads") == 0) {
    v->kind = FM_PLACE_THREAD;
  } else if (strcmp(spec, "contexts") == 0) {
    v->kind = FM_PLACE_CONTEXT;
  } else {
    v->kind = FM_PLACE_PROCESS;
    v->nodes = calloc((size_t)n, sizeof(nx_node_t));
    if (v->nodes == NULL) {
      free(v);
      return FM_ENOMEM;
    }
    int r = nx_nodes_acquire(spec, n, v->nodes);
    if (r != 0) {
      free(v->nodes);
      free(v);
      return r;
    }
    v->owns_nodes = 1;
  }
  *vc = v;
  return 0;
}

int fm_processors_free(fm_processors_t *vc) {
  if (vc == NULL)
    return FM_EINVAL;
  if (vc->owns_nodes)
    for (int i = 0; i < vc->n; i++)
      nx_node_release(&vc->nodes[i]);
  free(vc->nodes);
  free(vc);
  return 0;
}

int fm_processors_size(const fm_processors_t *vc) {
  return vc == NULL ? FM_EINVAL : vc->n;
}

int fm_processors_dims(const fm_processors_t *vc, int *dims) {
  if (vc == NULL)
    return FM_EINVAL;
  if (dims != NULL)
    memcpy(dims, vc->dims, (size_t)vc->ndims * sizeof(int));
  return vc->ndims;
}

static int vc_index(const fm_processors_t *vc, const int *coords) {
  int idx = 0;
  for (int i = 0; i < vc->ndims; i++) {
    if (coords[i] < 0 || coords[i] >= vc->dims[i])
      return FM_EINVAL;
    idx = idx * vc->dims[i] + coords[i];
  }
  return idx;
}

int fm_submachine(const fm_processors_t *vc, const int *lo, const int *hi,
                  fm_processors_t **sub) {
  if (vc == NULL || lo == NULL || hi == NULL || sub == NULL)
    return FM_EINVAL;
  int dims[MAX_DIMS], n = 1;
  for (int i = 0; i < vc->ndims; i++) {
    if (lo[i] < 0 || hi[i] >= vc->dims[i] || lo[i] > hi[i])
      return FM_EINVAL;
    dims[i] = hi[i] - lo[i] + 1;
    n *= dims[i];
  }
  fm_processors_t *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return FM_ENOMEM;
  s->kind = vc->kind;
  s->ndims = vc->ndims;
  memcpy(s->dims, dims, sizeof(dims));
  s->n = n;
  if (vc->nodes != NULL) {
    s->nodes = calloc((size_t)n, sizeof(nx_node_t));
    if (s->nodes == NULL) {
      free(s);
      return FM_ENOMEM;
    }
    /* Walk the sub-array in row-major order. */
    int c[MAX_DIMS];
    memcpy(c, lo, (size_t)vc->ndims * sizeof(int));
    for (int k = 0; k < n; k++) {
      s->nodes[k] = vc->nodes[vc_index(vc, c)];
      for (int d = vc->ndims - 1; d >= 0; d--) {
        if (++c[d] <= hi[d])
          break;
        c[d] = lo[d];
      }
    }
  }
  *sub = s;
  return 0;
}

const fm_processors_t *fm_processors_self(void) { return self_vc; }

/* ---- per-process data --------------------------------------------------- */

/* A process runs on its own thread from start to end (fm.run is a
 * NX_HANDLER_NEW_THREAD handler), so the thread's block is the process's,
 * whatever the placement. */
static _Thread_local void *pdata;
static _Thread_local size_t pdata_size;

void *fm_process_data(size_t size) {
  if (size == 0 || (pdata != NULL && size > pdata_size))
    return NULL;
  if (pdata == NULL) {
    pdata = calloc(1, size);
    pdata_size = pdata != NULL ? size : 0;
  }
  return pdata;
}

void fm_process_data_free(void) {
  free(pdata);
  pdata = NULL;
  pdata_size = 0;
}

int fm_location(const fm_processors_t *vc, const int *coords,
                fm_place_t *place) {
  if (vc == NULL || coords == NULL || place == NULL)
    return FM_EINVAL;
  int idx = vc_index(vc, coords);
  if (idx < 0)
    return idx;
  memset(place, 0, sizeof(*place));
  place->kind = vc->kind;
  place->vc = vc;
  place->index = idx;
  return 0;
}

static int vc_put(nx_buffer_t *b, const fm_processors_t *vc) {
  int r = nx_put_int32(b, vc != NULL);
  if (vc == NULL || r != 0)
    return r;
  r = nx_put_int32(b, vc->kind);
  if (r == 0)
    r = nx_put_int32(b, vc->ndims);
  if (r == 0)
    r = nx_put_int32_array(b, vc->dims, MAX_DIMS);
  if (r == 0)
    r = nx_put_int32(b, vc->nodes != NULL);
  for (int i = 0; vc->nodes != NULL && i < vc->n && r == 0; i++) {
    r = nx_put_uint32(b, vc->nodes[i].id);
    if (r == 0)
      r = nx_put_char_array(b, vc->nodes[i].host, sizeof(vc->nodes[i].host));
  }
  return r;
}

static int vc_get(nx_buffer_t *b, fm_processors_t **out) {
  int32_t has, kind, ndims, nodes;
  int r = nx_get_int32(b, &has);
  *out = NULL;
  if (r != 0 || !has)
    return r;
  fm_processors_t *v = calloc(1, sizeof(*v));
  if (v == NULL)
    return FM_ENOMEM;
  if ((r = nx_get_int32(b, &kind)) || (r = nx_get_int32(b, &ndims)) ||
      (r = nx_get_int32_array(b, v->dims, MAX_DIMS)) ||
      (r = nx_get_int32(b, &nodes)) || ndims < 1 || ndims > MAX_DIMS) {
    free(v);
    return r ? r : NX_EPROTO;
  }
  v->kind = kind;
  v->ndims = ndims;
  v->n = 1;
  for (int i = 0; i < ndims; i++) {
    if (v->dims[i] < 1 || v->dims[i] > 4096 || v->n * v->dims[i] > 4096) {
      free(v);
      return NX_EPROTO;
    }
    v->n *= v->dims[i];
  }
  if (nodes) {
    v->nodes = calloc((size_t)v->n, sizeof(nx_node_t));
    for (int i = 0; v->nodes != NULL && i < v->n && r == 0; i++) {
      r = nx_get_uint32(b, &v->nodes[i].id);
      if (r == 0)
        r = nx_get_char_array(b, v->nodes[i].host, sizeof(v->nodes[i].host));
      v->nodes[i].host[sizeof(v->nodes[i].host) - 1] = '\0';
    }
    if (v->nodes == NULL || r != 0) {
      fm_processors_free(v);
      return r ? r : FM_ENOMEM;
    }
  }
  *out = v;
  return 0;
}

/* ---- process blocks ------------------------------------------------------ */

struct member {
  fm_args_t *args;
  int done;
  int err;
  int made;      /* 1: in-process context, 2: process context, to end */
  nx_gp_t ctx;   /* the context it runs in */
  uint32_t proc; /* its OS process, when made == 2 */
};

struct fm_block {
  uint32_t magic;
  nx_mutex_t m;
  nx_cond_t c;
  struct member **mem;
  int n, cap, ndone;
  nx_gp_t self;
  struct fm_block *next; /* fm_g.blocks */
};

int fm_processes_begin(fm_block_t **block) {
  if (__atomic_load_n(&fm_g.init, __ATOMIC_ACQUIRE) <= 0)
    return FM_ENOTINIT;
  if (block == NULL)
    return FM_EINVAL;
  fm_block_t *b = calloc(1, sizeof(*b));
  if (b == NULL)
    return FM_ENOMEM;
  b->magic = FM_BLOCK_MAGIC;
  nx_mutex_init(&b->m);
  nx_cond_init(&b->c);
  int r = nx_gp_make(b, &b->self);
  if (r != 0) {
    free(b);
    return r;
  }
  nx_mutex_lock(&fm_g.m);
  b->next = fm_g.blocks;
  fm_g.blocks = b;
  nx_mutex_unlock(&fm_g.m);
  *block = b;
  return 0;
}

void fm_blocks_peer_dead(uint32_t proc) {
  nx_mutex_lock(&fm_g.m);
  for (fm_block_t *b = fm_g.blocks; b != NULL; b = b->next) {
    nx_mutex_lock(&b->m);
    for (int i = 0; i < b->n; i++) {
      struct member *mb = b->mem[i];
      if (mb != NULL && mb->made == 2 && mb->proc == proc && !mb->done) {
        mb->done = 1;
        mb->err = FM_EPEERDEAD;
        b->ndone++;
      }
    }
    nx_cond_broadcast(&b->c);
    nx_mutex_unlock(&b->m);
  }
  nx_mutex_unlock(&fm_g.m);
}

static int ctx_init(nx_context_t *ctx, void *arg) {
  (void)arg;
  return fm_register_handlers(ctx);
}

/* Makes (or names) the context a process call runs in. */
static int place_context(const fm_place_t *place, struct member *mb) {
  int kind = place != NULL && place->kind != 0 ? place->kind : FM_PLACE_CONTEXT;
  switch (kind) {
  case FM_PLACE_THREAD: return nx_gp_make(NULL, &mb->ctx);
  case FM_PLACE_CONTEXT: {
    int r = nx_context_create_local(ctx_init, NULL, &mb->ctx);
    if (r == 0)
      mb->made = 1;
    return r;
  }
  case FM_PLACE_PROCESS: {
    nx_node_t local[1];
    const nx_node_t *node = NULL;
    const fm_processors_t *vc = place->sub != NULL ? place->sub : place->vc;
    int idx = place->sub != NULL ? 0 : place->index;
    if (vc != NULL && vc->nodes != NULL && idx >= 0 && idx < vc->n) {
      node = &vc->nodes[idx];
    } else {
      int r = nx_nodes_acquire("localhost", 1, local);
      if (r != 0)
        return r;
      node = local;
    }
    char *argv[] = {fm_g.exe, "--fm-child", NULL};
    int r = nx_context_create(node, fm_g.exe, argv, &mb->ctx);
    if (node == local)
      nx_node_release(local);
    if (r == 0) {
      mb->made = 2;
      mb->proc = (uint32_t)(nx_gp_context(&mb->ctx) >> 32);
    }
    return r;
  }
  default: return FM_EINVAL;
  }
}

int fm_processcall(fm_block_t *block, const char *name, const fm_place_t *place,
                   fm_args_t *args) {
  fm_args_t *empty = NULL;
  if (block == NULL || block->magic != FM_BLOCK_MAGIC || name == NULL ||
      strlen(name) >= NAME_MAX_LEN) {
    if (args != NULL)
      fm_args_free(args);
    return FM_EINVAL;
  }
  if (args == NULL) {
    if (fm_args_create(&empty) != 0)
      return FM_ENOMEM;
    args = empty;
  }
  struct member *mb = calloc(1, sizeof(*mb));
  int r = mb == NULL ? FM_ENOMEM : 0;
  nx_mutex_lock(&block->m);
  if (r == 0 && block->n == block->cap) {
    int cap = block->cap ? block->cap * 2 : 8;
    struct member **n = realloc(block->mem, (size_t)cap * sizeof(*n));
    if (n == NULL)
      r = FM_ENOMEM;
    else {
      block->mem = n;
      block->cap = cap;
    }
  }
  int idx = block->n;
  if (r == 0) {
    mb->args = args;
    block->mem[block->n++] = mb;
  }
  nx_mutex_unlock(&block->m);
  if (r != 0) {
    free(mb);
    fm_args_free(args);
    return r;
  }
  /* From here the member counts: on error it is done with that error. */
  nx_buffer_t *b = NULL;
  char nm[NAME_MAX_LEN] = {0};
  snprintf(nm, sizeof(nm), "%s", name);
  r = place_context(place, mb);
  if (r == 0)
    r = nx_rsr_init(&b, &mb->ctx, fm_g.h_run, 256);
  if (r == 0) {
    const fm_processors_t *vc = place == NULL        ? NULL
                                : place->sub != NULL ? place->sub
                                                     : place->vc;
    if ((r = nx_put_char_array(b, nm, NAME_MAX_LEN)) == 0 &&
        (r = nx_put_gp(b, &block->self)) == 0 &&
        (r = nx_put_int32(b, idx)) == 0 && (r = vc_put(b, vc)) == 0)
      r = args_put(b, args);
    if (r == 0)
      r = nx_rsr_send(b);
    else
      nx_buffer_release(b);
  }
  if (r != 0) {
    nx_mutex_lock(&block->m);
    mb->done = 1;
    mb->err = r;
    block->ndone++;
    nx_mutex_unlock(&block->m);
  }
  return r;
}

/* "fm.run" (a new thread in the process's context): unpack, run, report. */
void fm_h_run(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  char name[NAME_MAX_LEN];
  nx_gp_t block = NX_GP_NULL;
  int32_t idx;
  fm_args_t *args = NULL;
  fm_processors_t *vc = NULL;
  if (nx_get_char_array(buf, name, NAME_MAX_LEN) != 0 ||
      nx_get_gp(buf, &block) != 0)
    return;
  name[NAME_MAX_LEN - 1] = '\0';
  int status = nx_get_int32(buf, &idx);
  if (status == 0)
    status = vc_get(buf, &vc);
  if (status == 0)
    status = args_get(buf, &args);
  fm_process_fn fn = status == 0 ? lookup(name) : NULL;
  if (status == 0 && fn == NULL)
    status = FM_ENOPROCESS;
  if (status == 0) {
    self_vc = vc;
    fn(args);
    self_vc = NULL;
    fm_process_data_free();
  }
  nx_buffer_t *out;
  if (nx_rsr_init(&out, &block, fm_g.h_done, 64) == 0) {
    int r = nx_put_int32(out, idx);
    if (r == 0)
      r = nx_put_int32(out, status);
    if (r == 0 && status == 0)
      r = outs_put(out, args);
    if (r == 0)
      nx_rsr_send(out);
    else
      nx_buffer_release(out);
  }
  if (args != NULL)
    fm_args_free(args);
  if (vc != NULL)
    fm_processors_free(vc);
  nx_gp_release(&block);
}

/* "fm.done" (the block's context): a process ended; keep its outputs. */
void fm_h_done(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  fm_block_t *b = addr;
  int32_t idx, status;
  if (b == NULL || nx_get_int32(buf, &idx) != 0 ||
      nx_get_int32(buf, &status) != 0)
    return;
  nx_mutex_lock(&b->m);
  if (b->magic == FM_BLOCK_MAGIC && idx >= 0 && idx < b->n &&
      b->mem[idx] != NULL && !b->mem[idx]->done) {
    struct member *mb = b->mem[idx];
    if (status == 0)
      status = outs_get(buf, mb->args);
    mb->err = status;
    mb->done = 1;
    b->ndone++;
    nx_cond_broadcast(&b->c);
  }
  nx_mutex_unlock(&b->m);
}

int fm_processes_end(fm_block_t *block) {
  if (block == NULL || block->magic != FM_BLOCK_MAGIC)
    return FM_EINVAL;
  nx_mutex_lock(&block->m);
  while (block->ndone < block->n)
    nx_cond_wait(&block->c, &block->m);
  nx_mutex_unlock(&block->m);
  int err = 0;
  for (int i = 0; i < block->n; i++) {
    struct member *mb = block->mem[i];
    if (mb->err != 0 && err == 0)
      err = mb->err;
    fm_args_t *a = mb->args;
    for (int j = 0; mb->err == 0 && j < a->n; j++) /* copy back, in order */
      if (a->a[j].intent & FM_OUT && a->a[j].caller != NULL)
        memcpy(a->a[j].caller, a->a[j].data,
               a->a[j].count * type_size(a->a[j].type));
    if (mb->made == 2)
      fm_mark_ended(mb->proc); /* its exit is not a death */
    if (mb->made != 0)
      nx_context_destroy(&mb->ctx);
    nx_gp_release(&mb->ctx);
    fm_args_free(a);
    /* Out of the block before it is freed: a death reported meanwhile (on
     * a runtime thread, fm_blocks_peer_dead) walks the block's members. */
    nx_mutex_lock(&block->m);
    block->mem[i] = NULL;
    nx_mutex_unlock(&block->m);
    free(mb);
  }
  /* The memory stays on fm_g.blocks until fm_finalize: a late "fm.done"
   * (after a death was reported) finds a closed block, not freed memory. */
  nx_mutex_lock(&block->m);
  block->magic = 0;
  block->n = block->ndone = 0;
  nx_mutex_unlock(&block->m);
  return err;
}

void fm_blocks_free(void) {
  while (fm_g.blocks != NULL) {
    fm_block_t *b = fm_g.blocks;
    fm_g.blocks = b->next;
    free(b->mem);
    nx_gp_release(&b->self);
    nx_cond_destroy(&b->c);
    nx_mutex_destroy(&b->m);
    free(b);
  }
}
