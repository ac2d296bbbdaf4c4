/* Confirmations (confirm.c): the messages that settle the ledger, nx_flush,
 * and what nx_init and nx_finalize call. */
#ifndef NXI_CONFIRM_H
#define NXI_CONFIRM_H

#include "base/rt.h"

/* After the initial context exists: registers the two handlers there and
 * registers the ledger's and the route layer's stages. Returns 0 or a negative
 * code. */
int nxi_confirm_init(void);
/* Asks peers until every RSR accepted for another process is settled or
 * `timeout_ms` passed (-1: no bound). Returns 0 or NX_ETIMEDOUT. */
int nxi_confirm_flush(int timeout_ms);
/* Tracing: asks every live peer with a route (`only` that process, if
 * not 0) once more, for the clock offset at the end of the run
 * (docs/tracing.md, "Clock offsets"), and waits up to `timeout_ms` for
 * the answers. Nothing when not tracing. */
void nxi_confirm_clock_end(uint32_t only, int timeout_ms);
/* The same for the RSRs to process `proc` alone (nx_context_destroy). */
int nxi_confirm_flush_proc(uint32_t proc, int timeout_ms);
/* Tells every peer whose RSRs ran here since it last heard its count;
 * `final` (the last time, in nx_finalize): they acknowledge, and
 * nxi_confirm_wait_acks waits up to `timeout_ms` for that. */
void nxi_confirm_tell_all(int final);
void nxi_confirm_wait_acks(int timeout_ms);
/* Drives progress until the modules completed every confirmation message
 * they accepted, or `timeout_ms` passed: the last counts leave before the
 * modules go. */
void nxi_confirm_drain(int timeout_ms);
/* Removes the stages (the ledger itself goes with nxi_ledger_finalize). */
void nxi_confirm_finalize(void);

#endif /* NXI_CONFIRM_H */
