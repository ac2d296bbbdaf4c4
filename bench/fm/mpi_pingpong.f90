! The MPI anchor of the fm benchmark: MPI_Send/MPI_Recv ping-pong from
! Fortran (use mpi) of an integer and of 1 MiB of doubles between ranks 0
! and 1; rank 0 prints the two medians in microseconds.
! Usage: mpirun -np 2 fm_mpi_pingpong [iterations]
program fm_mpi_pingpong
  use mpi
  implicit none
  integer, parameter :: NBIG = 131072
  integer :: rank, ierr, i, nsmall, nrep_big, v, st(MPI_STATUS_SIZE)
  character(len=32) :: arg
  double precision, allocatable :: x(:), t(:)
  double precision :: t0, small, big

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  nsmall = 2000
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) nsmall
  end if
  nrep_big = max(20, nsmall/20)
  allocate (x(NBIG), t(max(nsmall, nrep_big)))
  x = 1.5d0
  do i = 1, nsmall
    t0 = MPI_Wtime()
    if (rank == 0) then
      call MPI_Send(i, 1, MPI_INTEGER, 1, 0, MPI_COMM_WORLD, ierr)
      call MPI_Recv(v, 1, MPI_INTEGER, 1, 0, MPI_COMM_WORLD, st, ierr)
    else
      call MPI_Recv(v, 1, MPI_INTEGER, 0, 0, MPI_COMM_WORLD, st, ierr)
      call MPI_Send(v, 1, MPI_INTEGER, 0, 0, MPI_COMM_WORLD, ierr)
    end if
    t(i) = (MPI_Wtime() - t0)*1d6
  end do
  small = med(t(1:nsmall))
  do i = 1, nrep_big
    t0 = MPI_Wtime()
    if (rank == 0) then
      call MPI_Send(x, NBIG, MPI_DOUBLE_PRECISION, 1, 1, MPI_COMM_WORLD, ierr)
      call MPI_Recv(x, NBIG, MPI_DOUBLE_PRECISION, 1, 1, MPI_COMM_WORLD, st, ierr)
    else
      call MPI_Recv(x, NBIG, MPI_DOUBLE_PRECISION, 0, 1, MPI_COMM_WORLD, st, ierr)
      call MPI_Send(x, NBIG, MPI_DOUBLE_PRECISION, 0, 1, MPI_COMM_WORLD, ierr)
    end if
    t(i) = (MPI_Wtime() - t0)*1d6
  end do
  big = med(t(1:nrep_big))
  if (rank == 0) write (*, '(2f14.3)') small, big
  call MPI_Finalize(ierr)

contains

  double precision function med(a)
    double precision, intent(inout) :: a(:)
    integer :: p, q
    double precision :: s
    do p = 2, size(a)
      s = a(p)
      q = p - 1
      do while (q >= 1)
        if (a(q) <= s) exit
        a(q + 1) = a(q)
        q = q - 1
      end do
      a(q + 1) = s
    end do
    med = a(size(a)/2 + 1)
  end function
end program
