/* The event log a process writes under NX_TRACE=<dir> (base/trace.c), read
 * by nxtrace (nexus/tools), which turns the logs of a computation into one
 * OTF2 archive (docs/tracing.md). Shared by both: plain C, no runtime types.
 *
 * One file per process, <dir>/<proc id, 8 hex digits>-<pid>.nxt, in the
 * writer's byte order (nxtrace reads little- and big-endian logs): a
 * struct nxt_file_hdr, then chunks. A chunk is a struct nxt_chunk and
 * `bytes` of records of one thread, written whole with one write(2): a
 * process that dies leaves a log readable up to its last whole chunk.
 *
 * Records are 8-byte aligned and start with their type. The three that
 * come with every RSR (a send, a handler's begin and end) have compact
 * forms of their own (32, 32 and 16 bytes, 24 for an end on another
 * thread than its begin); every other is a struct nxt_rec (48 bytes). A
 * definition (NXT_DEF_*) is followed by its name: `bytes` of text, no
 * terminating NUL, padded with zeros to a multiple of
 * 8. nxt_decode turns any record into a struct nxt_rec. */
#ifndef NXI_TRACE_FORMAT_H
#define NXI_TRACE_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define NXT_MAGIC "NXTRACE1"
#define NXT_VERSION 2u
#define NXT_CHUNK_MAGIC 0x4e585443u /* "NXTC" */

struct nxt_file_hdr {
  char magic[8];         /* NXT_MAGIC, no NUL */
  uint32_t version;      /* NXT_VERSION */
  uint32_t proc_id;      /* the high 32 bits of this process's context ids */
  uint64_t pid;          /* its operating-system process id */
  uint64_t mono0, real0; /* CLOCK_MONOTONIC and CLOCK_REALTIME, ns, read
                            together when the log began */
  uint8_t host_uuid[16]; /* the host's identity (NX_HOST_ID or machine-id) */
  char host[64];         /* its name, NUL-terminated */
};

/* Records hold stamps in ticks of a counter (the CPU's time-stamp counter,
 * or ns where the writer has none it trusts). A chunk maps them to
 * CLOCK_MONOTONIC ns with two pairs of (ticks, ns) read together, at its
 * start and when it was written: nxt_ns. */
struct nxt_chunk {
  uint32_t magic;  /* NXT_CHUNK_MAGIC */
  uint32_t bytes;  /* of records that follow, a multiple of 8 */
  uint64_t thread; /* the writing thread, unique in the process */
  uint64_t tick0, mono0, tick1, mono1;
  /* The thread numbers its handler runs 1, 2, ...: a run's number (x of
   * BEGIN and END) is thread << 40 | that. runs0: how many it had begun
   * before this chunk; each BEGIN in it is the next (nxt_decode). */
  uint64_t runs0;
};

/* One event in its general form. `t` is a stamp (CLOCK: ns). Fields a
 * type does not name are 0. */
struct nxt_rec {
  uint8_t type;     /* enum nxt_type */
  uint8_t module;   /* a module's index (NXT_DEF_MODULE), 0xff: none */
  uint16_t flags;   /* NXT_F_* */
  uint32_t handler; /* a handler id (nx_handler_id) */
  uint32_t bytes;   /* payload bytes (UINT32_MAX: that many or more) */
  uint32_t aux;     /* see the types */
  uint64_t t;
  uint64_t ctx;  /* the context it happened in (0: none, the process) */
  uint64_t peer; /* the other context, see the types */
  uint64_t x;    /* see the types */
};

/* The compact forms. A send and a begin (NXT_SEND_C, NXT_BEGIN_C): `ctx`
 * is the low half of a context id of the writing process (its high half
 * is the log's proc_id; 0: none); a begin's run is its chunk's next
 * (struct nxt_chunk, runs0). An end on its begin's thread (NXT_END_S)
 * holds the low 32 bits of its run's number in that thread; on another
 * (NXT_END_C), the run's number whole. */
struct nxt_send {
  uint8_t type, module;
  uint16_t flags;
  uint32_t handler;
  uint32_t ctx, bytes;
  uint64_t peer;
  uint64_t t;
};
struct nxt_end_s {
  uint8_t type, pad8;
  uint16_t flags;
  uint32_t run;
  uint64_t t;
};
struct nxt_end {
  uint8_t type, pad8;
  uint16_t flags;
  uint32_t pad32;
  uint64_t t;
  uint64_t x;
};

