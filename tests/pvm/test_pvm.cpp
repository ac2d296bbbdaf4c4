// Each libnxpvm call against PVM 3.4's documented behaviour, in a task
// started by hand that spawns real child tasks (pvm_child) as processes.
#include <catch2/catch.hpp>

#include <pvm3.h>

#include "capture_stderr.h"

#include <sys/select.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

// The task leaves PVM (and nexus) once, when the test program ends.
struct Task {
  int tid;
  Task() : tid(pvm_mytid()) { pvm_setopt(PvmAutoErr, 0); }
  ~Task() { pvm_exit(); }
};

int me() {
  static Task task;
  REQUIRE(task.tid > 0);
  return task.tid;
}

int spawn(const char *what, const char *arg = nullptr) {
  char *argv[] = {const_cast<char *>(what), const_cast<char *>(arg), nullptr};
  int tid = 0;
  REQUIRE(pvm_spawn(const_cast<char *>(PVM_CHILD), argv, PvmTaskDefault,
                    const_cast<char *>(""), 1, &tid) == 1);
  REQUIRE(tid > 0);
  return tid;
}

void send_int(int to, int tag, int v) {
  REQUIRE(pvm_initsend(PvmDataDefault) > 0);
  REQUIRE(pvm_pkint(&v, 1, 1) == PvmOk);
  REQUIRE(pvm_send(to, tag) == PvmOk);
}

int recv_int(int from, int tag) {
  REQUIRE(pvm_recv(from, tag) > 0);
  int v = -1;
  REQUIRE(pvm_upkint(&v, 1, 1) == PvmOk);
  return v;
}

} // namespace

TEST_CASE("a task started by hand has a tid and no parent") {
  int tid = me();
  CHECK(pvm_mytid() == tid);
  CHECK(pvm_parent() == PvmNoParent);
  int *sib = nullptr;
  REQUIRE(pvm_siblings(&sib) == 1);
  CHECK(sib[0] == tid);
  CHECK(pvm_pstat(tid) == PvmOk);
  int n = 0;
  struct pvmtaskinfo *ti = nullptr;
  REQUIRE(pvm_tasks(0, &n, &ti) == PvmOk);
  REQUIRE(n >= 1);
  CHECK(ti[0].ti_tid == tid);
}

TEST_CASE("options: PvmRoute is accepted and reported, bad options refused") {
  me();
  int old = pvm_setopt(PvmRoute, PvmRouteDirect);
  CHECK(old == PvmAllowDirect);
  CHECK(pvm_getopt(PvmRoute) == PvmRouteDirect);
  CHECK(pvm_setopt(PvmRoute, 99) == PvmBadParam);
  CHECK(pvm_setopt(9999, 1) == PvmBadParam);
  CHECK(pvm_getopt(9999) == PvmBadParam);
  pvm_setopt(PvmRoute, old);
}

TEST_CASE("buffers: make, switch, free; bad ids refused") {
  me();
  int a = pvm_mkbuf(PvmDataDefault);
  int b = pvm_mkbuf(PvmDataRaw);
  REQUIRE(a > 0);
  REQUIRE(b > 0);
  CHECK(a != b);
  int old = pvm_setsbuf(a);
  CHECK(pvm_getsbuf() == a);
  CHECK(pvm_setsbuf(b) == a);
  CHECK(pvm_getsbuf() == b);
  CHECK(pvm_setsbuf(987654) == PvmNoSuchBuf);
  CHECK(pvm_freebuf(a) == PvmOk);
  CHECK(pvm_freebuf(a) == PvmNoSuchBuf);
  CHECK(pvm_freebuf(-3) == PvmBadParam);
  CHECK(pvm_mkbuf(77) == PvmBadParam);
  CHECK(pvm_initsend(77) == PvmBadParam);
  CHECK(pvm_freebuf(b) == PvmOk);
  // With no active send buffer, packing and sending say so.
  CHECK(pvm_getsbuf() == 0);
  int x = 1;
  CHECK(pvm_pkint(&x, 1, 1) == PvmNoBuf);
  CHECK(pvm_send(me(), 1) == PvmNoBuf);
  (void)old;
}

