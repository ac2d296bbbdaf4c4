/* libnxfpvm: PVM 3.4's Fortran interface (the pvmf routines of fpvm3.h)
 * over libnxpvm's C calls, with gfortran's calling conventions (pvmf.h). */
#include "pvmf.h"

/* Before pvm3.h: PVM 3.4.6's declares pvm_catchout only after <stdio.h>
 * (tests/pvm/fortran builds this file over Debian's libpvm3 too). */
#include <stdio.h>

#include <pvm3.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *nxpvmfi_cstr(const char *s, size_t len) {
  while (len > 0 && s[len - 1] == ' ')
    len--;
  char *c = malloc(len + 1);
  if (c == NULL)
    return NULL;
  if (len > 0)
    memcpy(c, s, len);
  c[len] = '\0';
  return c;
}

void nxpvmfi_fstr(char *dst, size_t len, const char *src) {
  size_t n = src != NULL ? strlen(src) : 0;
  if (n > len)
    n = len;
  if (n > 0)
    memcpy(dst, src, n);
  if (len > n)
    memset(dst + n, ' ', len - n);
}

/* ---- Tasks and the virtual machine ---- */

void pvmfmytid_(int *tid) { *tid = pvm_mytid(); }

void pvmfparent_(int *tid) { *tid = pvm_parent(); }

void pvmfexit_(int *info) { *info = pvm_exit(); }

/* A where that starts with '*' means any host, as in PVM's binding. */
void pvmfspawn_(char *aout, int *flag, char *where, int *ntask, int *tids,
                int *numt, size_t aout_len, size_t where_len) {
  char *task = nxpvmfi_cstr(aout, aout_len);
  int any = where_len == 0 || where[0] == '*';
  char *host = nxpvmfi_cstr(any ? "" : where, any ? 0 : where_len);
  if (task == NULL || host == NULL)
    *numt = PvmNoMem;
  else
    *numt = pvm_spawn(task, NULL, *flag, host, *ntask, tids);
  free(host);
  free(task);
}

void pvmfkill_(int *tid, int *info) { *info = pvm_kill(*tid); }

void pvmfsendsig_(int *tid, int *signum, int *info) {
  *info = pvm_sendsig(*tid, *signum);
}

void pvmfpstat_(int *tid, int *status) { *status = pvm_pstat(*tid); }

void pvmfnotify_(int *what, int *msgtag, int *cnt, int *tids, int *info) {
  *info = pvm_notify(*what, *msgtag, *cnt, tids);
}

/* index counts from 0, as in PVM's binding; one out of range gives
 * PvmNoTask in sibling. */
void pvmfsiblings_(int *ntids, int *index, int *sibling) {
  int *sibs = NULL;
  int n = pvm_siblings(&sibs);
  *ntids = n;
  if (*index >= 0 && *index < n && sibs != NULL)
    *sibling = sibs[*index];
  else
    *sibling = PvmNoTask;
}

/* pvmfconfig and pvmftasks give one host (task) per call, as PVM's binding
 * does: the first call takes the list from the C call, each call returns
 * the next entry with info 1, and the call after the last entry starts
 * over. nhost (ntask) -1 on entry starts over at once. The state is the
 * calling program's, as in PVM: these are not for several threads. */
void pvmfconfig_(int *nhost, int *narch, int *dtid, char *name, char *arch,
                 int *speed, int *info, size_t name_len, size_t arch_len) {
  static struct pvmhostinfo *hosts;
  static int count, archs, next;
  if (count > 0 && *nhost == -1)
    count = 0;
  if (count == 0) {
    int n, a;
    int rc = pvm_config(&n, &a, &hosts);
    if (rc < 0) {
      *info = rc;
      return;
    }
    count = n;
    archs = a;
    next = 0;
  }
  *info = PvmOk;
  if (next < count) {
    *nhost = count;
    *narch = archs;
    *dtid = hosts[next].hi_tid;
    nxpvmfi_fstr(name, name_len, hosts[next].hi_name);
    nxpvmfi_fstr(arch, arch_len, hosts[next].hi_arch);
    *speed = hosts[next].hi_speed;
    *info = 1;
    next++;
  }
  if (next == count)
    count = 0;
}

void pvmftasks_(int *where, int *ntask, int *tid, int *ptid, int *dtid,
                int *flag, char *aout, int *info, size_t aout_len) {
  static struct pvmtaskinfo *tasks;
  static int count, next;
  if (count > 0 && *ntask == -1)
    count = 0;
  if (count == 0) {
    int n;
    int rc = pvm_tasks(*where, &n, &tasks);
    if (rc < 0) {
      *info = rc;
      return;
    }
    count = n;
    next = 0;
  }
  *info = PvmOk;
  if (next < count) {
    *ntask = count;
    *tid = tasks[next].ti_tid;
    *ptid = tasks[next].ti_ptid;
    *dtid = tasks[next].ti_host;
    *flag = tasks[next].ti_flag;
    nxpvmfi_fstr(aout, aout_len, tasks[next].ti_a_out);
    *info = 1;
    next++;
  }
  if (next == count)
    count = 0;
}