enum nxt_type {
  /* An RSR of the program's handed to a module: ctx its sender's context,
   * peer its destination, handler, bytes, module, flags ORDERED, BYREF. */
  NXT_SEND = 1,
  /* A handler starts and ends: ctx the context it runs in, peer the
   * sender's context (BEGIN), handler, bytes (BEGIN), flags THREADED, x
   * the run's number (the same in both, unique in the process). A
   * threaded handler that blocked ends where it resumed: on another
   * thread, its END has flag MOVED; on the same one, other handlers may
   * have begun and ended in between (their runs do not nest in it). An
   * END names only its run (ctx, peer, handler and bytes 0): its BEGIN
   * has the rest. */
  NXT_BEGIN = 2,
  NXT_END = 3,
  /* A send waits for a full queue (the module said NX_EAGAIN): peer the
   * destination, module. */
  NXT_WAIT_BEGIN = 4,
  NXT_WAIT_END = 5,
  /* The route to a process failed over: peer a context of that process,
   * module the new route's module (0xff: none left), aux the old one's. */
  NXT_FALLBACK = 6,
  /* A gateway passed an RSR on: peer its destination, handler, bytes,
   * module the next hop's (0xff: not known yet), x its sender's context. */
  NXT_HOP = 7,
  /* Processes: CREATE when this process started one (peer 0: not known
   * yet, aux its pid), READY when it answered (peer its initial context,
   * aux its pid), LOSS when a process was found lost (peer a context of
   * it: its id's high 32 bits name it; aux the error, as a positive
   * number: -NX_E*), FINALIZE when this process began nx_finalize. */
  NXT_PROC_CREATE = 8,
  NXT_PROC_READY = 9,
  NXT_PROC_LOSS = 10,
  NXT_FINALIZE = 11,
  /* A context of this process was created (ctx) or destroyed. */
  NXT_CONTEXT_CREATE = 12,
  NXT_CONTEXT_DESTROY = 13,
  /* The clocks read together: t CLOCK_MONOTONIC and x CLOCK_REALTIME, in
   * ns (at the log's start, once a second while records come, and at its
   * end). */
  NXT_CLOCK = 14,
  /* This process's clock against another's, measured (a confirmation's
   * question and answer, services/confirm.c): peer a context of that
   * process (its id's high 32 bits name it), x the other's
   * CLOCK_MONOTONIC minus this one's at `t`, in ns, as a signed number,
   * aux the round trip in ns (the estimate is off by at most half of it;
   * UINT32_MAX: that long or longer). */
  NXT_OFFSET = 15,
  /* Names: a handler's (handler; ctx the context that registered it) and
   * a module's (module). `bytes` of name follow. */
  NXT_DEF_HANDLER = 32,
  NXT_DEF_MODULE = 33,
  /* The compact forms of SEND, BEGIN and END (nxt_decode). */
  NXT_SEND_C = 64,
  NXT_BEGIN_C = 65,
  NXT_END_C = 66,
  NXT_END_S = 67,
};

enum nxt_flag {
  NXT_F_ORDERED = 1 << 0,  /* NX_RSR_ORDERED */
  NXT_F_BYREF = 1 << 1,    /* values put by reference (nx_put_*_ref) */
  NXT_F_THREADED = 1 << 2, /* a threaded (or new-thread) handler */
  NXT_F_MOVED = 1 << 3,    /* END on another thread than its BEGIN */
};

static inline uint16_t nxt_sw16(uint16_t v, int s) {
  return s ? (uint16_t)(v >> 8 | v << 8) : v;
}
static inline uint32_t nxt_sw32(uint32_t v, int s) {
  return s ? __builtin_bswap32(v) : v;
}
static inline uint64_t nxt_sw64(uint64_t v, int s) {
  return s ? __builtin_bswap64(v) : v;
}

/* What decoding a chunk's records carries from one to the next: its
 * thread and how many runs that thread had begun (start from the chunk's
 * thread and runs0, in host byte order). */
struct nxt_dstate {
  uint64_t thread, runs;
};

/* The record at `p`, with `avail` bytes left in its chunk, written in the
 * other byte order if `swap`, in its general form in `*r` (its stamp still
 * in ticks; a compact record's context completed with `proc`, a run's
 * number with `st`, which it updates). Returns its length in bytes, a
 * definition's padded name included (the name starts at p + sizeof(struct
 * nxt_rec)), or 0 when it runs past `avail`. A type this reader does not
 * know is read as a struct nxt_rec. */
