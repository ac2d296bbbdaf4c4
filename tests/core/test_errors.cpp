// Tests of nexus/src/base/error.c: the NX_ERRNO_MAP codes, nx_strerror and
// nx_err_name.
#include <catch2/catch.hpp>

#include <cctype>
#include <climits>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "nexus.h"

namespace {

struct code_info {
  int code;
  const char *name;
  const char *msg;
};

// The table the header defines, built from the same X-macro list.
const std::vector<code_info> &all_codes() {
  static const std::vector<code_info> codes = {
#define XX(name, value, msg) {NX_##name, #name, msg},
      NX_ERRNO_MAP(XX)
#undef XX
  };
  return codes;
}

std::string lower(const char *s) {
  std::string out(s);
  for (char &c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

} // namespace

TEST_CASE("NX_OK is zero and every error code is negative and distinct",
          "[errors]") {
  STATIC_REQUIRE(NX_OK == 0);
  REQUIRE_FALSE(all_codes().empty());
  std::set<int> seen;
  for (const code_info &c : all_codes()) {
    INFO("code " << c.name << " = " << c.code);
    CHECK(c.code < 0);
    CHECK(seen.insert(c.code).second);
  }
}

TEST_CASE("POSIX-like codes are -errno values", "[errors]") {
  CHECK(NX_EINVAL == -EINVAL);
  CHECK(NX_ENOMEM == -ENOMEM);
  CHECK(NX_EAGAIN == -EAGAIN);
  CHECK(NX_ETIMEDOUT == -ETIMEDOUT);
  CHECK(NX_EBUSY == -EBUSY);
  CHECK(NX_ERANGE == -ERANGE);
}

TEST_CASE("every code has its own name and description", "[errors]") {
  std::set<std::string> names;
  std::set<std::string> messages;
  for (const code_info &c : all_codes()) {
    INFO("code " << c.name << " = " << c.code);
    const char *name = nx_err_name(c.code);
    const char *msg = nx_strerror(c.code);
    REQUIRE(name != nullptr);
    REQUIRE(msg != nullptr);
    // The name is the symbol without the NX_ prefix, the message the text
    // the map gives.
    CHECK(std::string(name) == c.name);
    CHECK(std::string(msg) == c.msg);
    CHECK(std::strlen(msg) > 0);
    CHECK(names.insert(name).second);
    CHECK(messages.insert(msg).second);
    // A known code must not read as unknown.
    CHECK(lower(msg).find("unknown") == std::string::npos);
  }
  CHECK(names.size() == all_codes().size());
  CHECK(messages.size() == all_codes().size());
}

TEST_CASE("unknown codes give a non-NULL 'unknown' text", "[errors]") {
  const int unknown[] = {
      1, 12345, -1 - 4010 - 1000, -9999, INT_MIN, INT_MAX, -4000, -4011};
  std::set<int> known;
  for (const code_info &c : all_codes())
    known.insert(c.code);
  for (int code : unknown) {
    INFO("code " << code);
    REQUIRE(known.count(code) == 0);
    const char *msg = nx_strerror(code);
    const char *name = nx_err_name(code);
    REQUIRE(msg != nullptr);
    REQUIRE(name != nullptr);
    CHECK(lower(msg).find("unknown") != std::string::npos);
    CHECK(lower(name).find("unknown") != std::string::npos);
  }
}

TEST_CASE("NX_OK has some text", "[errors]") {
  CHECK(nx_strerror(NX_OK) != nullptr);
  CHECK(nx_err_name(NX_OK) != nullptr);
}
