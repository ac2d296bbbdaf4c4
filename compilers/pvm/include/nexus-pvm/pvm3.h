/* PVM 3.4's C interface on nexus RSRs (libnxpvm): the calls, types and
 * constants a PVM program uses, with PVM 3.4's values, and no daemon. */
#ifndef NEXUS_PVM3_H
#define NEXUS_PVM3_H

#include <stdio.h>
#include <sys/time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Tells a program which library it was compiled against. */
#define NEXUS_PVM 1
#define PVM_MAJOR_VERSION 3
#define PVM_MINOR_VERSION 4
#define PVM_PATCH_VERSION 6
#define PVM_VER "3.4.6"

/* Packing styles for pvm_initsend and pvm_mkbuf. */
#define PvmDataDefault 0
#define PvmDataRaw 1
#define PvmDataInPlace 2
#define PvmDataFoo PvmDataDefault
#define PvmDataTrace 4

/* pvm_spawn flags. */
#define PvmTaskDefault 0
#define PvmTaskHost 1
#define PvmTaskArch 2
#define PvmTaskDebug 4
#define PvmTaskTrace 8
#define PvmMppFront 16
#define PvmHostCompl 32
#define PvmNoSpawnParent 64

/* pvm_notify kinds. */
#define PvmTaskExit 1
#define PvmHostDelete 2
#define PvmHostAdd 3
#define PvmRouteAdd 4
#define PvmRouteDelete 5
#define PvmNotifyCancel 256

/* pvm_setopt and pvm_getopt. */
#define PvmRoute 1
#define PvmDontRoute 1
#define PvmAllowDirect 2
#define PvmRouteDirect 3
#define PvmDebugMask 2
#define PvmAutoErr 3
#define PvmOutputTid 4
#define PvmOutputCode 5
#define PvmTraceTid 6
#define PvmTraceCode 7
#define PvmTraceBuffer 8
#define PvmTraceOptions 9
#define PvmFragSize 10
#define PvmResvTids 11
#define PvmSelfOutputTid 12
#define PvmSelfOutputCode 13
#define PvmSelfTraceTid 14
#define PvmSelfTraceCode 15
#define PvmSelfTraceBuffer 16
#define PvmSelfTraceOptions 17
#define PvmShowTids 18
#define PvmPollType 19
#define PvmPollConstant 1
#define PvmPollSleep 2
#define PvmPollTime 20
#define PvmOutputContext 21
#define PvmTraceContext 22
#define PvmSelfOutputContext 23
#define PvmSelfTraceContext 24
#define PvmNoReset 25

/* PvmTraceOptions values (nothing is traced: see docs/pvm.md). */
#define PvmTraceFull 1
#define PvmTraceTime 2
#define PvmTraceCount 3

/* Temporary file names, as PVM's header gives them. */
#define PVMTMPNAMFUN(x) tmpnam(x)
#ifdef L_tmpnam
#define PVMTMPNAMLEN L_tmpnam
#else
#define PVMTMPNAMLEN 128
#endif

/* pvm_[sg]ettmask (tracing; see docs/pvm.md). */
#define PvmTaskSelf 0
#define PvmTaskChild 1

/* Message contexts: the one every task starts in. */
#define PvmBaseContext 0

/* Message mailboxes: pvm_putinfo, pvm_recvinfo, pvm_delinfo. */
#define PvmMboxDefault 0
#define PvmMboxPersistent 1
#define PvmMboxMultiInstance 2
#define PvmMboxOverWritable 4
#define PvmMboxFirstAvail 8
#define PvmMboxReadAndDelete 16
#define PvmMboxWaitForInfo 32
#define PvmMboxMaxFlag 512
#define PvmMboxDirectIndexShift 10
#define PvmMboxMaxDirectIndex ((unsigned)1 << (31 - PvmMboxDirectIndexShift))
#define PvmMboxDirectIndexOf(_flags)                                           \
  (((_flags) & ((PvmMboxMaxDirectIndex - 1) << PvmMboxDirectIndexShift)) >>    \
   PvmMboxDirectIndexShift)
#define PvmMboxDirectIndex(_index)                                             \
  (((_index) >= PvmMboxMaxDirectIndex)                                         \
       ? (fprintf(stderr, "Mbox Direct Index Too Large: %d >= %d\n", (_index), \
                  PvmMboxMaxDirectIndex),                                      \
          0)                                                                   \
       : ((_index) << PvmMboxDirectIndexShift))

/* The system's mailbox classes. */
#define PVMNORESETCLASS "###_PVM_NO_RESET_###"
#define PVMHOSTERCLASS "###_PVM_HOSTER_###"
#define PVMTASKERCLASS "###_PVM_TASKER_###"
#define PVMTRACERCLASS "###_PVM_TRACER_###"
#define PVMRMCLASS "###_PVM_RM_###"

