! A ring of processes through which an inport migrates: a sender keeps
! sending on the channel while each process in turn holds its inport,
! takes its share of the values and passes the inport on; the channel
! delivers every value once and in order. Usage: fm_ring [mode] [P]
module ring_procs
  use fm
  use, intrinsic :: iso_c_binding
  implicit none
  integer(c_int32_t), parameter :: TOTAL = 1200

contains

  ! sender(out): 1..TOTAL, then the end.
  subroutine sender(args) bind(c)
    type(c_ptr), value :: args
    type(fm_outport) :: out
    integer(c_int32_t) :: i
    call fm_arg_get(args, 1, out)
    do i = 1, TOTAL
      call fm_send(out, i)
    end do
    call fm_endchannel(out)
  end subroutine

  ! member(from, to, share, got): receives the data inport on `from`
  ! (a carrier channel), takes `share` values (all that is left when
  ! share < 0), passes the inport on `to`. got = [in order, last value].
  subroutine member(args) bind(c)
    type(c_ptr), value :: args
    type(fm_inport) :: from, data
    type(fm_outport) :: to
    type(fm_msg) :: m
    integer(c_int32_t) :: share, v, last, ok, k
    integer :: st

    call fm_arg_get(args, 1, from)
    call fm_arg_get(args, 2, to)
    call fm_arg_get(args, 3, share)
    call fm_receive(from, m)
    call fm_get(m, data)
    call fm_msg_free(m)
    call fm_receive(from, m)
    call fm_get(m, last) ! the last value the previous holder took
    call fm_msg_free(m)
    ok = 0
    k = 0
    do while (share < 0 .or. k < share)
      call fm_receive(data, v, st)
      if (st == FM_END) exit
      k = k + 1
      if (v == last + 1) ok = ok + 1
      last = v
    end do
    if (share >= 0) then
      call fm_send_begin(to, m)
      call fm_put(m, data)
      call fm_send_end(m)
      call fm_send(to, last)
    end if
    call fm_arg_set(args, 4, [ok, last])
  end subroutine
end module

program fm_ring
  use ring_procs
  implicit none
  integer, parameter :: MAXP = 16
  type(fm_inport) :: din, cin(MAXP)
  type(fm_outport) :: dout, cout(MAXP)
  type(fm_block) :: blk
  type(fm_args) :: a
  type(fm_place) :: place
  type(fm_msg) :: m
  character(len=32) :: mode, arg
  integer(c_int32_t) :: got(2, MAXP), share(MAXP), zero
  integer :: i, p

  call fm_register('sender', c_funloc(sender))
  call fm_register('member', c_funloc(member))
  call fm_init()
  mode = 'contexts'
  p = 4
  if (command_argument_count() >= 1) call get_command_argument(1, mode)
  if (command_argument_count() >= 2) then
    call get_command_argument(2, arg)
    read (arg, *) p
  end if
  p = max(2, min(p, MAXP))
  place%kind = FM_PLACE_CONTEXT
  if (mode == 'threads') place%kind = FM_PLACE_THREAD
  if (mode == 'processes') place%kind = FM_PLACE_PROCESS

  call fm_channel(din, dout)
  do i = 1, p ! carrier i brings the inport to member i
    call fm_channel(cin(i), cout(i))
  end do
  ! Member 1 gets the inport from us, as if from member 0.
  zero = 0
  call fm_send_begin(cout(1), m)
  call fm_put(m, din)
  call fm_send_end(m)
  call fm_send(cout(1), zero)

  got = -1
  share(1:p - 1) = TOTAL/p
  share(p) = -1
  call fm_processes_begin(blk)
  call fm_args_create(a)
  call fm_arg(a, dout)
  call fm_processcall(blk, 'sender', a, place)
  do i = 1, p
    call fm_args_create(a)
    call fm_arg(a, cin(i))
    if (i < p) then
      call fm_arg(a, cout(i + 1))
    else
      call fm_arg(a, cout(1)) ! unused by the last member
    end if
    call fm_arg(a, share(i))
    call fm_arg(a, got(:, i), FM_OUT)
    call fm_processcall(blk, 'member', a, place)
  end do
  call fm_processes_end(blk)

  do i = 1, p
    if (i < p .and. got(1, i) /= share(i)) then
      write (0, *) 'fm_ring: member ', i, ' got ', got(1, i), ' in order'
      error stop 1
    end if
  end do
  if (sum(got(1, 1:p)) /= TOTAL .or. got(2, p) /= TOTAL) then
    write (0, *) 'fm_ring: in order ', sum(got(1, 1:p)), ' last ', got(2, p)
    error stop 1
  end if
  write (*, '(a,i0,a,i0,a,a)') 'fm_ring: ', TOTAL, &
    ' values in order while the inport went round ', p, ' processes in ', &
    trim(mode)
  call fm_finalize()
end program
