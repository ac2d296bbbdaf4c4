// Bad input for the ucx module: malformed descriptors in gps never reach
// UCX (which would crash on a bad worker address), and malformed active
// messages sent straight to a peer's worker with the raw UCP API are
// refused and counted while the peer keeps working.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <ucp/api/ucp.h>

#include "nexus/protocol.h"
#include "runtime_guard.h"
#define NX_HARNESS_UCX
#include "peer_harness.h"

using namespace ucx_test;

namespace {

uint64_t fnv1a(const uint8_t *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

void put_le(std::vector<uint8_t> &v, uint64_t x, int bytes) {
  for (int i = 0; i < bytes; i++)
    v.push_back((uint8_t)(x >> (8 * i)));
}

// Where the worker address starts in the ucx descriptor's data (ucx.h's
// UCX_DESC_HEAD): version, process uuid, address hash, FIFO fingerprint.
const size_t HEAD = 1 + 16 + 8 + 4;

// The bytes of a buffer holding one gp whose only descriptor is a ucx one
// with `data` (docs/design.md, "A global pointer in a buffer").
std::vector<uint8_t> gp_bytes(uint64_t context,
                              const std::vector<uint8_t> &scope,
                              const std::vector<uint8_t> &data) {
  std::vector<uint8_t> v;
  v.push_back(0x0D);
  put_le(v, context, 8);
  put_le(v, 0, 8);
  v.push_back(1); // one descriptor
  v.push_back(3);
  v.insert(v.end(), {'u', 'c', 'x'});
  put_le(v, 2, 2); // wire version (UCX_WIRE_VERSION)
  v.push_back((uint8_t)scope.size());
  v.insert(v.end(), scope.begin(), scope.end());
  put_le(v, data.size(), 2);
  v.insert(v.end(), data.begin(), data.end());
  return v;
}

// The ucx descriptor's data in a gp of ours or a peer's, or empty.
std::vector<uint8_t> ucx_data_of(const nx_gp_t &gp) {
  nx_buffer_t *b;
  const void *bytes;
  size_t len;
  std::vector<uint8_t> out;
  if (nx_buffer_create(64, &b) != 0)
    return out;
  if (nx_put_gp(b, &gp) == 0 && nx_buffer_bytes(b, &bytes, &len) == 0) {
    const uint8_t *p = static_cast<const uint8_t *>(bytes);
    size_t off = 17, end = len;
    unsigned count = off < end ? p[off++] : 0;
    for (unsigned i = 0; i < count && off < end; i++) {
      unsigned nl = p[off++];
      std::string name((const char *)p + off, nl);
      off += nl + 2;
      unsigned sl = p[off++];
      off += sl;
      size_t dl = p[off] | (size_t)p[off + 1] << 8;
      off += 2;
      if (name == "ucx" && off + dl <= end)
        out.assign(p + off, p + off + dl);
      off += dl;
    }
  }
  nx_buffer_release(b);
  return out;
}

} // namespace

TEST_CASE("malformed ucx descriptors in gps reach nothing and crash nothing",
          "[ucx][badinput]") {
  setup_env();
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_gp_t me;
  REQUIRE(nx_gp_make(nullptr, &me) == 0);
  std::vector<uint8_t> good = ucx_data_of(me);
  REQUIRE(good.size() > HEAD);
  nx_gp_release(&me);
  std::mt19937_64 rng(12345);
  int decoded = 0;
  for (int i = 0; i < 3000; i++) {
    std::vector<uint8_t> scope(16), data;
    for (auto &x : scope)
      x = (uint8_t)rng();
    size_t n = (size_t)(rng() % 700);
    switch (i % 4) {
    case 0: // anything
      data.resize(n);
      for (auto &x : data)
        x = (uint8_t)rng();
      break;
    case 1: // our own layout, a wrong hash
      data = good;
      data[1] ^= 0x5a; // another process
      data[17 + rng() % 8] ^= (uint8_t)(1 + rng() % 255);
      break;
    case 2: // a right hash over a damaged address
      data = good;
      data[1] ^= 0x5a;
      for (int k = 0; k < 4; k++)
        data[HEAD + rng() % (good.size() - HEAD)] ^= (uint8_t)(1 + rng() % 255);
      data.resize(HEAD + (rng() % (good.size() - HEAD)));
      {
        // Damaged *and* re-hashed: that would reach UCX. Only the hash
        // stops such bytes, so keep the hash wrong here and check that.
        uint64_t h = fnv1a(data.data() + HEAD, data.size() - HEAD) + 1;
        for (int k = 0; k < 8; k++)
          data[17 + k] = (uint8_t)(h >> (8 * k));
      }
      break;
    default: // short, or another version
      data.assign(good.begin(), good.begin() + (long)(rng() % (HEAD + 1)));
      if (!data.empty())
        data[0] = (uint8_t)(3 + rng() % 200); // ours is 2
      break;
    }
    std::vector<uint8_t> bytes =
        gp_bytes(((uint64_t)(rng() | 1) << 32) | 1, scope, data);
    nx_buffer_t *b;
    REQUIRE(nx_buffer_from_bytes(bytes.data(), bytes.size(), NX_FORMAT_LITTLE,
                                 &b) == 0);
    nx_gp_t gp = NX_GP_NULL;
    if (nx_get_gp(b, &gp) == 0) {
      decoded++;
      CHECK(nx_gp_protocol(&gp) == nullptr);
      nx_buffer_t *rsr;
      if (nx_rsr_init_name(&rsr, &gp, "seq", 8) == 0)
        CHECK(nx_rsr_send(rsr) == NX_EUNREACH);
      nx_gp_release(&gp);
    }
    nx_buffer_release(b);
  }
  CHECK(decoded > 2000);
}

namespace {

struct raw_ucp {
  ucp_context_h ctx = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_ep_h ep = nullptr;
  bool ok = false;

