! fpvm3.h: the constants of PVM 3.4's Fortran interface for nexus-pvm
! (libnxfpvm, docs/pvm.md), with the names and values of PVM 3.4.6's
! fpvm3.h. Written so that it can be included both by fixed-form
! (.f) and by free-form (.f90) sources: comments start with '!',
! statements start in column 7 and no line is continued.

!     Tells a program which library it was compiled against.
      integer NEXUSPVM
      parameter( NEXUSPVM = 1 )

!     pvmfspawn flags, and their old names.
      integer PVMTASKDEFAULT, PVMTASKHOST, PVMTASKARCH, PVMTASKDEBUG
      integer PVMTASKTRACE, PVMMPPFRONT, PVMHOSTCOMPL, PVMNOSPAWNPARENT
      integer PVMHOST, PVMARCH, PVMDEBUG, PVMTRACE
      parameter( PVMTASKDEFAULT = 0, PVMTASKHOST = 1, PVMTASKARCH = 2 )
      parameter( PVMTASKDEBUG = 4, PVMTASKTRACE = 8, PVMMPPFRONT = 16 )
      parameter( PVMHOSTCOMPL = 32, PVMNOSPAWNPARENT = 64 )
      parameter( PVMHOST = 1, PVMARCH = 2, PVMDEBUG = 4, PVMTRACE = 8 )

!     Encodings for pvmfinitsend and pvmfmkbuf, and their old names.
      integer PVMDATADEFAULT, PVMDATARAW, PVMDATAINPLACE, PVMDATATRACE
      integer PVMDEFAULT, PVMRAW, PVMINPLACE
      parameter( PVMDATADEFAULT = 0, PVMDATARAW = 1 )
      parameter( PVMDATAINPLACE = 2, PVMDATATRACE = 4 )
      parameter( PVMDEFAULT = 0, PVMRAW = 1, PVMINPLACE = 2 )

!     pvmfnotify kinds.
      integer PVMTASKEXIT, PVMHOSTDELETE, PVMHOSTADD, PVMROUTEADD
      integer PVMROUTEDELETE, PVMNOTIFYCANCEL
      parameter( PVMTASKEXIT = 1, PVMHOSTDELETE = 2, PVMHOSTADD = 3 )
      parameter( PVMROUTEADD = 4, PVMROUTEDELETE = 5 )
      parameter( PVMNOTIFYCANCEL = 256 )

!     Data types for pvmfpack, pvmfunpack, pvmfpsend, pvmfprecv and the
!     collectives (the values of PVM_STR ... PVM_LONG in pvm3.h).
      integer STRING, BYTE1, INTEGER2, INTEGER4, INTEGER8
      integer REAL4, COMPLEX8, REAL8, COMPLEX16
      parameter( STRING = 0, BYTE1 = 1, INTEGER2 = 2, INTEGER4 = 3 )
      parameter( REAL4 = 4, COMPLEX8 = 5, REAL8 = 6, COMPLEX16 = 7 )
      parameter( INTEGER8 = 8 )

!     pvmfsetopt and pvmfgetopt options.
      integer PVMROUTE, PVMDEBUGMASK, PVMAUTOERR
      integer PVMOUTPUTTID, PVMOUTPUTCODE, PVMRESVTIDS
      integer PVMTRACETID, PVMTRACECODE, PVMTRACEBUFFER
      integer PVMTRACEOPTIONS, PVMFRAGSIZE, PVMSHOWTIDS, PVMNORESET
      integer PVMSOUTPUTTID, PVMSOUTPUTCODE, PVMSTRACETID
      integer PVMSTRACECODE, PVMSTRACEBUFFER, PVMSTRACEOPTIONS
      integer PVMOUTPUTCTX, PVMTRACECTX, PVMSOUTPUTCTX, PVMSTRACECTX
      integer PVMPOLLTYPE, PVMPOLLTIME
      parameter( PVMROUTE = 1, PVMDEBUGMASK = 2, PVMAUTOERR = 3 )
      parameter( PVMOUTPUTTID = 4, PVMOUTPUTCODE = 5, PVMTRACETID = 6 )
      parameter( PVMTRACECODE = 7, PVMTRACEBUFFER = 8 )
      parameter( PVMTRACEOPTIONS = 9, PVMFRAGSIZE = 10 )
      parameter( PVMRESVTIDS = 11, PVMSOUTPUTTID = 12 )
      parameter( PVMSOUTPUTCODE = 13, PVMSTRACETID = 14 )
      parameter( PVMSTRACECODE = 15, PVMSTRACEBUFFER = 16 )
      parameter( PVMSTRACEOPTIONS = 17, PVMSHOWTIDS = 18 )
      parameter( PVMPOLLTYPE = 19, PVMPOLLTIME = 20 )
      parameter( PVMOUTPUTCTX = 21, PVMTRACECTX = 22 )
      parameter( PVMSOUTPUTCTX = 23, PVMSTRACECTX = 24 )
      parameter( PVMNORESET = 25 )

