// The ofi module with a provider that does not exist (meson runs this with
// FI_PROVIDER=nonexistent): the module is skipped with its reason, and
// nx_init still works with the local module.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <string>

#include "nexus.h"
#include "runtime_guard.h"

TEST_CASE("FI_PROVIDER=nonexistent: ofi is skipped with a reason, local "
          "carries on",
          "[ofi]") {
  const char *prov = std::getenv("FI_PROVIDER");
  REQUIRE(prov != nullptr);
  REQUIRE(std::string(prov) == "nonexistent");
  setenv("NX_PROTOCOLS", "ofi,local", 1);
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  bool found = false;
  for (int i = 0; i < nx_module_count(); i++) {
    nx_module_info_t info;
    REQUIRE(nx_module_info(i, &info) == 0);
    if (std::strcmp(info.name, "ofi") == 0) {
      found = true;
      CHECK(info.loaded == 0);
      CHECK(info.error == NX_EUNREACH);
      INFO("reason: " << info.reason);
      CHECK(std::string(info.reason).find("FI_PROVIDER=nonexistent") !=
            std::string::npos);
    }
    if (std::strcmp(info.name, "local") == 0)
      CHECK(info.loaded == 1);
  }
  CHECK(found);
  // RSRs inside this process still work, over local.
  nx_gp_t me;
  REQUIRE(nx_gp_make(nullptr, &me) == 0);
  const char *proto = nx_gp_protocol(&me);
  REQUIRE(proto != nullptr);
  CHECK(std::string(proto) == "local");
  nx_gp_release(&me);
}
