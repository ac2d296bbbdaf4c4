/* Message mailboxes: pvm_putinfo, pvm_recvinfo, pvm_delinfo,
 * pvm_getmboxinfo with their flags, an entry that outlives its owner
 * (PvmMboxPersistent) and one that leaves with it, and PVM 3.3's
 * pvm_insert, pvm_lookup and pvm_delete. */
#include <stdlib.h>

#include "common.h"

static int put_int(const char *name, int v, int flags) {
  int id = pvm_initsend(PvmDataDefault);
  pvm_pkint(&v, 1, 1);
  return pvm_putinfo((char *)name, id, flags);
}

/* Prints the entry's value, or the error, and returns it. */
static int show(const char *name, int index, int flags) {
  int id = pvm_recvinfo((char *)name, index, flags);
  if (id < 0) {
    printf("recvinfo %s %d: %s\n", name, index, code(id));
    return id;
  }
  int old = pvm_setrbuf(id);
  int v = -1;
  pvm_upkint(&v, 1, 1);
  pvm_setrbuf(old);
  pvm_freebuf(id);
  printf("recvinfo %s %d: %d\n", name, index, v);
  return v;
}

/* Prints the class's entries; returns their number (-1: no such class),
 * or the error. */
static int info(const char *name, int child) {
  int n = 0;
  struct pvmmboxinfo *c = NULL;
  int rc = pvm_getmboxinfo((char *)name, &n, &c);
  if (rc < 0) {
    printf("getmboxinfo %s: %s\n", name, code(rc));
    return rc;
  }
  for (int i = 0; i < n; i++) {
    if (strcmp(c[i].mi_name, name) != 0)
      continue;
    printf("class %s: %d entries", c[i].mi_name, c[i].mi_nentries);
    for (int j = 0; j < c[i].mi_nentries; j++) {
      int o = c[i].mi_owners[j];
      printf(" [%d %s %d]", c[i].mi_indices[j],
             o == 0             ? "none"
             : o == pvm_mytid() ? "me"
             : o == child       ? "child"
                                : "other",
             c[i].mi_flags[j] & 0x3ff);
    }
    printf("\n");
    return c[i].mi_nentries;
  }
  printf("class %s: absent\n", name);
  return -1;
}

/* The child's results go to the parent, which prints them: a spawned
 * task's output goes to the pvmd's log under the real PVM. */
static int child(void) {
  int parent = pvm_parent();
  int r[7];
  r[0] = put_int("nxt_persist", 7, PvmMboxPersistent);
  r[1] = put_int("nxt_plain", 8, PvmMboxDefault);
  r[2] = put_int("nxt_multi", 20, PvmMboxMultiInstance | PvmMboxPersistent);
  r[3] = put_int("nxt_multi", 21, PvmMboxMultiInstance | PvmMboxPersistent);
  r[4] = put_int("nxt_locked", 2, PvmMboxDefault);
  r[5] = pvm_delinfo("nxt_locked", 0, 0);
  r[6] = put_int("nxt_ow", 31, PvmMboxDefault);
  pvm_initsend(PvmDataDefault);
  pvm_pkint(r, 7, 1);
  pvm_send(parent, 1);
  pvm_exit();
  return 0;
}

