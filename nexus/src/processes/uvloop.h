/* The process layer's libuv loop (uvloop.c): one thread of its own runs it;
 * other threads hand it work and wait for what it reports. */
#ifndef NXI_UVLOOP_H
#define NXI_UVLOOP_H

#include <uv.h>

/* Runs fn(arg) on the loop's thread and returns once fn has returned,
 * starting the loop first if it is not running (at once when called on
 * that thread). Returns 0, or NX_EAGAIN (no loop or no thread) without
 * running fn. */
int nxi_uvloop_call(void (*fn)(void *arg), void *arg);
/* Hands fn(arg) to the loop's thread and returns at once (at once too on
 * that thread, after running it): calls and posts run in the order they
 * were made. Returns 0, or NX_EAGAIN or NX_ENOMEM without running fn. */
int nxi_uvloop_post(void (*fn)(void *arg), void *arg);
/* Whether the calling thread is the loop's: one that must not wait for the
 * loop (an error callback the loop ran calling nx_context_create). */
int nxi_uvloop_here(void);
/* The loop, for code that runs on its thread (inside nxi_uvloop_call's fn
 * or a handle's callback). */
uv_loop_t *nxi_uvloop(void);
/* A flag that the loop sets and another thread waits for: set writes
 * `value` and wakes the waiters; wait returns once *flag is not 0. */
void nxi_uvloop_set(int *flag, int value);
void nxi_uvloop_wait(const int *flag);
/* The last nx_finalize, after the process layer closed its handles: stops
 * the thread and closes the loop. */
void nxi_uvloop_finalize(void);

#endif /* NXI_UVLOOP_H */
