/* The event log a process writes under NX_TRACE=<dir> (base/trace.c), read
 * by nxtrace (nexus/tools), which turns the logs of a computation into one
 * OTF2 archive (docs/tracing.md). Shared by both: plain C, no runtime types.
 *
 * One file per process, <dir>/<proc id, 8 hex digits>-<pid>.nxt, in the
 * writer's byte order (nxtrace reads little- and big-endian logs): a
 * struct nxt_file_hdr, then chunks. A chunk is a struct nxt_chunk and its
 * `count` records of one thread, written whole with one write(2): a
 * process that dies leaves a log readable up to its last whole chunk. A
 * definition record (NXT_DEF_*) is followed by the records that hold its
 * name (`bytes` of text, no terminating NUL, in the same chunk). */
#ifndef NXI_TRACE_FORMAT_H
#define NXI_TRACE_FORMAT_H

#include <stdint.h>

#define NXT_MAGIC "NXTRACE1"
#define NXT_VERSION 1u
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

struct nxt_chunk {
  uint32_t magic;  /* NXT_CHUNK_MAGIC */
  uint32_t count;  /* records that follow */
  uint64_t thread; /* the writing thread, unique in the process */
};

/* One event, 48 bytes. `t` is CLOCK_MONOTONIC in ns. Fields a type does
 * not name are 0. */
struct nxt_rec {
  uint64_t t;
  uint64_t ctx;     /* the context it happened in (0: none, the process) */
  uint64_t peer;    /* the other context, see the types */
  uint64_t x;       /* see the types */
  uint32_t handler; /* a handler id (nx_handler_id) */
  uint32_t bytes;   /* payload bytes (UINT32_MAX: that many or more) */
  uint8_t type;     /* enum nxt_type */
  uint8_t module;   /* a module's index (NXT_DEF_MODULE), 0xff: none */
  uint16_t flags;   /* NXT_F_* */
  uint32_t aux;     /* see the types */
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
   * have begun and ended in between (their runs do not nest in it). */
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
  /* The clocks read together: x CLOCK_REALTIME at `t` (at the log's
   * start, at each flush of the process's log, and at its end). */
  NXT_CLOCK = 14,
  /* Names: a handler's (handler; ctx the context that registered it) and
   * a module's (module). `bytes` of name follow in the next records. */
  NXT_DEF_HANDLER = 32,
  NXT_DEF_MODULE = 33,
};

enum nxt_flag {
  NXT_F_ORDERED = 1 << 0,  /* NX_RSR_ORDERED */
  NXT_F_BYREF = 1 << 1,    /* values put by reference (nx_put_*_ref) */
  NXT_F_THREADED = 1 << 2, /* a threaded (or new-thread) handler */
  NXT_F_MOVED = 1 << 3,    /* END on another thread than its BEGIN */
};

#endif
