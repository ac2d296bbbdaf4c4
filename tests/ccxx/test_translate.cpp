// Unit tests of the ccxx translator: each construct's C++ translation, each
// malformed construct's error and line, and the driver end to end.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "translate.hpp"

static std::string tr(const std::string &src) {
  std::string out, err;
  INFO("source: " << src);
  bool ok = ccxx::translate(src, "t.ccxx", out, err);
  INFO("errors: " << err);
  REQUIRE(ok);
  REQUIRE(err.empty());
  return out;
}

static std::string bad(const std::string &src) {
  std::string out, err;
  INFO("source: " << src);
  REQUIRE_FALSE(ccxx::translate(src, "t.ccxx", out, err));
  REQUIRE(out.empty());
  return err;
}

// True when `hay` holds `needle`, ignoring spaces and newlines.
static bool has(const std::string &hay, const std::string &needle) {
  auto squash = [](const std::string &s) {
    std::string r;
    for (char c : s)
      if (c != ' ' && c != '\n')
        r += c;
    return r;
  };
  return squash(hay).find(squash(needle)) != std::string::npos;
}

static int lines(const std::string &s) {
  int n = 0;
  for (char c : s)
    n += c == '\n';
  return n;
}

TEST_CASE("the output starts with the include and a #line to the source") {
  std::string out = tr("int f() { return 1; }\n");
  CHECK(out.find("#include <ccxx/ccxx.hpp>\n#line 1 \"t.ccxx\"\n") !=
        std::string::npos);
  CHECK(has(out, "int f() { return 1; }"));
}

TEST_CASE("global class loses the keyword; new (where) C(args) creates") {
  std::string out = tr("global class C { public: C(int); int f(int); };\n"
                       "void g(ccxx::proc_t w) {\n"
                       "  C *global p = new (w) C(3);\n"
                       "  int r = p->f(4);\n"
                       "  C *global q = new (ccxx::here) C;\n"
                       "  delete p;\n"
                       "}\n");
  CHECK(has(out, "class C { public:"));
  CHECK(!has(out, "global class"));
  CHECK(has(out, "ccxx::global_ptr<C> p = ccxx::create<C>(w, 3);"));
  // The call is left to C++: global_ptr<C>::operator-> returns C's stub.
  CHECK(has(out, "int r = p->f(4);"));
  CHECK(has(out, "ccxx::global_ptr<C> q = ccxx::create<C>(ccxx::here);"));
  CHECK(has(out, "ccxx::delete_( p);"));
}

TEST_CASE("a global class gets a stub with its public functions' "
          "signatures, on the line of its closing brace") {
  std::string src = "global class C {\n"
                    "  int hidden(int);\n"
                    "public:\n"
                    "  C(int a) : a_(a), b_{a} {}\n"
                    "  int f(int a, std::string s = \"x\") const;\n"
                    "  int g(int) noexcept;\n"
                    "  int g(C *global o);\n"
                    "  void h(sync int *global s) { *s = 1; }\n"
                    "  static int st(int);\n"
                    "  template <class T> int tm(T);\n"
                    "  ~C();\n"
                    "private:\n"
                    "  int a_, b_;\n"
                    "};\n";
  std::string out = tr(src);
  CHECK(lines(out) == lines(src) + 3);
  CHECK(has(out, "public: struct ccxx_stub_ { const ccxx::global_ptr<C> "
                 "&ccxx_p_; const ccxx_stub_ *operator->() const { return "
                 "this; }"));
  CHECK(has(out, "template <int ccxx_n_ = 0> ccxx::detail::result_t<&C::f> "
                 "f(int a, std::string s = "
                 "\"x\") const { return ccxx::detail::stub_call<&C::f, "
                 "ccxx_n_>(ccxx_p_, std::move(a), std::move(s)); }"));
  // Overloads name their member function pointer's type.
  CHECK(has(out,
            "g(int ccxx_a0_) const { return "
            "ccxx::detail::stub_call<static_cast<int (C::*)(int) "
            "noexcept>(&C::g), ccxx_n_>(ccxx_p_, std::move(ccxx_a0_)); }"));
  CHECK(has(out, "g(ccxx::global_ptr<C> o) const { return "
                 "ccxx::detail::stub_call<static_cast<int "
                 "(C::*)(ccxx::global_ptr<C>)>(&C::g), ccxx_n_>(ccxx_p_, "
                 "std::move(o)); }"));
  CHECK(
      has(out, "result_t<&C::h> h(ccxx::global_ptr<ccxx::sync<int>> s) const"));
  // Not in the stub: private, static, template and special members, and
  // the constructor's initialisers.
  CHECK(!has(out, "> hidden("));
  CHECK(!has(out, "> st("));
  CHECK(!has(out, "> tm("));
  CHECK(!has(out, "> C("));
  CHECK(!has(out, "> a_("));
  CHECK(!has(out, "> b_("));
  CHECK(has(out, "}; };\n"));
}