/* A nonzero onoff collects the children's output on this task's stdout. */
void pvmfcatchout_(int *onoff, int *info) {
  *info = pvm_catchout(*onoff ? stdout : NULL);
}

void pvmfperror_(char *msg, int *info, size_t msg_len) {
  char *m = nxpvmfi_cstr(msg, msg_len);
  *info = m != NULL ? pvm_perror(m) : PvmNoMem;
  free(m);
}

void pvmfsetopt_(int *what, int *val, int *oldval) {
  *oldval = pvm_setopt(*what, *val);
}

void pvmfgetopt_(int *what, int *val) { *val = pvm_getopt(*what); }

void pvmfsleep_(int *secs) {
  if (*secs > 0)
    sleep((unsigned)*secs);
}

/* ---- Buffers and packing ---- */

void pvmfinitsend_(int *encoding, int *bufid) {
  *bufid = pvm_initsend(*encoding);
}

void pvmfmkbuf_(int *encoding, int *bufid) { *bufid = pvm_mkbuf(*encoding); }

void pvmffreebuf_(int *bufid, int *info) { *info = pvm_freebuf(*bufid); }

void pvmfgetsbuf_(int *bufid) { *bufid = pvm_getsbuf(); }

void pvmfgetrbuf_(int *bufid) { *bufid = pvm_getrbuf(); }

void pvmfsetsbuf_(int *bufid, int *oldbuf) { *oldbuf = pvm_setsbuf(*bufid); }

void pvmfsetrbuf_(int *bufid, int *oldbuf) { *oldbuf = pvm_setrbuf(*bufid); }

void pvmfbufinfo_(int *bufid, int *bytes, int *msgtag, int *tid, int *info) {
  *info = pvm_bufinfo(*bufid, bytes, msgtag, tid);
}

/* The data types are fpvm3.h's: INTEGER8 is a long (8 bytes on the LP64
 * systems this builds on), and STRING packs nitem bytes, as in PVM's
 * binding (a Fortran string has no terminating NUL). */
void pvmfpack_(int *what, void *xp, int *nitem, int *stride, int *info) {
  switch (*what) {
  case PVM_STR:
  case PVM_BYTE: *info = pvm_pkbyte(xp, *nitem, *stride); break;
  case PVM_SHORT: *info = pvm_pkshort(xp, *nitem, *stride); break;
  case PVM_INT: *info = pvm_pkint(xp, *nitem, *stride); break;
  case PVM_FLOAT: *info = pvm_pkfloat(xp, *nitem, *stride); break;
  case PVM_CPLX: *info = pvm_pkcplx(xp, *nitem, *stride); break;
  case PVM_DOUBLE: *info = pvm_pkdouble(xp, *nitem, *stride); break;
  case PVM_DCPLX: *info = pvm_pkdcplx(xp, *nitem, *stride); break;
  case PVM_LONG: *info = pvm_pklong(xp, *nitem, *stride); break;
  default: *info = PvmBadParam; break;
  }
}

void pvmfunpack_(int *what, void *xp, int *nitem, int *stride, int *info) {
  switch (*what) {
  case PVM_STR:
  case PVM_BYTE: *info = pvm_upkbyte(xp, *nitem, *stride); break;
  case PVM_SHORT: *info = pvm_upkshort(xp, *nitem, *stride); break;
  case PVM_INT: *info = pvm_upkint(xp, *nitem, *stride); break;
  case PVM_FLOAT: *info = pvm_upkfloat(xp, *nitem, *stride); break;
  case PVM_CPLX: *info = pvm_upkcplx(xp, *nitem, *stride); break;
  case PVM_DOUBLE: *info = pvm_upkdouble(xp, *nitem, *stride); break;
  case PVM_DCPLX: *info = pvm_upkdcplx(xp, *nitem, *stride); break;
  case PVM_LONG: *info = pvm_upklong(xp, *nitem, *stride); break;
  default: *info = PvmBadParam; break;
  }
}

/* ---- Messages ---- */

void pvmfsend_(int *tid, int *msgtag, int *info) {
  *info = pvm_send(*tid, *msgtag);
}

void pvmfmcast_(int *ntask, int *tids, int *msgtag, int *info) {
  *info = pvm_mcast(tids, *ntask, *msgtag);
}

void pvmfrecv_(int *tid, int *msgtag, int *bufid) {
  *bufid = pvm_recv(*tid, *msgtag);
}

void pvmfnrecv_(int *tid, int *msgtag, int *bufid) {
  *bufid = pvm_nrecv(*tid, *msgtag);
}

