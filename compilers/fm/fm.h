/* libfm: the run-time library a Fortran M compiler calls (channels, mergers,
 * movable ports, process blocks, virtual computers) on nexus. */
#ifndef FM_H
#define FM_H

#include <stddef.h>
#include <stdint.h>

#include <nexus.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes: 0 is success, FM_END a receive's end of channel, the rest
 * are negative. Calls may also return a nexus code (NX_*), which
 * fm_strerror describes too. */
enum fm_errno {
  FM_END = 1,            /* receive: every outport sent endchannel */
  FM_EINVAL = -5001,     /* invalid argument */
  FM_EUNDEFINED = -5002, /* the port is undefined (moved or never set) */
  FM_EWRONGPORT = -5003, /* receive/probe on an outport, send on an inport */
  FM_EMOVED = -5004,     /* the inport moved away while a thread waited */
  FM_EPEERDEAD = -5005,  /* a process of the computation died */
  FM_ENOPROCESS = -5006, /* no process registered under that name */
  FM_ENDED = -5007,      /* send after endchannel on that outport */
  FM_ENOTINIT = -5008,   /* fm_init was not called */
  FM_ETYPE = -5009,      /* an argument of another type or size */
  FM_ENOMEM = -5010,     /* out of memory */
  FM_EDUPLICATE = -5011  /* a copy of an outport wrote: a second writer */
};

/* A short English description of any FM_* or NX_* code. */
const char *fm_strerror(int err);

/* Starts nexus and libfm. Register every process (fm_register) first: in
 * a process context libfm started, fm_init does not return; it serves the
 * process calls sent to it and exits the program when its creator ends it.
 * argc/argv may be NULL. Calls nest with fm_finalize. Returns 0 or an
 * NX_* code of nx_init. */
int fm_init(int *argc, char ***argv);
int fm_finalize(void);

/* ---- Ports and channels ---------------------------------------------- */

/* A port is a plain value of 64 bytes (Fortran: type(fm_inport) and
 * type(fm_outport)); its members are private. A zeroed port is undefined. */
typedef struct fm_port {
  uint64_t priv[8];
} fm_port_t;

enum fm_port_kind { FM_UNDEFINED = 0, FM_INPORT = 1, FM_OUTPORT = 2 };

/* FM_INPORT, FM_OUTPORT or FM_UNDEFINED (also for NULL). */
int fm_port_kind(const fm_port_t *port);

/* channel(in=in, out=out): a queue in the calling thread's context. */
int fm_channel(fm_port_t *in, fm_port_t *out);

/* merger(in=in, out=(outs(i), i=1,n)): one queue, n outports, FIFO order
 * per outport. */
int fm_merger(fm_port_t *in, fm_port_t *outs, int n);

/* MOVEPORT(from=from, to=to): to gets the port, from becomes undefined. */
int fm_moveport(fm_port_t *from, fm_port_t *to);

/* SEND in three steps: start a message on an outport, pack its values
 * with nx_put_* and fm_put_port, then send it (asynchronous: it never
 * waits for the receiver). fm_send_begin returns FM_EUNDEFINED,
 * FM_EWRONGPORT, FM_ENDED, FM_EPEERDEAD (the queue's process died) or
 * FM_EDUPLICATE (this outport is a stale copy of one that sent or moved
 * since: nothing is sent, and the channel's receiver is told); a
 * started message must be ended with fm_send_end or, before any other
 * message on that outport, fm_send_abort. */
int fm_send_begin(fm_port_t *out, size_t size_hint, nx_buffer_t **msg);
int fm_send_end(nx_buffer_t *msg);
int fm_send_abort(fm_port_t *out, nx_buffer_t *msg);

/* ENDCHANNEL: the last message of this outport; later sends: FM_ENDED. */
int fm_endchannel(fm_port_t *out);

/* RECEIVE: waits for the next message and gives it in *msg, read with
 * nx_get_* and fm_get_port, then freed with fm_msg_free. Returns 0;
 * FM_END after every outport sent endchannel (again on each later call);
 * FM_EWRONGPORT, FM_EUNDEFINED, FM_EMOVED; FM_EDUPLICATE once for each
 * send a stale copy of one of its outports tried; FM_EPEERDEAD when the queue
 * is empty and a process of the computation has died (never waits forever for a
 * dead writer). */
int fm_receive(fm_port_t *in, nx_buffer_t **msg);
int fm_msg_free(nx_buffer_t *msg);