TEST_CASE("every type packs and unpacks, with counts and strides") {
  int tid = me();
  for (int enc : {PvmDataDefault, PvmDataRaw, PvmDataInPlace}) {
    INFO("encoding " << enc);
    char bytes[6] = {1, -2, 3, -4, 5, -6};
    short sh[4] = {-1, 2, -300, 400};
    unsigned short ush[2] = {65535, 1};
    int in[6] = {10, 11, 12, 13, 14, 15};
    unsigned int ui[2] = {4000000000u, 7};
    long lo[2] = {-5000000000L, 5000000000L};
    unsigned long ul[2] = {18000000000000000000UL, 3};
    float fl[3] = {1.5f, -2.25f, 1e30f};
    double db[4] = {1.0, 2.0, 3.0, 4.0};
    float cx[4] = {1, 2, 3, 4};
    double dcx[2] = {-1, 1};
    char str[] = "hello, pvm";
    REQUIRE(pvm_initsend(enc) > 0);
    REQUIRE(pvm_pkbyte(bytes, 3, 2) == PvmOk); // 1, 3, 5
    REQUIRE(pvm_pkshort(sh, 4, 1) == PvmOk);
    REQUIRE(pvm_pkushort(ush, 2, 1) == PvmOk);
    REQUIRE(pvm_pkint(in, 3, 2) == PvmOk); // 10, 12, 14
    REQUIRE(pvm_pkuint(ui, 2, 1) == PvmOk);
    REQUIRE(pvm_pklong(lo, 2, 1) == PvmOk);
    REQUIRE(pvm_pkulong(ul, 2, 1) == PvmOk);
    REQUIRE(pvm_pkfloat(fl, 3, 1) == PvmOk);
    REQUIRE(pvm_pkdouble(db, 2, 2) == PvmOk); // 1, 3
    REQUIRE(pvm_pkcplx(cx, 2, 1) == PvmOk);
    REQUIRE(pvm_pkdcplx(dcx, 1, 1) == PvmOk);
    REQUIRE(pvm_pkstr(str) == PvmOk);
    // In place: the values are read at the send, so this change travels.
    bytes[2] = 33;
    REQUIRE(pvm_send(tid, 40 + enc) == PvmOk);
    bytes[2] = 3;
    int bufid = pvm_recv(tid, 40 + enc);
    REQUIRE(bufid > 0);
    int nbytes = 0, tag = 0, src = 0;
    REQUIRE(pvm_bufinfo(bufid, &nbytes, &tag, &src) == PvmOk);
    CHECK(tag == 40 + enc);
    CHECK(src == tid);
    CHECK(nbytes == 3 + 8 + 4 + 12 + 8 + 16 + 16 + 12 + 16 + 16 + 16 + 11);

    char b2[6] = {0};
    REQUIRE(pvm_upkbyte(b2, 3, 2) == PvmOk); // into 0, 2, 4
    CHECK(b2[0] == 1);
    CHECK(b2[2] == (enc == PvmDataInPlace ? 33 : 3));
    CHECK(b2[4] == 5);
    CHECK(b2[1] == 0);
    short s2[4];
    // Unpacked in two pieces although packed in one.
    REQUIRE(pvm_upkshort(s2, 1, 1) == PvmOk);
    REQUIRE(pvm_upkshort(s2 + 1, 3, 1) == PvmOk);
    CHECK(std::equal(s2, s2 + 4, sh));
    unsigned short us2[2];
    REQUIRE(pvm_upkushort(us2, 2, 1) == PvmOk);
    CHECK(us2[0] == 65535);
    int i2[3];
    REQUIRE(pvm_upkint(i2, 3, 1) == PvmOk);
    CHECK(i2[0] == 10);
    CHECK(i2[1] == 12);
    CHECK(i2[2] == 14);
    unsigned int ui2[2];
    REQUIRE(pvm_upkuint(ui2, 2, 1) == PvmOk);
    CHECK(ui2[0] == 4000000000u);
    long l2[2];
    REQUIRE(pvm_upklong(l2, 2, 1) == PvmOk);
    CHECK(l2[0] == -5000000000L);
    CHECK(l2[1] == 5000000000L);
    unsigned long ul2[2];
    REQUIRE(pvm_upkulong(ul2, 2, 1) == PvmOk);
    CHECK(ul2[0] == 18000000000000000000UL);
    float f2[3];
    REQUIRE(pvm_upkfloat(f2, 3, 1) == PvmOk);
    CHECK(f2[1] == -2.25f);
    CHECK(f2[2] == 1e30f);
    double d2[4] = {0, 0, 0, 0};
    REQUIRE(pvm_upkdouble(d2, 2, 2) == PvmOk);
    CHECK(d2[0] == 1.0);
    CHECK(d2[2] == 3.0);
    CHECK(d2[1] == 0.0);
    float cx2[4];
    REQUIRE(pvm_upkcplx(cx2, 2, 1) == PvmOk);
    CHECK(std::equal(cx2, cx2 + 4, cx));
    double dcx2[2];
    REQUIRE(pvm_upkdcplx(dcx2, 1, 1) == PvmOk);
    CHECK(dcx2[0] == -1.0);
    CHECK(dcx2[1] == 1.0);
    // The wrong type, then reading past the end.
    int wrong;
    CHECK(pvm_upkint(&wrong, 1, 1) == PvmNoData);
    char s[32];
    REQUIRE(pvm_upkstr(s) == PvmOk);
    CHECK(std::string(s) == "hello, pvm");
    CHECK(pvm_upkint(&wrong, 1, 1) == PvmNoData);
    CHECK(pvm_upkint(&wrong, 1, 0) == PvmBadParam);
  }
}

