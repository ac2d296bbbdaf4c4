! The channel ping-pong benchmark, in Fortran: an integer and 1 MiB of
! doubles (131072) to an echo process in a new process context and back,
! with the 1 MiB array sent by reference (zero copy, the default) and
! copied (fm_zerocopy_min(0)), against the raw RSR ping-pong over the same
! module (rsr_anchor.c) and Open MPI's MPI_Send/MPI_Recv from Fortran
! (fm_mpi_pingpong under mpirun), in one run. Prints medians, ratios and
! the goals.
! Usage: fm_bench_pingpong [iterations]   (NX_PROTOCOLS picks the module)
module pingpong_procs
  use fm
  use, intrinsic :: iso_c_binding
  implicit none
  integer, parameter :: NBIG = 131072

  interface
    real(c_double) function fm_bench_rsr(exe, n, iters, proto, len) &
        bind(c, name='fm_bench_rsr')
      import :: c_double, c_char, c_int
      character(kind=c_char) :: exe(*), proto(*)
      integer(c_int), value :: n, iters, len
    end function
  end interface

contains

  ! echo(in, out, nsmall, nrep_big, zc): sends back what it receives,
  ! arrays of zc bytes and more by reference.
  subroutine echo(args) bind(c)
    type(c_ptr), value :: args
    type(fm_inport) :: in
    type(fm_outport) :: out
    integer(c_int32_t) :: v, nsmall, nrep_big, i, zc
    real(c_double), allocatable :: x(:)
    call fm_arg_get(args, 1, in)
    call fm_arg_get(args, 2, out)
    call fm_arg_get(args, 3, nsmall)
    call fm_arg_get(args, 4, nrep_big)
    call fm_arg_get(args, 5, zc)
    call fm_zerocopy_min(zc)
    allocate (x(NBIG))
    do i = 1, nsmall
      call fm_receive(in, v)
      call fm_send(out, v)
    end do
    do i = 1, nrep_big
      call fm_receive(in, x)
      call fm_send(out, x)
    end do
  end subroutine

  real(c_double) function now_us()
    integer(8) :: c, rate
    call system_clock(c, rate)
    now_us = real(c, c_double)*1.0d6/real(rate, c_double)
  end function

  real(c_double) function median(t)
    real(c_double), intent(inout) :: t(:)
    integer :: i, j
    real(c_double) :: s
    do i = 2, size(t)
      s = t(i)
      j = i - 1
      do while (j >= 1)
        if (t(j) <= s) exit
        t(j + 1) = t(j)
        j = j - 1
      end do
      t(j + 1) = s
    end do
    median = t(size(t)/2 + 1)
  end function
end module

