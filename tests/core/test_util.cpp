// Tests of the utility layer (nexus/util): the table of NX_* settings and
// its parsers, the key helpers and the uuid-keyed peer table. Linked statically
// (nexus_util_dep).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

extern "C" {
#include "nexus/errors.h"
#include "nxu_key.h"
#include "nxu_opt.h"
#include "nxu_uuid.h"
}

TEST_CASE("every NX_* setting is in the table once, with a meaning", "[util]") {
  std::set<std::string> names;
  for (size_t i = 0; i < nxu_opt_count; i++) {
    const nxu_opt &o = nxu_opts[i];
    INFO(o.name);
    CHECK(std::strncmp(o.name, "NX_", 3) == 0);
    CHECK(names.insert(o.name).second);
    CHECK(std::strlen(o.meaning) > 10);
    CHECK(nxu_opt_find(o.name) == &o);
  }
  CHECK(nxu_opt_find("NX_NO_SUCH") == nullptr);
}

TEST_CASE("numbers: defaults, suffixes, bounds, and clear refusals", "[util]") {
  char why[256];
  uint64_t v = 0;
  unsetenv("NX_SPIN_US");
  REQUIRE(nxu_opt_number("NX_SPIN_US", &v, why, sizeof(why)) == 0);
  CHECK(v == 50);
  setenv("NX_SPIN_US", "7", 1);
  REQUIRE(nxu_opt_number("NX_SPIN_US", &v, why, sizeof(why)) == 0);
  CHECK(v == 7);
  for (const char *bad : {"abc", "7k", "-1", " 7", "7 ", "1000001"}) {
    INFO(bad);
    setenv("NX_SPIN_US", bad, 1);
    v = 99;
    CHECK(nxu_opt_number("NX_SPIN_US", &v, why, sizeof(why)) == NX_EINVAL);
    CHECK(v == 99); // untouched on error
    CHECK(std::string(why).find("NX_SPIN_US=") == 0);
  }
  unsetenv("NX_SPIN_US");
  setenv("NX_BUFFER_CACHE", "2m", 1);
  size_t s = 0;
  REQUIRE(nxu_opt_size("NX_BUFFER_CACHE", &s, why, sizeof(why)) == 0);
  CHECK(s == (size_t)2 << 20);
  setenv("NX_BUFFER_CACHE", "2q", 1);
  CHECK(nxu_opt_size("NX_BUFFER_CACHE", &s, why, sizeof(why)) == NX_EINVAL);
  CHECK(std::string(why).find("suffix k, m, g") != std::string::npos);
  unsetenv("NX_BUFFER_CACHE");
  // A name the table lacks, or of another kind, is refused.
  CHECK(nxu_opt_number("NX_NO_SUCH", &v, why, sizeof(why)) == NX_EINVAL);
  CHECK(nxu_opt_number("NX_PROGRESS", &v, why, sizeof(why)) == NX_EINVAL);
}

TEST_CASE("choices and check_all", "[util]") {
  char why[256];
  int c = -1;
  unsetenv("NX_PROGRESS");
  REQUIRE(nxu_opt_choice("NX_PROGRESS", &c, why, sizeof(why)) == 0);
  CHECK(c == 0);
  setenv("NX_PROGRESS", "poll", 1);
  REQUIRE(nxu_opt_choice("NX_PROGRESS", &c, why, sizeof(why)) == 0);
  CHECK(c == 1);
  setenv("NX_PROGRESS", "pol", 1);
  CHECK(nxu_opt_choice("NX_PROGRESS", &c, why, sizeof(why)) == NX_EINVAL);
  CHECK(std::string(why) == "NX_PROGRESS=pol: expected one of thread|poll");
  CHECK(nxu_opt_check_all("core", why, sizeof(why)) == NX_EINVAL);
  CHECK(nxu_opt_check_all("tcp", why, sizeof(why)) == 0);
  unsetenv("NX_PROGRESS");
  CHECK(nxu_opt_check_all(nullptr, why, sizeof(why)) == 0);
}

TEST_CASE("keys: constant-time equality and hex both ways", "[util]") {
  const uint8_t a[4] = {0x00, 0xab, 0x10, 0xff};
  uint8_t b[4] = {0x00, 0xab, 0x10, 0xff};
  CHECK(nxu_key_equal(a, b, 4) == 1);
  b[3] = 0xfe;
  CHECK(nxu_key_equal(a, b, 4) == 0);
  char hex[9];
  nxu_hex_encode(a, 4, hex);
  CHECK(std::string(hex) == "00ab10ff");
  uint8_t back[4] = {1, 1, 1, 1};
  REQUIRE(nxu_hex_decode("00AB10ff", back, 4) == 0);
  CHECK(std::memcmp(back, a, 4) == 0);
  uint8_t keep[4] = {9, 9, 9, 9};
  for (const char *bad : {"00ab10f", "00ab10fff", "00ab10fg", ""}) {
    INFO(bad);
    CHECK(nxu_hex_decode(bad, keep, 4) == NX_EINVAL);
  }
  CHECK(keep[0] == 9); // untouched on error
  CHECK(nxu_hex_decode(nullptr, keep, 4) == NX_EINVAL);
}

TEST_CASE("the uuid table finds, keeps duplicates, walks and removes",
          "[util]") {
  nxu_uuid_table t{};
  const int n = 200;
  std::vector<nx_endpoint> links(n + 1);
  for (int i = 0; i < n; i++) {
    std::memset(links[i].uuid, 0, NXU_UUID_SIZE);
    std::memcpy(links[i].uuid, &i, sizeof(i));
    links[i].uuid[11] = (uint8_t)(i * 7);
    nxu_uuid_insert(&t, &links[i]);
  }
  // A second entry with the uuid of entry 5 (a peer and its successor).
  std::memcpy(links[n].uuid, links[5].uuid, NXU_UUID_SIZE);
  nxu_uuid_insert(&t, &links[n]);
  for (int i = 0; i < n; i++) {
    INFO(i);
    nx_endpoint *l = nxu_uuid_find(&t, links[i].uuid, nullptr);
    REQUIRE(l != nullptr);
    CHECK(std::memcmp(l->uuid, links[i].uuid, NXU_UUID_SIZE) == 0);
  }
  nx_endpoint *first = nxu_uuid_find(&t, links[5].uuid, nullptr);
  CHECK(first == &links[n]); // the newest first
  CHECK(nxu_uuid_find(&t, links[5].uuid, first) == &links[5]);
  CHECK(nxu_uuid_find(&t, links[5].uuid, &links[5]) == nullptr);
  uint8_t absent[NXU_UUID_SIZE] = {0xff, 0xff};
  CHECK(nxu_uuid_find(&t, absent, nullptr) == nullptr);
  int seen = 0;
  for (nx_endpoint *l = nxu_uuid_first(&t); l != nullptr;
       l = nxu_uuid_next(&t, l))
    seen++;
  CHECK(seen == n + 1);
  // Remove every entry while walking, as a module's finalize does.
  nx_endpoint *l;
  while ((l = nxu_uuid_first(&t)) != nullptr)
    nxu_uuid_remove(&t, l);
  CHECK(nxu_uuid_find(&t, links[7].uuid, nullptr) == nullptr);
  nxu_uuid_remove(&t, &links[3]); // not in the table: nothing happens
  CHECK(nxu_uuid_first(&t) == nullptr);
}
