! Every intrinsic type and kind gfortran has, as a scalar and as arrays of
! rank 1 to 7, sent whole and as strided sections and received into
! sections strided another way, through one generic fm_send/fm_receive: to
! an echo process and back, in the placement the first argument names
! (threads, contexts or processes). Then process arguments of several
! kinds, and mismatches (type, kind, size, port against value, a derived
! type), each an error code and never a corrupted value.
! Usage: fm_fortran_kinds [threads|contexts|processes]
module kinds_procs
  use fm
  use, intrinsic :: iso_c_binding
  implicit none

  ! A derived type: sent component by component, never whole.
  type :: pair
    integer :: a, b
  end type

contains

  subroutine expect(ok, what, fails)
    logical, intent(in) :: ok
    character(*), intent(in) :: what
    integer, intent(inout) :: fails
    if (.not. ok) then
      write (0, '(a,a)') 'fortran_kinds: failed: ', what
      fails = fails + 1
    end if
  end subroutine

#define CHECK check_int1
#define NAME 'int1'
#define TDECL integer(1)
#define VAL(i) int(i - 70, 1)
#define ZERO int(-100, 1)
#define EQ(a, b) logical((a) == (b))
#include "fortran_kinds_body.inc"
#undef CHECK
#undef NAME
#undef TDECL
#undef VAL
#undef ZERO
#undef EQ
#define CHECK check_int2
#define NAME 'int2'
#define TDECL integer(2)
#define VAL(i) int(i - 70, 2)*300_2
#define ZERO int(-100, 2)
#define EQ(a, b) logical((a) == (b))
#include "fortran_kinds_body.inc"
#undef CHECK
#undef NAME
#undef TDECL
#undef VAL
#undef ZERO
#undef EQ
#define CHECK check_int4
#define NAME 'int4'
#define TDECL integer(4)
#define VAL(i) int(i - 70, 4)*30000
#define ZERO int(-100, 4)
#define EQ(a, b) logical((a) == (b))
#include "fortran_kinds_body.inc"
#undef CHECK
#undef NAME
#undef TDECL
#undef VAL
#undef ZERO
#undef EQ
#define CHECK check_int8
#define NAME 'int8'
#define TDECL integer(8)
#define VAL(i) int(i - 70, 8)*3000000000_8
#define ZERO int(-100, 8)
#define EQ(a, b) logical((a) == (b))
#include "fortran_kinds_body.inc"
#undef CHECK
#undef NAME
#undef TDECL
#undef VAL
#undef ZERO
#undef EQ
#define CHECK check_int16
#define NAME 'int16'
#define TDECL integer(16)
#define VAL(i) int(i - 70, 16)*10_16**30
#define ZERO int(-100, 16)
#define EQ(a, b) logical((a) == (b))
#include "fortran_kinds_body.inc"
#undef CHECK
#undef NAME
#undef TDECL
#undef VAL
#undef ZERO
#undef EQ
#define CHECK check_real4
#define NAME 'real4'
#define TDECL real(4)
#define VAL(i) real(i, 4)/4 - 7
#define ZERO real(-1000, 4)
#define EQ(a, b) logical((a) == (b))
#include "fortran_kinds_body.inc"
#undef CHECK
#undef NAME
#undef TDECL
#undef VAL
#undef ZERO
#undef EQ
#define CHECK check_real8
#define NAME 'real8'
#define TDECL real(8)
#define VAL(i) real(i, 8)/3 - 7
#define ZERO real(-1000, 8)
#define EQ(a, b) logical((a) == (b))
#include "fortran_kinds_body.inc"
#undef CHECK
#undef NAME
#undef TDECL
#undef VAL
#undef ZERO
#undef EQ
#define CHECK check_real10
#define NAME 'real10'
#define TDECL real(10)
#define VAL(i) real(i, 10)/3 - 7
#define ZERO real(-1000, 10)
#define EQ(a, b) logical((a) == (b))
#include "fortran_kinds_body.inc"
#undef CHECK
#undef NAME
#undef TDECL
#undef VAL
#undef ZERO
#undef EQ
#define CHECK check_real16
#define NAME 'real16'
#define TDECL real(16)
#define VAL(i) real(i, 16)/3 - 7
#define ZERO real(-1000, 16)
#define EQ(a, b) logical((a) == (b))
#include "fortran_kinds_body.inc"
#undef CHECK
#undef NAME
#undef TDECL
#undef VAL
#undef ZERO
#undef EQ
#define CHECK check_complex4
#define NAME 'complex4'
#define TDECL complex(4)
#define VAL(i) cmplx(i, -2*i, 4)/4
#define ZERO cmplx(-1000, 0, 4)
#define EQ(a, b) logical((a) == (b))
#include "fortran_kinds_body.inc"
#undef CHECK
#undef NAME
#undef TDECL
#undef VAL
#undef ZERO
#undef EQ
#define CHECK check_complex8
#define NAME 'complex8'
#define TDECL complex(8)
#define VAL(i) cmplx(i, -2*i, 8)/3
#define ZERO cmplx(-1000, 0, 8)
#define EQ(a, b) logical((a) == (b))
#include "fortran_kinds_body.inc"
#undef CHECK
#undef NAME
#undef TDECL
#undef VAL
#undef ZERO
#undef EQ
#define CHECK check_complex10
#define NAME 'complex10'
#define TDECL complex(10)
#define VAL(i) cmplx(i, -2*i, 10)/3
#define ZERO cmplx(-1000, 0, 10)
#define EQ(a, b) logical((a) == (b))
#include "fortran_kinds_body.inc"
#undef CHECK
#undef NAME
#undef TDECL
#undef VAL
#undef ZERO
#undef EQ
#define CHECK check_complex16
#define NAME 'complex16'
#define TDECL complex(16)
#define VAL(i) cmplx(i, -2*i, 16)/3
#define ZERO cmplx(-1000, 0, 16)
#define EQ(a, b) logical((a) == (b))
#include "fortran_kinds_body.inc"
#undef CHECK
#undef NAME
#undef TDECL
#undef VAL
#undef ZERO
#undef EQ
#define CHECK check_logical1
#define NAME 'logical1'
#define TDECL logical(1)
#define VAL(i) logical(mod(i, 3) == 0, 1)
#define ZERO logical(.true., 1)
#define EQ(a, b) logical((a) .eqv. (b))
#include "fortran_kinds_body.inc"
#undef CHECK
#undef NAME
#undef TDECL
#undef VAL
#undef ZERO
#undef EQ
#define CHECK check_logical2
#define NAME 'logical2'
#define TDECL logical(2)
#define VAL(i) logical(mod(i, 3) == 0, 2)
#define ZERO logical(.true., 2)
#define EQ(a, b) logical((a) .eqv. (b))
#include "fortran_kinds_body.inc"
#undef CHECK
#undef NAME
#undef TDECL
#undef VAL
#undef ZERO
#undef EQ
#define CHECK check_logical4
#define NAME 'logical4'
#define TDECL logical(4)
#define VAL(i) logical(mod(i, 3) == 0, 4)
#define ZERO logical(.true., 4)
#define EQ(a, b) logical((a) .eqv. (b))
#include "fortran_kinds_body.inc"
#undef CHECK
#undef NAME
#undef TDECL
#undef VAL
#undef ZERO
#undef EQ
#define CHECK check_logical8
#define NAME 'logical8'
#define TDECL logical(8)
#define VAL(i) logical(mod(i, 3) == 0, 8)
#define ZERO logical(.true., 8)
#define EQ(a, b) logical((a) .eqv. (b))
#include "fortran_kinds_body.inc"
#undef CHECK
#undef NAME
#undef TDECL
#undef VAL
#undef ZERO
#undef EQ
#define CHECK check_logical16
#define NAME 'logical16'
#define TDECL logical(16)
#define VAL(i) logical(mod(i, 3) == 0, 16)
#define ZERO logical(.true., 16)
#define EQ(a, b) logical((a) .eqv. (b))
#include "fortran_kinds_body.inc"
#undef CHECK
#undef NAME
#undef TDECL
#undef VAL
#undef ZERO
#undef EQ
#define CHECK check_char1
#define NAME 'char1'
#define TDECL character(len=3)
#define VAL(i) achar(65 + mod(i, 26))//achar(97 + mod(i, 7))//'!'
#define ZERO '###'
#define EQ(a, b) logical((a) == (b))
#include "fortran_kinds_body.inc"
#undef CHECK
#undef NAME
#undef TDECL
#undef VAL
#undef ZERO
#undef EQ
#define CHECK check_char4
#define NAME 'char4'
#define TDECL character(kind=4, len=2)
#define VAL(i) char(945 + mod(i, 20), 4)//char(65 + mod(i, 5), 4)
#define ZERO 4_'##'
#define EQ(a, b) logical((a) == (b))
#include "fortran_kinds_body.inc"
#undef CHECK
#undef NAME
#undef TDECL
#undef VAL
#undef ZERO
#undef EQ

  ! Arrays of 64 KiB and more go by reference (zero copy): the main side
  ! changes its array as soon as fm_send returns, and what arrives must be
  ! what was sent. The echo side sends back from a section (copied).
  subroutine check_big(role, in, out, fails)
    character(*), intent(in) :: role
    type(fm_inport), intent(inout) :: in
    type(fm_outport), intent(inout) :: out
    integer, intent(inout) :: fails
    real(8), allocatable :: d(:), e(:)
    integer(16), allocatable :: w(:)
    integer :: i
    allocate (d(16384), e(32768), w(4096))
    if (role == 'main') then
      d = [(real(i, 8)/7, i=1, 16384)]
      w = [(int(i, 16)*10_16**25 - 3, i=1, 4096)]
      call fm_send(out, d)
      d = -1
      call fm_send(out, w)
      w = -1
      call fm_receive(in, d)
      call expect(all(d == [(real(i, 8)/7, i=1, 16384)]), 'main: 128 KiB of real(8) by reference', fails)
      call fm_receive(in, w)
      call expect(all(w == [(int(i, 16)*10_16**25 - 3, i=1, 4096)]), 'main: 64 KiB of integer(16) by reference', fails)
    else
      e = 0
      call fm_receive(in, e(1:32768:2))
      call fm_send(out, e(1:32768:2))
      call fm_receive(in, w)
      call fm_send(out, w)
    end if
  end subroutine

  subroutine run_all(role, in, out, fails)
    character(*), intent(in) :: role
    type(fm_inport), intent(inout) :: in
    type(fm_outport), intent(inout) :: out
    integer, intent(inout) :: fails
    call check_big(role, in, out, fails)
    call check_int1(role, in, out, fails)
    call check_int2(role, in, out, fails)
    call check_int4(role, in, out, fails)
    call check_int8(role, in, out, fails)
    call check_int16(role, in, out, fails)
    call check_real4(role, in, out, fails)
    call check_real8(role, in, out, fails)
    call check_real10(role, in, out, fails)
    call check_real16(role, in, out, fails)
    call check_complex4(role, in, out, fails)
    call check_complex8(role, in, out, fails)
    call check_complex10(role, in, out, fails)
    call check_complex16(role, in, out, fails)
    call check_logical1(role, in, out, fails)
    call check_logical2(role, in, out, fails)
    call check_logical4(role, in, out, fails)
    call check_logical8(role, in, out, fails)
    call check_logical16(role, in, out, fails)
    call check_char1(role, in, out, fails)
    call check_char4(role, in, out, fails)
  end subroutine

  ! echo(in, out, z, x, l, k, u): sends every value back; checks and sets
  ! its other arguments; ends with its own count of failures.
  subroutine echo(args) bind(c)
    type(c_ptr), value :: args
    type(fm_inport) :: in
    type(fm_outport) :: out
    complex(8) :: z(2, 3)
    real(10) :: x(4)
    integer(16) :: k
    character(kind=4, len=4) :: u
    integer :: fails, st, i
    fails = 0
    call fm_arg_get(args, 1, in)
    call fm_arg_get(args, 2, out)
    call fm_arg_get(args, 3, z)
    call expect(all(z == reshape([(cmplx(i, -i, 8), i=1, 11, 2)], [2, 3])), &
                'arg: a complex(8) section, gathered', fails)
    call fm_arg_get(args, 4, x)
    call expect(all(x == [1, 2, 3, 4]/3.0_10), 'arg: real(10) inout in', fails)
    call fm_arg_set(args, 4, x*3)
    call fm_arg_set(args, 5, .true._1)
    call fm_arg_get(args, 6, k)
    call expect(k == 2_16**100, 'arg: integer(16)', fails)
    call fm_arg_get(args, 7, u)
    call expect(u == 4_'abcd', 'arg: character(kind=4) inout in', fails)
    call fm_arg_set(args, 7, 4_'xy')
    call fm_arg_get(args, 6, x, st)
    call expect(st == FM_ETYPE, 'arg: integer(16) read as real(10): FM_ETYPE', fails)
    call run_all('echo', in, out, fails)
    call fm_send(out, fails)
    call fm_endchannel(out)
  end subroutine
