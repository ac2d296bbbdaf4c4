c     PVM 3.4's Fortran interface, tasks, buffers and messages: a master
c     spawns five copies of this program and prints what comes back.
c     The same source builds against Debian's libfpvm3 and against
c     nexus-fpvm; both must print tests/pvm/expected/fpvm_msg.txt.
      program fpvmmsg
      include 'fpvm3.h'
      integer mytid, ptid, info
      call pvmfmytid(mytid)
      if (mytid .lt. 0) stop 77
      call pvmfparent(ptid)
      if (ptid .eq. PvmNoParent) then
         call master(mytid)
      else
         call child(ptid)
      end if
      end

      subroutine master(mytid)
      include 'fpvm3.h'
      integer mytid
      integer nkid
      parameter (nkid = 5)
      character*512 self
      character*16 word, name, arch
      integer tids(nkid), bad(1), numt, info, i, k, old, val, bufid
      integer b, cur, bytes, tag, src, nhost, narch, dtid, speed
      integer*2 i2(3)
      integer i4(6), got(nkid), sib(nkid), ended(nkid), me
      logical sawme, sawkid
      integer*8 i8(2)
      real r4(2)
      double precision r8(3), dsum, dbuf(4)
      complex c8
      complex*16 c16
      character*1 b1(3)
      integer atid, atag, alen

      write(*,'(a,l1)') 'mytid positive ', mytid .gt. 0
      write(*,'(a,i0)') 'parent ', PvmNoParent
      call pvmfsetopt(PVMAUTOERR, 0, old)
      call pvmfgetopt(PVMAUTOERR, val)
      write(*,'(a,i0,a,i0)') 'autoerr was ', old, ' now ', val
      call pvmfconfig(nhost, narch, dtid, name, arch, speed, info)
      write(*,'(a,i0,a,i0)') 'config hosts ', nhost, ' info ', info

c     Nothing has been sent yet: the non-blocking calls find nothing.
      call pvmfnrecv(-1, 77, bufid)
      write(*,'(a,i0)') 'nrecv ', bufid
      call pvmfprobe(-1, 77, bufid)
      write(*,'(a,i0)') 'probe ', bufid
      call pvmftrecv(-1, 77, 0, 50000, bufid)
      write(*,'(a,i0)') 'trecv after 50 ms ', bufid

c     Buffers made, made active and freed by hand.
      call pvmfmkbuf(PVMDATADEFAULT, b)
      call pvmfsetsbuf(b, old)
      call pvmfgetsbuf(cur)
      write(*,'(a,l1)') 'setsbuf active ', cur .eq. b
      call pvmfpack(99, i4, 1, 1, info)
      write(*,'(a,i0)') 'pack of type 99 ', info
      call pvmffreebuf(b, info)
      write(*,'(a,i0)') 'freebuf ', info
      call pvmffreebuf(b, info)
      write(*,'(a,i0)') 'freebuf again ', info

      call getarg(0, self)
      call pvmfspawn(self, PVMTASKDEFAULT, '*', nkid, tids, numt)
      write(*,'(a,i0)') 'spawned ', numt
      if (numt .ne. nkid) stop 1
      call pvmfspawn('/nonexistent/fpvm-none', PVMTASKDEFAULT, '*',
     &     1, bad, numt)
      write(*,'(a,i0)') 'spawned a missing program ', numt
      call pvmfnotify(PVMTASKEXIT, 99, nkid, tids, info)
      write(*,'(a,i0)') 'notify ', info
      call pvmfpstat(tids(1), info)
      write(*,'(a,i0)') 'pstat of a live child ', info
      sawme = .false.
      sawkid = .false.
c     The first call gives the first task; numt gets their number.
      numt = -1
      call pvmftasks(0, numt, me, k, dtid, val, name, info)
      if (info .eq. 1) then
         do 5 i = 1, 1000
            if (me .eq. mytid) sawme = .true.
            if (me .eq. tids(1) .and. k .eq. mytid) sawkid = .true.
            if (i .ge. numt) go to 6
            call pvmftasks(0, numt, me, k, dtid, val, name, info)
    5    continue
      end if
    6 write(*,'(a,l1,1x,l1)') 'tasks list me, child 1 ', sawme, sawkid

c     Each child learns its index (tag 5).
      do 10 i = 1, nkid
         call pvmfinitsend(PVMDATADEFAULT, bufid)
         call pvmfpack(INTEGER4, i, 1, 1, info)
         call pvmfsend(tids(i), 5, info)
   10 continue