  explicit raw_ucp(const std::vector<uint8_t> &address) {
    ucp_config_t *cfg;
    if (ucp_config_read(nullptr, nullptr, &cfg) != UCS_OK)
      return;
    // As the module sets them (ucx.c, config_defaults): on shared memory
    // the sender indexes the receiver's FIFO with its own element size.
    ucp_config_modify(cfg, "MM_ERROR_HANDLING", "y");
    ucp_config_modify(cfg, "MM_FIFO_ELEM_SIZE", "256");
    ucp_params_t params = {};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM;
    ucs_status_t st = ucp_init(&params, cfg, &ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK)
      return;
    ucp_worker_params_t wp = {};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (ucp_worker_create(ctx, &wp, &worker) != UCS_OK)
      return;
    std::vector<uint8_t> copy(address);
    copy.resize(copy.size() + 64);
    ucp_ep_params_t ep_params = {};
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                           UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep_params.address = (const ucp_address_t *)copy.data();
    ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ok = ucp_ep_create(worker, &ep_params, &ep) == UCS_OK;
  }

  ~raw_ucp() {
    if (ep != nullptr) {
      ucp_request_param_t p = {};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      wait(ucp_ep_close_nbx(ep, &p));
    }
    if (worker != nullptr)
      ucp_worker_destroy(worker);
    if (ctx != nullptr)
      ucp_cleanup(ctx);
  }

  // Progresses until the request completes (10 s at most); its status.
  ucs_status_t wait(ucs_status_ptr_t req) {
    if (req == nullptr)
      return UCS_OK;
    if (UCS_PTR_IS_ERR(req))
      return UCS_PTR_STATUS(req);
    uint64_t end = now_ms() + 10000;
    ucs_status_t st;
    while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS &&
           now_ms() < end)
      ucp_worker_progress(worker);
    ucp_request_free(req);
    return st;
  }