end module

program fortran_kinds
  use kinds_procs
  implicit none
  type(fm_inport) :: to_in, back_in, in
  type(fm_outport) :: to_out, back_out, out, port
  type(fm_block) :: b
  type(fm_args) :: a
  type(fm_place) :: place
  character(len=32) :: mode
  complex(8) :: z(4, 6)
  real(10) :: x(4)
  logical(1) :: l
  character(kind=4, len=4) :: u
  integer(4) :: i4(3)
  integer(8) :: i8(3)
  real(8) :: r8(3)
  complex(8) :: c8(3)
  character(len=3) :: s3
  character(kind=4, len=3) :: u3
  type(pair) :: pr, prs(4)
  integer :: fails, efails, st, i

  call fm_register('echo', c_funloc(echo))
  call fm_init()
  mode = 'contexts'
  if (command_argument_count() >= 1) call get_command_argument(1, mode)
  place%kind = FM_PLACE_CONTEXT
  if (mode == 'threads') place%kind = FM_PLACE_THREAD
  if (mode == 'processes') place%kind = FM_PLACE_PROCESS
  fails = 0

  ! Mismatches on a channel of our own: each is FM_ETYPE, the message is
  ! taken, and the next one arrives right.
  call fm_channel(in, out)
  call fm_send(out, [1_4, 2_4, 3_4])
  call fm_receive(in, i8, st)
  call expect(st == FM_ETYPE, 'integer(4) into integer(8): FM_ETYPE', fails)
  call fm_send(out, [1_4, 2_4])
  call fm_receive(in, i4, st)
  call expect(st == FM_ETYPE, '2 values into 3: FM_ETYPE', fails)
  call fm_send(out, [1d0, 2d0, 3d0])
  call fm_receive(in, c8, st)
  call expect(st == FM_ETYPE, 'real(8) into complex(8): FM_ETYPE', fails)
  call fm_send(out, 'abc')
  call fm_receive(in, u3, st)
  call expect(st == FM_ETYPE, 'character(1) into character(4): FM_ETYPE', fails)
  call fm_channel(to_in, port)
  call fm_send(out, port)
  call fm_receive(in, i4, st)
  call expect(st == FM_ETYPE, 'a port into an integer: FM_ETYPE', fails)
  call fm_send(out, 7_4)
  call fm_receive(in, port, st)
  call expect(st == FM_ETYPE, 'an integer into a port: FM_ETYPE', fails)
  pr = pair(1, 2)
  call fm_send(out, pr, st)
  call expect(st == FM_ETYPE, 'a derived type: FM_ETYPE', fails)
  call fm_send(out, pr%a)
  call fm_send(out, pr%b)
  pr = pair(0, 0)
  call fm_receive(in, pr%a)
  call fm_receive(in, pr%b)
  call expect(pr%a == 1 .and. pr%b == 2, 'a derived type, component by component', fails)
  prs = [(pair(i, -i), i=1, 4)]
  call fm_send(out, prs%b) ! a component of an array: a strided section
  call fm_receive(in, i4(1:2), st)
  call expect(st == FM_ETYPE, '4 values into 2: FM_ETYPE', fails)
  call fm_send(out, prs(2:4)%b)
  call fm_receive(in, i4)
  call expect(all(i4 == [-2, -3, -4]), 'a component of an array of derived type', fails)
  r8 = 0
  call fm_send(out, [4d0, 5d0, 6d0])
  call fm_receive(in, r8)
  call expect(all(r8 == [4d0, 5d0, 6d0]), 'after the mismatches', fails)
  s3 = 'zzz'
  call fm_send(out, 'a')
  call fm_receive(in, s3)
  call expect(s3 == 'a  ', 'a string padded', fails)

  ! The echo process, with arguments of several kinds.
  call fm_channel(to_in, to_out)
  call fm_channel(back_in, back_out)
  z = reshape([(cmplx(i, -i, 8), i=1, 24)], [4, 6])
  x = [1, 2, 3, 4]/3.0_10
  l = .false.
  u = 4_'abcd'
  call fm_processes_begin(b)
  call fm_args_create(a)
  call fm_arg(a, to_in)
  call fm_arg(a, back_out)
  call fm_arg(a, z(1:4:2, 1:3)) ! values 1, 3, ..., 11
  call fm_arg(a, x, FM_INOUT)
  call fm_arg(a, l, FM_OUT)
  call fm_arg(a, 2_16**100)
  call fm_arg(a, u, FM_INOUT)
  call fm_processcall(b, 'echo', a, place)
  call run_all('main', back_in, to_out, fails)
  call fm_receive(back_in, efails)
  call fm_receive(back_in, i, st)
  call expect(st == FM_END, 'the echo ended its channel', fails)
  call fm_processes_end(b, st)
  call expect(st == 0, 'processes_end', fails)
  call expect(all(x == [1, 2, 3, 4]/3.0_10*3), 'real(10) inout copied back', fails)
  call expect(logical(l), 'logical(1) out copied back', fails)
  call expect(u == 4_'xy  ', 'character(kind=4) inout copied back', fails)
  call fm_finalize()
  if (fails > 0 .or. efails /= 0) then
    write (0, '(a,i0,a,i0)') 'fortran_kinds: failures: main ', fails, ', echo ', efails
    error stop 1
  end if
  write (*, '(a,a)') 'fortran_kinds: ok in ', trim(mode)
end program