TEST_CASE("receives match tid and tag, with -1 wildcards, out of order") {
  int tid = me();
  send_int(tid, 3, 300);
  send_int(tid, 1, 100);
  send_int(tid, 2, 200);
  send_int(tid, 1, 101);
  // Sends (to oneself too) are asynchronous; pairwise order means that
  // once this marker is here, the four before it are too.
  send_int(tid, 9, 9);
  CHECK(recv_int(tid, 9) == 9);
  // probe sees without taking; nrecv takes.
  int p = pvm_probe(-1, 2);
  REQUIRE(p > 0);
  int bytes, tag, src;
  REQUIRE(pvm_bufinfo(p, &bytes, &tag, &src) == PvmOk);
  CHECK(tag == 2);
  CHECK(pvm_probe(-1, 99) == 0);
  CHECK(recv_int(-1, 2) == 200);
  CHECK(recv_int(tid, 1) == 100);
  CHECK(recv_int(-1, -1) == 300);
  REQUIRE(pvm_nrecv(-1, -1) > 0);
  int v;
  REQUIRE(pvm_upkint(&v, 1, 1) == PvmOk);
  CHECK(v == 101);
  CHECK(pvm_nrecv(-1, -1) == 0);
  CHECK(pvm_recv(0, 1) == PvmBadParam);
  CHECK(pvm_recv(-1, -7) == PvmBadParam);
}

TEST_CASE("trecv times out with 0 and returns a message that is there") {
  int tid = me();
  struct timeval tv = {0, 200000};
  auto t0 = std::chrono::steady_clock::now();
  CHECK(pvm_trecv(-1, 555, &tv) == 0);
  double ms = std::chrono::duration<double, std::milli>(
                  std::chrono::steady_clock::now() - t0)
                  .count();
  CHECK(ms >= 190);
  CHECK(ms < 5000);
  struct timeval zero = {0, 0};
  CHECK(pvm_trecv(-1, 555, &zero) == 0);
  send_int(tid, 555, 7);
  CHECK(pvm_trecv(-1, 555, &tv) > 0);
  struct timeval bad = {-1, 0};
  CHECK(pvm_trecv(-1, 555, &bad) == PvmBadParam);
}

TEST_CASE("psend/precv and mcast") {
  int tid = me();
  double v[3] = {1.5, 2.5, 3.5};
  REQUIRE(pvm_psend(tid, 60, v, 3, PVM_DOUBLE) == PvmOk);
  double w[3] = {0, 0, 0};
  int rtid, rtag, rlen;
  REQUIRE(pvm_precv(-1, 60, w, 3, PVM_DOUBLE, &rtid, &rtag, &rlen) == PvmOk);
  CHECK(rtid == tid);
  CHECK(rtag == 60);
  CHECK(rlen == 3 * 8); // in bytes, as the real PVM 3.4.6's
  CHECK(w[2] == 3.5);
  CHECK(pvm_psend(tid, 60, v, 3, 99) == PvmBadParam);

  int child = spawn("echo");
  CHECK(pvm_parent() == PvmNoParent);
  int tids[2] = {tid, child};
  REQUIRE(pvm_initsend(PvmDataDefault) > 0);
  int x = 61;
  REQUIRE(pvm_pkint(&x, 1, 1) == PvmOk);
  REQUIRE(pvm_mcast(tids, 2, 61) == PvmOk);
  CHECK(recv_int(tid, 61) == 61);   // ours
  CHECK(recv_int(child, 61) == 61); // echoed by the child
  send_int(child, 0, 0);            // ends the echo task
}

TEST_CASE("a spawned task: parent, order of messages, echo of a buffer") {
  int tid = me();
  int child = spawn("echo");
  CHECK(child != tid);
  CHECK(pvm_pstat(child) == PvmOk);
  for (int i = 0; i < 200; i++)
    send_int(child, 1 + i % 3, i);
  // Pairwise order: the echoes come back in the order sent.
  for (int i = 0; i < 200; i++)
    CHECK(recv_int(child, -1) == i);
  send_int(child, 0, 0);
}

TEST_CASE("a buffer written in the other byte order is converted") {
  me();
  int child = spawn("foreign");
  REQUIRE(pvm_recv(child, 1) > 0);
  char c;
  short s;
  unsigned short us;
  int i;
  unsigned int ui;
  long l;
  unsigned long ul;
  float f, cx[2];
  double d, dcx[2];
  char str[16];
  REQUIRE(pvm_upkbyte(&c, 1, 1) == PvmOk);
  REQUIRE(pvm_upkshort(&s, 1, 1) == PvmOk);
  REQUIRE(pvm_upkushort(&us, 1, 1) == PvmOk);
  REQUIRE(pvm_upkint(&i, 1, 1) == PvmOk);
  REQUIRE(pvm_upkuint(&ui, 1, 1) == PvmOk);
  REQUIRE(pvm_upklong(&l, 1, 1) == PvmOk);
  REQUIRE(pvm_upkulong(&ul, 1, 1) == PvmOk);
  REQUIRE(pvm_upkfloat(&f, 1, 1) == PvmOk);
  REQUIRE(pvm_upkdouble(&d, 1, 1) == PvmOk);
  REQUIRE(pvm_upkcplx(cx, 1, 1) == PvmOk);
  REQUIRE(pvm_upkdcplx(dcx, 1, 1) == PvmOk);
  REQUIRE(pvm_upkstr(str) == PvmOk);
  CHECK(c == -5);
  CHECK(s == -1234);
  CHECK(us == 65000);
  CHECK(i == -123456789);
  CHECK(ui == 4000000000u);
  CHECK(l == -1234567890123L);
  CHECK(ul == 12345678901234UL);
  CHECK(f == 3.25f);
  CHECK(d == -2.0e300);
  CHECK(cx[0] == 1.5f);
  CHECK(cx[1] == -2.5f);
  CHECK(dcx[0] == -1.0e-300);
  CHECK(dcx[1] == 7.0);
  CHECK(std::string(str) == "foreign");
}