program fm_bench_pingpong
  use pingpong_procs
  implicit none
  type(fm_inport) :: ain, bin
  type(fm_outport) :: aout, bout
  type(fm_block) :: blk
  type(fm_args) :: a
  type(fm_place) :: place
  character(len=4096) :: self, dir
  character(len=64) :: arg, proto
  character(kind=c_char, len=16) :: cproto
  integer(c_int32_t) :: nsmall, nrep_big, v, i
  real(c_double), allocatable :: x(:), t(:)
  real(c_double) :: fm_small, fm_big, raw_small, raw_big, mpi_small, &
    mpi_big, fm_small_copy, fm_big_copy
  integer :: st, u, k

  call fm_register('echo', c_funloc(echo))
  call fm_init()
  nsmall = 2000
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) nsmall
  end if
  nrep_big = max(20, nsmall/20)
  call get_command_argument(0, self)
  k = index(self, '/', back=.true.)
  dir = '.'
  if (k > 0) dir = self(1:k - 1)

  ! The channel ping-pong: main -> echo on a, echo -> main on b; the 1 MiB
  ! array by reference, then copied.
  allocate (x(NBIG), t(max(nsmall, nrep_big)))
  x = 1.5d0
  call fm_round(32768, fm_small, fm_big)
  call fm_round(0, fm_small_copy, fm_big_copy)

  ! The raw RSR anchor over the same module.
  raw_small = fm_bench_rsr(trim(dir)//'/fm_rsr_echo'//c_null_char, 0, &
    nsmall, cproto, 16)
  raw_big = fm_bench_rsr(trim(dir)//'/fm_rsr_echo'//c_null_char, NBIG, &
    nrep_big, cproto, 16)
  proto = ''
  do k = 1, 16
    if (cproto(k:k) == c_null_char) exit
    proto(k:k) = cproto(k:k)
  end do

  ! Open MPI from Fortran, when built and mpirun runs.
  mpi_small = -1
  mpi_big = -1
  ! (The ALLOW_RUN_AS_ROOT pair only matters when run as root, as in CI.)
  call execute_command_line('OMPI_ALLOW_RUN_AS_ROOT=1 '// &
    'OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 2 '//trim(dir)// &
    '/fm_mpi_pingpong '//trim(arg_or(nsmall))//' > fm_mpi_pingpong.out 2>&1', &
    exitstat=st)
  open (newunit=u, file='fm_mpi_pingpong.out', status='old', iostat=k)
  if (k == 0) then
    if (st == 0) read (u, *, iostat=st) mpi_small, mpi_big
    if (st /= 0) mpi_big = -1
    close (u, status='delete')
  end if

  write (*, '(a,a)') 'fm channel ping-pong (Fortran) vs raw RSR over ', &
    trim(proto)
  write (*, '(a)') 'size        fm us  raw RSR us   fm/raw   goal'
  write (*, '(a,f12.2,f12.2,f9.2,a,a)') '8 B  ', fm_small, raw_small, &
    fm_small/raw_small, '   <= 1.20: ', verdict(fm_small/raw_small <= 1.2d0)
  write (*, '(a,f12.2,f12.2,f9.2,a,a)') '1 MiB', fm_big, raw_big, &
    fm_big/raw_big, '   <= 1.20: ', verdict(fm_big/raw_big <= 1.2d0)
  write (*, '(a,f12.2,f12.2,f9.2,a)') '1 MiB*', &
    fm_big_copy, raw_big, fm_big_copy/raw_big, '   (comparison)'
  write (*, '(a)') '(1 MiB*: the array copied into the message, fm_zerocopy_min(0))'
  if (mpi_big > 0) then
    write (*, '(a)') 'vs Open MPI MPI_Send/MPI_Recv from Fortran (mpirun -np 2): fm us, MPI us, fm/MPI'
    write (*, '(a,f12.2,f12.2,f9.2,a)') '8 B  ', fm_small, mpi_small, &
      fm_small/mpi_small, '   (no goal)'
    write (*, '(a,f12.2,f12.2,f9.2,a,a)') '1 MiB', fm_big, mpi_big, &
      fm_big/mpi_big, '   <= 1.00: ', verdict(fm_big/mpi_big <= 1.0d0)
  else
    write (*, '(a)') 'MPI row skipped: fm_mpi_pingpong not built (no mpifort)'// &
      ' or mpirun failed'
  end if
  call fm_finalize()

contains

  ! One channel ping-pong round against a new echo process: medians of
  ! the integer and of the 1 MiB array, arrays of zc bytes and more by
  ! reference (0: copied) on both sides.
  subroutine fm_round(zc, small, big)
    integer, intent(in) :: zc
    real(c_double), intent(out) :: small, big
    real(c_double) :: t0
    call fm_zerocopy_min(zc)
    call fm_channel(ain, aout)
    call fm_channel(bin, bout)
    place%kind = FM_PLACE_PROCESS
    call fm_processes_begin(blk)
    call fm_args_create(a)
    call fm_arg(a, ain)
    call fm_arg(a, bout)
    call fm_arg(a, nsmall)
    call fm_arg(a, nrep_big)
    call fm_arg(a, int(zc, c_int32_t))
    call fm_processcall(blk, 'echo', a, place)
    do i = 1, nsmall
      t0 = now_us()
      call fm_send(aout, i)
      call fm_receive(bin, v)
      t(i) = now_us() - t0
      if (v /= i) error stop 'fm_bench_pingpong: wrong echo'
    end do
    small = median(t(1:nsmall))
    do i = 1, nrep_big
      t0 = now_us()
      call fm_send(aout, x)
      call fm_receive(bin, x)
      t(i) = now_us() - t0
    end do
    big = median(t(1:nrep_big))
    call fm_processes_end(blk)
  end subroutine

  ! A goal's outcome in this run, as bench_ccxx prints it.
  function verdict(ok) result(s)
    logical, intent(in) :: ok
    character(len=6) :: s
    s = 'MISSED'
    if (ok) s = 'met'
  end function

  function arg_or(n) result(s)
    integer(c_int32_t), intent(in) :: n
    character(len=16) :: s
    write (s, '(i0)') n
  end function
end program