TEST_CASE("a global class declared in a function gets no stub; one in a "
          "namespace or a class does") {
  std::string out = tr("namespace n { global class A { public: int f(); }; }\n"
                       "struct O { global class B { public: int f(); }; };\n"
                       "template <class T> void t() {}\n"
                       "int main() {\n"
                       "  global class L { public: int f() { return 1; } };\n"
                       "  struct S { global class M { public: int f(); }; };\n"
                       "  L *global l = new (ccxx::here) L();\n"
                       "  return l.call<&L::f>();\n"
                       "}\n");
  CHECK(has(out, "class A { public: int f(); public: struct ccxx_stub_"));
  CHECK(has(out, "class B { public: int f(); public: struct ccxx_stub_"));
  CHECK(has(out, "class L { public: int f() { return 1; } };"));
  CHECK(has(out, "class M { public: int f(); };"));
}

TEST_CASE("ccxx::async(p, &C::f, args) names the method as a template "
          "argument") {
  std::string out = tr("void g(P p) { auto f = ccxx::async(p, &C::f, 1, "
                       "h(2, 3)); auto v = ccxx::async(q(p, 1), &ns::C::v); "
                       "}\n");
  CHECK(has(out, "auto f = ccxx::async<&C::f>(p, 1, h(2, 3));"));
  CHECK(has(out, "auto v = ccxx::async<&ns::C::v>(q(p, 1));"));
  CHECK(bad("void g() {\n  ccxx::async(p, f);\n}\n") ==
        "t.ccxx:2: error: ccxx::async needs the method as its second "
        "argument: ccxx::async(p, &C::f, args...)\n");
}

TEST_CASE("several global pointers in one declaration") {
  std::string out =
      tr("global class C { public: int f(); };\n"
         "void g(ccxx::proc_t w) {\n"
         "  C *global a = new (w) C(), *global b = a, *global c;\n"
         "  for (C *global x = a, *global y = b; x; ) {}\n"
         "  delete b;\n"
         "}\n");
  CHECK(has(out, "ccxx::global_ptr<C> a = ccxx::create<C>(w), b = a, c;"));
  CHECK(has(out, "for (ccxx::global_ptr<C> x = a, y = b; x; ) {}"));
  CHECK(has(out, "ccxx::delete_( b);"));
}

TEST_CASE("delete of anything becomes ccxx::delete_, except delete[] and "
          "deleted functions") {
  std::string out = tr("struct S { S(const S &) = delete; };\n"
                       "void f(int *p, int *q, S *s) { delete p; delete[] q; "
                       "delete s; }\n");
  CHECK(has(out, "S(const S &) = delete;"));
  CHECK(has(out, "ccxx::delete_( p);"));
  CHECK(has(out, "delete[] q;"));
  CHECK(has(out, "ccxx::delete_( s);"));
}

