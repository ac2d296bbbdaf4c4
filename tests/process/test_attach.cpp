// Tests of nexus/src/processes/attach.c: a program started separately joins a
// running computation through its URL; a wrong key or garbage is refused,
// and the listener keeps serving.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "latch.h"
#include "nexus.h"
#include "runtime_guard.h"

namespace {

// A listener process (the test child in attach-server mode).
struct listener {
  pid_t pid = -1;
  std::string url;
  listener() {
    char path[] = "/tmp/nx_url_XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    unlink(path);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      execl(CHILD_EXE, "ctx_child", "attach-server", path, (char *)nullptr);
      _exit(127);
    }
    for (int i = 0; i < 1000 && url.empty(); i++) {
      std::ifstream in(path);
      std::getline(in, url);
      if (url.empty())
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    unlink(path);
  }
  ~listener() {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  bool alive() { return waitpid(pid, nullptr, WNOHANG) == 0; }
};

struct pongs {
  latch n;
};
void on_pong(nx_context_t *ctx, void *, nx_buffer_t *b) {
  int32_t v = 0;
  if (nx_get_int32(b, &v) == 0 && v == 42)
    static_cast<pongs *>(nx_context_data(ctx))->n.add();
}

} // namespace

TEST_CASE("a separately started program attaches and exchanges RSRs",
          "[attach]") {
  listener l;
  REQUIRE(l.url.rfind("nexus://127.0.0.1:", 0) == 0);
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_gp_t gp = NX_GP_NULL;
  REQUIRE(nx_attach(l.url.c_str(), &gp) == 0);
  CHECK((nx_gp_context(&gp) >> 32) != (nx_context_id(nx_context_self()) >> 32));
  const char *proto = nx_gp_protocol(&gp);
  REQUIRE(proto != nullptr); // these tests are built only with tcp
  CHECK(std::string(proto) == "tcp");
  pongs p;
  nx_context_set_data(nx_context_self(), &p);
  REQUIRE(nx_handler_register(nx_context_self(), "pong", on_pong,
                              NX_HANDLER_NONTHREADED, nullptr) == 0);
  nx_gp_t me;
  REQUIRE(nx_gp_make(nullptr, &me) == 0);
  for (int i = 0; i < 10; i++) {
    nx_buffer_t *b;
    REQUIRE(nx_rsr_init_name(&b, &gp, "ping", 64) == 0);
    REQUIRE(nx_put_int32(b, 41) == 0);
    REQUIRE(nx_put_gp(b, &me) == 0);
    REQUIRE(nx_rsr_send(b) == 0);
  }
  CHECK(p.n.wait_for(10, 20) == 10);
  nx_gp_release(&me);
  nx_gp_release(&gp);
}

TEST_CASE("attaching with a wrong key, or sending garbage, is refused",
          "[attach][badinput]") {
  listener l;
  REQUIRE(!l.url.empty());
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  std::string wrong = l.url;
  char &last = wrong.back();
  last = last == '0' ? '1' : '0';
  nx_gp_t gp = NX_GP_NULL;
  CHECK(nx_attach(wrong.c_str(), &gp) == NX_EACCES);
  CHECK(nx_gp_is_null(&gp));

  // Raw garbage at the listening port.
  unsigned port = 0;
  REQUIRE(std::sscanf(l.url.c_str(), "nexus://127.0.0.1:%u/", &port) == 1);
  for (const char *junk : {"GARBAGE-GARBAGE-GARBAGE-GARBAGE", "NXA1", ""}) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd, (sockaddr *)&a, sizeof(a)) == 0);
    send(fd, junk, std::strlen(junk), MSG_NOSIGNAL);
    shutdown(fd, SHUT_WR);
    char c;
    CHECK(recv(fd, &c, 1, 0) <= 0); // closed without an answer
    close(fd);
  }
  CHECK(l.alive());
  // The right key still works afterwards.
  CHECK(nx_attach(l.url.c_str(), &gp) == 0);
  nx_gp_release(&gp);
}

TEST_CASE("malformed URLs and nobody listening", "[attach][badinput]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_gp_t gp = NX_GP_NULL;
  const std::string key(32, 'a');
  for (std::string url :
       {std::string("http://127.0.0.1:1/") + key, std::string("nexus://"),
        std::string("nexus://127.0.0.1/") + key,
        std::string("nexus://127.0.0.1:80/abc"),
        std::string("nexus://127.0.0.1:80/") + std::string(32, 'z'),
        std::string("nexus://[::1:80/") + key})
    CHECK(nx_attach(url.c_str(), &gp) == NX_EINVAL);
  CHECK(nx_attach(nullptr, &gp) == NX_EINVAL);
  // A port with nobody behind it (bound, never listening).
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, (sockaddr *)&a, sizeof(a)) == 0);
  socklen_t len = sizeof(a);
  REQUIRE(getsockname(fd, (sockaddr *)&a, &len) == 0);
  std::string url =
      "nexus://127.0.0.1:" + std::to_string(ntohs(a.sin_port)) + "/" + key;
  CHECK(nx_attach(url.c_str(), &gp) == NX_EUNREACH);
  close(fd);
  CHECK(nx_gp_is_null(&gp));
}

TEST_CASE("a listener that never takes the connection: NX_EUNREACH in 5 s",
          "[attach][badinput]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  // A listening socket whose accept queue is full (backlog 0, two
  // connections nobody accepts): the kernel drops the next SYN, and a
  // blocking connect would wait for its retries (about two minutes).
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(ls, (sockaddr *)&a, sizeof(a)) == 0);
  REQUIRE(listen(ls, 0) == 0);
  socklen_t len = sizeof(a);
  REQUIRE(getsockname(ls, (sockaddr *)&a, &len) == 0);
  int fill[2];
  for (int &f : fill) {
    f = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    REQUIRE(f >= 0);
    connect(f, (sockaddr *)&a, sizeof(a)); // in progress or made
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::string url = "nexus://127.0.0.1:" + std::to_string(ntohs(a.sin_port)) +
                    "/" + std::string(32, 'a');
  nx_gp_t gp = NX_GP_NULL;
  auto t0 = std::chrono::steady_clock::now();
  CHECK(nx_attach(url.c_str(), &gp) == NX_EUNREACH);
  double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  CHECK(s < 7.0);
  CHECK(nx_gp_is_null(&gp));
  for (int f : fill)
    close(f);
  close(ls);
}
