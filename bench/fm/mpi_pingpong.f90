! The MPI anchor of the fm benchmark: MPI_Send/MPI_Recv ping-pong from
! Fortran (use mpi) of an integer, of 1 MiB and of 4 MiB of doubles between
! ranks 0 and 1, timed as fm_bench_pingpong times the channel: the best of
! `reps` batches (200 round trips of the integer, 4 of 1 MiB, 2 of 4 MiB,
! alternating), per round trip. Rank 0 prints the three times in
! microseconds.
! Usage: mpirun -np 2 fm_mpi_pingpong [reps]
program fm_mpi_pingpong
  use mpi
  use, intrinsic :: iso_fortran_env, only: output_unit, error_unit
  implicit none
  integer, parameter :: NBIG = 131072, NBIG4 = 524288, NSMALL = 200, &
    NREP_BIG = 4, NREP_BIG4 = 2
  integer :: rank, ierr, r, reps, ios
  character(len=256) :: arg
  double precision, allocatable :: x(:)
  double precision :: t, small, big, big4

  ! The command line, read before MPI_Init, so that --help and a bad
  ! argument need no MPI job: --help prints the usage (status 0), anything
  ! but one count is named on stderr with the usage (status 2).
  reps = 31
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    if (arg == '--help' .or. arg == '-h') then
      call print_usage(output_unit)
      stop
    end if
    ios = 1
    if (len_trim(arg) > 0 .and. len_trim(arg) < 10 .and. &
        verify(trim(arg), '0123456789') == 0) read (arg, *, iostat=ios) reps
    if (ios /= 0 .or. command_argument_count() > 1) then
      if (ios == 0) call get_command_argument(2, arg)
      if (arg(1:1) == '-') then
        write (error_unit, '(3a)') "fm_mpi_pingpong: unknown argument '", &
          trim(arg), "'"
      else if (ios == 0) then
        write (error_unit, '(3a)') 'fm_mpi_pingpong: ', trim(arg), &
          ': one argument too many'
      else
        write (error_unit, '(3a)') 'fm_mpi_pingpong: ', trim(arg), &
          ': not a count'
      end if
      call print_usage(error_unit)
      stop 2, quiet=.true.
    end if
  end if
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  reps = max(reps, 1)
  allocate (x(NBIG4))
  x = 1.5d0
  ! The warm-up, as the channel's.
  t = small_batch()
  t = big_batch(NBIG, NREP_BIG)
  t = big_batch(NBIG4, NREP_BIG4)
  small = huge(t)
  big = huge(t)
  big4 = huge(t)
  do r = 1, reps
    small = min(small, small_batch())
    big = min(big, big_batch(NBIG, NREP_BIG))
    big4 = min(big4, big_batch(NBIG4, NREP_BIG4))
  end do
  if (rank == 0) write (*, '(3f14.3)') small, big, big4
  call MPI_Finalize(ierr)

contains

  subroutine print_usage(unit)
    integer, intent(in) :: unit
    write (unit, '(a)') &
      'usage: mpirun -np 2 fm_mpi_pingpong [REPS]', &
      '  The MPI anchor of fm_bench_pingpong: MPI_Send/MPI_Recv round trips', &
      '  of an integer, of 1 MiB and of 4 MiB of doubles between ranks 0 and', &
      '  1, the best of REPS batches (default 31); rank 0 prints the three', &
      '  times in microseconds.'
  end subroutine

  double precision function small_batch()
    integer :: i, v, st(MPI_STATUS_SIZE)
    double precision :: t0
    t0 = MPI_Wtime()
    do i = 1, NSMALL
      if (rank == 0) then
        call MPI_Send(i, 1, MPI_INTEGER, 1, 0, MPI_COMM_WORLD, ierr)
        call MPI_Recv(v, 1, MPI_INTEGER, 1, 0, MPI_COMM_WORLD, st, ierr)
        if (v /= i) error stop 'fm_mpi_pingpong: wrong echo'
      else
        call MPI_Recv(v, 1, MPI_INTEGER, 0, 0, MPI_COMM_WORLD, st, ierr)
        call MPI_Send(v, 1, MPI_INTEGER, 0, 0, MPI_COMM_WORLD, ierr)
      end if
    end do
    small_batch = (MPI_Wtime() - t0)*1d6/NSMALL
  end function

  double precision function big_batch(n, nrep)
    integer, intent(in) :: n, nrep
    integer :: i, st(MPI_STATUS_SIZE)
    double precision :: t0
    t0 = MPI_Wtime()
    do i = 1, nrep
      if (rank == 0) then
        call MPI_Send(x, n, MPI_DOUBLE_PRECISION, 1, 1, MPI_COMM_WORLD, ierr)
        call MPI_Recv(x, n, MPI_DOUBLE_PRECISION, 1, 1, MPI_COMM_WORLD, st, &
                      ierr)
      else
        call MPI_Recv(x, n, MPI_DOUBLE_PRECISION, 0, 1, MPI_COMM_WORLD, st, &
                      ierr)
        call MPI_Send(x, n, MPI_DOUBLE_PRECISION, 0, 1, MPI_COMM_WORLD, ierr)
      end if
    end do
    big_batch = (MPI_Wtime() - t0)*1d6/nrep
  end function
end program