TEST_CASE("placement new of an ordinary class is left alone") {
  std::string out = tr("struct S {}; void f(void *m) { new (m) S(); }\n");
  CHECK(has(out, "new (m) S();"));
}

TEST_CASE("T *global declares a global pointer; -> on data reads a member") {
  std::string out = tr("struct P { int x; };\n"
                       "int f(P *global g, std::vector<int> *global v) {\n"
                       "  return g->x;\n"
                       "}\n");
  CHECK(has(out, "int f(ccxx::global_ptr<P> g, "
                 "ccxx::global_ptr<std::vector<int>> v)"));
  CHECK(has(out, "return (*g.member(&P::x));"));
}

TEST_CASE("a method returning T *global keeps its name") {
  std::string out = tr("global class C { int x; public: int *global at() { "
                       "return &x; } };\n");
  CHECK(has(out, "ccxx::global_ptr<int> at() { return &x; }"));
}

TEST_CASE("sync T x becomes ccxx::sync<T>") {
  std::string out = tr("sync int a;\nsync std::vector<long> b;\n"
                       "void f(sync long *global s);\n");
  CHECK(has(out, "ccxx::sync<int> a;"));
  CHECK(has(out, "ccxx::sync<std::vector<long>> b;"));
  CHECK(has(out, "void f(ccxx::global_ptr<ccxx::sync<long>> s);"));
}

TEST_CASE("atomic member functions take the object's atomic lock") {
  std::string out =
      tr("global class A { public: atomic int get() const { return 1; } };\n");
  CHECK(has(out, "int get() const { ccxx::atomic_guard ccxx_atomic_(this); "
                 "return 1; }"));
}

TEST_CASE("par runs each statement as a lambda in ccxx::par") {
  std::string out = tr("void f() {\n  par {\n    a();\n    { b(); c(); }\n"
                       "  }\n}\n");
  CHECK(has(out, "ccxx::par( [&] { a(); }, [&] { { b(); c(); } } );"));
  CHECK(lines(out) == lines("void f() {\n  par {\n    a();\n    { b(); c(); "
                            "}\n  }\n}\n") +
                          3);
}

TEST_CASE("parfor adds each iteration to a group, capturing its variable") {
  std::string out = tr("void f(int *v) {\n"
                       "  parfor (int i = 0; i < 10; i++) v[i] = i;\n"
                       "  parfor (int j = 0; j < 3; j++) { v[j]++; }\n"
                       "}\n");
  CHECK(has(out, "{ ccxx::parfor_group ccxx_pf0_; for (int i = 0; i < 10; "
                 "i++) ccxx_pf0_.add([&, i]() { v[i] = i; }); "
                 "ccxx_pf0_.run(); }"));
  CHECK(has(out, "{ ccxx::parfor_group ccxx_pf1_; for (int j = 0; j < 3; "
                 "j++) ccxx_pf1_.add([&, j]() { v[j]++; }); "
                 "ccxx_pf1_.run(); }"));
}

TEST_CASE("spawn evaluates the arguments here and runs the call in a new "
          "thread") {
  std::string out = tr("void g(int);\nvoid h();\nvoid f(int x) { spawn g(x + "
                       "1); spawn h(); spawn o.m(a, b(c)); }\n");
  CHECK(has(out, "ccxx::spawn([=](auto &&...ccxx_a_) mutable { "
                 "g(std::forward<decltype(ccxx_a_)>(ccxx_a_)...); }, x + 1);"));
  CHECK(has(out, "ccxx::spawn([=](auto &&...ccxx_a_) mutable { "
                 "h(std::forward<decltype(ccxx_a_)>(ccxx_a_)...); });"));
  CHECK(has(out, "ccxx::spawn([=](auto &&...ccxx_a_) mutable { "
                 "o.m(std::forward<decltype(ccxx_a_)>(ccxx_a_)...); }, a, "
                 "b(c));"));
}

