! The channel ping-pong benchmark, in Fortran: an integer, 1 MiB of
! doubles (131072) and 4 MiB (524288) to an echo process in a new process
! context and back, with the arrays sent by reference (zero copy, the
! default; 1 MiB also copied, fm_zerocopy_min(0)) and received where they
! arrive (receive placement), against the raw RSR ping-pong over the same
! module (rsr_anchor.c, with its peer rsr_echo.c: copied in and out) and
! Open MPI's MPI_Send/MPI_Recv from Fortran (fm_mpi_pingpong under mpirun),
! with its defaults (shared memory) and on the module's transport (ucx:
! pml ucx on any transport; tcp: the tcp BTL on lo; ofi: the ofi MTL), in
! one run. Each is timed as the best of `reps` short batches of round trips
! (per round trip), and the channel's and the raw RSR's batches alternate,
! so a machine whose load changes (two cores shared with builds) weighs on
! both alike and one clean batch of each is found. Prints the times, the
! ratios and the goals.
!
! Usage: fm_bench_pingpong [reps]   (default 15 a round; NX_PROTOCOLS picks
!                                    the module)
!        fm_bench_pingpong --profile PATH N
! --profile runs N round trips of one path after the same warm-up, and
! nothing else, for an instruction count per round trip: PATH is fm8 (the
! integer over the channel), raw8 (the raw RSR's), fm1m (1 MiB by
! reference), fm1mcopy (copied) or raw1m. The count per round trip is the
! difference of two runs over the difference of their N, e.g.
!   NX_PROTOCOLS=tcp,local valgrind --tool=callgrind --trace-children=yes \
!     fm_bench_pingpong --profile fm8 2000     (and 0)
module pingpong_procs
  use fm
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: output_unit, error_unit
  implicit none
  integer, parameter :: NBIG = 131072, NBIG4 = 524288
  ! What the echo process does next: a command is echoed (untimed), then
  ! that many round trips follow.
  integer(c_int32_t), parameter :: CMD_QUIT = 0, CMD_SMALL = 1, CMD_BIG = 2, &
    CMD_BIG4 = 3

  interface
    integer(c_int) function fm_bench_rsr_start(exe, nmax, proto, len) &
        bind(c, name='fm_bench_rsr_start')
      import :: c_char, c_int
      character(kind=c_char) :: exe(*), proto(*)
      integer(c_int), value :: nmax, len
    end function
    real(c_double) function fm_bench_rsr_batch(n, iters) &
        bind(c, name='fm_bench_rsr_batch')
      import :: c_double, c_int
      integer(c_int), value :: n, iters
    end function
    subroutine fm_bench_rsr_stop() bind(c, name='fm_bench_rsr_stop')
    end subroutine
    subroutine fm_bench_pin(all) bind(c, name='fm_bench_pin')
      import :: c_int
      integer(c_int), value :: all
    end subroutine
  end interface

