! The FM guide's prime sieve: a pipeline of processes, each keeping the
! multiples of its prime out of the stream and starting the next stage when
! the first number gets through; the primes come back on one outport that
! moves down the pipeline. Usage: fm_sieve [threads|contexts|processes] [N]
module sieve_procs
  use fm
  use, intrinsic :: iso_c_binding
  implicit none
  type(fm_place), save :: place

contains

  ! sieve(in, results): the first number on `in` is a prime; the rest, not
  ! multiples of it, go on to the next stage.
  subroutine sieve(args) bind(c)
    type(c_ptr), value :: args
    type(fm_inport) :: in, nin
    type(fm_outport) :: results, nout
    type(fm_block) :: blk
    type(fm_args) :: a
    integer(c_int32_t) :: p, x
    integer :: st, kind

    call fm_arg_get(args, 1, in)
    call fm_arg_get(args, 2, results)
    call fm_arg_get(args, 3, kind)
    call fm_receive(in, p, st)
    if (st == FM_END) then ! the last stage: no more primes
      call fm_endchannel(results)
      return
    end if
    call fm_send(results, p)
    ! The next stage, as the sieve grows.
    call fm_channel(nin, nout)
    call fm_processes_begin(blk)
    call fm_args_create(a)
    call fm_arg(a, nin)
    call fm_arg(a, results) ! moves down the pipeline
    call fm_arg(a, kind)
    place%kind = kind
    call fm_processcall(blk, 'sieve', a, place)
    do
      call fm_receive(in, x, st)
      if (st == FM_END) exit
      if (mod(x, p) /= 0) call fm_send(nout, x)
    end do
    call fm_endchannel(nout)
    call fm_processes_end(blk)
  end subroutine
end module

program fm_sieve
  use sieve_procs
  implicit none
  type(fm_inport) :: in, rin
  type(fm_outport) :: out, rout
  type(fm_block) :: blk
  type(fm_args) :: a
  character(len=32) :: mode, arg
  integer(c_int32_t) :: i, n, p, kind
  integer :: st, count, expect(25), k
  data expect/2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, &
    59, 61, 67, 71, 73, 79, 83, 89, 97/

  call fm_register('sieve', c_funloc(sieve))
  call fm_init()
  mode = 'contexts'
  if (command_argument_count() >= 1) call get_command_argument(1, mode)
  n = 60
  if (command_argument_count() >= 2) then
    call get_command_argument(2, arg)
    read (arg, *) n
  end if
  n = min(n, 100)
  select case (mode)
  case ('threads')
    kind = FM_PLACE_THREAD
  case ('processes')
    kind = FM_PLACE_PROCESS
  case default
    kind = FM_PLACE_CONTEXT
  end select

  call fm_channel(in, out)
  call fm_channel(rin, rout)
  call fm_processes_begin(blk)
  call fm_args_create(a)
  call fm_arg(a, in)
  call fm_arg(a, rout)
  call fm_arg(a, kind)
  place%kind = kind
  call fm_processcall(blk, 'sieve', a, place)
  do i = 2, n
    call fm_send(out, i)
  end do
  call fm_endchannel(out)
  count = 0
  do
    call fm_receive(rin, p, st)
    if (st == FM_END) exit
    if (st /= 0) then
      write (0, *) 'fm_sieve: receive: ', fm_errstr(st)
      error stop 1
    end if
    count = count + 1
    if (count > size(expect) .or. p /= expect(min(count, size(expect)))) then
      write (0, *) 'fm_sieve: wrong prime ', p, ' at ', count
      error stop 1
    end if
    write (*, '(i0,1x)', advance='no') p
  end do
  write (*, *)
  call fm_processes_end(blk)
  k = count_primes(n)
  if (count /= k) then
    write (0, *) 'fm_sieve: ', count, ' primes, expected ', k
    error stop 1
  end if
  write (*, '(a,i0,a,i0,a,a)') 'fm_sieve: ', count, ' primes up to ', n, &
    ' ok in ', trim(mode)
  call fm_finalize()

contains

  integer function count_primes(m)
    integer(c_int32_t), intent(in) :: m
    integer :: j
    count_primes = 0
    do j = 1, size(expect)
      if (expect(j) <= m) count_primes = count_primes + 1
    end do
  end function
end program