TEST_CASE("a task that dies: notify fires, receives from it fail") {
  me();
  int child = spawn("die");
  REQUIRE(pvm_notify(PvmTaskExit, 70, 1, &child) == PvmOk);
  send_int(child, 1, 1); // the child exits without pvm_exit
  REQUIRE(pvm_recv(-1, 70) > 0);
  int bytes, tag, src;
  REQUIRE(pvm_bufinfo(pvm_getrbuf(), &bytes, &tag, &src) == PvmOk);
  int dead = 0;
  REQUIRE(pvm_upkint(&dead, 1, 1) == PvmOk);
  CHECK(dead == child);
  // Nothing more will come from it: an error, not a hang.
  CHECK(pvm_recv(child, -1) == PvmSysErr);
  CHECK(pvm_pstat(child) == PvmNoTask);
  // As PVM's pvmd: a message to a task that has ended is dropped, no error.
  CHECK(pvm_send(child, 1) == PvmOk);
}

TEST_CASE("tasks that end without pvm_exit right after a send: it arrives") {
  me();
  char *argv[] = {const_cast<char *>("noexit"), nullptr};
  int tids[3];
  REQUIRE(pvm_spawn(const_cast<char *>(PVM_CHILD), argv, PvmTaskDefault,
                    const_cast<char *>(""), 3, tids) == 3);
  int sum = 0;
  for (int i = 0; i < 3; i++) {
    struct timeval tmout = {10, 0};
    int id = pvm_trecv(-1, 77, &tmout);
    REQUIRE(id > 0);
    int v = 0;
    REQUIRE(pvm_upkint(&v, 1, 1) == PvmOk);
    sum += v;
  }
  CHECK(sum == 21);
}

TEST_CASE("pvm_kill ends a task; notify of an unknown task fires at once") {
  me();
  int child = 0;
  // As under PVM, nothing is printed: the spawner's nexus reaps the killed
  // task (within its monitor's 100 ms rounds) without a line on stderr.
  std::string err = capture_stderr([&] {
    child = spawn("wait");
    REQUIRE(pvm_notify(PvmTaskExit, 71, 1, &child) == PvmOk);
    REQUIRE(pvm_kill(child) == PvmOk);
    CHECK(recv_int(-1, 71) == child);
    usleep(500 * 1000);
  });
  INFO(err);
  CHECK(err.find("killed by signal") == std::string::npos);
  CHECK(err.find("exited with status") == std::string::npos);
  CHECK(pvm_kill(me()) == PvmBadParam);
  int nobody = 0x1234567;
  REQUIRE(pvm_notify(PvmTaskExit, 72, 1, &nobody) == PvmOk);
  CHECK(recv_int(-1, 72) == nobody);
  CHECK(pvm_notify(99, 1, 1, &nobody) == PvmBadParam);
}

TEST_CASE("pvm_sendsig signals a task; pvm_config is one host") {
  me();
  int child = spawn("wait");
  REQUIRE(pvm_notify(PvmTaskExit, 73, 1, &child) == PvmOk);
  CHECK(pvm_sendsig(child, 0) == PvmBadParam);
  REQUIRE(pvm_sendsig(child, SIGINT) == PvmOk);
  CHECK(recv_int(-1, 73) == child);
  int nhost = 0, narch = 0;
  struct pvmhostinfo *hosts = nullptr;
  REQUIRE(pvm_config(&nhost, &narch, &hosts) == PvmOk);
  CHECK(nhost == 1);
  CHECK(narch == 1);
  REQUIRE(hosts != nullptr);
  CHECK(std::strlen(hosts[0].hi_name) > 0);
  CHECK(pvm_catchout(stdout) == PvmOk);
}

TEST_CASE("spawn errors: a missing program, a bad count, an unknown host") {
  me();
  int tids[2] = {0, 0};
  char *none[] = {nullptr};
  CHECK(pvm_spawn(const_cast<char *>("/nonexistent/pvm-task"), none,
                  PvmTaskDefault, const_cast<char *>(""), 2, tids) == 0);
  CHECK(tids[0] == PvmNoFile);
  CHECK(tids[1] == PvmNoFile);
  CHECK(pvm_spawn(const_cast<char *>(PVM_CHILD), none, PvmTaskDefault,
                  const_cast<char *>(""), 0, tids) == PvmBadParam);
  CHECK(pvm_spawn(const_cast<char *>(PVM_CHILD), none, PvmTaskHost,
                  const_cast<char *>("no-such-host:x"), 1, tids) == 0);
  CHECK(tids[0] == PvmNoHost);
}

