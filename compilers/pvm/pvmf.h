/* The C side of PVM 3.4's Fortran interface (libnxfpvm): the 63 pvmf
 * routines of PVM 3.4.6's libfpvm3 and the four reduce functions, as
 * gfortran calls them.
 *
 * The conventions are gfortran's, which PVM's own libfpvm3 follows on
 * Linux: the name in lower case with a trailing underscore; every argument
 * by reference; after the last argument, one hidden length (a size_t, by
 * value) per CHARACTER argument, in the order of those arguments; the
 * result comes back in the last argument (info, or the value the C call
 * returns). A CHARACTER argument is a name with trailing blanks, which are
 * removed before the C call sees it. pvmfpack and pvmfunpack take any type
 * as their data argument: when it is a CHARACTER, gfortran appends its
 * length, which they do not read (the count is nitem). */
#ifndef NXPVM_PVMF_H
#define NXPVM_PVMF_H

#include <stddef.h>

/* A Fortran reduce function (pvmsum, or the program's own), called by
 * pvm_reduce as PVM calls it: every argument by reference. */
typedef void pvmf_reduce_fn(int *datatype, void *x, void *y, int *num,
                            int *info);

/* Tasks and the virtual machine. */
void pvmfmytid_(int *tid);
void pvmfparent_(int *tid);
void pvmfexit_(int *info);
void pvmfspawn_(char *aout, int *flag, char *where, int *ntask, int *tids,
                int *numt, size_t aout_len, size_t where_len);
void pvmfkill_(int *tid, int *info);
void pvmfsendsig_(int *tid, int *signum, int *info);
void pvmfpstat_(int *tid, int *status);
void pvmfnotify_(int *what, int *msgtag, int *cnt, int *tids, int *info);
void pvmfsiblings_(int *ntids, int *index, int *sibling);
void pvmfconfig_(int *nhost, int *narch, int *dtid, char *name, char *arch,
                 int *speed, int *info, size_t name_len, size_t arch_len);
void pvmftasks_(int *where, int *ntask, int *tid, int *ptid, int *dtid,
                int *flag, char *aout, int *info, size_t aout_len);
void pvmfcatchout_(int *onoff, int *info);
void pvmfperror_(char *msg, int *info, size_t msg_len);
void pvmfsetopt_(int *what, int *val, int *oldval);
void pvmfgetopt_(int *what, int *val);
void pvmfsleep_(int *secs);

/* Buffers and packing. */
void pvmfinitsend_(int *encoding, int *bufid);
void pvmfmkbuf_(int *encoding, int *bufid);
void pvmffreebuf_(int *bufid, int *info);
void pvmfgetsbuf_(int *bufid);
void pvmfgetrbuf_(int *bufid);
void pvmfsetsbuf_(int *bufid, int *oldbuf);
void pvmfsetrbuf_(int *bufid, int *oldbuf);
void pvmfbufinfo_(int *bufid, int *bytes, int *msgtag, int *tid, int *info);
void pvmfpack_(int *what, void *xp, int *nitem, int *stride, int *info);
void pvmfunpack_(int *what, void *xp, int *nitem, int *stride, int *info);

/* Messages. */
void pvmfsend_(int *tid, int *msgtag, int *info);
void pvmfmcast_(int *ntask, int *tids, int *msgtag, int *info);
void pvmfrecv_(int *tid, int *msgtag, int *bufid);
void pvmfnrecv_(int *tid, int *msgtag, int *bufid);
void pvmfprobe_(int *tid, int *msgtag, int *bufid);
void pvmftrecv_(int *tid, int *msgtag, int *sec, int *usec, int *bufid);
void pvmfpsend_(int *tid, int *msgtag, void *buf, int *len, int *datatype,
                int *info);
void pvmfprecv_(int *tid, int *msgtag, void *buf, int *len, int *datatype,
                int *atid, int *atag, int *alen, int *info);

/* Groups. */
void pvmfjoingroup_(char *group, int *inum, size_t group_len);
void pvmflvgroup_(char *group, int *info, size_t group_len);
void pvmfgsize_(char *group, int *size, size_t group_len);
void pvmfgetinst_(char *group, int *tid, int *inum, size_t group_len);
void pvmfgettid_(char *group, int *inum, int *tid, size_t group_len);
void pvmfbarrier_(char *group, int *count, int *info, size_t group_len);
void pvmfbcast_(char *group, int *msgtag, int *info, size_t group_len);
void pvmfreduce_(pvmf_reduce_fn *func, void *data, int *count, int *datatype,
                 int *msgtag, char *group, int *rootinst, int *info,
                 size_t group_len);
void pvmfgather_(void *result, void *data, int *count, int *datatype,
                 int *msgtag, char *group, int *rootinst, int *info,
                 size_t group_len);
void pvmfscatter_(void *result, void *data, int *count, int *datatype,
                  int *msgtag, char *group, int *rootinst, int *info,
                  size_t group_len);
void pvmsum_(int *datatype, void *x, void *y, int *num, int *info);
void pvmproduct_(int *datatype, void *x, void *y, int *num, int *info);
void pvmmax_(int *datatype, void *x, void *y, int *num, int *info);
void pvmmin_(int *datatype, void *x, void *y, int *num, int *info);

/* The routines of pvmf_pending.c, whose C calls libnxpvm does not have
 * yet (docs/pvm.md). */
void pvmfaddhost_(char *host, int *info, size_t host_len);
void pvmfdelhost_(char *host, int *info, size_t host_len);
void pvmfhalt_(int *info);
void pvmftidtohost_(int *tid, int *dtid);
void pvmfmstat_(char *host, int *mstat, size_t host_len);
void pvmfhostsync_(int *host, int *sec, int *usec, int *dsec, int *dusec,
                   int *info);
void pvmfarchcode_(char *arch, int *code, size_t arch_len);
void pvmfstartpvmd_(char *args, int *block, int *info, size_t args_len);
void pvmfaddmhf_(int *src, int *tag, int *ctx, int *unused, int (*func)(int),
                 int *info);
void pvmfdelmhf_(int *mhid, int *info);
void pvmfnewcontext_(int *ctx);
void pvmfsetcontext_(int *ctx, int *oldctx);
void pvmfgetcontext_(int *ctx);
void pvmffreecontext_(int *ctx, int *info);
void pvmfputinfo_(char *name, int *bufid, int *flags, int *index,
                  size_t name_len);
void pvmfrecvinfo_(char *name, int *index, int *flags, int *bufid,
                   size_t name_len);
void pvmfdelinfo_(char *name, int *index, int *flags, int *info,
                  size_t name_len);
void pvmfgetmboxinfo_(char *pattern, char *name, int *nclasses, int *nentries,
                      int *index, int *owner, int *flags, int *info,
                      size_t pattern_len, size_t name_len);
void pvmffreezegroup_(char *group, int *size, int *info, size_t group_len);

/* String conversions shared by pvmf.c and pvmf_pending.c. */

/* A NUL-terminated copy of the Fortran string (s, len) without its
 * trailing blanks, to free(); NULL if out of memory. */
char *nxpvmfi_cstr(const char *s, size_t len);

/* Copies the C string src into the Fortran string (dst, len), cut at len
 * or padded with blanks. */
void nxpvmfi_fstr(char *dst, size_t len, const char *src);

#endif