contains

  ! echo(in, out): runs the commands that arrive on `in`: [kind, n, zc],
  ! echoed, then n integers (CMD_SMALL) or n arrays (CMD_BIG: 1 MiB,
  ! CMD_BIG4: 4 MiB) sent back, arrays of zc bytes and more by reference.
  subroutine echo(args) bind(c)
    type(c_ptr), value :: args
    type(fm_inport) :: in
    type(fm_outport) :: out
    integer(c_int32_t) :: cmd(3), v, i
    real(c_double), allocatable :: x(:), x4(:)
    call fm_arg_get(args, 1, in)
    call fm_arg_get(args, 2, out)
    allocate (x(NBIG), x4(NBIG4))
    do
      call fm_receive(in, cmd)
      call fm_send(out, cmd)
      if (cmd(1) == CMD_QUIT) exit
      call fm_zerocopy_min(cmd(3))
      if (cmd(1) == CMD_SMALL) then
        do i = 1, cmd(2)
          call fm_receive(in, v)
          call fm_send(out, v)
        end do
      else if (cmd(1) == CMD_BIG) then
        do i = 1, cmd(2)
          call fm_receive(in, x)
          call fm_send(out, x)
        end do
      else
        do i = 1, cmd(2)
          call fm_receive(in, x4)
          call fm_send(out, x4)
        end do
      end if
    end do
  end subroutine

  real(c_double) function now_us()
    integer(8) :: c, rate
    call system_clock(c, rate)
    now_us = real(c, c_double)*1.0d6/real(rate, c_double)
  end function

  ! Reads the command line, before fm_init starts anything: reps, or path
  ! and nprof (--profile). --help prints the usage and stops (status 0);
  ! an argument it does not take is named on stderr with the usage, and
  ! the program stops with status 2 (a list-directed read of it would stop
  ! with a Fortran runtime error). This program started again by fm as its
  ! echo process carries fm's --fm-child, which is fm_init's to read.
  subroutine read_args(reps, path, nprof)
    integer(c_int32_t), intent(inout) :: reps, nprof
    character(len=*), intent(inout) :: path
    character(len=256) :: arg
    integer :: i, n
    n = command_argument_count()
    do i = 1, n
      call get_command_argument(i, arg)
      if (arg == '--fm-child') return
    end do
    if (n == 0) return
    call get_command_argument(1, arg)
    if (arg == '--help' .or. arg == '-h') then
      call print_usage(output_unit)
      stop
    end if
    if (arg == '--profile') then
      if (n /= 3) call bad_arg(arg, 'needs PATH and N')
      call get_command_argument(2, path)
      select case (path)
      case ('fm8', 'raw8', 'fm1m', 'fm1mcopy', 'raw1m')
      case default
        call bad_arg(path, 'not a path (fm8, raw8, fm1m, fm1mcopy, raw1m)')
      end select
      call get_command_argument(3, arg)
      nprof = count_arg(arg, 0)
    else
      if (n > 1) then
        call get_command_argument(2, arg)
        call bad_arg(arg, 'one argument too many')
      end if
      reps = count_arg(arg, 1)
    end if
  end subroutine

  ! The count `arg` (digits only, at least `least`), else bad_arg.
  integer(c_int32_t) function count_arg(arg, least)
    character(len=*), intent(in) :: arg
    integer, intent(in) :: least
    integer :: ios
    count_arg = -1
    if (len_trim(arg) > 0 .and. len_trim(arg) < 10 .and. &
        verify(trim(arg), '0123456789') == 0) &
      read (arg, *, iostat=ios) count_arg
    if (count_arg < least) then
      if (arg(1:1) == '-') call bad_arg(arg, '')
      call bad_arg(arg, 'not a count')
    end if
  end function

  subroutine print_usage(unit)
    integer, intent(in) :: unit
    write (unit, '(a)') &
      'usage: fm_bench_pingpong [REPS]', &
      '       fm_bench_pingpong --profile fm8|raw8|fm1m|fm1mcopy|raw1m N', &
      '  The fm channel ping-pong (an integer, and 1 MiB of doubles by', &
      '  reference and copied) to an echo process, beside the raw RSR', &
      '  ping-pong and Open MPI (fm_mpi_pingpong under mpirun), in one run;', &
      '  prints the times, the ratios and the goals. NX_PROTOCOLS picks the', &
      '  module.', &
      '  REPS        batches of each a round (default 15)', &
      '  --profile   N round trips of one path alone, for instruction counts'
  end subroutine

  ! Names `arg` on stderr (with `why`; blank: an unknown argument) and the
  ! usage, and stops with status 2.
  subroutine bad_arg(arg, why)
    character(len=*), intent(in) :: arg, why
    if (why == '') then
      write (error_unit, '(3a)') "fm_bench_pingpong: unknown argument '", &
        trim(arg), "'"
    else
      write (error_unit, '(4a)') 'fm_bench_pingpong: ', trim(arg), ': ', why
    end if
    call print_usage(error_unit)
    stop 2, quiet=.true.
  end subroutine
end module