TEST_CASE("main is renamed and a real main calls ccxx::start") {
  std::string out = tr("#include <cstdio>\n\nint main() {\n  return 0;\n}\n");
  CHECK(has(out, "int ccxx_main_() {"));
  CHECK(has(out, "#line 3 \"t.ccxx\"\nint main(int argc, char **argv) { "
                 "return ccxx::start(argc, argv, ccxx_main_); }"));
}

TEST_CASE("constructs nest: par inside parfor, spawn inside par") {
  std::string out = tr("void f() { parfor (int i = 0; i < 2; i++) { par { "
                       "a(i); spawn b(i); } } }\n");
  CHECK(has(out, "ccxx_pf0_.add([&, i]() { ccxx::par( [&] { a(i); }, [&] { "
                 "ccxx::spawn([=](auto &&...ccxx_a_) mutable { "
                 "b(std::forward<decltype(ccxx_a_)>(ccxx_a_)...); }, i); } ); "
                 "});"));
}

TEST_CASE("keywords in strings, comments and qualified names are not touched") {
  std::string out = tr("// par { spawn x; }\nconst char *s = \"sync global\";\n"
                       "ccxx::sync<int> a; void f() { obj.par(); }\n");
  CHECK(has(out, "// par { spawn x; }"));
  CHECK(has(out, "\"sync global\""));
  CHECK(has(out, "ccxx::sync<int> a;"));
  CHECK(has(out, "obj.par();"));
}

TEST_CASE("malformed constructs: file:line: error: ...") {
  CHECK(bad("void f() {\n  par a();\n}\n") ==
        "t.ccxx:2: error: 'par' without a block: write par { statement; ... "
        "}\n");
  CHECK(bad("void f() {\n\n  spawn x;\n}\n") ==
        "t.ccxx:3: error: 'spawn' of a non-call: spawn takes a function call, "
        "spawn f(args);\n");
  CHECK(bad("void f() { spawn (x); }\n") ==
        "t.ccxx:1: error: 'spawn' of a non-call: spawn takes a function call, "
        "spawn f(args);\n");
  CHECK(bad("int v;\nvoid f() {\n  sync int &r = v;\n}\n") ==
        "t.ccxx:3: error: 'sync' on a reference: a sync variable holds its own "
        "value (use 'sync T *global' to share one)\n");
  CHECK(bad("\nglobal class C;\n") ==
        "t.ccxx:2: error: global class 'C' has no body (a processor object "
        "type must be defined where it is declared global)\n");
  CHECK(bad("void f() {\n  parfor i < 3;\n}\n") ==
        "t.ccxx:2: error: 'parfor' without a loop header: write parfor (init; "
        "cond; step) statement\n");
  CHECK(bad("void f() { parfor (; i < 3; i++) g(); }\n") ==
        "t.ccxx:1: error: 'parfor' needs a loop variable set in its header "
        "(int i = 0; ...)\n");
  CHECK(bad("void f() { parfor (int i = 0; i < 3) g(); }\n") ==
        "t.ccxx:1: error: 'parfor' header needs init; condition; step\n");
  CHECK(bad("global int x;\n") == "t.ccxx:1: error: 'global' belongs after "
                                  "'*' (T *global p) or before 'class'\n");
  CHECK(bad("class C {\n  atomic int f();\n};\n") ==
        "t.ccxx:2: error: atomic function 'f' has no body here (define atomic "
        "functions inside their class)\n");
  CHECK(bad("sync x;\n") ==
        "t.ccxx:1: error: 'sync' needs a type and then a name: sync T name;\n");
  CHECK(bad("global class C { public: int f(); };\nvoid g() {\n"
            "  C *global a, b;\n}\n") ==
        "t.ccxx:3: error: 'b' would be a global pointer too: declare it "
        "separately, or write *global before it\n");
  CHECK(bad("void g() {\n  *global p;\n}\n") ==
        "t.ccxx:2: error: '*global' needs a pointee type before it (T "
        "*global p)\n");
  CHECK(bad("template <class T>\nglobal class Box { T v; };\n") ==
        "t.ccxx:2: error: global class 'Box' is a template: templates of "
        "global classes are not supported\n");
  CHECK(bad("global class P { public: P(int); };\nvoid f() {\n"
            "  P *global p = new (ccxx::here) P{5};\n}\n") ==
        "t.ccxx:3: error: 'new (where) P{...}': write the constructor's "
        "arguments in parentheses, new (where) P(args)\n");
  CHECK(bad("global class C {\npublic:\n  int f(int);\n  auto f(long x) { "
            "return x; }\n};\n") ==
        "t.ccxx:4: error: overloaded remote method 'C::f' needs its return "
        "type written (not auto)\n");
}

