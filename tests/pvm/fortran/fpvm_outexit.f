c     pvmfcatchout with a child whose lines gfortran writes only when the
c     program ends: its stdout is a pipe, so gfortran buffers it, and the
c     lines go out at the end, after pvmfexit. PVM's pvmd forwards a
c     task's output until its process ends, so they come with the
c     "[t<tid>]" prefix before the child's EOF. The parent writes its own
c     lines out (flush) before it spawns and after its pvmfexit, which
c     returns once the child's output is written: the order is defined. The
c     same source builds against Debian's libfpvm3 and against
c     nexus-fpvm; both must print tests/pvm/expected/fpvm_outexit.txt
c     (with the tid numbered by the runner: tids differ from run to run).
      program fpvmoutexit
      include 'fpvm3.h'
      integer mytid, ptid, info, numt, tids(1)
      character*512 self
      call pvmfmytid(mytid)
      if (mytid .lt. 0) stop 77
      call pvmfparent(ptid)
      if (ptid .ne. PvmNoParent) then
         write(*,'(a)') 'the child, before pvmfexit'
         write(*,'(a,i0)') 'and another line, ', 42
         call pvmfexit(info)
         write(*,'(a)') 'the child, after pvmfexit'
         stop
      end if
      call pvmfcatchout(1, info)
      write(*,'(a,i0)') 'catchout ', info
      flush(6)
c     The caught lines come while the parent runs on (BEGIN may come
c     before pvmfspawn returns, or after): it writes nothing more until
c     its pvmfexit has returned, with every caught line written.
      call getarg(0, self)
      call pvmfspawn(self, PVMTASKDEFAULT, '*', 1, tids, numt)
      call pvmfexit(info)
      write(*,'(a,i0)') 'spawned ', numt
      write(*,'(a,i0)') 'exit ', info
      if (numt .ne. 1) stop 1
      end