/* PROBE(in, empty=e): 1 when a receive would not wait (a message, the end,
 * or an error), 0 when it would. Or a negative error. */
int fm_probe(fm_port_t *in);

/* Ports travel in messages. Putting one moves it: the sender's copy becomes
 * undefined. An inport takes its queue along: queued messages go with it,
 * and messages still arriving at the old place are forwarded (docs/fm.md).
 * fm_get_port makes the port live in the calling thread's context.
 * fm_put_port of a stale copy of an outport returns FM_EDUPLICATE. */
int fm_put_port(nx_buffer_t *msg, fm_port_t *port);
int fm_get_port(nx_buffer_t *msg, fm_port_t *port);

/* The Fortran binding's fm_send puts a contiguous array of at least `bytes`
 * bytes by reference (zero copy) and waits until nexus no longer reads it;
 * smaller ones, and all when `bytes` is 0, are copied into the message.
 * Process-wide; the default is 32768. Returns the previous value. */
size_t fm_zerocopy_min(size_t bytes);

/* One-value messages in C: one typed value (fm_put_values), as the Fortran
 * binding sends it, so C and Fortran programs talk to each other. */
int fm_send_int32(fm_port_t *out, int32_t v);
int fm_send_int32_array(fm_port_t *out, const int32_t *v, size_t n);
int fm_send_double_array(fm_port_t *out, const double *v, size_t n);
int fm_receive_int32(fm_port_t *in, int32_t *v);
int fm_receive_int32_array(fm_port_t *in, int32_t *v, size_t n);
int fm_receive_double_array(fm_port_t *in, double *v, size_t n);

/* ---- Processes -------------------------------------------------------- */

/* Process arguments: the values a process call copies in, and (INTENT out
 * and inout) copies back when the block ends. */
typedef struct fm_args fm_args_t;

enum fm_intent { FM_IN = 1, FM_OUT = 2, FM_INOUT = 3 };

/* Value types: every intrinsic type and kind of Fortran (gfortran), and
 * ports. A value travels with its type, count and length, and its values go
 * through nexus's typed puts, so byte order converts (docs/fm.md). */
enum fm_type {
  FM_TYPE_INT32 = 1,
  FM_TYPE_INT64 = 2,
  FM_TYPE_FLOAT = 3,  /* real(4) */
  FM_TYPE_DOUBLE = 4, /* real(8) */
  FM_TYPE_CHAR = 5,   /* character(kind=1): count is in characters */
  FM_TYPE_PORT = 6,
  FM_TYPE_INT8 = 7,
  FM_TYPE_INT16 = 8,
  FM_TYPE_INT128 = 9,     /* integer(16), __int128 */
  FM_TYPE_REAL10 = 10,    /* real(10): x87 extended, in 16 bytes */
  FM_TYPE_REAL16 = 11,    /* real(16): IEEE binary128 */
  FM_TYPE_COMPLEX4 = 12,  /* complex(4): two real(4) */
  FM_TYPE_COMPLEX8 = 13,  /* complex(8) */
  FM_TYPE_COMPLEX10 = 14, /* complex(10) */
  FM_TYPE_COMPLEX16 = 15, /* complex(16) */
  FM_TYPE_LOGICAL1 = 16,  /* logical(1): 0 or 1 in an integer of its size */
  FM_TYPE_LOGICAL2 = 17,
  FM_TYPE_LOGICAL4 = 18,
  FM_TYPE_LOGICAL8 = 19,
  FM_TYPE_LOGICAL16 = 20,
  FM_TYPE_UCS4 = 21, /* character(kind=4): count is in characters */
  FM_TYPE_MAX = 21
};

/* The size in memory of one value of `type` (one character for the
 * character types); 0 for an unknown type. */
size_t fm_type_size(int type);

/* A typed value in a message: `count` values of `type` from `v`
 * (contiguous). fm_get_values reads one back into `v`: the same type and
 * count, or FM_ETYPE (a character value may also be read whole into a
 * count of that many characters). Return 0, FM_EINVAL, FM_ETYPE,
 * FM_ENOMEM or an NX_* code of the put or get. */
int fm_put_values(nx_buffer_t *msg, int type, const void *v, size_t count);
int fm_get_values(nx_buffer_t *msg, int type, void *v, size_t count);

/* A process: runs with its arguments; reads and writes them in place. */
typedef void (*fm_process_fn)(fm_args_t *args);

/* Registers a process under a name (at most 63 characters). Call before
 * fm_init, in every run of the program. Returns 0, FM_EINVAL or FM_ENOMEM. */