TEST_CASE("return, break, continue and goto that would leave a par or "
          "parfor body are refused, naming the line") {
  const std::string par_why = "a 'par' block: each of its statements runs as "
                              "a function of its own, in a thread of its own\n";
  const std::string parfor_why =
      "a 'parfor' body: each iteration runs as a function of its own\n";
  CHECK(bad("int f(int x) {\n  par {\n    { if (x < 0) return -1; }\n"
            "    g();\n  }\n  return x;\n}\n") ==
        "t.ccxx:3: error: 'return' cannot leave " + par_why);
  CHECK(bad("int f(int *v) {\n  parfor (int i = 0; i < 8; i++) {\n"
            "    if (v[i] < 0)\n      return i;\n  }\n  return -1;\n}\n") ==
        "t.ccxx:4: error: 'return' cannot leave " + parfor_why);
  CHECK(bad("void f(int *v) {\n  parfor (int i = 0; i < 8; i++) {\n"
            "    if (v[i]) continue;\n    if (v[i] < 0) break;\n  }\n}\n") ==
        "t.ccxx:3: error: 'continue' cannot leave " + parfor_why +
            "t.ccxx:4: error: 'break' cannot leave " + parfor_why);
  // In a loop around the par, or in a switch inside the body, still out.
  CHECK(bad("void f() {\n  for (;;) {\n    par { break; g(); }\n  }\n}\n") ==
        "t.ccxx:3: error: 'break' cannot leave " + par_why);
  CHECK(bad("void f(int *v) {\n  parfor (int i = 0; i < 8; i++) {\n"
            "    switch (v[i]) { case 0: continue; default: break; }\n  "
            "}\n}\n") ==
        "t.ccxx:3: error: 'continue' cannot leave " + parfor_why);
  CHECK(bad("void f(int *v) {\n  parfor (int i = 0; i < 8; i++) {\n"
            "    if (v[i]) goto out;\n  }\nout:;\n}\n") ==
        "t.ccxx:3: error: 'goto' cannot leave " + parfor_why);
  // A nested par is reported once, as itself.
  CHECK(bad("int f() {\n  parfor (int i = 0; i < 2; i++) {\n"
            "    par { return 1; g(); }\n  }\n  return 0;\n}\n") ==
        "t.ccxx:3: error: 'return' cannot leave " + par_why);
}

TEST_CASE("return, break, continue and goto that stay inside a par or parfor "
          "body are translated") {
  tr("int f(int *v, int n) {\n"
     "  parfor (int i = 0; i < n; i++) {\n"
     "    auto neg = [&](int x) { if (x < 0) return true; return false; };\n"
     "    struct local { static int g(int x) { return x + 1; } };\n"
     "    for (int j = 0; j < 3; j++) { if (j == 1) continue; break; }\n"
     "    while (v[i] > 100) break;\n"
     "    do { if (v[i]) break; } while (0);\n"
     "    for (int k = 0; k < 2; k++) if (k) break; else continue;\n"
     "    switch (v[i]) { case 1: break; default: break; }\n"
     "    if (v[i] == 7) goto done;\n"
     "    v[i] = local::g(v[i]);\n"
     "  done:\n"
     "    v[i] += neg(v[i]);\n"
     "    (void)[] { return 1; }();\n"
     "  }\n"
     "  par {\n"
     "    { for (int a : {1, 2}) { if (a) continue; } }\n"
     "    g([&]() -> int { return n; }());\n"
     "  }\n"
     "  return n;\n"
     "}\n");
}