void pvmfprobe_(int *tid, int *msgtag, int *bufid) {
  *bufid = pvm_probe(*tid, *msgtag);
}

/* sec -1 waits for ever, as in PVM's binding. */
void pvmftrecv_(int *tid, int *msgtag, int *sec, int *usec, int *bufid) {
  struct timeval t = {.tv_sec = *sec, .tv_usec = *usec};
  *bufid = pvm_trecv(*tid, *msgtag, *sec == -1 ? NULL : &t);
}

void pvmfpsend_(int *tid, int *msgtag, void *buf, int *len, int *datatype,
                int *info) {
  *info = pvm_psend(*tid, *msgtag, buf, *len, *datatype);
}

void pvmfprecv_(int *tid, int *msgtag, void *buf, int *len, int *datatype,
                int *atid, int *atag, int *alen, int *info) {
  *info = pvm_precv(*tid, *msgtag, buf, *len, *datatype, atid, atag, alen);
}

/* ---- Groups ---- */

void pvmfjoingroup_(char *group, int *inum, size_t group_len) {
  char *g = nxpvmfi_cstr(group, group_len);
  *inum = g != NULL ? pvm_joingroup(g) : PvmNoMem;
  free(g);
}

void pvmflvgroup_(char *group, int *info, size_t group_len) {
  char *g = nxpvmfi_cstr(group, group_len);
  *info = g != NULL ? pvm_lvgroup(g) : PvmNoMem;
  free(g);
}

void pvmfgsize_(char *group, int *size, size_t group_len) {
  char *g = nxpvmfi_cstr(group, group_len);
  *size = g != NULL ? pvm_gsize(g) : PvmNoMem;
  free(g);
}

void pvmfgetinst_(char *group, int *tid, int *inum, size_t group_len) {
  char *g = nxpvmfi_cstr(group, group_len);
  *inum = g != NULL ? pvm_getinst(g, *tid) : PvmNoMem;
  free(g);
}

void pvmfgettid_(char *group, int *inum, int *tid, size_t group_len) {
  char *g = nxpvmfi_cstr(group, group_len);
  *tid = g != NULL ? pvm_gettid(g, *inum) : PvmNoMem;
  free(g);
}

void pvmfbarrier_(char *group, int *count, int *info, size_t group_len) {
  char *g = nxpvmfi_cstr(group, group_len);
  *info = g != NULL ? pvm_barrier(g, *count) : PvmNoMem;
  free(g);
}

void pvmfbcast_(char *group, int *msgtag, int *info, size_t group_len) {
  char *g = nxpvmfi_cstr(group, group_len);
  *info = g != NULL ? pvm_bcast(g, *msgtag) : PvmNoMem;
  free(g);
}

/* func is the Fortran procedure itself (pvmsum, ..., or the program's
 * own, declared external): pvm_reduce calls it with every argument by
 * reference, which is how a Fortran subroutine takes them. */
void pvmfreduce_(pvmf_reduce_fn *func, void *data, int *count, int *datatype,
                 int *msgtag, char *group, int *rootinst, int *info,
                 size_t group_len) {
  char *g = nxpvmfi_cstr(group, group_len);
  *info = g != NULL
              ? pvm_reduce(func, data, *count, *datatype, *msgtag, g, *rootinst)
              : PvmNoMem;
  free(g);
}

void pvmfgather_(void *result, void *data, int *count, int *datatype,
                 int *msgtag, char *group, int *rootinst, int *info,
                 size_t group_len) {
  char *g = nxpvmfi_cstr(group, group_len);
  *info = g != NULL ? pvm_gather(result, data, *count, *datatype, *msgtag, g,
                                 *rootinst)
                    : PvmNoMem;
  free(g);
}

void pvmfscatter_(void *result, void *data, int *count, int *datatype,
                  int *msgtag, char *group, int *rootinst, int *info,
                  size_t group_len) {
  char *g = nxpvmfi_cstr(group, group_len);
  *info = g != NULL ? pvm_scatter(result, data, *count, *datatype, *msgtag, g,
                                  *rootinst)
                    : PvmNoMem;
  free(g);
}

/* The predefined reduce functions under their Fortran names, to pass to
 * pvmfreduce (declared external by the program, as with PVM). */
void pvmsum_(int *datatype, void *x, void *y, int *num, int *info) {
  PvmSum(datatype, x, y, num, info);
}

void pvmproduct_(int *datatype, void *x, void *y, int *num, int *info) {
  PvmProduct(datatype, x, y, num, info);
}

void pvmmax_(int *datatype, void *x, void *y, int *num, int *info) {
  PvmMax(datatype, x, y, num, info);
}

void pvmmin_(int *datatype, void *x, void *y, int *num, int *info) {
  PvmMin(datatype, x, y, num, info);
}
