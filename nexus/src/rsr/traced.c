/* A handler's run between its BEGIN and END in the trace (base/trace.h):
 * called instead of the handler where one is called (dispatch.c, fiber.c)
 * while tracing is on. */
#include "base/trace.h"
#include "contexts/context.h"
#include "rsr/dispatch.h"

__attribute__((cold)) void nxi_run_traced(struct nx_buffer *b,
                                          struct nx_context *ctx) {
  uint16_t f = b->threaded ? NXT_F_THREADED : 0; /* set by dispatch */
  uint64_t run = nxi_trace_begin(ctx->id, b->source, b->handler,
                                 nxi_buffer_wire_len(b), f);
  b->fn(ctx, (void *)(uintptr_t)b->address, b);
  nxi_trace_end(run, f);
}