// pvm_spawn starts the tasks after the first one at the same time
// (docs/pvm.md): their tids still come in order, and, as PVM's man page
// says, the tasks that did not start are the last entries.
TEST_CASE("spawn of several tasks: tids in order, the failed ones last") {
  me();
  char *wait_argv[] = {const_cast<char *>("wait"), nullptr};
  int tids[6] = {0};
  REQUIRE(pvm_spawn(const_cast<char *>(PVM_CHILD), wait_argv, PvmTaskDefault,
                    const_cast<char *>(""), 6, tids) == 6);
  for (int i = 0; i < 6; i++) {
    CHECK(tids[i] > 0);
    if (i > 0)
      CHECK(tids[i] > tids[i - 1]);
  }
  for (int t : tids)
    send_int(t, 12345, 0);
  // Of five, the 2nd and 4th to start end before their first PVM call.
  char path[] = "/tmp/nxpvm-starts-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  char *odd_argv[] = {const_cast<char *>("start-odd"), path, nullptr};
  int t5[5] = {0};
  int n = pvm_spawn(const_cast<char *>(PVM_CHILD), odd_argv, PvmTaskDefault,
                    const_cast<char *>(""), 5, t5);
  unlink(path);
  CHECK(n == 3);
  for (int i = 0; i < 5; i++) {
    INFO("tids[" << i << "] = " << t5[i]);
    if (i < n) {
      CHECK(t5[i] > 0);
      if (i > 0)
        CHECK(t5[i] > t5[i - 1]);
    } else {
      CHECK(t5[i] == PvmSysErr);
    }
  }
  for (int i = 0; i < n && t5[i] > 0; i++)
    send_int(t5[i], 12345, 0);
}

TEST_CASE("groups: join, instances, size, errors") {
  int tid = me();
  char g[] = "unit";
  CHECK(pvm_joingroup(const_cast<char *>("")) == PvmNullGroup);
  CHECK(pvm_gsize(const_cast<char *>("never-made")) == PvmNoGroup);
  int inst = pvm_joingroup(g);
  CHECK(inst == 0);
  CHECK(pvm_joingroup(g) == PvmDupGroup);
  CHECK(pvm_gsize(g) == 1);
  CHECK(pvm_getinst(g, tid) == 0);
  CHECK(pvm_gettid(g, 0) == tid);
  CHECK(pvm_gettid(g, 5) == PvmNoInst);
  CHECK(pvm_barrier(g, 1) == PvmOk);
  // bcast does not come back to the caller.
  REQUIRE(pvm_initsend(PvmDataDefault) > 0);
  REQUIRE(pvm_bcast(g, 80) == PvmOk);
  int sum[2] = {3, 4};
  REQUIRE(pvm_reduce(PvmSum, sum, 2, PVM_INT, 81, g, 0) == PvmOk);
  CHECK(sum[0] == 3);
  CHECK(pvm_lvgroup(g) == PvmOk);
  // The group ended with its last member, as with PVM's group server.
  CHECK(pvm_lvgroup(g) == PvmNoGroup);
  CHECK(pvm_getinst(g, tid) == PvmNoGroup);
  struct timeval tv = {0, 100000};
  CHECK(pvm_trecv(-1, 80, &tv) == 0);
}

TEST_CASE("total order: 4 members bcast 1,000 messages each concurrently") {
  const int n = 1000;
  me();
  char g[] = "order";
  int inst = pvm_joingroup(g);
  REQUIRE(inst >= 0);
  int kids[3];
  for (int &k : kids)
    k = spawn("order", "1000");
  REQUIRE(pvm_notify(PvmTaskExit, 93, 3, kids) == PvmOk);
  REQUIRE(pvm_barrier(g, 4) == PvmOk);
  std::map<int, std::vector<int>> logs;
  for (int k = 0; k < n; k++) {
    int v[2] = {inst, k};
    REQUIRE(pvm_initsend(PvmDataDefault) > 0);
    REQUIRE(pvm_pkint(v, 2, 1) == PvmOk);
    REQUIRE(pvm_bcast(g, 91) == PvmOk);
  }
  std::vector<int> &mine = logs[inst];
  for (int k = 0; k < 3 * n; k++) {
    int v[2];
    REQUIRE(pvm_recv(-1, 91) > 0);
    REQUIRE(pvm_upkint(v, 2, 1) == PvmOk);
    mine.push_back(v[0] * 1000000 + v[1]);
  }
  for (int k = 0; k < 3; k++) {
    REQUIRE(pvm_recv(-1, 92) > 0);
    int who;
    REQUIRE(pvm_upkint(&who, 1, 1) == PvmOk);
    std::vector<int> log(3 * n);
    REQUIRE(pvm_upkint(log.data(), 3 * n, 1) == PvmOk);
    logs[who] = log;
  }
  REQUIRE(logs.size() == 4);
  // Every member saw the others' messages, each sender's in its order, and
  // any two members saw the messages of the other two in the same order.
  for (auto &[who, log] : logs) {
    std::map<int, int> next;
    for (int e : log) {
      int from = e / 1000000, k = e % 1000000;
      INFO("member " << who << " from " << from);
      CHECK(from != who);
      CHECK(k == next[from]++);
    }
  }
  for (auto &[a, la] : logs)
    for (auto &[b, lb] : logs) {
      if (a >= b)
        continue;
      std::vector<int> fa, fb;
      for (int e : la)
        if (e / 1000000 != b)
          fa.push_back(e);
      for (int e : lb)
        if (e / 1000000 != a)
          fb.push_back(e);
      INFO("members " << a << " and " << b);
      CHECK(fa.size() == size_t(2 * n));
      CHECK(fa == fb);
    }
  REQUIRE(pvm_barrier(g, 4) == PvmOk);
  CHECK(pvm_lvgroup(g) == PvmOk);
  // The members' pvm_exit (after their pvm_lvgroup) fires the notifies.
  for (int k = 0; k < 3; k++) {
    int gone = recv_int(-1, 93);
    CHECK(std::find(kids, kids + 3, gone) != kids + 3);
  }
}

