// Two peer processes that start sending to each other at the same moment
// both open a connection; the tcp module keeps one (the one opened by the
// lower process uuid) and loses or reorders nothing on the way.
#include <catch2/catch.hpp>

#include "runtime_guard.h"
#define NX_HARNESS_TCP
#include "peer_harness.h"

using namespace tcp_test;

TEST_CASE_METHOD(session,
                 "two processes connecting to each other at once keep one "
                 "connection and lose nothing",
                 "[tcp]") {
  const uint32_t count = 3000;
  for (int round = 0; round < 6; round++) {
    INFO("round " << round);
    peer_process a, b;
    REQUIRE(a.start() == "");
    REQUIRE(b.start() == "");
    REQUIRE(introduce(a.gp, b.gp) == 0);
    REQUIRE(introduce(b.gp, a.gp) == 0);
    // Both start sending at the same instant.
    uint64_t start = realtime_ns() + 150000000ull;
    REQUIRE(blast(a.gp, count, start) == 0);
    REQUIRE(blast(b.gp, count, start) == 0);
    uint64_t sa[STAT_COUNT] = {}, sb[STAT_COUNT] = {};
    uint64_t end = now_ms() + 30000;
    do {
      REQUIRE(peer_stats(a.gp, cs.me, sa));
      REQUIRE(peer_stats(b.gp, cs.me, sb));
      if (sa[STAT_SEQ_FRAMES] >= count && sb[STAT_SEQ_FRAMES] >= count)
        break;
      sleep_ms(20);
    } while (now_ms() < end);
    CHECK(sa[STAT_SEQ_FRAMES] == count);
    CHECK(sb[STAT_SEQ_FRAMES] == count);
    CHECK(sa[STAT_SEQ_BAD] == 0);
    CHECK(sb[STAT_SEQ_BAD] == 0);
    CHECK(sa[STAT_BLAST_FAILS] == 0);
    CHECK(sb[STAT_BLAST_FAILS] == 0);
    CHECK(sa[STAT_DROP_BAD_FRAME] == 0);
    CHECK(sb[STAT_DROP_BAD_FRAME] == 0);
    // One connection to this process, one between them: the loser is gone.
    CHECK(sa[STAT_SOCKETS] == 2);
    CHECK(sb[STAT_SOCKETS] == 2);
    CHECK(a.quit() == 0);
    CHECK(b.quit() == 0);
  }
}
