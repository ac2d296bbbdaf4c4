/* A group whose first task leaves early: the first task joins, spawns two
 * members, waits for them at a barrier, leaves the group and calls
 * pvm_exit; the members go on using the group (size, instances, tids, a
 * barrier, a broadcast, a new group), and the last member prints what they
 * saw. The first task's pvm_catchout brings that output to its stdout
 * under the real PVM, whose pvm_exit then waits for the members (so there
 * the first task leaves PVM only after them, and the members cannot wait
 * for its exit: they wait for the group to shrink). Under nexus-pvm the
 * members also wait until the first task has left PVM (its exit notify),
 * so everything after runs without it. */
#include <stdlib.h>

#include "common.h"

#define NMEMBER 2
#define TAG_GONE 1
#define TAG_BCAST 2
#define TAG_REPORT 3

static char group[] = "nxt_leave";

static int member(void) {
  int first = pvm_parent();
  if (pvm_joingroup(group) < 0)
    return 1;
  pvm_barrier(group, NMEMBER + 1);
  /* Wait until the first task has left the group (and, under nexus-pvm,
   * PVM). */
  for (int i = 0; i < 2000 && pvm_gsize(group) != NMEMBER; i++)
    usleep(10000);
#ifdef NEXUS_PVM
  pvm_notify(PvmTaskExit, TAG_GONE, 1, &first);
  if (recv_for(-1, TAG_GONE) <= 0)
    return 1;
#else
  (void)first;
#endif
  int me = pvm_mytid();
  int inst = pvm_getinst(group, me);
  int r[6];
  r[0] = pvm_gsize(group);
  r[1] = inst;
  r[2] = pvm_gettid(group, inst) == me;
  r[3] = pvm_gettid(group, 0);
  r[4] = pvm_barrier(group, NMEMBER);
  int v = 0;
  if (inst == 1) {
    v = 42;
    pvm_initsend(PvmDataDefault);
    pvm_pkint(&v, 1, 1);
    pvm_bcast(group, TAG_BCAST);
  } else if (recv_for(-1, TAG_BCAST) > 0) {
    pvm_upkint(&v, 1, 1);
  }
  r[5] = v;
  if (inst == 1) {
    /* Report to the last member, which prints for both; leave after it. */
    pvm_initsend(PvmDataDefault);
    pvm_pkint(r, 6, 1);
    int last = pvm_gettid(group, NMEMBER);
    pvm_send(last, TAG_REPORT);
    pvm_barrier(group, NMEMBER);
    recv_for(last, TAG_REPORT);
    pvm_lvgroup(group);
    pvm_initsend(PvmDataDefault);
    pvm_send(last, TAG_REPORT);
    pvm_exit();
    return 0;
  }
  int o[6];
  if (recv_for(-1, TAG_REPORT) <= 0)
    return 1;
  int other = 0, bytes, tag;
  pvm_bufinfo(pvm_getrbuf(), &bytes, &tag, &other);
  pvm_upkint(o, 6, 1);
  int *rs[2] = {o, r};
  for (int i = 0; i < 2; i++) {
    printf("member %d: size %d, tid of its instance %s, instance 0 %s, "
           "barrier %s, broadcast %d\n",
           rs[i][1], rs[i][0], rs[i][2] ? "its own" : "another", code(rs[i][3]),
           code(rs[i][4]), rs[i][5]);
    /* The group outlives the first task: its two members, each its own
     * instance (the first task's 0 is free), a barrier and a broadcast. */
    NXT_EXPECT(rs[i][0] == NMEMBER && rs[i][2] && rs[i][3] == PvmNoInst &&
                   rs[i][4] == PvmOk && rs[i][5] == 42,
               1);
  }
  NXT_EXPECT(rs[0][1] != rs[1][1] && rs[0][1] >= 1 && rs[1][1] >= 1, 1);
  int inst2 = pvm_joingroup("nxt_leave_2");
  printf("a new group: instance %d\n", inst2);
  NXT_EXPECT(inst2 == 0, 1);
  pvm_barrier(group, NMEMBER);
  int rc = pvm_lvgroup(group);
  int size = pvm_gsize(group);
  printf("leave %s, then size %d\n", code(rc), size);
  NXT_EXPECT(rc == PvmOk && size == 1, 1);
  NXT_EXPECT(
      said("barrier when not in it", pvm_barrier(group, 1), PvmNotInGroup), 1);
  pvm_initsend(PvmDataDefault);
  pvm_send(other, TAG_REPORT);
  NXT_EXPECT(recv_for(other, TAG_REPORT) > 0, 1); /* it has left too */
  rc = pvm_gsize(group);
  printf("when the last has left: size %s\n", code(rc));
  NXT_EXPECT(rc == PvmNoGroup, 1);
  NXT_EXPECT(said("leave again", pvm_lvgroup(group), PvmNoGroup), 1);
  pvm_lvgroup(group);
  pvm_exit();
  return 0;
}

int main(int argc, char **argv) {
  if (task_start() < 0)
    return 77;
  if (argc > 1 && strcmp(argv[1], "member") == 0)
    return member();
  pvm_setopt(PvmShowTids, 0);
  pvm_catchout(stdout);
  if (pvm_joingroup(group) != 0)
    return 1;
  int tids[NMEMBER];
  if (spawn_self("member", NMEMBER, tids) != NMEMBER)
    return 1;
  pvm_barrier(group, NMEMBER + 1);
  pvm_lvgroup(group);
  printf("the first task leaves\n");
  fflush(stdout);
  pvm_exit();
  return 0;
}