program fm_bench_pingpong
  use pingpong_procs
  implicit none
  ! Round trips per batch: about a millisecond each.
  integer, parameter :: NSMALL = 200, NREP_BIG = 4, NREP_BIG4 = 2, &
    ZC = 32768, ROUNDS = 3
  type(fm_inport) :: ain, bin
  type(fm_outport) :: aout, bout
  type(fm_block) :: blk
  type(fm_args) :: a
  type(fm_place) :: place
  character(len=4096) :: self, dir
  character(len=64) :: proto, path
  character(kind=c_char, len=16) :: cproto
  integer(c_int32_t) :: reps, nprof
  real(c_double), allocatable :: x(:), x4(:)
  real(c_double) :: fm_small, fm_big, raw_small, raw_big, mpi_small, &
    mpi_big, fm_big_copy, t, fm_big4, raw_big4, mpi_big4, tr_small, &
    tr_big, tr_big4
  character(len=128) :: mca
  integer :: k, r

  reps = 15
  path = ''
  nprof = 0
  call read_args(reps, path, nprof)
  ! The ping side on one CPU, the echo processes (this program again, and
  ! rsr_echo) on another, as mpirun binds its two ranks; before fm_init
  ! starts threads, which keep the CPU.
  call fm_bench_pin(0)
  call fm_register('echo', c_funloc(echo))
  call fm_init()
  reps = max(reps, 1)
  call get_command_argument(0, self)
  k = index(self, '/', back=.true.)
  dir = '.'
  if (k > 0) dir = self(1:k - 1)
  allocate (x(NBIG), x4(NBIG4))
  x = 1.5d0
  x4 = 2.5d0

  fm_small = huge(t)
  raw_small = huge(t)
  fm_big = huge(t)
  fm_big_copy = huge(t)
  raw_big = huge(t)
  mpi_small = huge(t)
  mpi_big = huge(t)
  fm_big4 = huge(t)
  raw_big4 = huge(t)
  mpi_big4 = huge(t)
  tr_small = huge(t)
  tr_big = huge(t)
  tr_big4 = huge(t)
  if (path /= '') then
    call start_peers()
    select case (path)
    case ('fm8')
      if (nprof > 0) t = fm_batch(CMD_SMALL, nprof, ZC)
    case ('raw8')
      if (nprof > 0) t = raw_batch(0, nprof)
    case ('fm1m')
      if (nprof > 0) t = fm_batch(CMD_BIG, nprof, ZC)
    case ('fm1mcopy')
      if (nprof > 0) t = fm_batch(CMD_BIG, nprof, 0)
    case ('raw1m')
      if (nprof > 0) t = raw_batch(NBIG, nprof)
    case default
      error stop 'fm_bench_pingpong: --profile fm8|raw8|fm1m|fm1mcopy|raw1m N'
    end select
    call stop_peers()
    call fm_finalize()
    stop
  end if

  ! ROUNDS rounds of: the channel's and the raw RSR's batches, alternating,
  ! then Open MPI's (a job of its own, while the peers wait idle), so each
  ! anchor is measured in the same stretches of the machine's load as the
  ! channel.
  ! (The peers live through every round: nexus reports the end of the raw
  ! RSR's peer to fm as a death, which would fail the next receive.)
  call start_peers()
  ! Open MPI on the transport the module uses, beside its defaults.
  select case (proto)
  case ('ucx')
    ! (Open MPI 4.1 takes UCX only on its listed InfiniBand and GPU
    ! transports unless told otherwise.)
    mca = '--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any'
  case ('tcp')
    mca = '--mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo'
  case ('ofi')
    mca = '--mca pml cm --mca mtl ofi'
  case default
    mca = ''
    tr_big = -1
  end select
  do k = 1, ROUNDS
    do r = 1, reps
      fm_small = min(fm_small, fm_batch(CMD_SMALL, NSMALL, ZC))
      raw_small = min(raw_small, raw_batch(0, NSMALL))
      fm_big = min(fm_big, fm_batch(CMD_BIG, NREP_BIG, ZC))
      fm_big_copy = min(fm_big_copy, fm_batch(CMD_BIG, NREP_BIG, 0))
      raw_big = min(raw_big, raw_batch(NBIG, NREP_BIG))
      fm_big4 = min(fm_big4, fm_batch(CMD_BIG4, NREP_BIG4, ZC))
      raw_big4 = min(raw_big4, raw_batch(NBIG4, NREP_BIG4))
    end do
    if (mpi_big > 0) call mpi_round('', mpi_small, mpi_big, mpi_big4)
    if (tr_big > 0) call mpi_round(mca, tr_small, tr_big, tr_big4)
  end do
  call stop_peers()

  write (*, '(a,i0,a,i0,a,i0,a,i0,a,i0,a)') 'us per round trip, the best of ', &
    ROUNDS, 'x', reps, ' alternating batches (', NSMALL, &
    ' round trips at 8 B, ', NREP_BIG, ' at 1 MiB, ', NREP_BIG4, ' at 4 MiB)'
  write (*, '(a,a)') 'fm channel ping-pong (Fortran) vs raw RSR over ', &
    trim(proto)
  write (*, '(a)') 'size        fm us  raw RSR us   fm/raw   goal'
  write (*, '(a,f12.2,f12.2,f9.2,a,a)') '8 B  ', fm_small, raw_small, &
    fm_small/raw_small, '   <= 1.20: ', verdict(fm_small/raw_small <= 1.2d0)
  write (*, '(a,f12.2,f12.2,f9.2,a,a)') '1 MiB', fm_big, raw_big, &
    fm_big/raw_big, '   <= 1.20: ', verdict(fm_big/raw_big <= 1.2d0)
  write (*, '(a,f12.2,f12.2,f9.2,a)') '1 MiB*', &
    fm_big_copy, raw_big, fm_big_copy/raw_big, '   (comparison)'
  write (*, '(a,f12.2,f12.2,f9.2,a)') '4 MiB', fm_big4, raw_big4, &
    fm_big4/raw_big4, '   (no goal)'
  write (*, '(a)') '(1 MiB*: the array copied into the message, fm_zerocopy_min(0))'
  if (mpi_big > 0 .and. mpi_big < huge(t)) then
    write (*, '(a)') 'vs Open MPI MPI_Send/MPI_Recv from Fortran (mpirun -np 2, '// &
      'its defaults): fm us, MPI us, fm/MPI'
    write (*, '(a,f12.2,f12.2,f9.2,a)') '8 B  ', fm_small, mpi_small, &
      fm_small/mpi_small, '   (no goal)'
    write (*, '(a,f12.2,f12.2,f9.2,a,a)') '1 MiB', fm_big, mpi_big, &
      fm_big/mpi_big, '   <= 1.00: ', verdict(fm_big/mpi_big <= 1.0d0)
    write (*, '(a,f12.2,f12.2,f9.2,a)') '4 MiB', fm_big4, mpi_big4, &
      fm_big4/mpi_big4, '   (no goal)'
  else
    write (*, '(a)') 'MPI row skipped: fm_mpi_pingpong not built (no mpifort)'// &
      ' or mpirun failed'
  end if
  if (tr_big > 0 .and. tr_big < huge(t)) then
    write (*, '(3a)') 'vs Open MPI on the same transport (', trim(mca), &
      '): fm us, MPI us, fm/MPI'
    write (*, '(a,f12.2,f12.2,f9.2,a)') '8 B  ', fm_small, tr_small, &
      fm_small/tr_small, '   (no goal)'
    if (proto == 'ucx') then
      write (*, '(a,f12.2,f12.2,f9.2,a,a)') '1 MiB', fm_big, tr_big, &
        fm_big/tr_big, '   <= 1.00: ', verdict(fm_big/tr_big <= 1.0d0)
    else
      write (*, '(a,f12.2,f12.2,f9.2,a,a)') '1 MiB', fm_big, tr_big, &
        fm_big/tr_big, '   <= 1.20: ', verdict(fm_big/tr_big <= 1.2d0)
    end if
    write (*, '(a,f12.2,f12.2,f9.2,a)') '4 MiB', fm_big4, tr_big4, &
      fm_big4/tr_big4, '   (no goal)'
  else if (len_trim(mca) > 0) then
    write (*, '(3a)') 'Open MPI on the same transport (', trim(mca), &
      ') skipped: mpirun failed'
  end if
  call fm_finalize()

contains

  ! Microseconds per channel round trip, the mean of a batch of n: integers
  ! (CMD_SMALL) or the 1 MiB array (CMD_BIG), arrays of zc bytes and more
  ! by reference (0: copied) on both sides.
  real(c_double) function fm_batch(kind, n, zc)
    integer(c_int32_t), intent(in) :: kind
    integer, intent(in) :: n, zc
    integer(c_int32_t) :: cmd(3), v, i
    real(c_double) :: t0
    call fm_zerocopy_min(zc)
    cmd = [kind, int(n, c_int32_t), int(zc, c_int32_t)]
    call fm_send(aout, cmd)
    call fm_receive(bin, cmd)
    t0 = now_us()
    if (kind == CMD_SMALL) then
      do i = 1, n
        call fm_send(aout, i)
        call fm_receive(bin, v)
        if (v /= i) error stop 'fm_bench_pingpong: wrong echo'
      end do
    else if (kind == CMD_BIG) then
      do i = 1, n
        call fm_send(aout, x)
        call fm_receive(bin, x)
      end do
    else
      do i = 1, n
        call fm_send(aout, x4)
        call fm_receive(bin, x4)
      end do
    end if
    fm_batch = (now_us() - t0)/n
  end function

  real(c_double) function raw_batch(n, iters)
    integer, intent(in) :: n, iters
    raw_batch = fm_bench_rsr_batch(n, iters)
    if (raw_batch < 0) error stop 'fm_bench_pingpong: raw RSR ping-pong failed'
  end function

  ! Both peers at once: the channel's echo process (main -> echo on a,
  ! echo -> main on b) and the raw RSR's; then the warm-up (connections,
  ! buffer caches, first touches), the same whatever comes next.
  subroutine start_peers()
    real(c_double) :: t
    integer :: k
    call fm_channel(ain, aout)
    call fm_channel(bin, bout)
    place%kind = FM_PLACE_PROCESS
    call fm_processes_begin(blk)
    call fm_args_create(a)
    call fm_arg(a, ain)
    call fm_arg(a, bout)
    call fm_processcall(blk, 'echo', a, place)
    if (fm_bench_rsr_start(trim(dir)//'/fm_rsr_echo'//c_null_char, NBIG4, &
                           cproto, 16) /= 0) &
      error stop 'fm_bench_pingpong: the raw RSR peer did not start'
    proto = ''
    do k = 1, 16
      if (cproto(k:k) == c_null_char) exit
      proto(k:k) = cproto(k:k)
    end do
    t = fm_batch(CMD_SMALL, NSMALL, ZC)
    t = raw_batch(0, NSMALL)
    t = fm_batch(CMD_BIG, NREP_BIG, ZC)
    t = fm_batch(CMD_BIG, NREP_BIG, 0)
    t = raw_batch(NBIG, NREP_BIG)
    t = fm_batch(CMD_BIG4, NREP_BIG4, ZC)
    t = raw_batch(NBIG4, NREP_BIG4)
  end subroutine

  ! One mpirun of fm_mpi_pingpong (reps batches of each size) with the
  ! options `mca`: keeps the better times. All are set negative when it
  ! does not run.
  subroutine mpi_round(mca, small, big, big4)
    character(len=*), intent(in) :: mca
    real(c_double), intent(inout) :: small, big, big4
    real(c_double) :: s, b, b4
    character(len=16) :: n
    character(len=64) :: out
    integer :: st, u, k
    write (n, '(i0)') reps
    ! (Named by the process id: runs in one directory do not collide.)
    write (out, '(a,i0,a)') 'fm_mpi_pingpong.', getpid(), '.out'
    call fm_bench_pin(1)
    ! (The ALLOW_RUN_AS_ROOT pair only matters when run as root, as in CI.)
    call execute_command_line('OMPI_ALLOW_RUN_AS_ROOT=1 '// &
      'OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe --map-by core --bind-to core -np 2 '// &
      trim(mca)//' '// &
      trim(dir)//'/fm_mpi_pingpong '//trim(n)// &
      ' > '//trim(out)//' 2>&1', exitstat=st)
    call fm_bench_pin(0)
    open (newunit=u, file=trim(out), status='old', iostat=k)
    if (k /= 0) st = 1
    if (k == 0) then
      if (st == 0) read (u, *, iostat=st) s, b, b4
      close (u, status='delete')
    end if
    if (st /= 0) then
      small = -1
      big = -1
      big4 = -1
    else
      small = min(small, s)
      big = min(big, b)
      big4 = min(big4, b4)
    end if
  end subroutine

  subroutine stop_peers()
    integer(c_int32_t) :: cmd(3)
    cmd = [CMD_QUIT, 0, 0]
    call fm_send(aout, cmd)
    call fm_receive(bin, cmd)
    call fm_processes_end(blk)
    call fm_bench_rsr_stop()
  end subroutine

  ! A goal's outcome in this run, as bench_ccxx prints it.
  function verdict(ok) result(s)
    logical, intent(in) :: ok
    character(len=6) :: s
    s = 'MISSED'
    if (ok) s = 'met'
  end function
end program
