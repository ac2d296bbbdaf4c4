/* What the round-trip benchmarks (rsr_ucx.c, rsr_ofi.c, rsr_mpi.c) share:
 * the clock, the statistics and size labels they print, pipe I/O, and the
 * RSR echo peer: a child process (this program again, "--child FD PARENT")
 * that hands its gp to the parent through a pipe, learns where to reply
 * ("hello") and answers "ping" until told to "quit". */
#ifndef NX_BENCH_UTIL_H
#define NX_BENCH_UTIL_H

#include <limits.h>
#include <sched.h>
#include <stddef.h>
#include <sys/types.h>

#include "nexus.h"

/* The program's name, for error messages ("bench_rsr_ucx"). */
extern const char *bench_name;

/* Says what failed (and why, when `why` is not NULL) on stderr, with the
 * program's name and pid, and exits 1. */
void bench_die(const char *what, const char *why);

/* A monotonic clock, in microseconds. */
double bench_now_us(void);

/* Sorts v[0..n-1]; returns the median, *best the smallest. */
double bench_median(double *v, int n, double *best);

/* A ratio as goal lines print it (two decimals), so that a verdict always
 * follows from the number beside it. */
double bench_two_places(double ratio);

/* The path of `name`, relative to this program's folder ("mpi_pingpong",
 * "../nexus/tools/nxrun"), into out[len]. This program's path comes from
 * /proc/self/exe, which under valgrind names the program, not the tool.
 * Returns 0 when that file is executable, else -1 (`out` then holds the
 * path looked at, for a message, or "" when it did not fit). */
int bench_beside_self(const char *name, char *out, size_t len);

/* Round trips per run for a payload of `size` bytes: 5000 up to 4 KiB, 2000
 * up to 64 KiB, 200 up to 1 MiB, 50 above (a 1 MiB round trip costs a
 * hundred times an 8 B one, and a benchmark should stay within a few
 * minutes); a tenth with `quick`. */
int bench_iters(size_t size, int quick);

/* "8 B", "64 KiB", "1 MiB". */
void bench_size_label(size_t size, char *out, size_t len);

/* Read or write exactly n bytes; 0 or -1. */
int bench_read_all(int fd, void *p, size_t n);
int bench_write_all(int fd, const void *p, size_t n);

/* Sets NX_KEY to a fresh random key, so that the processes this program
 * starts form one computation of their own. */
void bench_set_key(void);

/* The CPUs this process may run on, as it started: bench_cpus_init reads
 * them (first thing in main); bench_pin_to pins the calling thread (and
 * the threads it starts later) to `cpu`, or back to all of them for -1. */
extern cpu_set_t bench_all_cpus;
void bench_cpus_init(void);
void bench_pin_to(int cpu);

/* --- round trips between handlers and the main thread --------------------- */

/* Resets the count of replies and the quit flag; after nx_init. */
void bench_sync_init(void);

/* The count of replies to wait for after sending one more request. */
long bench_next_reply(void);

/* A handler counts a reply and wakes the waiting thread. */
void bench_reply_arrived(void);

/* Waits (driving progress) until `want` replies came: without a limit when
 * timeout_s is 0, else dying after timeout_s seconds. */
void bench_wait_replies(long want, int timeout_s);

/* What a "ping" handler does with a payload of bytes: copies it out into
 * `scratch` (as a receiver would) and answers with the same bytes in
 * handler `pong` at `reply`. A payload larger than scratch_len is
 * dropped. */
void bench_echo(nx_buffer_t *ping, const nx_gp_t *reply, nx_handler_id_t pong,
                void *scratch, size_t scratch_len);

/* Receive placement (nx_handler_set_place): bench_place_into names where
 * the trailing bytes of RSRs to the handlers given bench_place go, as a
 * receiver that posted its buffer; a "ping" handler that then gets them
 * into that memory (bench_echo with it as `scratch`) copies nothing. The
 * child of bench_child_run places its "ping" when the variable
 * BENCH_PLACE is set (its parent sets it before bench_child_spawn), and its
 * "ping_ref" too: bench_echo_ref then answers from the placed memory. */
void bench_place_into(void *mem, size_t len);
int bench_place(nx_context_t *ctx, void *addr, nx_buffer_t *lead, size_t tail,
                nx_place_t *where);

/* --- zero copy: payloads put by reference and read in place ------------- */

/* The zero-copy round trip's payload: a uint64 count, then that many bytes
 * put by reference (nx_put_bytes_ref), read in place (nx_get_bytes_ptr).
 * bench_send_ref sends one from the caller's memory; its release callback
 * is counted, so that the sender knows when the memory is free again. The
 * size hint is the count's only: the payload takes no room in the buffer.
 * Returns 0 or the error of nx_rsr_init, a put or nx_rsr_send. */
