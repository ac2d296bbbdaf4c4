// When UCX cannot be used (no transport it may use), the ucx module is
// skipped with its reason, and nx_init carries on with local.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

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

} // namespace

TEST_CASE("UCX_TLS naming no usable transport: ucx skipped with a reason, "
          "local still works",
          "[ucx]") {
  env_scope protocols("NX_PROTOCOLS", "ucx,local");
  env_scope tls("UCX_TLS", "bogus_transport");
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  bool seen = false;
  for (int i = 0; i < nx_module_count(); i++) {
    nx_module_info_t info;
    REQUIRE(nx_module_info(i, &info) == 0);
    if (std::string(info.name) != "ucx")
      continue;
    seen = true;
    INFO("reason: " << info.reason);
    CHECK(info.loaded == 0);
    CHECK(info.error < 0);
    CHECK(info.rank == -1);
    CHECK(std::string(info.reason).find("ucp_init") != std::string::npos);
  }
  CHECK(seen);
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

TEST_CASE("NX_UCX_QUEUE_MAX that is not a size: ucx skipped, saying why",
          "[ucx]") {
  env_scope protocols("NX_PROTOCOLS", "ucx,local");
  env_scope bad("NX_UCX_QUEUE_MAX", "lots");
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  for (int i = 0; i < nx_module_count(); i++) {
    nx_module_info_t info;
    REQUIRE(nx_module_info(i, &info) == 0);
    if (std::string(info.name) == "ucx") {
      CHECK(info.loaded == 0);
      CHECK(info.error == NX_EINVAL);
      CHECK(std::string(info.reason).find("NX_UCX_QUEUE_MAX") !=
            std::string::npos);
    }
  }
}

TEST_CASE("NX_UCX_QUEUE_FRAMES of 0 or not a number: ucx skipped, saying why",
          "[ucx]") {
  for (const char *value : {"0", "many", "-3"}) {
    INFO("NX_UCX_QUEUE_FRAMES=" << value);
    env_scope protocols("NX_PROTOCOLS", "ucx,local");
    env_scope bad("NX_UCX_QUEUE_FRAMES", value);
    runtime_guard rt;
    REQUIRE(rt.init_rc() == 0);
    bool seen = false;
    for (int i = 0; i < nx_module_count(); i++) {
      nx_module_info_t info;
      REQUIRE(nx_module_info(i, &info) == 0);
      if (std::string(info.name) == "ucx") {
        seen = true;
        CHECK(info.loaded == 0);
        CHECK(info.error == NX_EINVAL);
        CHECK(std::string(info.reason).find("NX_UCX_QUEUE_FRAMES") !=
              std::string::npos);
      }
    }
    CHECK(seen);
  }
}
