c     PVM 3.4's Fortran interface, the routines of pvmf_pending.c:
c     contexts, mailboxes, message handlers, hosts and pvmffreezegroup,
c     in one task. Built against nexus-fpvm once libnxpvm has their C
c     calls (meson.build). expected/fpvm_pending.txt is what it prints on
c     the real PVM, built against Debian's libfpvm3 and also with
c     pvmf_pending.c and pvmf.c in its place over Debian's libpvm3.
      program fpvmpending
      include 'fpvm3.h'
      external handler
      integer handler
      integer mytid, info, ctx0, ctx, old, bufid, val, index, mhid
      integer dtid, mstat, code, sec, usec, dsec, dusec, size
      integer nclass, nentry, idx(4), owner(4), flags(4), nfound
      character*32 name
      integer hits
      common /fpvmh/ hits

      call pvmfmytid(mytid)
      if (mytid .lt. 0) stop 77
      call pvmfsetopt(PVMAUTOERR, 0, info)

c     Contexts: a message sent in a new context is received in it only.
      call pvmfgetcontext(ctx0)
      call pvmfnewcontext(ctx)
      write(*,'(a,l1)') 'new context differs ', ctx .ne. ctx0
      call pvmfsetcontext(ctx, old)
      write(*,'(a,l1)') 'setcontext returns the old ', old .eq. ctx0
      call pvmfinitsend(PVMDATADEFAULT, bufid)
      call pvmfpack(INTEGER4, 5, 1, 1, info)
      call pvmfsend(mytid, 40, info)
      call pvmfsetcontext(ctx0, old)
      call pvmfnrecv(mytid, 40, bufid)
      write(*,'(a,i0)') 'nrecv in the base context ', bufid
      call pvmfsetcontext(ctx, old)
      call pvmftrecv(mytid, 40, 5, 0, bufid)
      call pvmfunpack(INTEGER4, val, 1, 1, info)
      write(*,'(a,i0)') 'received in the new context ', val
      call pvmfsetcontext(ctx0, old)
      call pvmfgetcontext(old)
      write(*,'(a,l1)') 'back in the base context ', old .eq. ctx0
c     Not checked after: PVM 3.4.6's pvmffreecontext makes ctx current
c     (it calls pvm_setcontext), nexus-fpvm's frees it.
      call pvmffreecontext(ctx, info)
      write(*,'(a,i0)') 'freecontext ', info

c     Mailboxes.
      call pvmfinitsend(PVMDATADEFAULT, bufid)
      call pvmfpack(INTEGER4, 7, 1, 1, info)
      call pvmfputinfo('fpvm-box', bufid, PVMMBOXDEFAULT, index)
      write(*,'(a,i0)') 'putinfo index ', index
      call pvmfputinfo('fpvm-box', bufid, PVMMBOXDEFAULT, info)
      write(*,'(a,i0)') 'putinfo again ', info
      call pvmfrecvinfo('fpvm-box', 0, PVMMBOXDEFAULT, bufid)
      call pvmfsetrbuf(bufid, old)
      call pvmfunpack(INTEGER4, val, 1, 1, info)
      write(*,'(a,i0)') 'recvinfo value ', val
      nclass = -1
      call pvmfgetmboxinfo('fpvm-*', name, nclass, nentry, idx, owner,
     &     flags, info)
c     nclass is not printed: PVM 3.4.6's binding does not set it.
      write(*,'(a,a,a,i0,a,l1)') 'mboxinfo ', name(1:10),
     &     ' entries ', nentry, ' owner is me ', owner(1) .eq. mytid
      call pvmfdelinfo('fpvm-box', 0, PVMMBOXDEFAULT, info)
      write(*,'(a,i0)') 'delinfo ', info
      call pvmfrecvinfo('fpvm-box', 0, PVMMBOXDEFAULT, bufid)
      write(*,'(a,i0)') 'recvinfo after delinfo ', bufid
      nclass = -1
      call pvmfgetmboxinfo('fpvm-none*', name, nclass, nentry, idx,
     &     owner, flags, nfound)
      write(*,'(a,i0)') 'mboxinfo of nothing ', nfound

c     A message handler for tag 41 from this task, run while it
c     receives. The fourth argument is not used (PVM 3.4.6's binding).
      hits = 0
      call pvmfaddmhf(mytid, 41, -1, 0, handler, mhid)
      write(*,'(a,l1)') 'addmhf id ', mhid .ge. 0
      call pvmfinitsend(PVMDATADEFAULT, bufid)
      call pvmfpack(INTEGER4, 9, 1, 1, info)
      call pvmfsend(mytid, 41, info)
      call pvmfsend(mytid, 42, info)
      call pvmfrecv(mytid, 42, bufid)
      write(*,'(a,i0)') 'handler runs ', hits
      call pvmfdelmhf(mhid, info)
      write(*,'(a,i0)') 'delmhf ', info
      call pvmfdelmhf(mhid, info)
      write(*,'(a,i0)') 'delmhf again ', info

c     Hosts: this task's host, and one that is not in the machine.
      call pvmftidtohost(mytid, dtid)
      write(*,'(a,l1)') 'tidtohost ', dtid .gt. 0
      call pvmfmstat('fpvm-nosuch.invalid', mstat)
      write(*,'(a,i0)') 'mstat of no host ', mstat
      call pvmfhostsync(dtid, sec, usec, dsec, dusec, info)
      write(*,'(a,i0)') 'hostsync ', info
      call pvmfarchcode('NOSUCHARCH', code)
      write(*,'(a,i0)') 'archcode of no arch ', code

c     A group frozen at its size.
      call pvmfjoingroup('fpvm-frozen', info)
      call pvmffreezegroup('fpvm-frozen', -1, info)
      write(*,'(a,i0)') 'freezegroup ', info
      call pvmfgsize('fpvm-frozen', size)
      write(*,'(a,i0)') 'frozen size ', size
      call pvmflvgroup('fpvm-frozen', info)
      call pvmfexit(info)
      end

c     Called as a C handler is, with the message id by value.
      integer function handler(mid)
      integer, value :: mid
      integer hits
      common /fpvmh/ hits
      if (mid .gt. 0) hits = hits + 1
      handler = 0
      end