int fm_register(const char *name, fm_process_fn fn);

/* Caller side: an argument list, filled in order. `data` points at
 * `count` values of `type`, copied now; with FM_OUT/FM_INOUT they are
 * copied back into `data` by fm_processes_end, so it must stay valid
 * until then. A port argument is moved to the process (FM_IN only). */
int fm_args_create(fm_args_t **args);
int fm_args_add(fm_args_t *args, int type, void *data, size_t count,
                int intent);
int fm_args_add_port(fm_args_t *args, fm_port_t *port);
int fm_args_free(fm_args_t *args);

/* Process side: argument i (0-based) in place, its type and count. Returns
 * NULL for a bad index. A port argument is an fm_port_t. */
void *fm_args_data(fm_args_t *args, int i, int *type, size_t *count);
int fm_args_count(const fm_args_t *args);

/* Per-process data: a zeroed block of `size` bytes that belongs to the
 * calling process (the main program is one too) in every placement, where
 * threads and in-process contexts share static and global variables. The
 * first call makes it; later calls return the same block (NULL if they ask
 * for more). libfm frees it when the process returns (the main program's
 * at fm_finalize). NULL for size 0 or out of memory. */
void *fm_process_data(size_t size);

/* ---- Virtual computers ------------------------------------------------ */

typedef struct fm_processors fm_processors_t;

/* Where processes of a virtual computer run. */
enum fm_placement {
  FM_PLACE_THREAD = 1,  /* a thread in the calling context */
  FM_PLACE_CONTEXT = 2, /* a new in-process context (FM's default) */
  FM_PLACE_PROCESS = 3  /* a new process context on the node */
};

/* PROCESSORS(d1, d2, ...): a virtual computer of ndims dims (1..4).
 * `spec` says what its processors are: "threads" and "contexts" (this
 * process, FM_PLACE_THREAD / FM_PLACE_CONTEXT), or a nexus node spec
 * ("localhost", "mpi:host=a,b", ...: one node per processor, each process
 * in a new process context there). Returns 0, FM_EINVAL, FM_ENOMEM or the
 * nx_nodes_acquire code. */
int fm_processors_create(const char *spec, int ndims, const int *dims,
                         fm_processors_t **vc);
int fm_processors_free(fm_processors_t *vc);
int fm_processors_size(const fm_processors_t *vc);
/* Its number of dims, and (if dims is not NULL) the dims themselves. */
int fm_processors_dims(const fm_processors_t *vc, int *dims);

/* SUBMACHINE: the sub-array lo..hi (0-based, inclusive, per dim) as a new
 * virtual computer with the same nodes. */
int fm_submachine(const fm_processors_t *vc, const int *lo, const int *hi,
                  fm_processors_t **sub);

/* The virtual computer a process was given (the submachine or the
 * processor it was placed on), inside a process; NULL elsewhere. Owned by
 * libfm. */
const fm_processors_t *fm_processors_self(void);

/* Where a process call runs: a placement kind and, for a virtual computer,
 * the processor (LOCATION) or sub-array (SUBMACHINE). */
typedef struct fm_place {
  int kind; /* enum fm_placement; 0 means FM_PLACE_CONTEXT */
  const fm_processors_t *vc;
  int index;                  /* LOCATION: row-major processor index */
  const fm_processors_t *sub; /* SUBMACHINE, or NULL */
} fm_place_t;

/* LOCATION(vc(c1, c2, ...)): the place of processor `coords` (0-based). */
int fm_location(const fm_processors_t *vc, const int *coords,
                fm_place_t *place);

/* ---- Process blocks --------------------------------------------------- */

typedef struct fm_block fm_block_t;

/* PROCESSES: starts a block. */
int fm_processes_begin(fm_block_t **block);

/* PROCESSCALL name(args) at `place` (NULL: a new in-process context). The
 * process starts at once; args are taken (freed by libfm). PROCESSDO is a
 * loop of processcall inside one block. */
int fm_processcall(fm_block_t *block, const char *name, const fm_place_t *place,
                   fm_args_t *args);

/* ENDPROCESSES: waits until every process of the block has ended, copies
 * INTENT out/inout arguments back in call order, frees the block. Returns
 * 0, the first process-start error, or FM_EPEERDEAD (a process's OS
 * process died: its outputs are not copied). */
int fm_processes_end(fm_block_t *block);

#ifdef __cplusplus
}
#endif

#endif /* FM_H */
