! A test of the Fortran binding (module fm): every value kind and its arrays
! through a channel, strings padded and cut, ports in messages, probe,
! endchannel and the stat codes, and process arguments of each kind.
module types_procs
  use fm
  use, intrinsic :: iso_c_binding
  implicit none
  integer :: failures = 0

contains

  subroutine expect(ok, what)
    logical, intent(in) :: ok
    character(*), intent(in) :: what
    if (.not. ok) then
      write (0, '(a,a)') 'fortran_types: failed: ', what
      failures = failures + 1
    end if
  end subroutine

  ! args: integer in, double(3) inout, character(5) inout, outport in,
  ! integer out (the status of a wrong-type fm_arg_get).
  subroutine proc(args) bind(c)
    type(c_ptr), value :: args
    integer(c_int32_t) :: n, st32
    real(c_double) :: d(3)
    character(len=5) :: s
    type(fm_outport) :: out
    integer :: st
    call fm_arg_get(args, 1, n)
    call fm_arg_get(args, 2, d)
    call fm_arg_get(args, 3, s)
    call fm_arg_get(args, 4, out)
    call fm_arg_get(args, 1, d, st) ! an integer read as double(3)
    st32 = st
    call fm_arg_set(args, 2, d*n)
    call fm_arg_set(args, 3, 'xy')
    call fm_arg_set(args, 5, st32)
    call fm_send(out, 'from proc')
    call fm_endchannel(out)
  end subroutine
end module

