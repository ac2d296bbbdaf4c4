/* Tracing (docs/tracing.md): with NX_TRACE=<dir>, this process writes what
 * it does to an event log in <dir> (base/trace_format.h), which nxtrace
 * turns into one OTF2 archive for the computation. Off by default; then
 * each trace point is one test of a plain flag that never changes while
 * the runtime runs, and predicted not taken. */
#ifndef NXI_TRACE_H
#define NXI_TRACE_H

#include <stdint.h>

#include "base/trace_format.h"

/* Set by nxi_trace_start before the runtime sends or handles anything,
 * cleared by nxi_trace_stop after it stopped: read without a fence.
 * Hidden: a test is then one compare with memory and a jump, not a load
 * of its address first. */
extern int nxi_trace_on __attribute__((visibility("hidden")));

static inline int nxi_tracing(void) {
  return __builtin_expect(nxi_trace_on, 0);
}

/* At nx_init, once the process's id is known: opens the log if NX_TRACE
 * names a folder (creating it). Returns 0, or NX_EIO/NX_EINVAL when it
 * is set and the log cannot be written (nx_init fails: a trace that was
 * asked for is not silently missing). */
int nxi_trace_start(void);
/* At nx_finalize, last: writes every thread's records and closes the
 * log. Later events are not recorded. */
void nxi_trace_stop(void);

/* Records one event (trace_format.h names the fields each type uses);
 * call only when nxi_tracing(). `bytes` saturates at UINT32_MAX. */
void nxi_trace_event(uint8_t type, uint64_t ctx, uint64_t peer,
                     uint32_t handler, uint64_t bytes, uint8_t module,
                     uint16_t flags, uint32_t aux, uint64_t x);
/* Records a name (NXT_DEF_HANDLER, NXT_DEF_MODULE). */
void nxi_trace_name(uint8_t type, uint64_t ctx, uint32_t handler,
                    uint8_t module, const char *name);
/* The records of every RSR, in their compact forms (trace_format.h):
 * its send; its handler's begin, which returns the run's number; and its
 * end, given that number (marked MOVED when it is another thread's). */
void nxi_trace_send(uint64_t ctx, uint64_t peer, uint32_t handler,
                    uint64_t bytes, uint8_t module, uint16_t flags);
uint64_t nxi_trace_begin(uint64_t ctx, uint64_t peer, uint32_t handler,
                         uint64_t bytes, uint16_t flags);
void nxi_trace_end(uint64_t run, uint16_t flags);

#endif