c     Every type, some strided, to child 1, which sends each back
c     changed (tag 1, answer tag 11).
      do 20 i = 1, 6
         i4(i) = 10 * i
   20 continue
      i2(1) = -3
      i2(2) = 7
      i2(3) = 30000
      i8(1) = 1234567_8
      i8(2) = 2
      r4(1) = 1.5
      r4(2) = -0.25
      r8(1) = 3.25d0
      r8(2) = 1.0d100
      r8(3) = -7.5d-3
      c8 = (1.5, -2.0)
      c16 = (0.5d0, 4.0d0)
      b1(1) = 'x'
      b1(2) = 'y'
      b1(3) = 'z'
      word = 'fortran'
      call pvmfinitsend(PVMDATADEFAULT, bufid)
      call pvmfpack(INTEGER4, i4, 3, 2, info)
      call pvmfpack(INTEGER2, i2, 3, 1, info)
      call pvmfpack(INTEGER8, i8, 2, 1, info)
      call pvmfpack(REAL4, r4, 2, 1, info)
      call pvmfpack(REAL8, r8, 3, 1, info)
      call pvmfpack(COMPLEX8, c8, 1, 1, info)
      call pvmfpack(COMPLEX16, c16, 1, 1, info)
      call pvmfpack(BYTE1, b1, 3, 1, info)
      call pvmfpack(STRING, word, 7, 1, info)
      write(*,'(a,i0)') 'last pack ', info
      call pvmfsend(tids(1), 1, info)
      write(*,'(a,i0)') 'send ', info

      call pvmfrecv(-1, 11, bufid)
      call pvmfgetrbuf(cur)
      write(*,'(a,l1)') 'getrbuf ', cur .eq. bufid
      call pvmfbufinfo(bufid, bytes, tag, src, info)
      write(*,'(a,i0,a,l1,a,i0)') 'answer tag ', tag,
     &     ' from child 1 ', src .eq. tids(1), ' info ', info
      do 30 i = 1, 6
         i4(i) = 0
   30 continue
      call pvmfunpack(INTEGER4, i4, 3, 2, info)
      call pvmfunpack(INTEGER2, i2, 3, 1, info)
      call pvmfunpack(INTEGER8, i8, 2, 1, info)
      call pvmfunpack(REAL4, r4, 2, 1, info)
      call pvmfunpack(REAL8, r8, 3, 1, info)
      call pvmfunpack(COMPLEX8, c8, 1, 1, info)
      call pvmfunpack(COMPLEX16, c16, 1, 1, info)
      call pvmfunpack(BYTE1, b1, 3, 1, info)
      word = ' '
      call pvmfunpack(STRING, word, 9, 1, info)
      write(*,'(a,i0)') 'last unpack ', info
      write(*,'(a,6(1x,i0))') 'integer4', i4
      write(*,'(a,3(1x,i0))') 'integer2', i2
      write(*,'(a,2(1x,i0))') 'integer8', i8
      write(*,'(a,2(1x,f8.3))') 'real4', r4
      write(*,'(a,3(1x,es12.5))') 'real8', r8
      write(*,'(a,2(1x,f8.3))') 'complex8', c8
      write(*,'(a,2(1x,f8.3))') 'complex16', c16
      write(*,'(a,3(1x,a1))') 'byte1', b1
      write(*,'(a,a,a)') 'string [', word, ']'
      call pvmfunpack(INTEGER4, i4, 1, 1, info)
      write(*,'(a,i0)') 'unpack past the end ', info
      call pvmfsetrbuf(0, old)
      call pvmfgetrbuf(cur)
      write(*,'(a,l1,1x,i0)') 'setrbuf 0 ', old .eq. bufid, cur
      call pvmfperror('fpvm_msg', info)
      write(*,'(a,i0)') 'perror ', info

c     psend and precv with child 2 (tags 3 and 4), outside the buffers.
      call pvmfgetsbuf(cur)
      dbuf(1) = 1.0d0
      dbuf(2) = 2.5d0
      dbuf(3) = -4.0d0
      dbuf(4) = 0.125d0
      call pvmfpsend(tids(2), 3, dbuf, 4, REAL8, info)
      write(*,'(a,i0)') 'psend ', info
      call pvmfprecv(tids(2), 4, dsum, 1, REAL8, atid, atag, alen, info)
c     alen: the length in bytes (8), as PVM 3.4.6 gives it.
      write(*,'(a,f8.3,a,i0,a,l1,a,i0)') 'precv ', dsum, ' tag ', atag,
     &     ' from child 2 ', atid .eq. tids(2), ' alen ', alen
      call pvmfgetsbuf(b)
      write(*,'(a,l1)') 'send buffer kept ', b .eq. cur

c     A multicast to the first three (tag 2): each answers (tag 12)
c     with its index, the value times the index, and 1 if it is among
c     its siblings.
      call pvmfinitsend(PVMRAW, bufid)
      call pvmfpack(INTEGER4, 21, 1, 1, info)
      call pvmfmcast(3, tids, 2, info)
      write(*,'(a,i0)') 'mcast ', info
      do 40 i = 1, nkid
         got(i) = 0
         sib(i) = 0
   40 continue
      do 50 k = 1, 3
         call pvmfrecv(-1, 12, bufid)
         call pvmfunpack(INTEGER4, i, 1, 1, info)
         call pvmfunpack(INTEGER4, val, 1, 1, info)
         if (i .ge. 1 .and. i .le. nkid) then
            got(i) = val
            call pvmfunpack(INTEGER4, sib(i), 1, 1, info)
         end if
   50 continue
      write(*,'(a,4(1x,i0))') 'mcast answers', (got(i), i = 1, 4)
      write(*,'(a,3(1x,i0))') 'siblings list me', (sib(i), i = 1, 3)