program fortran_types
  use types_procs
  implicit none
  type(fm_inport) :: in, cin, in2
  type(fm_outport) :: out, cout, out2
  type(fm_msg) :: m
  type(fm_block) :: b
  type(fm_args) :: a
  integer(c_int32_t) :: i, ia(4), n, st32
  real(c_float) :: r, ra(3)
  real(c_double) :: d, da(5), dd(3), dz(0)
  integer(c_int32_t) :: z0(0)
  character(len=8) :: s8
  character(len=3) :: s3
  character(len=5) :: s5
  character(len=16) :: s16
  logical :: empty
  integer :: st

  call fm_register('proc', c_funloc(proc))
  call fm_init()
  call fm_channel(in, out)

  call fm_send(out, 7_c_int32_t)
  call fm_send(out, [1_c_int32_t, 2_c_int32_t, 3_c_int32_t, 4_c_int32_t])
  call fm_send(out, 1.5_c_float)
  call fm_send(out, [0.5_c_float, -1.0_c_float, 2.0_c_float])
  call fm_send(out, 2.25_c_double)
  call fm_send(out, [(real(i, c_double)/3, i=1, 5)])
  call fm_send(out, 'fortran')
  call fm_send(out, 'fortran m')
  call fm_receive(in, i)
  call expect(i == 7, 'integer')
  call fm_receive(in, ia)
  call expect(all(ia == [1, 2, 3, 4]), 'integer array')
  call fm_receive(in, r)
  call expect(r == 1.5_c_float, 'real')
  call fm_receive(in, ra)
  call expect(all(ra == [0.5_c_float, -1.0_c_float, 2.0_c_float]), 'real array')
  call fm_receive(in, d)
  call expect(d == 2.25_c_double, 'double')
  call fm_receive(in, da)
  call expect(all(da == [(real(i, c_double)/3, i=1, 5)]), 'double array')
  call fm_receive(in, s8)
  call expect(s8 == 'fortran ', 'string padded')
  call fm_receive(in, s3)
  call expect(s3 == 'for', 'string cut')

  ! Values of no units alone in a message: a zero-size section, an empty
  ! array, a character(len=0) (received as blanks). Then the next message.
  call fm_send(out, ia(3:2))
  call fm_receive(in, z0, st)
  call expect(st == 0, 'a zero-size section received')
  call fm_send(out, da(1:0))
  call fm_receive(in, dz, st)
  call expect(st == 0, 'an empty double array received')
  call fm_send(out, '')
  s5 = 'abcde'
  call fm_receive(in, s5, st)
  call expect(st == 0 .and. s5 == '     ', 'character(len=0) received')
  call fm_send(out, 8_c_int32_t)
  call fm_receive(in, i)
  call expect(i == 8, 'the message after the empty ones')

  ! A wrong-size array is refused, with a code, not a crash.
  call fm_send(out, [1_c_int32_t, 2_c_int32_t])
  call fm_receive(in, ia, st)
  call expect(st /= 0, 'wrong-size array refused')

  ! Probe, then a message of several values with a port in it.
  call fm_probe(in, empty)
  call expect(empty, 'probe on an empty channel')
  call fm_channel(cin, cout)
  call fm_send_begin(out, m)
  call fm_put(m, 3_c_int32_t)
  call fm_put(m, cout)
  call fm_put(m, 'tail')
  call fm_send_end(m)
  call fm_send(cout, 1, st)
  call expect(st == FM_EUNDEFINED, 'send on a moved port')
  do
    call fm_probe(in, empty)
    if (.not. empty) exit
  end do
  call fm_receive(in, m)
  call fm_get(m, n)
  call fm_get(m, out2)
  call fm_get(m, s16)
  call fm_msg_free(m)
  call expect(n == 3 .and. s16 == 'tail', 'multi-value message')
  call fm_send(out2, 99_c_int32_t)
  call fm_receive(cin, i)
  call expect(i == 99, 'outport moved in a message')

  ! A copied outport: out2 = out, one send on each. The copy's send fails
  ! with FM_EDUPLICATE (nothing is lost silently) and the receiver is told.
  out2 = out
  call fm_send(out, 5_c_int32_t)
  call fm_send(out2, 6_c_int32_t, st)
  call expect(st == FM_EDUPLICATE, 'send on a copied outport: FM_EDUPLICATE')
  i = 0
  call fm_receive(in, i, st)
  if (st == FM_EDUPLICATE) then ! the report may come first
    call fm_receive(in, i)
  else
    call expect(st == 0, 'first value after a copy')
    call fm_receive(in, n, st)
    call expect(st == FM_EDUPLICATE, 'the receiver told of the copy')
  end if
  call expect(i == 5, 'the original outport''s value')
  call fm_probe(in, empty)
  call expect(empty, 'nothing else after a copy')

  ! Endchannel, FM_END each time, FM_ENDED after.
  call fm_endchannel(out)
  call fm_receive(in, i, st)
  call expect(st == FM_END, 'FM_END')
  call fm_receive(in, i, st)
  call expect(st == FM_END, 'FM_END again')
  call fm_send(out, 1_c_int32_t, st)
  call expect(st == FM_ENDED, 'FM_ENDED')
  call expect(fm_errstr(FM_END) == 'end of channel', 'fm_errstr')

  ! A process with arguments of each kind, copied in and back.
  call fm_channel(in2, out2)
  n = 2
  dd = [1d0, 2d0, 3d0]
  s5 = 'hello'
  st32 = 0
  call fm_processes_begin(b)
  call fm_args_create(a)
  call fm_arg(a, n)
  call fm_arg(a, dd, FM_INOUT)
  call fm_arg(a, s5, FM_INOUT)
  call fm_arg(a, out2)
  call fm_arg(a, st32, FM_OUT)
  call fm_processcall(b, 'proc', a)
  call fm_receive(in2, s16)
  call expect(s16 == 'from proc', 'string from a process')
  call fm_receive(in2, s16, st)
  call expect(st == FM_END, 'process ended its channel')
  call fm_processes_end(b, st)
  call expect(st == 0, 'processes_end')
  call expect(all(dd == [2d0, 4d0, 6d0]), 'double(3) inout copied back')
  call expect(s5 == 'xy   ', 'character inout copied back')
  call expect(st32 == FM_ETYPE, 'fm_arg_get of another type: FM_ETYPE')

  call fm_processes_begin(b)
  call fm_args_create(a)
  call fm_processcall(b, 'nobody', a)
  call fm_processes_end(b, st)
  call expect(st == FM_ENOPROCESS, 'FM_ENOPROCESS')

  call fm_finalize()
  if (failures > 0) error stop 1
  write (*, '(a)') 'fortran_types: ok'
end program