/* Error codes, as PVM 3.4. */
#define PvmOk 0
#define PvmBadParam -2
#define PvmMismatch -3
#define PvmOverflow -4
#define PvmNoData -5
#define PvmNoHost -6
#define PvmNoFile -7
#define PvmDenied -8
#define PvmNoMem -10
#define PvmBadMsg -12
#define PvmSysErr -14
#define PvmNoBuf -15
#define PvmNoSuchBuf -16
#define PvmNullGroup -17
#define PvmDupGroup -18
#define PvmNoGroup -19
#define PvmNotInGroup -20
#define PvmNoInst -21
#define PvmHostFail -22
#define PvmNoParent -23
#define PvmNotImpl -24
#define PvmDSysErr -25
#define PvmBadVersion -26
#define PvmOutOfRes -27
#define PvmDupHost -28
#define PvmCantStart -29
#define PvmAlready -30
#define PvmNoTask -31
#define PvmNotFound -32
#define PvmExists -33
#define PvmHostrNMstr -34
#define PvmParentNotSet -35
#define PvmIPLoopback -36

/* PVM 3.3's names, as PVM 3.4 redefines them. */
#define PvmNoEntry PvmNotFound
#define PvmDupEntry PvmDenied

/* Data types for pvm_psend, pvm_precv, pvm_reduce, pvm_gather and
 * pvm_scatter. */
#define PVM_STR 0
#define PVM_BYTE 1
#define PVM_SHORT 2
#define PVM_INT 3
#define PVM_FLOAT 4
#define PVM_CPLX 5
#define PVM_DOUBLE 6
#define PVM_DCPLX 7
#define PVM_LONG 8
#define PVM_USHORT 9
#define PVM_UINT 10
#define PVM_ULONG 11

/* What pvm_config gives per host. */
struct pvmhostinfo {
  int hi_tid;
  char *hi_name;
  char *hi_arch;
  int hi_speed;
  int hi_dsig;
};

/* What pvm_tasks gives per task. */
struct pvmtaskinfo {
  int ti_tid;
  int ti_ptid;
  int ti_host;
  int ti_flag;
  char *ti_a_out;
  int ti_pid;
};

/* What pvm_getminfo gives and pvm_setminfo sets of a message. */
struct pvmminfo {
  int len;
  int ctx;
  int tag;
  int wid;
  int enc;
  int crc;
  int src;
  int dst;
};

/* What pvm_getmboxinfo gives per mailbox class. */
struct pvmmboxinfo {
  char *mi_name;
  int mi_nentries;
  int *mi_indices;
  int *mi_owners;
  int *mi_flags;
};

/* Tasks. */
int pvm_mytid(void);
int pvm_parent(void);
int pvm_exit(void);
int pvm_spawn(char *task, char **argv, int flag, char *where, int ntask,
              int *tids);
int pvm_kill(int tid);
int pvm_sendsig(int tid, int signum);
int pvm_catchout(FILE *ff);
int pvm_config(int *nhost, int *narch, struct pvmhostinfo **hostp);
int pvm_pstat(int tid);
int pvm_notify(int what, int msgtag, int cnt, int *tids);
int pvm_siblings(int **tids);
int pvm_tasks(int which, int *ntask, struct pvmtaskinfo **taskp);
int pvm_perror(char *msg);
int pvm_setopt(int what, int val);
int pvm_getopt(int what);
char *pvm_version(void);
int pvm_export(char *name);
int pvm_unexport(char *name);
int pvm_getfds(int **fds);
int pvm_getnoresets(int **tids, int *ntids);
int pvm_tickle(int how, int *args, int *nres, int *results);
char *pvm_strerror(void);
char *pvmgettmp(void);
char *pvmgetrsh(void);

/* Hosts and the virtual machine: one host, this one (docs/pvm.md). */
int pvm_addhosts(char **hosts, int nhost, int *infos);
int pvm_delhosts(char **hosts, int nhost, int *infos);
int pvm_halt(void);
int pvm_tidtohost(int tid);
int pvm_mstat(char *host);
int pvm_hostsync(int host, struct timeval *clk, struct timeval *delta);
int pvm_archcode(char *arch);
int pvm_start_pvmd(int argc, char **argv, int block);
int pvm_reg_hoster(void);
int pvm_reg_rm(struct pvmhostinfo **hip);
int pvm_reg_tasker(void);
int pvm_reg_tracer(int tctx, int ttag, int octx, int otag, char *tmask,
                   int tbuf, int topt);

/* Message contexts. */
int pvm_newcontext(void);
int pvm_setcontext(int ctx);
int pvm_getcontext(void);
int pvm_freecontext(int ctx);

