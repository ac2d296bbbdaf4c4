/* The pvmf routines whose C calls libnxpvm does not have yet (hosts,
 * message handlers, contexts, mailboxes, pvm_freezegroup): written
 * against PVM 3.4's prototypes, and left out of the build (meson.build)
 * until pvm3.h declares those calls and libnxpvm defines them. */
#include "pvmf.h"

#include <pvm3.h>
#include <stdlib.h>
#include <string.h>

/* ---- Hosts ---- */

/* info gets the new host's dtid, or an error, as in PVM's binding. */
void pvmfaddhost_(char *host, int *info, size_t host_len) {
  char *h = nxpvmfi_cstr(host, host_len);
  if (h == NULL) {
    *info = PvmNoMem;
    return;
  }
  int dtid = 0;
  int rc = pvm_addhosts(&h, 1, &dtid);
  *info = rc >= 0 ? dtid : rc;
  free(h);
}

/* info gets the host's status, or an error. */
void pvmfdelhost_(char *host, int *info, size_t host_len) {
  char *h = nxpvmfi_cstr(host, host_len);
  if (h == NULL) {
    *info = PvmNoMem;
    return;
  }
  int status = 0;
  int rc = pvm_delhosts(&h, 1, &status);
  *info = rc >= 0 ? status : rc;
  free(h);
}

void pvmfhalt_(int *info) { *info = pvm_halt(); }

void pvmftidtohost_(int *tid, int *dtid) { *dtid = pvm_tidtohost(*tid); }

void pvmfmstat_(char *host, int *mstat, size_t host_len) {
  char *h = nxpvmfi_cstr(host, host_len);
  *mstat = h != NULL ? pvm_mstat(h) : PvmNoMem;
  free(h);
}

void pvmfhostsync_(int *host, int *sec, int *usec, int *dsec, int *dusec,
                   int *info) {
  struct timeval clk = {0}, delta = {0};
  *info = pvm_hostsync(*host, &clk, &delta);
  *sec = (int)clk.tv_sec;
  *usec = (int)clk.tv_usec;
  *dsec = (int)delta.tv_sec;
  *dusec = (int)delta.tv_usec;
}

void pvmfarchcode_(char *arch, int *code, size_t arch_len) {
  char *a = nxpvmfi_cstr(arch, arch_len);
  *code = a != NULL ? pvm_archcode(a) : PvmNoMem;
  free(a);
}

/* args is one string of words separated by blanks, which become the
 * argument vector of pvm_start_pvmd, as in PVM's binding. */
void pvmfstartpvmd_(char *args, int *block, int *info, size_t args_len) {
  char *line = nxpvmfi_cstr(args, args_len);
  char **argv = calloc(args_len / 2 + 2, sizeof(*argv));
  if (line == NULL || argv == NULL) {
    *info = PvmNoMem;
    goto out;
  }
  int argc = 0;
  for (char *save = NULL, *w = strtok_r(line, " \t", &save); w != NULL;
       w = strtok_r(NULL, " \t", &save))
    argv[argc++] = w;
  *info = pvm_start_pvmd(argc, argc > 0 ? argv : NULL, *block);
out:
  free(argv);
  free(line);
}

/* ---- Message handlers and contexts ---- */

/* The arguments are PVM 3.4.6's: (src, tag, ctx, unused, func, info),
 * the fourth neither read nor written (a program may pass a constant);
 * info gets the handler's id or an error. func is called as a C handler
 * is, with the message id by value: a Fortran handler declares it
 * `integer, value :: mid`. */
void pvmfaddmhf_(int *src, int *tag, int *ctx, int *unused, int (*func)(int),
                 int *info) {
  *info = pvm_addmhf(*src, *tag, *ctx, func);
}

void pvmfdelmhf_(int *mhid, int *info) { *info = pvm_delmhf(*mhid); }

void pvmfnewcontext_(int *ctx) { *ctx = pvm_newcontext(); }

void pvmfsetcontext_(int *ctx, int *oldctx) { *oldctx = pvm_setcontext(*ctx); }

void pvmfgetcontext_(int *ctx) { *ctx = pvm_getcontext(); }

/* PVM 3.4.6's libfpvm3 calls pvm_setcontext here (a slip); this frees the
 * context, as its man page says. */
void pvmffreecontext_(int *ctx, int *info) { *info = pvm_freecontext(*ctx); }

/* ---- Mailboxes ---- */

void pvmfputinfo_(char *name, int *bufid, int *flags, int *index,
                  size_t name_len) {
  char *n = nxpvmfi_cstr(name, name_len);
  *index = n != NULL ? pvm_putinfo(n, *bufid, *flags) : PvmNoMem;
  free(n);
}

void pvmfrecvinfo_(char *name, int *index, int *flags, int *bufid,
                   size_t name_len) {
  char *n = nxpvmfi_cstr(name, name_len);
  *bufid = n != NULL ? pvm_recvinfo(n, *index, *flags) : PvmNoMem;
  free(n);
}

void pvmfdelinfo_(char *name, int *index, int *flags, int *info,
                  size_t name_len) {
  char *n = nxpvmfi_cstr(name, name_len);
  *info = n != NULL ? pvm_delinfo(n, *index, *flags) : PvmNoMem;
  free(n);
}

/* One mailbox class per call, as pvmfconfig gives hosts: the first call
 * asks pvm_getmboxinfo (info PvmNotFound when nothing matches pattern),
 * each call returns the next class's name and its entries' indices, owners
 * and flags (arrays of nentries), and the call after the last starts over;
 * nclasses -1 on entry starts over at once. */
void pvmfgetmboxinfo_(char *pattern, char *name, int *nclasses, int *nentries,
                      int *index, int *owner, int *flags, int *info,
                      size_t pattern_len, size_t name_len) {
  static struct pvmmboxinfo *classes;
  static int count, next;
  if (count > 0 && *nclasses == -1)
    count = 0;
  *info = PvmOk;
  if (count == 0) {
    char *p = nxpvmfi_cstr(pattern, pattern_len);
    if (p == NULL) {
      *info = PvmNoMem;
      return;
    }
    int n = 0;
    int rc = pvm_getmboxinfo(p, &n, &classes);
    free(p);
    if (rc < 0) {
      *info = rc;
      return;
    }
    count = n;
    next = 0;
    if (count == 0) {
      *info = PvmNotFound;
      return;
    }
  }
  const struct pvmmboxinfo *c = &classes[next];
  *nclasses = count;
  *nentries = c->mi_nentries;
  nxpvmfi_fstr(name, name_len, c->mi_name);
  for (int i = 0; i < c->mi_nentries; i++) {
    index[i] = c->mi_indices[i];
    owner[i] = c->mi_owners[i];
    flags[i] = c->mi_flags[i];
  }
  if (++next == count)
    count = 0;
}

void pvmffreezegroup_(char *group, int *size, int *info, size_t group_len) {
  char *g = nxpvmfi_cstr(group, group_len);
  *info = g != NULL ? pvm_freezegroup(g, *size) : PvmNoMem;
  free(g);
}
