// Tests of nexus/tools/nxrun.c with real processes: bootstrap of N
// contexts, signal forwarding, reports of a context that dies, and no
// process left behind.
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

struct run {
  pid_t pid = -1;
  std::string err_path;
};

run start(std::vector<std::string> args) {
  run r;
  char path[] = "/tmp/nxrun_err_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  r.err_path = path;
  r.pid = fork();
  REQUIRE(r.pid >= 0);
  if (r.pid == 0) {
    dup2(fd, 2);
    std::vector<char *> argv;
    for (auto &a : args)
      argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    execv(NXRUN_EXE, argv.data());
    _exit(127);
  }
  close(fd);
  return r;
}

// Waits for nxrun's exit status (-1 on timeout, after killing it).
int finish(run &r, int seconds) {
  for (int i = 0; i < seconds * 100; i++) {
    int status;
    if (waitpid(r.pid, &status, WNOHANG) == r.pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(r.pid, SIGKILL);
  waitpid(r.pid, nullptr, 0);
  return -1;
}

std::string slurp(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Processes running the test child program, anywhere on the machine.
int children_alive() {
  int n = 0;
  DIR *d = opendir("/proc");
  struct dirent *e;
  while (d != nullptr && (e = readdir(d)) != nullptr) {
    std::ifstream st(std::string("/proc/") + e->d_name + "/stat");
    std::string pid, comm, state;
    if (st >> pid >> comm >> state && comm == "(ctx_child)" && state != "Z")
      n++;
  }
  if (d != nullptr)
    closedir(d);
  return n;
}

bool wait_gone(int seconds) {
  for (int i = 0; i < seconds * 100; i++) {
    if (children_alive() == 0)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::string tmpbase() {
  char path[] = "/tmp/nxrun_out_XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  unlink(path);
  return path;
}

} // namespace

TEST_CASE("nxrun gives every context the gps of all, in rank order",
          "[nxrun]") {
  REQUIRE(wait_gone(5));
  std::string base = tmpbase();
  run r = start({"nxrun", "-n", "4", CHILD_EXE, "peers", base});
  std::vector<std::string> lines(4);
  for (int tries = 0; tries < 1000; tries++) {
    int have = 0;
    for (int i = 0; i < 4; i++) {
      lines[i] = slurp(base + "." + std::to_string(i));
      have += !lines[i].empty();
    }
    if (have == 4)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string first_ctx;
  for (int i = 0; i < 4; i++) {
    INFO("rank " << i << ": " << lines[i]);
    std::istringstream in(lines[i]);
    int rc = -1, n = -1, rank = -1;
    std::string ctx;
    REQUIRE(in >> rc >> n >> rank >> ctx);
    CHECK(rc == 0);
    CHECK(n == 4);
    CHECK(rank == i);
    if (i == 0)
      first_ctx = ctx;
    CHECK(ctx == first_ctx); // everyone's peer 0 is the same context
    unlink((base + "." + std::to_string(i)).c_str());
  }
  // They serve until told otherwise: SIGTERM to nxrun ends them all.
  REQUIRE(kill(r.pid, SIGTERM) == 0);
  CHECK(finish(r, 20) == 1);
  std::string err = slurp(r.err_path);
  CHECK(err.find("forwarding signal 15") != std::string::npos);
  CHECK(wait_gone(5));
  unlink(r.err_path.c_str());
}

TEST_CASE("nxrun reports a context that dies; the others hear of it",
          "[nxrun]") {
  REQUIRE(wait_gone(5));
  std::string base = tmpbase();
  run r = start({"nxrun", "-n", "3", CHILD_EXE, "die", base});
  CHECK(finish(r, 60) == 1);
  std::string err = slurp(r.err_path);
  INFO(err);
  CHECK(err.find("context 1") != std::string::npos);
  CHECK(err.find("killed by signal 9") != std::string::npos);
  CHECK(slurp(base + ".0") == "saw-death\n");
  CHECK(slurp(base + ".2") == "saw-death\n");
  for (int i = 0; i < 3; i++)
    unlink((base + "." + std::to_string(i)).c_str());
  CHECK(wait_gone(5));
  unlink(r.err_path.c_str());
}

TEST_CASE("nxrun killed with SIGKILL leaves no orphans", "[nxrun]") {
  REQUIRE(wait_gone(5));
  std::string base = tmpbase();
  run r = start({"nxrun", "-n", "3", CHILD_EXE, "peers", base});
  for (int tries = 0; tries < 500 && children_alive() < 3; tries++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(children_alive() == 3);
  REQUIRE(kill(r.pid, SIGKILL) == 0);
  waitpid(r.pid, nullptr, 0);
  CHECK(wait_gone(5));
  for (int i = 0; i < 3; i++)
    unlink((base + "." + std::to_string(i)).c_str());
  unlink(r.err_path.c_str());
}

TEST_CASE("nxrun refuses bad usage and reports a program it cannot run",
          "[nxrun]") {
  run r = start({"nxrun"});
  CHECK(finish(r, 10) == 2);
  unlink(r.err_path.c_str());
  r = start({"nxrun", "-n", "0", CHILD_EXE});
  CHECK(finish(r, 10) == 2);
  unlink(r.err_path.c_str());
  r = start({"nxrun", "-n", "2", "/nonexistent/program"});
  CHECK(finish(r, 20) == 1);
  std::string err = slurp(r.err_path);
  CHECK(err.find("cannot run /nonexistent/program") != std::string::npos);
  CHECK(err.find("exited with status 127") != std::string::npos);
  unlink(r.err_path.c_str());
}
