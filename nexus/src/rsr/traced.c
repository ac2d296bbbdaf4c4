/* A handler's run between its BEGIN and END in the trace (base/trace.h):
 * called instead of the handler where one is called (dispatch.c, fiber.c)
 * while tracing is on. */
#include "base/trace.h"
#include "contexts/context.h"
#include "rsr/dispatch.h"

__attribute__((cold)) void nxi_run_traced(struct nx_buffer *b,
                                          struct nx_context *ctx) {
  const struct nxi_handler *h = nxi_handler_find(ctx, b->handler);
  uint16_t f =
      h != NULL && h->kind != NX_HANDLER_NONTHREADED ? NXT_F_THREADED : 0;
  uint64_t run = nxi_trace_run(), thread = nxi_trace_thread();
  uint64_t id = ctx->id;
  uint32_t handler = b->handler;
  nxi_trace_event(NXT_BEGIN, id, b->source, handler, nxi_buffer_wire_len(b),
                  0xff, f, 0, run);
  b->fn(ctx, (void *)(uintptr_t)b->address, b);
  if (nxi_trace_thread() != thread)
    f |= NXT_F_MOVED;
  nxi_trace_event(NXT_END, id, 0, handler, 0, 0xff, f, 0, run);
}
