! A manager-worker farm: workers ask for work by sending their reply outport
! to the manager through a merger; the manager sends a task back on it,
! with the outport, so the worker can ask again. Results come back through
! a second merger. Usage: fm_farm [threads|contexts|processes]
module farm_procs
  use fm
  use, intrinsic :: iso_c_binding
  implicit none
  integer, parameter :: WORKERS = 3, TASKS = 40

contains

  ! worker(requests, results): asks, squares, reports, until told to stop.
  subroutine worker(args) bind(c)
    type(c_ptr), value :: args
    type(fm_outport) :: reqs, res, rout
    type(fm_inport) :: rin
    type(fm_msg) :: m
    integer(c_int32_t) :: task
    real(c_double) :: x(4)

    call fm_arg_get(args, 1, reqs)
    call fm_arg_get(args, 2, res)
    call fm_channel(rin, rout)
    do
      call fm_send_begin(reqs, m)
      call fm_put(m, rout) ! the reply outport moves to the manager
      call fm_send_end(m)
      call fm_receive(rin, m)
      call fm_get(m, task)
      call fm_get(m, rout) ! and comes back with the task
      call fm_msg_free(m)
      if (task < 0) exit
      x = real(task, c_double)
      call fm_send_begin(res, m)
      call fm_put(m, task)
      call fm_put(m, x*x)
      call fm_send_end(m)
    end do
    call fm_endchannel(res)
  end subroutine
end module

program fm_farm
  use farm_procs
  implicit none
  type(fm_inport) :: reqs_in, res_in
  type(fm_outport) :: reqs_out(WORKERS), res_out(WORKERS), reply
  type(fm_block) :: blk
  type(fm_args) :: a
  type(fm_place) :: place
  type(fm_msg) :: m
  character(len=32) :: mode
  integer(c_int32_t) :: next, task
  real(c_double) :: sq(4)
  integer :: i, st, stopped, got
  logical :: seen(TASKS)

  call fm_register('worker', c_funloc(worker))
  call fm_init()
  mode = 'contexts'
  if (command_argument_count() >= 1) call get_command_argument(1, mode)
  place%kind = FM_PLACE_CONTEXT
  if (mode == 'threads') place%kind = FM_PLACE_THREAD
  if (mode == 'processes') place%kind = FM_PLACE_PROCESS

  call fm_merger(reqs_in, reqs_out)
  call fm_merger(res_in, res_out)
  call fm_processes_begin(blk)
  do i = 1, WORKERS ! processdo i = 1, WORKERS
    call fm_args_create(a)
    call fm_arg(a, reqs_out(i))
    call fm_arg(a, res_out(i))
    call fm_processcall(blk, 'worker', a, place)
  end do

  ! The manager: a task for each request, then a stop for each worker.
  next = 1
  stopped = 0
  do while (stopped < WORKERS)
    call fm_receive(reqs_in, m)
    call fm_get(m, reply)
    call fm_msg_free(m)
    call fm_send_begin(reply, m)
    if (next <= TASKS) then
      call fm_put(m, next)
      next = next + 1
    else
      call fm_put(m, -1_c_int32_t)
      stopped = stopped + 1
    end if
    call fm_put(m, reply) ! moving it back: our copy is undefined now
    call fm_send_end(m)
  end do

  seen = .false.
  got = 0
  do
    call fm_receive(res_in, m, st)
    if (st == FM_END) exit ! every worker ended its results outport
    call fm_get(m, task)
    call fm_get(m, sq)
    call fm_msg_free(m)
    if (task < 1 .or. task > TASKS) error stop 'fm_farm: bad task'
    if (seen(task)) error stop 'fm_farm: a result twice'
    if (any(abs(sq - real(task, c_double)**2) > 0)) error stop 'fm_farm: bad result'
    seen(task) = .true.
    got = got + 1
  end do
  call fm_processes_end(blk)
  if (got /= TASKS .or. .not. all(seen)) error stop 'fm_farm: results missing'
  write (*, '(a,i0,a,i0,a,a)') 'fm_farm: ', TASKS, ' tasks on ', WORKERS, &
    ' workers ok in ', trim(mode)
  call fm_finalize()
end program