TEST_CASE("misuse gets an error code, never a crash") {
  int tid = me();
  pvm_setsbuf(0);
  CHECK(pvm_pkint(nullptr, 1, 1) == PvmNoBuf); // no active send buffer
  REQUIRE(pvm_initsend(PvmDataDefault) > 0);
  CHECK(pvm_pkint(nullptr, 1, 1) == PvmBadParam);
  CHECK(pvm_pkint(nullptr, 0, 1) == PvmOk);
  CHECK(pvm_pkdouble(nullptr, -1, 1) == PvmBadParam);
  CHECK(pvm_pkstr(nullptr) == PvmBadParam);
  CHECK(pvm_mcast(nullptr, 2, 1) == PvmBadParam);
  CHECK(pvm_mcast(&tid, 1, -3) == PvmBadParam);
  CHECK(pvm_notify(PvmTaskExit, 1, 1, nullptr) == PvmBadParam);
  CHECK(pvm_notify(PvmTaskExit, 1, -1, &tid) == PvmBadParam);
  CHECK(pvm_notify(PvmHostDelete, 1, 0, nullptr) == PvmOk);
  CHECK(pvm_joingroup(nullptr) == PvmNullGroup);
  CHECK(pvm_barrier(nullptr, 2) == PvmNullGroup);
  std::string longname(100, 'g');
  CHECK(pvm_joingroup(const_cast<char *>(longname.c_str())) == PvmBadParam);
  CHECK(pvm_bufinfo(0, nullptr, nullptr, nullptr) == PvmBadParam);
  CHECK(pvm_bufinfo(pvm_getsbuf(), nullptr, nullptr, nullptr) == PvmOk);
  CHECK(pvm_spawn(nullptr, nullptr, 0, nullptr, 1, nullptr) == PvmBadParam);
  CHECK(pvm_psend(tid, 1, nullptr, 3, PVM_INT) == PvmBadParam);
  CHECK(pvm_precv(tid, 1, nullptr, 3, PVM_INT, nullptr, nullptr, nullptr) ==
        PvmBadParam);
  CHECK(pvm_reduce(nullptr, &tid, 1, PVM_INT, 1, const_cast<char *>("g"), 0) ==
        PvmBadParam);
  CHECK(pvm_gettid(const_cast<char *>("never-made"), 0) == PvmNoGroup);
  CHECK(pvm_sendsig(tid, 100000) == PvmBadParam);
  // No active receive buffer.
  pvm_setrbuf(0);
  int x;
  char s[4];
  CHECK(pvm_upkint(&x, 1, 1) == PvmNoBuf);
  CHECK(pvm_upkstr(s) == PvmNoBuf);
  // A message from oneself received, then the wrong unpacks.
  int v = 5;
  REQUIRE(pvm_pkint(&v, 1, 1) == PvmOk);
  REQUIRE(pvm_send(tid, 90) == PvmOk);
  REQUIRE(pvm_recv(tid, 90) > 0);
  CHECK(pvm_upkstr(nullptr) == PvmBadParam);
  CHECK(pvm_upkstr(s) == PvmNoData);
  CHECK(pvm_upkdouble(nullptr, 1, 1) == PvmBadParam);
}

