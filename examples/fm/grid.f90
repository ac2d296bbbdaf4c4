! A process block over a 2-D virtual computer: processors(2,3), one process
! on each processor by LOCATION, each reporting its coordinates through a
! merger and an INTENT(out) argument; one more process on a SUBMACHINE.
! Usage: fm_grid [threads|contexts|processes]
module grid_procs
  use fm
  use, intrinsic :: iso_c_binding
  implicit none
  integer, parameter :: NI = 2, NJ = 3

contains

  ! cell(i, j, out, res): sends i*10+j on out; res = [i*10+j, vc size].
  subroutine cell(args) bind(c)
    type(c_ptr), value :: args
    type(fm_outport) :: out
    integer(c_int32_t) :: i, j
    call fm_arg_get(args, 1, i)
    call fm_arg_get(args, 2, j)
    call fm_arg_get(args, 3, out)
    call fm_send(out, i*10 + j)
    call fm_endchannel(out)
    call fm_arg_set(args, 4, [i*10 + j, int(fm_processors_self_size(), c_int32_t)])
  end subroutine
end module

program fm_grid
  use grid_procs
  implicit none
  type(fm_processors) :: vc, sub
  type(fm_place) :: place
  type(fm_block) :: blk
  type(fm_args) :: a
  type(fm_inport) :: in
  type(fm_outport) :: outs(NI*NJ + 1)
  character(len=32) :: mode, spec
  integer(c_int32_t) :: i, j, v, res(2, NI*NJ + 1)
  integer :: k, st, sum_seen

  call fm_register('cell', c_funloc(cell))
  call fm_init()
  mode = 'contexts'
  if (command_argument_count() >= 1) call get_command_argument(1, mode)
  spec = mode
  if (mode == 'processes') spec = 'localhost' ! one node per processor

  call fm_processors_create(trim(spec), [NI, NJ], vc)
  if (fm_processors_size(vc) /= NI*NJ) error stop 'fm_grid: size'
  call fm_submachine(vc, [1, 2], [2, 3], sub) ! a 2x2 corner
  call fm_merger(in, outs)
  res = 0
  call fm_processes_begin(blk)
  k = 0
  do i = 1, NI ! processdo i, j
    do j = 1, NJ
      k = k + 1
      call fm_location(vc, [i, j], place)
      call fm_args_create(a)
      call fm_arg(a, i)
      call fm_arg(a, j)
      call fm_arg(a, outs(k))
      call fm_arg(a, res(:, k), FM_OUT)
      call fm_processcall(blk, 'cell', a, place)
    end do
  end do
  call fm_place_in(sub, place)
  call fm_args_create(a)
  i = 9
  j = 9
  call fm_arg(a, i)
  call fm_arg(a, j)
  call fm_arg(a, outs(k + 1))
  call fm_arg(a, res(:, k + 1), FM_OUT)
  call fm_processcall(blk, 'cell', a, place)

  sum_seen = 0
  do
    call fm_receive(in, v, st)
    if (st == FM_END) exit
    sum_seen = sum_seen + v
  end do
  call fm_processes_end(blk)
  k = 0
  do i = 1, NI
    do j = 1, NJ
      k = k + 1
      if (res(1, k) /= i*10 + j .or. res(2, k) /= NI*NJ) then
        write (0, *) 'fm_grid: cell ', i, j, ' said ', res(:, k)
        error stop 1
      end if
    end do
  end do
  if (res(1, k + 1) /= 99 .or. res(2, k + 1) /= 4) error stop 'fm_grid: sub'
  if (sum_seen /= sum(res(1, :))) error stop 'fm_grid: merger'
  write (*, '(a,a)') 'fm_grid: 2x3 processors and a 2x2 submachine ok in ', &
    trim(mode)
  call fm_submachine(vc, [1, 1], [1, 1], sub) ! reuse: free both
  call fm_processors_free(sub)
  call fm_processors_free(vc)
  call fm_finalize()
end program
