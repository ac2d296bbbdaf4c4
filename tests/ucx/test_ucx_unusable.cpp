// When UCX cannot be used (no transport it may use), the ucx module is
// skipped with its reason, and nx_init carries on with local.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <utility>

#include "latch.h"
#include "nexus.h"
#include "runtime_guard.h"

namespace {

latch pinged;

void on_ping(nx_context_t *, void *, nx_buffer_t *) { pinged.add(); }

// Sets an environment variable for the scope, restoring what was there.
class env_scope {
public:
  env_scope(const char *name, const char *value) : name_(name) {
    const char *old = std::getenv(name);
    had_ = old != nullptr;
    if (had_)
      old_ = old;
    setenv(name, value, 1);
  }
  ~env_scope() {
    if (had_)
      setenv(name_.c_str(), old_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }

private:
  std::string name_, old_;
  bool had_ = false;
};

// The ucx module's entry in nx_module_info; false when there is none.
bool ucx_info(nx_module_info_t *out) {
  for (int i = 0; i < nx_module_count(); i++) {
    nx_module_info_t info;
    REQUIRE(nx_module_info(i, &info) == 0);
    if (std::string(info.name) == "ucx") {
      *out = info;
      return true;
    }
  }
  return false;
}

} // namespace

TEST_CASE("UCX_TLS naming no usable transport: ucx skipped with a reason, "
          "local still works",
          "[ucx]") {
  env_scope protocols("NX_PROTOCOLS", "ucx,local");
  env_scope tls("UCX_TLS", "bogus_transport");
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_module_info_t info;
  REQUIRE(ucx_info(&info));
  INFO("reason: " << info.reason);
  CHECK(info.loaded == 0);
  CHECK(info.error < 0);
  CHECK(info.rank == -1);
  CHECK(std::string(info.reason).find("ucp_init") != std::string::npos);
  nx_context_t *self = nx_context_self();
  REQUIRE(nx_handler_register(self, "ping", on_ping, NX_HANDLER_NONTHREADED,
                              nullptr) == 0);
  nx_gp_t me;
  REQUIRE(nx_gp_make(nullptr, &me) == 0);
  REQUIRE(nx_gp_protocol(&me) != nullptr);
  CHECK(std::string(nx_gp_protocol(&me)) == "local");
  nx_buffer_t *b;
  REQUIRE(nx_rsr_init_name(&b, &me, "ping", 0) == 0);
  REQUIRE(nx_rsr_send(b) == 0);
  CHECK(pinged.wait_for(1, 10) == 1);
  nx_gp_release(&me);
}

TEST_CASE("a bad NX_UCX_QUEUE_MAX or NX_UCX_QUEUE_FRAMES: ucx skipped, "
          "saying why",
          "[ucx]") {
  const std::pair<const char *, const char *> bad_settings[] = {
      {"NX_UCX_QUEUE_MAX", "lots"},
      {"NX_UCX_QUEUE_FRAMES", "0"},
      {"NX_UCX_QUEUE_FRAMES", "many"},
      {"NX_UCX_QUEUE_FRAMES", "-3"}};
  for (const auto &setting : bad_settings) {
    INFO(setting.first << "=" << setting.second);
    env_scope protocols("NX_PROTOCOLS", "ucx,local");
    env_scope bad(setting.first, setting.second);
    runtime_guard rt;
    REQUIRE(rt.init_rc() == 0);
    nx_module_info_t info;
    REQUIRE(ucx_info(&info));
    CHECK(info.loaded == 0);
    CHECK(info.error == NX_EINVAL);
    CHECK(std::string(info.reason).find(setting.first) != std::string::npos);
  }
}
