! Per-process data (fm_process_data) in each placement: three processes of
! one procedure, running at once, each count in a block of their own; the
! main program's block stays its own. With one block shared (as module
! variables are between threads and in-process contexts) the counts would
! add up. Usage: fm_fortran_pdata [threads|contexts|processes]
module pdata_procs
  use fm
  use, intrinsic :: iso_c_binding
  implicit none
  integer, parameter :: STEPS = 50

  ! What each process keeps of its own.
  type :: state
    integer :: count
    integer :: id
  end type

contains

  ! counter(out, id): counts STEPS in its own block, sending each step on
  ! a merger, then its id and its count in one message.
  subroutine counter(args) bind(c)
    type(c_ptr), value :: args
    type(fm_outport) :: out
    type(state), pointer :: st, again
    type(fm_msg) :: m
    integer :: id, k
    call fm_arg_get(args, 1, out)
    call fm_arg_get(args, 2, id)
    call c_f_pointer(fm_process_data(storage_size(st)/8), st)
    st%id = id
    do k = 1, STEPS
      st%count = st%count + 1
      call fm_send(out, k)
    end do
    call c_f_pointer(fm_process_data(storage_size(st)/8), again)
    call fm_send_begin(out, m) ! one message: the outports interleave
    call fm_put(m, -again%id)
    call fm_put(m, again%count)
    call fm_send_end(m)
    call fm_endchannel(out)
  end subroutine
end module

program fortran_pdata
  use pdata_procs
  implicit none
  type(fm_inport) :: in
  type(fm_outport) :: outs(3)
  type(fm_block) :: b
  type(fm_args) :: a
  type(fm_place) :: place
  type(state), pointer :: mine
  type(fm_msg) :: m
  character(len=32) :: mode
  integer :: i, v, st, nsteps, fails, counts(3)

  call fm_register('counter', c_funloc(counter))
  call fm_init()
  mode = 'contexts'
  if (command_argument_count() >= 1) call get_command_argument(1, mode)
  place%kind = FM_PLACE_CONTEXT
  if (mode == 'threads') place%kind = FM_PLACE_THREAD
  if (mode == 'processes') place%kind = FM_PLACE_PROCESS
  fails = 0

  call c_f_pointer(fm_process_data(storage_size(mine)/8), mine)
  mine%count = 1000
  mine%id = 42
  if (c_associated(fm_process_data(storage_size(mine)/8 + 64))) then
    write (0, '(a)') 'fortran_pdata: a larger block than the first was given'
    fails = fails + 1
  end if

  call fm_merger(in, outs)
  call fm_processes_begin(b)
  do i = 1, 3
    call fm_args_create(a)
    call fm_arg(a, outs(i))
    call fm_arg(a, i)
    call fm_processcall(b, 'counter', a, place)
  end do
  ! Per process: STEPS steps, then -id and its count in one message.
  nsteps = 0
  counts = -1
  do
    call fm_receive(in, m, st)
    if (st /= 0) exit
    call fm_get(m, v)
    if (v < 0) then
      call fm_get(m, counts(-v))
    else
      nsteps = nsteps + 1
    end if
    call fm_msg_free(m)
  end do
  call fm_processes_end(b)
  if (st /= FM_END .or. nsteps /= 3*STEPS .or. any(counts /= STEPS)) then
    write (0, '(a,i0,a,i0,a,3(1x,i0))') 'fortran_pdata: stat ', st, &
      ', steps ', nsteps, ', counts', counts
    fails = fails + 1
  end if
  call c_f_pointer(fm_process_data(storage_size(mine)/8), mine)
  if (mine%count /= 1000 .or. mine%id /= 42) then
    write (0, '(a)') 'fortran_pdata: the main program''s block changed'
    fails = fails + 1
  end if
  call fm_finalize()
  if (fails > 0) error stop 1
  write (*, '(a,a)') 'fortran_pdata: ok in ', trim(mode)
end program
