c     PVM 3.4's Fortran interface, groups: a master and the three copies
c     of this program it spawns join a group, meet at barriers, and
c     broadcast, reduce (with PVM's functions and one of their own),
c     gather and scatter. The same source builds against Debian's
c     libfpvm3 and libgpvm3 and against nexus-fpvm; both must print
c     tests/pvm/expected/fpvm_group.txt.
      program fpvmgroup
      include 'fpvm3.h'
      integer nproc
      parameter (nproc = 4)
      external pvmsum, pvmmax, pvmmin, pvmproduct, lastbig
      character*512 self
c     Blank padded: the binding must strip the trailing blanks.
      character*24 group
      integer mytid, ptid, tids(nproc), numt, inum, inst, info, i, k
      integer size, tid0, value, bufid, isum(2), imax(2), all(nproc)
      integer mine, vals(nproc), ilast(2), rc
      double precision squares(nproc), got, seen(nproc), dmin(1)
      double precision dprod(1)

      group = 'fpvm-group'
      call pvmfmytid(mytid)
      if (mytid .lt. 0) stop 77
      call pvmfsetopt(PVMAUTOERR, 0, info)
      call pvmfparent(ptid)
      if (ptid .eq. PvmNoParent) then
c        Join before spawning, so that the master is instance 0.
         call pvmfjoingroup(group, inum)
         write(*,'(a,i0)') 'master joined as ', inum
         call pvmfjoingroup(group, info)
         write(*,'(a,i0)') 'join again ', info
         call pvmflvgroup('fpvm-nosuch', info)
         write(*,'(a,i0)') 'leave a group not joined ', info
c        All blanks: the empty name.
         call pvmfjoingroup('    ', info)
         write(*,'(a,i0)') 'join a blank name ', info
         call getarg(0, self)
         call pvmfspawn(self, PVMTASKDEFAULT, '*', nproc - 1, tids,
     &        numt)
         write(*,'(a,i0)') 'spawned ', numt
         if (numt .ne. nproc - 1) stop 1
      else
         call pvmfjoingroup(group, inum)
      end if
      call pvmfgetinst(group, mytid, inst)
      call pvmfbarrier(group, nproc, info)

c     Instance 0 broadcasts (tag 20); bcast skips the caller.
      value = 0
      if (inst .eq. 0) then
         value = 42
         call pvmfinitsend(PVMDATADEFAULT, bufid)
         call pvmfpack(INTEGER4, value, 1, 1, info)
         call pvmfbcast(group, 20, info)
         write(*,'(a,i0)') 'bcast ', info
      else
         call pvmfrecv(-1, 20, bufid)
         call pvmfunpack(INTEGER4, value, 1, 1, info)
      end if

c     Reductions at instance 0 (tags 21 to 25).
      isum(1) = (inst + 1) * value
      isum(2) = inst * 10
      imax(1) = isum(1)
      imax(2) = isum(2)
      ilast(1) = inst
      ilast(2) = 100 - inst
      dmin(1) = 1.5d0 * (inst + 1)
      dprod(1) = 0.5d0 * (inst + 1)
      call pvmfreduce(pvmsum, isum, 2, INTEGER4, 21, group, 0, info)
      call pvmfreduce(pvmmax, imax, 2, INTEGER4, 22, group, 0, info)
      call pvmfreduce(pvmmin, dmin, 1, REAL8, 23, group, 0, info)
      call pvmfreduce(pvmproduct, dprod, 1, REAL8, 24, group, 0,
     &     info)
      call pvmfreduce(lastbig, ilast, 2, INTEGER4, 25, group, 0, info)

c     Gather every instance's number times 3 (tag 26); scatter squares
c     (tag 27).
      mine = inst * 3
      do 10 i = 1, nproc
         all(i) = 0
         squares(i) = dble(i - 1) ** 2 + 0.5d0
   10 continue
      call pvmfgather(all, mine, 1, INTEGER4, 26, group, 0, info)
      got = -1
      call pvmfscatter(got, squares, 1, REAL8, 27, group, 0, info)

      call pvmfgsize(group, size)
      call pvmfgettid(group, 0, tid0)
      if (inst .ne. 0) then
         call pvmfinitsend(PVMDATADEFAULT, bufid)
         call pvmfpack(INTEGER4, inst, 1, 1, info)
         call pvmfpack(INTEGER4, value, 1, 1, info)
         call pvmfpack(REAL8, got, 1, 1, info)
         call pvmfsend(tid0, 28, info)
      else
         write(*,'(a,i0)') 'group size ', size
         write(*,'(a,l1)') 'tid of instance 0 is mine ', tid0 .eq. mytid
         write(*,'(a,2(1x,i0))') 'reduce sum', isum
         write(*,'(a,2(1x,i0))') 'reduce max', imax
         write(*,'(a,f8.3)') 'reduce min ', dmin(1)
         write(*,'(a,f8.3)') 'reduce product ', dprod(1)
         write(*,'(a,2(1x,i0))') 'reduce own function', ilast
         write(*,'(a,4(1x,i0))') 'gather', all
         write(*,'(a,f8.3)') 'scatter at 0 ', got
         do 20 i = 1, nproc
            vals(i) = 0
            seen(i) = -1
   20    continue
         do 30 k = 1, nproc - 1
            call pvmfrecv(-1, 28, bufid)
            call pvmfunpack(INTEGER4, i, 1, 1, info)
            call pvmfunpack(INTEGER4, value, 1, 1, info)
            call pvmfunpack(REAL8, got, 1, 1, info)
            if (i .ge. 1 .and. i .lt. nproc) then
               vals(i + 1) = value
               seen(i + 1) = got
            end if
   30    continue
         do 40 i = 2, nproc
            write(*,'(a,i0,a,i0,a,f8.3)') 'instance ', i - 1,
     &           ': bcast ', vals(i), ', scatter ', seen(i)
   40    continue
      end if

c     The others leave first and say so (tag 29); instance 0 leaves last.
      call pvmfbarrier(group, nproc, info)
      if (inst .ne. 0) then
         call pvmflvgroup(group, info)
         call pvmfinitsend(PVMDATADEFAULT, bufid)
         call pvmfpack(INTEGER4, info, 1, 1, info)
         call pvmfsend(tid0, 29, info)
      else
         do 50 k = 1, nproc - 1
            call pvmfrecv(-1, 29, bufid)
            call pvmfunpack(INTEGER4, info, 1, 1, rc)
            write(*,'(a,i0)') 'a member left with ', info
   50    continue
         call pvmfgsize(group, size)
         write(*,'(a,i0)') 'size after they left ', size
         call pvmflvgroup(group, info)
         write(*,'(a,i0)') 'master left with ', info
      end if
      call pvmfexit(info)
      end

c     A reduce function of the program's own, called by pvmfreduce as
c     PVM calls pvmsum: keeps the larger value, element by element.
      subroutine lastbig(datatype, x, y, num, info)
      integer datatype, num, info, i
      integer x(num), y(num)
      do 10 i = 1, num
         if (y(i) .ge. x(i)) x(i) = y(i)
   10 continue
      info = 0
      end