// Last: leaving PVM and coming back gives a new task.
TEST_CASE("host calls on a machine of this host alone") {
  int tid = me();
  int nhost = 0, narch = 0;
  struct pvmhostinfo *hi = nullptr;
  REQUIRE(pvm_config(&nhost, &narch, &hi) == PvmOk);
  int host = hi[0].hi_tid;
  CHECK(host > 0);
  CHECK(std::string(hi[0].hi_arch) == "NEXUS");
  CHECK(pvm_tidtohost(tid) == host);
  CHECK(pvm_tidtohost(0) == PvmBadParam);
  CHECK(pvm_tidtohost(-5) == PvmBadParam);
  char *hosts[] = {hi[0].hi_name, const_cast<char *>("localhost"),
                   const_cast<char *>("nxt-no-such-host")};
  int infos[3] = {0, 0, 0};
  CHECK(pvm_addhosts(hosts, 3, infos) == 0);
  CHECK(infos[0] == PvmDupHost);
  CHECK(infos[1] == PvmDupHost);
  CHECK(infos[2] == PvmNoHost); /* not on the network, as in PVM */
  CHECK(pvm_addhosts(hosts, 0, infos) == PvmBadParam);
  CHECK(pvm_delhosts(hosts, 3, infos) == 0);
  CHECK(infos[0] == PvmBadParam);
  CHECK(infos[2] == PvmNoHost);
  CHECK(pvm_mstat(hi[0].hi_name) == PvmOk);
  CHECK(pvm_mstat(const_cast<char *>("nxt-no-such-host")) == PvmNoHost);
  CHECK(pvm_mstat(nullptr) == PvmBadParam);
  struct timeval clk, delta;
  CHECK(pvm_hostsync(host, &clk, &delta) == PvmOk);
  CHECK(delta.tv_sec == 0);
  CHECK(pvm_hostsync(12345, &clk, &delta) == PvmNoHost);
  CHECK(pvm_archcode(const_cast<char *>("NEXUS")) == 0);
  CHECK(pvm_archcode(const_cast<char *>("LINUX64")) == PvmNotFound);
  CHECK(pvm_start_pvmd(0, nullptr, 0) == PvmDupHost);
  CHECK(std::string(pvm_version()) == "3.4.6");
  struct pvmhostinfo *rm = nullptr;
  CHECK(pvm_reg_rm(&rm) == PvmOk);
  CHECK(rm != nullptr);
  CHECK(pvm_reg_hoster() == PvmOk);
  CHECK(pvm_reg_tasker() == PvmOk);
  CHECK(pvm_reg_tracer(0, 0, 0, 0, nullptr, 0, 0) == PvmOk);
  int args[1] = {0}, nres = -1, res[16];
  CHECK(pvm_tickle(1, args, &nres, res) == PvmOk);
  CHECK(nres == 0);
  CHECK(pvm_tickle(0, nullptr, &nres, res) == PvmBadParam);
  int n = 0;
  struct pvmtaskinfo *ti = nullptr;
  CHECK(pvm_tasks(host, &n, &ti) == PvmOk); // a host tid: all its tasks
  CHECK(n >= 1);
}

TEST_CASE("spawn: PvmTaskArch, and the search in $PVM_ROOT/bin/$PVM_ARCH") {
  me();
  int tid = 0;
  char *argv[] = {const_cast<char *>("echo"), nullptr};
  CHECK(pvm_spawn(const_cast<char *>(PVM_CHILD), argv, PvmTaskArch,
                  const_cast<char *>("NOSUCHARCH"), 1, &tid) == 0);
  CHECK(tid == PvmNoHost);
  // The child by its bare name, found in $PVM_ROOT/bin/$PVM_ARCH.
  char dir[] = "/tmp/nxpvm-root-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  std::string bin = std::string(dir) + "/bin";
  std::string arch = bin + "/NXTEST";
  REQUIRE(mkdir(bin.c_str(), 0700) == 0);
  REQUIRE(mkdir(arch.c_str(), 0700) == 0);
  std::string link = arch + "/nxt_child";
  REQUIRE(symlink(PVM_CHILD, link.c_str()) == 0);
  setenv("PVM_ROOT", dir, 1);
  setenv("PVM_ARCH", "NXTEST", 1);
  int n = pvm_spawn(const_cast<char *>("nxt_child"), argv, PvmTaskArch,
                    const_cast<char *>("NEXUS"), 1, &tid);
  unsetenv("PVM_ARCH");
  unsetenv("PVM_ROOT");
  unlink(link.c_str());
  rmdir(arch.c_str());
  rmdir(bin.c_str());
  rmdir(dir);
  REQUIRE(n == 1);
  send_int(tid, 1, 99); // the echo child sends it back
  CHECK(recv_int(tid, 1) == 99);
  send_int(tid, 0, 0); // and ends
}

// PVM's other places (pvmd's default path, PVM_PATH), found as pvmd finds
// them: $HOME/pvm3/bin/<arch> with the architecture PVM gives this machine
// when the program's shell did not set PVM_ARCH, and the directories of
// PVM_PATH, a relative one from $HOME.
TEST_CASE("spawn: the search in $HOME/pvm3/bin and PVM_PATH") {
  me();
  char *argv[] = {const_cast<char *>("echo"), nullptr};
  char home[] = "/tmp/nxpvm-home-XXXXXX";
  REQUIRE(mkdtemp(home) != nullptr);
  std::string old_home = getenv("HOME") != nullptr ? getenv("HOME") : "";
  setenv("HOME", home, 1);
  unsetenv("PVM_ARCH");
  unsetenv("PVM_ROOT");
  auto spawn_named = [&](const char *name) {
    int tid = 0;
    int n = pvm_spawn(const_cast<char *>(name), argv, PvmTaskDefault,
                      const_cast<char *>(""), 1, &tid);
    if (n == 1) {
      send_int(tid, 1, 5);
      CHECK(recv_int(tid, 1) == 5);
      send_int(tid, 0, 0);
    }
    return n == 1 ? 0 : tid;
  };
  std::vector<std::string> made; // to remove, deepest first
  auto dir = [&](const std::string &d) {
    REQUIRE(mkdir(d.c_str(), 0700) == 0);
    made.push_back(d);
  };
  auto child_in = [&](const std::string &d, const char *name) {
    std::string link = d + "/" + name;
    REQUIRE(symlink(PVM_CHILD, link.c_str()) == 0);
    made.push_back(link);
  };
  dir(std::string(home) + "/pvm3");
  dir(std::string(home) + "/pvm3/bin");
#if defined(__linux__) && defined(__x86_64__)
  dir(std::string(home) + "/pvm3/bin/LINUX64");
  child_in(std::string(home) + "/pvm3/bin/LINUX64", "nxt_home_child");
  CHECK(spawn_named("nxt_home_child") == 0);
#endif
  dir(std::string(home) + "/mine");
  child_in(std::string(home) + "/mine", "nxt_path_child");
  setenv("PVM_PATH", "/nonexistent:mine", 1);
  CHECK(spawn_named("nxt_path_child") == 0);
  setenv("PVM_PATH", "/nonexistent", 1);
  CHECK(spawn_named("nxt_path_child") == PvmNoFile);
  unsetenv("PVM_PATH");
  for (auto it = made.rbegin(); it != made.rend(); ++it)
    CHECK(remove(it->c_str()) == 0);
  rmdir(home);
  setenv("HOME", old_home.c_str(), 1);
}

