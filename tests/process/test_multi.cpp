// Computations of several processes: a gp handed on in a buffer is used
// directly by its receiver, and a computation mixing in-process and process
// contexts picks local inside a process and tcp across processes.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "latch.h"
#include "nexus.h"
#include "runtime_guard.h"

namespace {

bool tcp_loaded() {
  for (int i = 0; i < nx_module_count(); i++) {
    nx_module_info_t m;
    if (nx_module_info(i, &m) == 0 && std::strcmp(m.name, "tcp") == 0)
      return m.loaded;
  }
  return false;
}

struct reports {
  latch n;
  int last = 0;
  std::string proto;
};

void on_counted(nx_context_t *ctx, void *, nx_buffer_t *b) {
  auto *r = static_cast<reports *>(nx_context_data(ctx));
  int32_t v = 0;
  char name[16] = {0};
  if (nx_get_int32(b, &v) == 0 && nx_get_char_array(b, name, 16) == 0) {
    name[15] = '\0';
    r->last = v;
    r->proto = name;
    r->n.add();
  }
}

} // namespace

TEST_CASE("A hands B a gp to C; B's RSR reaches C directly", "[multi]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  REQUIRE(tcp_loaded()); // these tests are built only with tcp
  reports rep;
  nx_context_set_data(nx_context_self(), &rep);
  REQUIRE(nx_handler_register(nx_context_self(), "counted", on_counted,
                              NX_HANDLER_NONTHREADED, nullptr) == 0);
  nx_node_t node;
  REQUIRE(nx_nodes_acquire("localhost", 1, &node) == 0);
  nx_gp_t b, c, me;
  char *const argv[] = {(char *)"ctx_child", (char *)"serve", nullptr};
  REQUIRE(nx_context_create(&node, CHILD_EXE, argv, &b) == 0);
  REQUIRE(nx_context_create(&node, CHILD_EXE, argv, &c) == 0);
  REQUIRE(nx_gp_make(nullptr, &me) == 0);
  CHECK(std::string(nx_gp_protocol(&b)) == "tcp");
  nx_stats_t before;
  REQUIRE(nx_stats_get(&before) == 0);
  const int n = 20;
  for (int i = 0; i < n; i++) {
    nx_buffer_t *buf;
    REQUIRE(nx_rsr_init_name(&buf, &b, "forward", 256) == 0);
    REQUIRE(nx_put_gp(buf, &c) == 0);
    REQUIRE(nx_put_gp(buf, &me) == 0);
    REQUIRE(nx_rsr_send(buf) == 0);
  }
  REQUIRE(rep.n.wait_for(n, 30) == n);
  CHECK(rep.last == n);      // C's own counter: every forward reached C
  CHECK(rep.proto == "tcp"); // B reached C over tcp, on its own connection
  nx_stats_t after;
  REQUIRE(nx_stats_get(&after) == 0);
  // A handled only the n reports: nothing went through A on its way to C.
  CHECK(after.rsr_handled - before.rsr_handled == (uint64_t)n);
  REQUIRE(nx_context_destroy(&b) == 0);
  REQUIRE(nx_context_destroy(&c) == 0);
  nx_gp_release(&b);
  nx_gp_release(&c);
  nx_gp_release(&me);
}

TEST_CASE("nxrun + cluster demo: local inside a process, tcp across",
          "[multi]") {
  {
    runtime_guard rt;
    REQUIRE(rt.init_rc() == 0);
    REQUIRE(tcp_loaded()); // these tests are built only with tcp
  }
  std::string cmd = std::string(NXRUN_EXE) + " -n 2 " + CLUSTER_EXE + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE *)> p(popen(cmd.c_str(), "r"), pclose);
  REQUIRE(p != nullptr);
  std::string out;
  std::array<char, 4096> chunk;
  size_t got;
  while ((got = fread(chunk.data(), 1, chunk.size(), p.get())) > 0)
    out.append(chunk.data(), got);
  int status = pclose(p.release());
  INFO(out);
  REQUIRE(status == 0);
  // Parse the table: rows and columns named <process>.<index>.
  std::istringstream in(out.substr(out.find("took:")));
  std::string line;
  std::getline(in, line); // the title line
  std::getline(in, line);
  std::istringstream head(line);
  std::vector<std::string> cols;
  for (std::string c; head >> c;)
    cols.push_back(c);
  REQUIRE(cols.size() == 9);
  int checked = 0;
  for (size_t r = 0; r < cols.size(); r++) {
    REQUIRE(std::getline(in, line));
    std::istringstream row(line);
    std::string name;
    row >> name;
    for (size_t c = 0; c < cols.size(); c++) {
      std::string cell;
      row >> cell;
      std::string pr = name.substr(0, name.find('.'));
      std::string pc = cols[c].substr(0, cols[c].find('.'));
      if (name == cols[c])
        CHECK(cell == "-");
      else
        CHECK(cell == (pr == pc ? "local" : "tcp"));
      checked++;
    }
  }
  CHECK(checked == 81);
}