!     Values of the trace, poll and route options.
      integer PVMTRACEFULL, PVMTRACETIME, PVMTRACECOUNT
      integer PVMPOLLCONSTANT, PVMPOLLSLEEP
      integer PVMDONTROUTE, PVMALLOWDIRECT, PVMROUTEDIRECT
      parameter( PVMTRACEFULL = 1, PVMTRACETIME = 2, PVMTRACECOUNT = 3 )
      parameter( PVMPOLLCONSTANT = 1, PVMPOLLSLEEP = 2 )
      parameter( PVMDONTROUTE = 1, PVMALLOWDIRECT = 2 )
      parameter( PVMROUTEDIRECT = 3 )

!     Mailbox flags.
      integer PVMMBOXDEFAULT, PVMMBOXPERSISTENT, PVMMBOXMULTIINSTANCE
      integer PVMMBOXOVERWRITABLE, PVMMBOXFIRSTAVAIL
      integer PVMMBOXREADANDDELETE, PVMMBOXWAITFORINFO
      parameter( PVMMBOXDEFAULT = 0, PVMMBOXPERSISTENT = 1 )
      parameter( PVMMBOXMULTIINSTANCE = 2, PVMMBOXOVERWRITABLE = 4 )
      parameter( PVMMBOXFIRSTAVAIL = 8, PVMMBOXREADANDDELETE = 16 )
      parameter( PVMMBOXWAITFORINFO = 32 )

!     The values returned in info (and in place of a result).
      integer PvmOk, PvmSysErr, PvmBadParam, PvmMismatch
      integer PvmNoData, PvmNoHost, PvmNoFile, PvmNoMem
      integer PvmBadMsg, PvmNoBuf, PvmNoSuchBuf
      integer PvmNullGroup, PvmDupGroup, PvmNoGroup
      integer PvmNotInGroup, PvmNoInst, PvmHostFail, PvmNoParent
      integer PvmNotImpl, PvmDSysErr, PvmBadVersion, PvmOutOfRes
      integer PvmDupHost, PvmCantStart, PvmAlready, PvmNoTask
      integer PvmNoEntry, PvmDupEntry, PvmOverflow, PvmDenied
      integer PvmNotFound, PvmExists, PvmHostrNMstr, PvmParentNotSet
      integer PvmIPLoopback
      parameter( PvmOk = 0, PvmBadParam = -2, PvmMismatch = -3 )
      parameter( PvmOverflow = -4, PvmNoData = -5, PvmNoHost = -6 )
      parameter( PvmNoFile = -7, PvmDenied = -8, PvmNoMem = -10 )
      parameter( PvmBadMsg = -12, PvmSysErr = -14, PvmNoBuf = -15 )
      parameter( PvmNoSuchBuf = -16, PvmNullGroup = -17 )
      parameter( PvmDupGroup = -18, PvmNoGroup = -19 )
      parameter( PvmNotInGroup = -20, PvmNoInst = -21 )
      parameter( PvmHostFail = -22, PvmNoParent = -23 )
      parameter( PvmNotImpl = -24, PvmDSysErr = -25 )
      parameter( PvmBadVersion = -26, PvmOutOfRes = -27 )
      parameter( PvmDupHost = -28, PvmCantStart = -29 )
      parameter( PvmAlready = -30, PvmNoTask = -31 )
      parameter( PvmNotFound = -32, PvmExists = -33 )
      parameter( PvmHostrNMstr = -34, PvmParentNotSet = -35 )
      parameter( PvmIPLoopback = -36 )
!     Old names of PvmNotFound and PvmExists.
      parameter( PvmNoEntry = -32, PvmDupEntry = -33 )