int bench_send_ref(const nx_gp_t *to, nx_handler_id_t handler, const void *p,
                   size_t n);

/* Waits (driving progress) until every payload bench_send_ref sent was
 * released; dies when a release reported an error, or after timeout_s
 * seconds when it is not 0. */
void bench_wait_released(int timeout_s);

/* What a zero-copy "ping" handler does: takes a pointer to the payload in
 * `ping` (nx_get_bytes_ptr), retains `ping` and answers in handler `pong`
 * at `reply` with the same bytes put by reference from the received
 * buffer, which the reply's release callback releases. Nothing is copied
 * outside the runtime. Dies on a malformed ping or a failed reply. */
void bench_echo_ref(nx_buffer_t *ping, const nx_gp_t *reply,
                    nx_handler_id_t pong);

/* What a zero-copy "pong" handler does: reads the payload in place and
 * checks its count against `size` and its first and last bytes against
 * `sent`. Returns 0, or -1 for a wrong reply. */
int bench_check_ref(nx_buffer_t *pong, const void *sent, size_t size);

/* The "quit" handler: serve_until_quit returns. */
void bench_on_quit(nx_context_t *ctx, void *addr, nx_buffer_t *buf);

/* Runs until "quit" came: busy-polling when NX_PROGRESS is "poll", else
 * asleep while the progress thread works. When `parent` is not 0, also
 * gives up (returning -1) once the process `parent` is gone. */
int bench_serve_until_quit(pid_t parent);

/* --- the echo child ------------------------------------------------------ */

/* Where the child's replies go: the gp "hello" brought. */
extern nx_gp_t bench_reply_gp;

/* The child's main: nx_init, registers "hello", "quit", `on_ping` and
 * "ping_ref" (bench_echo_ref answering "pong_ref"), all non-threaded, in
 * its initial context, writes its gp to `fd`, serves
 * until "quit" (or its parent is gone) and finalizes. Returns the exit
 * status. */
int bench_child_main(int fd, pid_t parent, nx_handler_fn on_ping);
/* The child's side of bench_child_spawn: when argv is "--child FD PARENT
 * [CPU]", pins to CPU if given and returns bench_child_main's status;
 * otherwise -1 (the caller is the parent). */
int bench_child_run(int argc, char **argv, nx_handler_fn on_ping);
/* The memory the child's "ping" is placed into under BENCH_PLACE (its
 * on_ping's scratch): set by the program before bench_child_run. */
extern void *bench_child_place_mem;
extern size_t bench_child_place_len;

struct bench_child {
  pid_t pid;
  int fd;     /* the pipe the gp comes through */
  nx_gp_t gp; /* the child's initial context */
  nx_gp_t me; /* where its replies go */
};

/* Starts this program as "--child FD PARENT" and `extra` when it is not
 * NULL: the CPU to pin the child to, -1 for none (bench_child_run);
 * environment inherited. */
void bench_child_spawn(struct bench_child *ch, const char *extra);

/* After nx_init: reads the child's gp, checks that `proto` reaches it, and
 * tells it where to reply ("hello"). */
void bench_child_connect(struct bench_child *ch, const char *proto);

/* Sends "quit", reaps the child and releases the gps. */
void bench_child_stop(struct bench_child *ch);

/* --- Open MPI's ping-pong, the anchor measured in the same run ------------ */

/* mpi_pingpong (bench/mpi_pingpong.c, built next to the benchmarks where
 * Open MPI is installed) under mpirun. */
struct bench_mpi {
  char pingpong[PATH_MAX]; /* mpi_pingpong next to this program */
  char why[256];           /* set once Open MPI turned out unavailable */
};

/* Finds mpi_pingpong next to this program; when it is not there, says so
 * in mpi->why. */
void bench_mpi_find(struct bench_mpi *mpi);

/* Runs "mpirun --allow-run-as-root --oversubscribe -np 2 OPTS... mpi_pingpong
 * SIZES... [--quick]" (`opts` a NULL-terminated list of mpirun options,
 * such as "--mca", "pml", "ucx"; NULL for none) for at most 120 s, with
 * this process's environment, and puts mpi_pingpong's median round trip for
 * sizes[i] in usec[i], in microseconds. Returns 0, or -1 with every usec[i]
 * NAN and the reason in mpi->why; once mpi->why is set, returns -1 at
 * once (a caller that tries other options clears it first). */
int bench_mpi_run(struct bench_mpi *mpi, const char *const *opts,
                  const size_t *sizes, double *usec, int n, int quick);

#endif /* NX_BENCH_UTIL_H */