  ucs_status_t send(unsigned id, const void *hdr, size_t hdr_len,
                    const void *data, size_t len, unsigned flags = 0) {
    ucp_request_param_t p = {};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = flags;
    return wait(ucp_am_send_nbx(ep, id, hdr, hdr_len, data, len, &p));
  }
};

// A frame header (docs/design.md section 4).
std::vector<uint8_t> frame_header(uint32_t magic, uint32_t handler,
                                  uint64_t context, uint64_t length) {
  std::vector<uint8_t> h;
  put_le(h, magic, 4);
  h.push_back(1);                // version
  h.push_back(NX_FORMAT_LITTLE); // format
  put_le(h, 0, 2);
  put_le(h, handler, 4);
  put_le(h, 0, 4);
  put_le(h, context, 8);
  put_le(h, 0, 8);
  put_le(h, length, 8);
  return h;
}

} // namespace

TEST_CASE_METHOD(session,
                 "malformed active messages to a peer's worker are refused and "
                 "counted",
                 "[ucx][badinput]") {
  peer_process peer;
  REQUIRE(peer.start() == 0);
  REQUIRE(echo_round_trip(peer.gp, cs.me, 1, 8));
  uint64_t st0[STAT_COUNT] = {};
  REQUIRE(peer_stats(peer.gp, cs.me, st0));
  std::vector<uint8_t> data = ucx_data_of(peer.gp);
  REQUIRE(data.size() > HEAD);
  std::vector<uint8_t> address(data.begin() + HEAD, data.end());
  {
    raw_ucp raw(address);
    REQUIRE(raw.ok);
    uint32_t seq = nx_handler_id("seq");
    uint64_t ctx = nx_gp_context(&peer.gp);
    std::vector<uint8_t> payload(1u << 20, 0xab);
    // 1. A header of the wrong size.
    std::vector<uint8_t> h10(10, 0);
    CHECK(raw.send(0, h10.data(), h10.size(), payload.data(), 8) == UCS_OK);
    // 2. A bad magic (frame_alloc refuses it: NX_EPROTO, counted by the core).
    std::vector<uint8_t> bad = frame_header(0x12345678u, seq, ctx, 8);
    CHECK(raw.send(0, bad.data(), bad.size(), payload.data(), 8) == UCS_OK);
    // 3. A header announcing more than the message carries.
    std::vector<uint8_t> more = frame_header(NX_FRAME_MAGIC, seq, ctx, 100);
    CHECK(raw.send(0, more.data(), more.size(), payload.data(), 8) == UCS_OK);
    // 4. The same by rendezvous: refused, and the sender is told.
    std::vector<uint8_t> less = frame_header(NX_FRAME_MAGIC, seq, ctx, 10);
    CHECK(raw.send(0, less.data(), less.size(), payload.data(), payload.size(),
                   UCP_AM_SEND_FLAG_RNDV) != UCS_OK);
    // 5. A message with no header at all.
    CHECK(raw.send(0, nullptr, 0, payload.data(), 16) == UCS_OK);
  }
  // Counted by the peer (over another endpoint, so poll for it).
  uint64_t st[STAT_COUNT] = {};
  uint64_t start = now_ms();
  do {
    REQUIRE(peer_stats(peer.gp, cs.me, st));
    if (st[STAT_DROP_BAD_FRAME] >= st0[STAT_DROP_BAD_FRAME] + 5)
      break;
    sleep_ms(20);
  } while (now_ms() - start < 10000);
  CHECK(st[STAT_DROP_BAD_FRAME] == st0[STAT_DROP_BAD_FRAME] + 5);
  CHECK(st[STAT_SEQ_FRAMES] == 0); // nothing reached a handler
  // And the peer carries on.
  REQUIRE(echo_round_trip(peer.gp, cs.me, 2, 1u << 20));
  REQUIRE(echo_round_trip(peer.gp, cs.me, 3, 8));
}
