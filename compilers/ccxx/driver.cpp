// ccxx, the driver: translates a .ccxx file to C++17 and, unless -E is given,
// compiles and links it with the system C++ compiler against libccxx and
// libnexus.
//
//   ccxx prog.ccxx -o prog [c++ flags]    a program
//   ccxx -E prog.ccxx -o prog.cpp         the translation only
//
// The compiler is $CCXX_CXX, else c++. Flags for libccxx come from the
// build tree when this ccxx runs from it, else from pkg-config (ccxx.pc).
#include "translate.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

static int usage() {
  fprintf(stderr, "usage: ccxx [-E] FILE.ccxx [-o OUTPUT] [c++ flags...]\n"
                  "  -E   write the C++ translation to OUTPUT (or stdout) "
                  "and stop\n");
  return 2;
}

static std::string self_dir() {
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0)
    return "";
  path[n] = '\0';
  std::string p(path);
  return p.substr(0, p.rfind('/'));
}

// Output of a shell command (pkg-config), without the trailing newline.
static bool capture(const std::string &cmd, std::string &out) {
  FILE *f = popen(cmd.c_str(), "r");
  if (f == nullptr)
    return false;
  char buf[512];
  out.clear();
  while (fgets(buf, sizeof(buf), f) != nullptr)
    out += buf;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' '))
    out.pop_back();
  return pclose(f) == 0;
}

static std::vector<std::string> split(const std::string &s) {
  std::istringstream in(s);
  std::vector<std::string> v;
  for (std::string w; in >> w;)
    v.push_back(w);
  return v;
}

// -I, -L, -l and rpath flags for libccxx and libnexus.
static bool library_flags(std::vector<std::string> &flags) {
#ifdef CCXX_BUILD_DIR
  if (self_dir() == CCXX_BUILD_DIR) {
    flags = {"-I" CCXX_SOURCE_INC,
             "-I" NEXUS_SOURCE_INC,
             "-I" NEXUS_BUILD_INC,
             "-L" CCXX_BUILD_DIR,
             "-L" NEXUS_BUILD_DIR,
             "-Wl,-rpath," CCXX_BUILD_DIR ":" NEXUS_BUILD_DIR,
             "-lccxx",
             "-lnexus",
             "-pthread"};
    if (std::string(CCXX_BUILD_SANITIZE) != "none")
      flags.push_back("-fsanitize=" CCXX_BUILD_SANITIZE);
    return true;
  }
#endif
  std::string cflags, libs, libdir;
  if (!capture("pkg-config --cflags --libs ccxx", cflags) ||
      !capture("pkg-config --variable=libdir ccxx", libdir)) {
    fprintf(stderr, "ccxx: pkg-config does not find ccxx.pc (set "
                    "PKG_CONFIG_PATH to the lib/pkgconfig of its prefix)\n");
    return false;
  }
  flags = split(cflags);
  flags.push_back("-Wl,-rpath," + libdir);
  return true;
}

int main(int argc, char **argv) {
  bool translate_only = false;
  std::string input, output;
  std::vector<std::string> extra;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "-E")
      translate_only = true;
    else if (a == "-o" && i + 1 < argc)
      output = argv[++i];
    else if (a == "-h" || a == "--help")
      return usage();
    else if (input.empty() && a.size() > 5 &&
             a.compare(a.size() - 5, 5, ".ccxx") == 0)
      input = a;
    else
      extra.push_back(a);
  }
  if (input.empty())
    return usage();
  std::ifstream in(input);
  if (!in) {
    fprintf(stderr, "ccxx: cannot read %s: %s\n", input.c_str(),
            strerror(errno));
    return 1;
  }
  std::stringstream src;
  src << in.rdbuf();
  std::string cpp, errors;
  if (!ccxx::translate(src.str(), input, cpp, errors)) {
    fputs(errors.c_str(), stderr);
    return 1;
  }
  if (translate_only) {
    if (output.empty()) {
      fputs(cpp.c_str(), stdout);
      return 0;
    }
    std::ofstream o(output);
    o << cpp;
    return o.good() ? 0 : 1;
  }
  if (output.empty())
    output = "a.out";
  // The translation goes next to the output, where a failed compile leaves
  // it for reading.
  std::string tmp = output + ".ccxx.cpp";
  {
    std::ofstream o(tmp);
    o << cpp;
    if (!o.good()) {
      fprintf(stderr, "ccxx: cannot write %s\n", tmp.c_str());
      return 1;
    }
  }
  std::vector<std::string> flags;
  if (!library_flags(flags))
    return 1;
  const char *cxx = getenv("CCXX_CXX");
  std::vector<std::string> cmd = {cxx != nullptr && *cxx ? cxx : "c++",
                                  "-std=c++17", tmp, "-o", output};
  cmd.insert(cmd.end(), extra.begin(), extra.end());
  cmd.insert(cmd.end(), flags.begin(), flags.end());
  std::vector<char *> args;
  for (auto &s : cmd)
    args.push_back(&s[0]);
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    perror("ccxx: fork");
    return 1;
  }
  if (pid == 0) {
    execvp(args[0], args.data());
    fprintf(stderr, "ccxx: cannot run %s: %s\n", args[0], strerror(errno));
    _exit(127);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    unlink(tmp.c_str());
    return 0;
  }
  return 1;
}