TEST_CASE("a public method of a global class with a local pointer or "
          "reference parameter is refused, naming the parameter") {
  std::string err =
      bad("global class C {\n"
          "  void helper(int *p);\n"
          "public:\n"
          "  C(const std::string &name);\n"
          "  int f(int a, int *b, std::vector<int> v);\n"
          "  int g(C *global o, sync int *global s) { return 1; }\n"
          "  friend ccxx::stream &operator<<(ccxx::stream &, "
          "const C &);\n"
          "};\n");
  CHECK(err == "t.ccxx:4: error: remote method 'C::C': parameter 'name' is a "
               "local reference (pass it by value, or as T *global)\n"
               "t.ccxx:5: error: remote method 'C::f': parameter 'b' is a "
               "local pointer (pass it by value, or as T *global)\n");
}

TEST_CASE("every error of a file is reported, each with its line") {
  std::string err = bad("void f() {\n  par a();\n  spawn 3;\n}\n");
  CHECK(err == "t.ccxx:2: error: 'par' without a block: write par { "
               "statement; ... }\n"
               "t.ccxx:3: error: 'spawn' of a non-call: spawn takes a "
               "function call, spawn f(args);\n");
}

#ifdef CCXX_TOOL
static int run(const std::string &cmd, std::string &out) {
  std::string full = cmd + " 2>&1";
  FILE *f = popen(full.c_str(), "r");
  REQUIRE(f != nullptr);
  char buf[512];
  out.clear();
  while (fgets(buf, sizeof(buf), f) != nullptr)
    out += buf;
  int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST_CASE("the driver: a sync written twice fails with the documented "
          "message; a C++ error points at the .ccxx line") {
  char dir[] = "/tmp/ccxx_test_XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  std::string d = dir;
  {
    std::ofstream f(d + "/twice.ccxx");
    f << "#include <cstdio>\n"
         "int main() {\n"
         "  sync int x;\n"
         "  x = 1;\n"
         "  printf(\"first write: %d\\n\", (int)x);\n"
         "  x = 2;\n"
         "  printf(\"not reached\\n\");\n"
         "  return 0;\n"
         "}\n";
  }
  {
    std::ofstream f(d + "/typo.ccxx");
    f << "int main() {\n"
         "  par {\n"
         "    undeclared_name();\n"
         "  }\n"
         "  return 0;\n"
         "}\n";
  }
  std::string out;
  REQUIRE(
      run(std::string(CCXX_TOOL) + " " + d + "/twice.ccxx -o " + d + "/twice",
          out) == 0);
  int st = run(d + "/twice", out);
  INFO(out);
  CHECK(st == 1);
  CHECK(out.find("first write: 1") != std::string::npos);
  CHECK(out.find("ccxx: sync variable written twice (a sync is "
                 "single-assignment)") != std::string::npos);
  CHECK(out.find("not reached") == std::string::npos);

  st = run(std::string(CCXX_TOOL) + " " + d + "/typo.ccxx -o " + d + "/typo",
           out);
  CHECK(st != 0);
  CHECK(out.find(d + "/typo.ccxx:3") != std::string::npos);
  CHECK(out.find("undeclared_name") != std::string::npos);

  st = run(std::string(CCXX_TOOL) + " " + d + "/missing.ccxx -o " + d + "/m",
           out);
  CHECK(st == 1);
  CHECK(out.find("cannot read") != std::string::npos);
  std::string rm = "rm -rf " + d;
  CHECK(system(rm.c_str()) == 0);
}
#endif