static inline size_t nxt_decode(const void *p, size_t avail, int swap,
                                uint32_t proc, struct nxt_dstate *st,
                                struct nxt_rec *r) {
  const uint8_t *b = p;
  memset(r, 0, sizeof(*r));
  if (avail < 8)
    return 0;
  size_t len;
  switch (b[0]) {
  case NXT_SEND_C:
  case NXT_BEGIN_C: {
    struct nxt_send c;
    if (avail < sizeof(c))
      return 0;
    memcpy(&c, b, sizeof(c));
    uint32_t lo = nxt_sw32(c.ctx, swap);
    r->type = b[0] == NXT_SEND_C ? NXT_SEND : NXT_BEGIN;
    r->module = c.module;
    r->flags = nxt_sw16(c.flags, swap);
    r->handler = nxt_sw32(c.handler, swap);
    r->bytes = nxt_sw32(c.bytes, swap);
    r->ctx = lo != 0 ? (uint64_t)proc << 32 | lo : 0;
    r->peer = nxt_sw64(c.peer, swap);
    r->t = nxt_sw64(c.t, swap);
    if (r->type == NXT_BEGIN)
      r->x = st->thread << 40 | (++st->runs & ((1ull << 40) - 1));
    return sizeof(c);
  }
  case NXT_END_S: {
    struct nxt_end_s c;
    memcpy(&c, b, sizeof(c));
    r->type = NXT_END;
    r->module = 0xff;
    r->flags = nxt_sw16(c.flags, swap);
    r->t = nxt_sw64(c.t, swap);
    /* The run begun last with those low bits. */
    uint64_t n = (st->runs & ~0xffffffffull) | nxt_sw32(c.run, swap);
    if (n > st->runs && n >= (1ull << 32))
      n -= 1ull << 32;
    r->x = st->thread << 40 | (n & ((1ull << 40) - 1));
    return sizeof(c);
  }
  case NXT_END_C: {
    struct nxt_end c;
    if (avail < sizeof(c))
      return 0;
    memcpy(&c, b, sizeof(c));
    r->type = NXT_END;
    r->module = 0xff;
    r->flags = nxt_sw16(c.flags, swap);
    r->t = nxt_sw64(c.t, swap);
    r->x = nxt_sw64(c.x, swap);
    return sizeof(c);
  }
  default:
    if (avail < sizeof(*r))
      return 0;
    memcpy(r, b, sizeof(*r));
    r->flags = nxt_sw16(r->flags, swap);
    r->handler = nxt_sw32(r->handler, swap);
    r->bytes = nxt_sw32(r->bytes, swap);
    r->aux = nxt_sw32(r->aux, swap);
    r->t = nxt_sw64(r->t, swap);
    r->ctx = nxt_sw64(r->ctx, swap);
    r->peer = nxt_sw64(r->peer, swap);
    r->x = nxt_sw64(r->x, swap);
    len = sizeof(*r);
    if (r->type == NXT_BEGIN)
      st->runs++; /* numbered as a compact one, its number written */
    if (r->type == NXT_DEF_HANDLER || r->type == NXT_DEF_MODULE) {
      size_t name = ((size_t)r->bytes + 7) & ~(size_t)7;
      if (name > avail - len)
        return 0;
      len += name;
    }
    return len;
  }
}

/* A stamp of chunk `c` (in host byte order) in CLOCK_MONOTONIC ns:
 * exact in integers where it fits (always, but for a damaged chunk's
 * pairs), saturated at 0 and UINT64_MAX. */
static inline uint64_t nxt_ns(const struct nxt_chunk *c, uint64_t tick) {
  __int128 d = (__int128)tick - c->tick0;
  __int128 dm = (__int128)c->mono1 - c->mono0;
  __int128 dt = (__int128)c->tick1 - c->tick0;
  __int128 ns;
  if (dt == 0) {
    ns = d;
  } else if (!__builtin_mul_overflow(d, dm, &ns)) {
    ns /= dt;
  } else {
    long double x = (long double)d * (long double)dm / (long double)dt;
    ns = x > 1e30L    ? (__int128)1e30L
         : x < -1e30L ? -(__int128)1e30L
                      : (__int128)x;
  }
  ns += c->mono0;
  return ns < 0 ? 0 : ns > (__int128)UINT64_MAX ? UINT64_MAX : (uint64_t)ns;
}

#endif
