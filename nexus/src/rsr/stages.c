/* The RSR layer's stage tables (stages.h): what is registered, and the
 * defaults that stand in when nothing is. */
#include "rsr/stages.h"

static int note_none(struct nx_buffer *b, unsigned gen) {
  (void)b, (void)gen;
  return 0;
}
static int voided_none(struct nx_buffer *b) {
  (void)b;
  return 1; /* nothing reported it: the caller does */
}
static void ask_none(struct nxi_peer *p) { (void)p; }
static int resend_none(struct nx_buffer *b) {
  (void)b;
  return 0;
}
static void handled_none(const struct nx_buffer *b) { (void)b; }
static int take_none(struct nx_buffer *b) {
  (void)b;
  return 0;
}
static void gone_none(struct nx_buffer *b) { (void)b; }
static void tick_none(uint64_t now) {
  (void)now;
  atomic_store_explicit(&nxi_stage_tick_at, UINT64_MAX, memory_order_relaxed);
}

static const struct nxi_reliability_stages reliability_none = {
    .note = note_none,
    .voided = voided_none,
    .ask = ask_none,
    .resend = resend_none,
    .handled = handled_none,
    .take = take_none,
    .gone = gone_none,
    .tick = tick_none,
};

static int forward_none(struct nx_buffer *b) {
  (void)b;
  return 0;
}

static const struct nxi_gateway_stages gateway_none = {.forward = forward_none};

const struct nxi_reliability_stages *_Atomic nxi_reliability =
    &reliability_none;
const struct nxi_gateway_stages *_Atomic nxi_gateway = &gateway_none;
atomic_uint_fast64_t nxi_stage_tick_at;
atomic_long nxi_ctl_inflight;

void nxi_reliability_stages_set(const struct nxi_reliability_stages *s) {
  atomic_store(&nxi_reliability, s != NULL ? s : &reliability_none);
  atomic_store(&nxi_stage_tick_at, 0);
}

void nxi_gateway_stages_set(const struct nxi_gateway_stages *s) {
  atomic_store(&nxi_gateway, s != NULL ? s : &gateway_none);
}
