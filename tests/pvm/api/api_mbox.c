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

/* The entry's value, or the error. */
static void show(const char *name, int index, int flags) {
  int id = pvm_recvinfo((char *)name, index, flags);
  if (id < 0) {
    printf("recvinfo %s %d: %s\n", name, index, code(id));
    return;
  }
  int old = pvm_setrbuf(id);
  int v = -1;
  pvm_upkint(&v, 1, 1);
  pvm_setrbuf(old);
  pvm_freebuf(id);
  printf("recvinfo %s %d: %d\n", name, index, v);
}

static void info(const char *name, int child) {
  int n = 0;
  struct pvmmboxinfo *c = NULL;
  int rc = pvm_getmboxinfo((char *)name, &n, &c);
  if (rc < 0) {
    printf("getmboxinfo %s: %s\n", name, code(rc));
    return;
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
    return;
  }
  printf("class %s: absent\n", name);
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
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (pvm_mytid() < 0)
    return 77;
  pvm_setopt(PvmAutoErr, 0);
  if (argc > 1 && strcmp(argv[1], "child") == 0)
    return child();
  printf("put locked: %s\n", code(put_int("nxt_locked", 1, PvmMboxDefault)));
  printf("put locked again: %s\n",
         code(put_int("nxt_locked", 11, PvmMboxDefault)));
  printf("put ow: %s\n", code(put_int("nxt_ow", 30, PvmMboxOverWritable)));
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
  static const char *what[] = {
      "put persist",      "put plain",     "put multi",   "put multi",
      "overwrite locked", "delete locked", "overwrite ow"};
  for (int i = 0; i < 7; i++)
    printf("child %s: %s\n", what[i], code(r[i]));
  /* The child has ended: its plain entry left with it, the persistent one
   * stays with no owner. */
  show("nxt_locked", 0, PvmMboxDefault);
  show("nxt_ow", 0, PvmMboxDefault);
  show("nxt_persist", 0, PvmMboxDefault);
  show("nxt_plain", 0, PvmMboxDefault);
  show("nxt_multi", 0, PvmMboxDefault);
  show("nxt_multi", 1, PvmMboxDefault);
  show("nxt_multi", 2, PvmMboxDefault);
  show("nxt_multi", 1, PvmMboxFirstAvail);
  show("nxt_nothing", 0, PvmMboxDefault);
  info("nxt_persist", tid);
  info("nxt_multi", tid);
  info("nxt_plain", tid);
  info("nxt_locked", tid);
  printf("delinfo persist: %s\n", code(pvm_delinfo("nxt_persist", 0, 0)));
  printf("delinfo locked 3: %s\n", code(pvm_delinfo("nxt_locked", 3, 0)));
  printf("delinfo nothing: %s\n", code(pvm_delinfo("nxt_nothing", 0, 0)));
  printf("put ow over: %s\n", code(put_int("nxt_ow", 32, PvmMboxOverWritable)));
  show("nxt_ow", 0, PvmMboxReadAndDelete);
  show("nxt_ow", 0, PvmMboxDefault);
  printf("put direct 3: %s\n",
         code(put_int("nxt_direct", 40,
                      PvmMboxDirectIndex(3) | PvmMboxOverWritable)));
  show("nxt_direct", 3, PvmMboxDefault);
  show("nxt_direct", 0, PvmMboxFirstAvail);
  printf("delinfo locked: %s\n", code(pvm_delinfo("nxt_locked", 0, 0)));
  show("nxt_locked", 0, PvmMboxDefault);
  int d = 0;
  printf("insert: %s\n", code(pvm_insert("nxt_ins", -1, 5)));
  printf("insert: %s\n", code(pvm_insert("nxt_ins", -1, 6)));
  printf("insert at 4: %s\n", code(pvm_insert("nxt_ins", 4, 9)));
  printf("insert at 4 again: %s\n", code(pvm_insert("nxt_ins", 4, 10)));
  int rc = pvm_lookup("nxt_ins", 4, &d);
  printf("lookup 4: %s %d\n", code(rc), d);
  rc = pvm_lookup("nxt_ins", -1, &d);
  printf("lookup first: %s %d\n", code(rc), d);
  printf("lookup 7: %s\n", code(pvm_lookup("nxt_ins", 7, &d)));
  printf("delete 4: %s\n", code(pvm_delete("nxt_ins", 4)));
  printf("delete 4 again: %s\n", code(pvm_delete("nxt_ins", 4)));
  printf("noreset: %s\n", code(pvm_setopt(PvmNoReset, 1)));
  int *nr = NULL, nnr = -1;
  rc = pvm_getnoresets(&nr, &nnr);
  int mine = 0;
  for (int i = 0; rc == 0 && i < nnr; i++)
    mine += nr[i] == pvm_mytid();
  printf("getnoresets: %s, lists me %d time(s)\n", code(rc), mine);
  pvm_exit();
  return 0;
}