/* Message mailboxes. */
int pvm_putinfo(char *name, int bufid, int flags);
int pvm_recvinfo(char *name, int index, int flags);
int pvm_delinfo(char *name, int index, int flags);
int pvm_getmboxinfo(char *pattern, int *nclasses, struct pvmmboxinfo **classes);
int pvm_delete(char *name, int req);
int pvm_insert(char *name, int req, int data);
int pvm_lookup(char *name, int req, int *datap);

/* Buffers. */
int pvm_initsend(int encoding);
int pvm_mkbuf(int encoding);
int pvm_freebuf(int bufid);
int pvm_getsbuf(void);
int pvm_setsbuf(int bufid);
int pvm_getrbuf(void);
int pvm_setrbuf(int bufid);
int pvm_bufinfo(int bufid, int *bytes, int *msgtag, int *tid);
int pvm_getminfo(int bufid, struct pvmminfo *info);
int pvm_setminfo(int bufid, struct pvmminfo *info);
#ifdef PVM33COMPAT
int pvm_getmwid(int bufid);
int pvm_setmwid(int bufid, int wid);
#endif

int pvm_packf(const char *fmt, ...);
int pvm_unpackf(const char *fmt, ...);
int pvm_pkmesg(int bufid);
int pvm_pkmesgbody(int bufid);
int pvm_upkmesg(void);

int pvm_pkbyte(char *xp, int nitem, int stride);
int pvm_pkcplx(float *xp, int nitem, int stride);
int pvm_pkdcplx(double *xp, int nitem, int stride);
int pvm_pkdouble(double *xp, int nitem, int stride);
int pvm_pkfloat(float *xp, int nitem, int stride);
int pvm_pkint(int *xp, int nitem, int stride);
int pvm_pklong(long *xp, int nitem, int stride);
int pvm_pkshort(short *xp, int nitem, int stride);
int pvm_pkuint(unsigned int *xp, int nitem, int stride);
int pvm_pkulong(unsigned long *xp, int nitem, int stride);
int pvm_pkushort(unsigned short *xp, int nitem, int stride);
int pvm_pkstr(char *sp);

int pvm_upkbyte(char *xp, int nitem, int stride);
int pvm_upkcplx(float *xp, int nitem, int stride);
int pvm_upkdcplx(double *xp, int nitem, int stride);
int pvm_upkdouble(double *xp, int nitem, int stride);
int pvm_upkfloat(float *xp, int nitem, int stride);
int pvm_upkint(int *xp, int nitem, int stride);
int pvm_upklong(long *xp, int nitem, int stride);
int pvm_upkshort(short *xp, int nitem, int stride);
int pvm_upkuint(unsigned int *xp, int nitem, int stride);
int pvm_upkulong(unsigned long *xp, int nitem, int stride);
int pvm_upkushort(unsigned short *xp, int nitem, int stride);
int pvm_upkstr(char *sp);

/* Messages. */
int pvm_send(int tid, int msgtag);
int pvm_mcast(int *tids, int ntask, int msgtag);
int pvm_psend(int tid, int msgtag, void *buf, int len, int datatype);
int pvm_recv(int tid, int msgtag);
int pvm_nrecv(int tid, int msgtag);
int pvm_trecv(int tid, int msgtag, struct timeval *tmout);
int pvm_probe(int tid, int msgtag);
int pvm_precv(int tid, int msgtag, void *buf, int len, int datatype, int *rtid,
              int *rtag, int *rlen);
int (*pvm_recvf(int (*match)(int bufid, int tid, int tag)))(int, int, int);
int pvm_addmhf(int src, int tag, int ctx, int (*func)(int bufid));
int pvm_delmhf(int mhid);

/* Groups (libgpvm3's calls, in this library; no group server). */
int pvm_joingroup(char *group);
int pvm_lvgroup(char *group);
int pvm_gsize(char *group);
int pvm_getinst(char *group, int tid);
int pvm_gettid(char *group, int inst);
int pvm_barrier(char *group, int count);
int pvm_bcast(char *group, int msgtag);
int pvm_reduce(void (*func)(int *, void *, void *, int *, int *), void *data,
               int count, int datatype, int msgtag, char *group, int rootginst);
int pvm_gather(void *result, void *data, int count, int datatype, int msgtag,
               char *group, int rootginst);
int pvm_scatter(void *result, void *data, int count, int datatype, int msgtag,
                char *group, int rootginst);
int pvm_freezegroup(char *group, int size);

/* The predefined pvm_reduce functions. */
void PvmMax(int *datatype, void *x, void *y, int *num, int *info);
void PvmMin(int *datatype, void *x, void *y, int *num, int *info);
void PvmSum(int *datatype, void *x, void *y, int *num, int *info);
void PvmProduct(int *datatype, void *x, void *y, int *num, int *info);

#ifdef __cplusplus
}
#endif

#endif /* NEXUS_PVM3_H */