c     Children 4 and 5 wait for a message that never comes: kill one,
c     send SIGTERM to the other. The others are told to leave (tag 9).
c     Every exit is notified (tag 99).
      call pvmfkill(tids(4), info)
      write(*,'(a,i0)') 'kill ', info
      call pvmfsendsig(tids(5), 15, info)
      write(*,'(a,i0)') 'sendsig ', info
      call pvmfinitsend(PVMDATADEFAULT, bufid)
      do 60 i = 1, 3
         call pvmfsend(tids(i), 9, info)
   60 continue
      do 70 i = 1, nkid
         ended(i) = 0
   70 continue
      do 90 k = 1, nkid
         call pvmfrecv(-1, 99, bufid)
         call pvmfunpack(INTEGER4, val, 1, 1, info)
         do 80 i = 1, nkid
            if (tids(i) .eq. val) ended(i) = 1
   80    continue
   90 continue
      write(*,'(a,5(1x,i0))') 'exits notified', ended
      call pvmfpstat(tids(1), info)
      write(*,'(a,i0)') 'pstat of an ended child ', info
      call pvmfexit(info)
      write(*,'(a,i0)') 'exit ', info
      end

      subroutine child(ptid)
      include 'fpvm3.h'
      integer ptid
      integer idx, bufid, info, bytes, tag, src, i, val, me, nsib, k
      integer found
      integer*2 i2(3)
      integer i4(3)
      integer*8 i8(2)
      real r4(2)
      double precision r8(3), dbuf(4), dsum
      complex c8
      complex*16 c16
      character*1 b1(3)
      character*7 word
      integer atid, atag, alen

      call pvmfrecv(ptid, 5, bufid)
      call pvmfunpack(INTEGER4, idx, 1, 1, info)
      if (idx .eq. 2) then
         call pvmfprecv(ptid, 3, dbuf, 4, REAL8, atid, atag, alen, info)
         dsum = 0
         do 10 i = 1, 4
            dsum = dsum + dbuf(i)
   10    continue
         call pvmfpsend(ptid, 4, dsum, 1, REAL8, info)
      end if
      if (idx .ge. 4) then
         call pvmfrecv(ptid, 1000, bufid)
      end if

   20 continue
      call pvmfrecv(ptid, -1, bufid)
c     The parent gone (a failed run): end rather than ask again for ever.
      if (bufid .lt. 0) return
      call pvmfbufinfo(bufid, bytes, tag, src, info)
      if (tag .eq. 1) then
         call pvmfunpack(INTEGER4, i4, 3, 1, info)
         call pvmfunpack(INTEGER2, i2, 3, 1, info)
         call pvmfunpack(INTEGER8, i8, 2, 1, info)
         call pvmfunpack(REAL4, r4, 2, 1, info)
         call pvmfunpack(REAL8, r8, 3, 1, info)
         call pvmfunpack(COMPLEX8, c8, 1, 1, info)
         call pvmfunpack(COMPLEX16, c16, 1, 1, info)
         call pvmfunpack(BYTE1, b1, 3, 1, info)
         call pvmfunpack(STRING, word, 7, 1, info)
         do 30 i = 1, 3
            i4(i) = i4(i) + 1
            i2(i) = -i2(i)
   30    continue
         i8(1) = i8(1) * 2
         r4(1) = r4(1) * 2
         r8(2) = r8(2) / 4
         c8 = c8 * (0.0, 1.0)
         c16 = conjg(c16)
         b1(2) = 'Y'
         call pvmfinitsend(PVMDATADEFAULT, bufid)
         call pvmfpack(INTEGER4, i4, 3, 1, info)
         call pvmfpack(INTEGER2, i2, 3, 1, info)
         call pvmfpack(INTEGER8, i8, 2, 1, info)
         call pvmfpack(REAL4, r4, 2, 1, info)
         call pvmfpack(REAL8, r8, 3, 1, info)
         call pvmfpack(COMPLEX8, c8, 1, 1, info)
         call pvmfpack(COMPLEX16, c16, 1, 1, info)
         call pvmfpack(BYTE1, b1, 3, 1, info)
         call pvmfpack(STRING, word // '77', 9, 1, info)
         call pvmfsend(ptid, 11, info)
      else if (tag .eq. 2) then
         call pvmfunpack(INTEGER4, val, 1, 1, info)
         call pvmfinitsend(PVMDATADEFAULT, bufid)
         call pvmfpack(INTEGER4, idx, 1, 1, info)
         call pvmfpack(INTEGER4, val * idx, 1, 1, info)
         call pvmfmytid(me)
         found = 0
         call pvmfsiblings(nsib, -1, k)
         do 40 i = 0, nsib - 1
            call pvmfsiblings(nsib, i, k)
            if (k .eq. me) found = 1
   40    continue
         call pvmfpack(INTEGER4, found, 1, 1, info)
         call pvmfsend(ptid, 12, info)
      else if (tag .eq. 9) then
         call pvmfexit(info)
         return
      end if
      go to 20
      end