int main(int argc, char **argv) {
  if (task_start() < 0)
    return 77;
  if (argc > 1 && strcmp(argv[1], "child") == 0)
    return child();
  /* The owner may replace its own entry. */
  NXT_EXPECT(said("put locked", put_int("nxt_locked", 1, PvmMboxDefault), 0),
             1);
  NXT_EXPECT(
      said("put locked again", put_int("nxt_locked", 11, PvmMboxDefault), 0),
      1);
  NXT_EXPECT(said("put ow", put_int("nxt_ow", 30, PvmMboxOverWritable), 0), 1);
  int tid;
  if (spawn_self("child", 1, &tid) != 1)
    return 1;
  pvm_notify(PvmTaskExit, 9, 1, &tid);
  int r[7];
  if (recv_for(tid, 1) <= 0 || pvm_upkint(r, 7, 1) < 0 ||
      recv_for(-1, 9) <= 0) {
    printf("child did not report\n");
    return 1;
  }
  static const char *what[] = {"child put persist",      "child put plain",
                               "child put multi",        "child put multi",
                               "child overwrite locked", "child delete locked",
                               "child overwrite ow"};
  /* A second instance goes at the next index; another's entry may be
   * neither replaced nor deleted unless it is overwritable. */
  static const int want[] = {0, 0, 0, 1, PvmDenied, PvmDenied, 0};
  for (int i = 0; i < 7; i++)
    NXT_EXPECT(said(what[i], r[i], want[i]), 1);
  /* The child has ended: its plain entry left with it, the persistent one
   * stays with no owner. */
  NXT_EXPECT(show("nxt_locked", 0, PvmMboxDefault) == 11, 1);
  NXT_EXPECT(show("nxt_ow", 0, PvmMboxDefault) == PvmNotFound, 1);
  NXT_EXPECT(show("nxt_persist", 0, PvmMboxDefault) == 7, 1);
  NXT_EXPECT(show("nxt_plain", 0, PvmMboxDefault) == PvmNotFound, 1);
  NXT_EXPECT(show("nxt_multi", 0, PvmMboxDefault) == 20, 1);
  NXT_EXPECT(show("nxt_multi", 1, PvmMboxDefault) == 21, 1);
  NXT_EXPECT(show("nxt_multi", 2, PvmMboxDefault) == PvmNotFound, 1);
  NXT_EXPECT(show("nxt_multi", 1, PvmMboxFirstAvail) == 21, 1);
  NXT_EXPECT(show("nxt_nothing", 0, PvmMboxDefault) == PvmNotFound, 1);
  NXT_EXPECT(info("nxt_persist", tid) == 1, 1);
  NXT_EXPECT(info("nxt_multi", tid) == 2, 1);
  NXT_EXPECT(info("nxt_plain", tid) == -1, 1);
  NXT_EXPECT(info("nxt_locked", tid) == 1, 1);
  NXT_EXPECT(
      said("delinfo persist", pvm_delinfo("nxt_persist", 0, 0), PvmDenied), 1);
  NXT_EXPECT(
      said("delinfo locked 3", pvm_delinfo("nxt_locked", 3, 0), PvmNotFound),
      1);
  NXT_EXPECT(
      said("delinfo nothing", pvm_delinfo("nxt_nothing", 0, 0), PvmNotFound),
      1);
  NXT_EXPECT(said("put ow over", put_int("nxt_ow", 32, PvmMboxOverWritable), 0),
             1);
  NXT_EXPECT(show("nxt_ow", 0, PvmMboxReadAndDelete) == 32, 1);
  NXT_EXPECT(show("nxt_ow", 0, PvmMboxDefault) == PvmNotFound, 1);
  NXT_EXPECT(said("put direct 3",
                  put_int("nxt_direct", 40,
                          PvmMboxDirectIndex(3) | PvmMboxOverWritable),
                  3),
             1);
  NXT_EXPECT(show("nxt_direct", 3, PvmMboxDefault) == 40, 1);
  NXT_EXPECT(show("nxt_direct", 0, PvmMboxFirstAvail) == 40, 1);
  NXT_EXPECT(said("delinfo locked", pvm_delinfo("nxt_locked", 0, 0), 0), 1);
  NXT_EXPECT(show("nxt_locked", 0, PvmMboxDefault) == PvmNotFound, 1);
  int d = 0;
  NXT_EXPECT(said("insert", pvm_insert("nxt_ins", -1, 5), 0), 1);
  NXT_EXPECT(said("insert", pvm_insert("nxt_ins", -1, 6), 1), 1);
  NXT_EXPECT(said("insert at 4", pvm_insert("nxt_ins", 4, 9), 4), 1);
  NXT_EXPECT(said("insert at 4 again", pvm_insert("nxt_ins", 4, 10), PvmDenied),
             1);
  int rc = pvm_lookup("nxt_ins", 4, &d);
  printf("lookup 4: %s %d\n", code(rc), d);
  NXT_EXPECT(rc == 4 && d == 9, 1);
  rc = pvm_lookup("nxt_ins", -1, &d);
  printf("lookup first: %s %d\n", code(rc), d);
  NXT_EXPECT(rc == 0 && d == 5, 1);
  NXT_EXPECT(said("lookup 7", pvm_lookup("nxt_ins", 7, &d), PvmNotFound), 1);
  NXT_EXPECT(said("delete 4", pvm_delete("nxt_ins", 4), 4), 1);
  NXT_EXPECT(said("delete 4 again", pvm_delete("nxt_ins", 4), PvmNotFound), 1);
  NXT_EXPECT(said("noreset", pvm_setopt(PvmNoReset, 1), 0), 1);
  int *nr = NULL, nnr = -1;
  rc = pvm_getnoresets(&nr, &nnr);
  int mine = 0;
  for (int i = 0; rc == 0 && i < nnr; i++)
    mine += nr[i] == pvm_mytid();
  printf("getnoresets: %s, lists me %d time(s)\n", code(rc), mine);
  NXT_EXPECT(rc == 0 && mine == 1, 1);
  /* Classes are listed in the order they were made. */
  put_int("nxt_order_b", 1, PvmMboxDefault);
  put_int("nxt_order_a", 2, PvmMboxDefault);
  put_int("nxt_order_c", 3, PvmMboxDefault);
  struct pvmmboxinfo *c = NULL;
  int n = 0;
  rc = pvm_getmboxinfo("nxt_order_*", &n, &c);
  printf("getmboxinfo nxt_order_*: %s,", code(rc));
  for (int i = 0; rc == 0 && i < n; i++)
    printf(" %s", c[i].mi_name);
  printf("\n");
  NXT_EXPECT(rc == 0 && n == 3 && strcmp(c[0].mi_name, "nxt_order_b") == 0 &&
                 strcmp(c[2].mi_name, "nxt_order_c") == 0,
             1);
  pvm_exit();
  return 0;
}
