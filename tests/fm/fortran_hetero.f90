! The x86-64 end of the fm heterogeneity test (tests/fm/hetero.sh): a
! big-endian peer (hetero_fm_peer.c, s390x under qemu) sends an
! integer(int64) and a complex(8) array, received here into strided
! sections; they go back from those sections to the peer, which checks
! them against what it sent. Usage: fm_fortran_hetero PEER-COMMAND...
program fortran_hetero
  use fm
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: int64
  implicit none
  interface
    integer(c_int) function fmh_start(out) bind(c, name='fmh_start')
      import :: c_int, fm_outport
      type(fm_outport) :: out
    end function
    integer(c_int) function fmh_finish() bind(c, name='fmh_finish')
      import :: c_int
    end function
  end interface
  type(fm_inport) :: in
  type(fm_outport) :: out, back
  integer(int64) :: big(6, 8), iv(12)
  complex(8) :: z(4, 8), zv(8)
  integer :: i, k, verdict, st, fails
  logical :: mask_i(6, 8), mask_z(4, 8)

  call fm_init()
  fails = 0
  call fm_channel(in, out)
  st = fmh_start(out)
  if (st /= 0) then
    write (0, '(a,a)') 'fortran_hetero: starting the peer: ', fm_errstr(st)
    error stop 1
  end if
  iv = [(int(i, int64)*1000000000007_int64*merge(-1, 1, mod(i - 1, 2) == 1), i=1, 12)]
  zv = [(cmplx(k + 0.25d0, -3d0*k - 0.5d0, 8), k=0, 7)]

  big = -7
  call fm_receive(in, big(1:6:2, 2:8:2))
  mask_i = .false.
  mask_i(1:6:2, 2:8:2) = .true.
  if (any(pack(big, mask_i) /= iv) .or. any(pack(big, .not. mask_i) /= -7)) then
    write (0, '(a)') 'fortran_hetero: the int64 array from the s390x peer is wrong'
    fails = fails + 1
  end if
  z = (0d0, 0d0)
  call fm_receive(in, z(1:3:2, 1:8:2))
  mask_z = .false.
  mask_z(1:3:2, 1:8:2) = .true.
  if (any(pack(z, mask_z) /= zv) .or. any(pack(z, .not. mask_z) /= (0d0, 0d0))) then
    write (0, '(a)') 'fortran_hetero: the complex(8) array from the s390x peer is wrong'
    fails = fails + 1
  end if

  call fm_receive(in, back)
  call fm_send(back, big(1:6:2, 2:8:2))
  call fm_send(back, z(1:3:2, 1:8:2))
  call fm_receive(in, verdict)
  if (verdict /= 0) then
    write (0, '(a,i0,a)') 'fortran_hetero: the peer found the sections wrong (', verdict, ')'
    fails = fails + 1
  end if
  call fm_receive(in, i, st)
  if (st /= FM_END) fails = fails + 1
  if (fmh_finish() /= 0) then
    write (0, '(a)') 'fortran_hetero: the peer did not end cleanly'
    fails = fails + 1
  end if
  call fm_finalize()
  if (fails > 0) error stop 1
  write (*, '(a)') 'fortran_hetero: ok: int64 and complex(8) sections to and from a big-endian peer'
end program