TEST_CASE("mailbox and message misuse gets error codes") {
  me();
  CHECK(pvm_putinfo(const_cast<char *>("nxt_m"), -1, 0) == PvmBadParam);
  CHECK(pvm_putinfo(const_cast<char *>("nxt_m"), 999, 0) == PvmNoSuchBuf);
  CHECK(pvm_putinfo(nullptr, 1, 0) == PvmBadParam);
  CHECK(pvm_recvinfo(const_cast<char *>("nxt_m"), -1, 0) == PvmBadParam);
  CHECK(pvm_recvinfo(const_cast<char *>("nxt_m"), 0, 0) == PvmNotFound);
  CHECK(pvm_delinfo(const_cast<char *>("nxt_m"), 0, 0) == PvmNotFound);
  int n = -1;
  struct pvmmboxinfo *c = nullptr;
  CHECK(pvm_getmboxinfo(const_cast<char *>("nxt_m"), &n, &c) == PvmOk);
  CHECK(n == 0);
  CHECK(pvm_getmboxinfo(const_cast<char *>("[unclosed"), &n, &c) ==
        PvmBadParam);
  CHECK(pvm_setcontext(-1) == PvmBadParam);
  CHECK(pvm_freecontext(-1) == PvmBadParam);
  CHECK(pvm_addmhf(-1, 1, 0, nullptr) == PvmBadParam);
  CHECK(pvm_setminfo(0, nullptr) == PvmBadParam);
  CHECK(pvm_packf(nullptr) == PvmBadParam);
  REQUIRE(pvm_initsend(PvmDataDefault) > 0);
  CHECK(pvm_packf("%q", 1) == PvmBadParam);
  CHECK(pvm_upkmesg() >= PvmBadMsg - 100); // no crash, whatever it holds
  CHECK(pvm_freezegroup(nullptr, 1) == PvmBadParam);
  CHECK(pvm_freezegroup(const_cast<char *>("nxt_g"), 0) == PvmBadParam);
  // A receive buffer holding no packed message.
  int v = 5;
  REQUIRE(pvm_pkint(&v, 1, 1) == PvmOk);
  REQUIRE(pvm_send(me(), 91) == PvmOk);
  REQUIRE(pvm_recv(me(), 91) > 0);
  CHECK(pvm_upkmesg() == PvmNoData);
}

TEST_CASE("pvm_getfds: readable while a message waits") {
  int tid = me();
  int *fds = nullptr;
  REQUIRE(pvm_getfds(&fds) == 1);
  while (pvm_nrecv(-1, -1) > 0)
    ;
  fd_set r;
  FD_ZERO(&r);
  FD_SET(fds[0], &r);
  struct timeval zero = {0, 0};
  CHECK(select(fds[0] + 1, &r, nullptr, nullptr, &zero) == 0);
  send_int(tid, 92, 1);
  FD_ZERO(&r);
  FD_SET(fds[0], &r);
  struct timeval ten = {10, 0};
  CHECK(select(fds[0] + 1, &r, nullptr, nullptr, &ten) == 1);
  REQUIRE(pvm_recv(tid, 92) > 0);
  FD_ZERO(&r);
  FD_SET(fds[0], &r);
  zero = {0, 0};
  CHECK(select(fds[0] + 1, &r, nullptr, nullptr, &zero) == 0);
}

TEST_CASE("pvm_export and pvm_unexport edit PVM_EXPORT") {
  setenv("PVM_EXPORT", "A:B", 1);
  CHECK(pvm_export(const_cast<char *>("C")) == PvmOk);
  CHECK(pvm_export(const_cast<char *>("A")) == PvmOk);
  CHECK(std::string(getenv("PVM_EXPORT")) == "A:B:C");
  CHECK(pvm_unexport(const_cast<char *>("B")) == PvmOk);
  CHECK(pvm_unexport(const_cast<char *>("Z")) == PvmOk);
  CHECK(std::string(getenv("PVM_EXPORT")) == "A:C");
  unsetenv("PVM_EXPORT");
}

TEST_CASE("pvm_exit, then a PVM call starts a new task") {
  int old = me();
  CHECK(pvm_exit() == PvmOk);
  CHECK(pvm_exit() == PvmOk);
  int tid = pvm_mytid();
  REQUIRE(tid > 0);
  CHECK(tid != old);
  CHECK(pvm_parent() == PvmNoParent);
  send_int(tid, 5, 55);
  CHECK(recv_int(tid, 5) == 55);
}
