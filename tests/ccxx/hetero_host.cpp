// The ccxx heterogeneity test's host (x86-64): listens for attachments,
// starts the peer command it is given with the URL appended (the s390x peer
// under qemu-s390x, or the native one), gets the global pointer of the
// peer's Meter object and calls it with an aggregate of every transferable
// kind (hetero_types.hpp): the peer checks what arrived, the host what came
// back; then the peer calls an object of the host the same way. Exits 0
// when both sides saw the values sent.
//
// usage: ccxx_hetero_host PEER-COMMAND...
#include "hetero_types.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

// The Meter's gp, from the peer's hello.
static std::mutex hello_mu;
static nx_gp_t hello_gp = NX_GP_NULL;
static bool hello = false;
static pid_t peer = -1;

static void on_hello(nx_context_t *, void *, nx_buffer_t *buf) {
  nx_gp_t gp;
  if (nx_get_gp(buf, &gp) != 0)
    return;
  std::lock_guard<std::mutex> g(hello_mu);
  if (hello) {
    nx_gp_release(&gp);
    return;
  }
  hello_gp = gp;
  hello = true;
}

static bool got_hello() {
  std::lock_guard<std::mutex> g(hello_mu);
  return hello;
}

// The peer's exit status within `seconds`, or -1 (then it is killed).
static int reap(int seconds) {
  for (int i = 0; i < seconds * 100; i++) {
    int st;
    if (waitpid(peer, &st, WNOHANG) == peer)
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(peer, SIGKILL);
  waitpid(peer, nullptr, 0);
  return -1;
}

static int run(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: ccxx_hetero_host PEER-COMMAND...\n");
    return 2;
  }
  int rc = nx_handler_register(nx_context_self(), "ccxx_hetero.hello", on_hello,
                               NX_HANDLER_NONTHREADED, nullptr);
  const char *url = nullptr;
  if (rc == 0)
    rc = nx_attach_listen(&url);
  if (rc != 0) {
    fprintf(stderr, "ccxx hetero host: %s\n", nx_strerror(rc));
    return 1;
  }
  std::vector<char *> args(argv + 1, argv + argc);
  args.push_back(const_cast<char *>(url));
  args.push_back(nullptr);
  fflush(nullptr);
  peer = fork();
  if (peer == 0) {
    execvp(args[0], args.data());
    fprintf(stderr, "ccxx hetero host: cannot run %s: %s\n", args[0],
            strerror(errno));
    _exit(127);
  }
  // The hello, within 120 s (qemu starts slowly on a loaded machine).
  for (int i = 0; i < 12000 && !got_hello(); i++) {
    int st;
    if (waitpid(peer, &st, WNOHANG) == peer) {
      fprintf(stderr, "ccxx hetero host: the peer exited before its hello\n");
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!got_hello()) {
    fprintf(stderr, "ccxx hetero host: no hello from the peer in 120 s\n");
    reap(0);
    return 1;
  }
  ccxx::global_ptr<Meter> m = ccxx::global_ptr<Meter>::adopt(hello_gp);
  int failures = 0;
  try {
    std::string there = m.call<&Meter::machine>();
    struct utsname u;
    uname(&u);
    printf("host %s, peer %s\n", u.machine, there.c_str());
    std::pair<bool, reading> got = m.call<&Meter::check>(sent());
    printf("reading at the peer: %s\n", got.first ? "as sent" : "WRONG");
    bool back = same(got.second, revised(sent()));
    printf("revised reading at the host: %s\n", back ? "as sent" : "WRONG");
    failures += !got.first + !back;
    // And the other way: the peer calls an object of this program.
    ccxx::global_ptr<Meter> mine = ccxx::create<Meter>(ccxx::here);
    bool asked = m.call<&Meter::ask>(mine);
    printf("the peer calling the host's object: %s\n",
           asked ? "reading as sent both ways" : "WRONG");
    failures += !asked;
    // Large vectors, placed where they arrive, both ways.
    bool big = m.call<&Meter::ask_big>(mine);
    printf("large vectors, peer to host: %s\n",
           big ? "placed, as sent" : "WRONG");
    failures += !big;
    big = mine.call<&Meter::ask_big>(m);
    printf("large vectors, host to peer: %s\n",
           big ? "placed, as sent" : "WRONG");
    failures += !big;
    ccxx::destroy(mine);
    m.call<&Meter::quit>();
  } catch (const std::exception &e) {
    fprintf(stderr, "ccxx hetero host: %s\n", e.what());
    failures++;
  }
  int st = reap(60);
  if (st != 0) {
    fprintf(stderr, "ccxx hetero host: the peer exited with %d\n", st);
    failures++;
  }
  printf("%s\n", failures ? "FAIL" : "ok");
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  if (ccxx::init(argc, argv) != 0)
    return 1;
  int r = run(argc, argv);
  ccxx::finalize();
  return r;
}
