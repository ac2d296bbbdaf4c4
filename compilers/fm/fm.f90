! The Fortran 2003 binding of libfm (module fm): channels, mergers, ports,
! process blocks and virtual computers for integer, real, double precision
! and character values and their arrays, on iso_c_binding.
!
! Every routine takes an optional integer `stat`: 0, FM_END (a receive at
! the end of the channel) or a negative FM_*/NX_* code (fm_errstr says what
! it means). Without `stat`, any nonzero result stops the program with a
! message.
module fm
  use, intrinsic :: iso_c_binding
  implicit none
  private

  ! Ports are opaque values (fm_port_t); a default one is undefined.
  type, bind(c), public :: fm_inport
    integer(c_int64_t) :: priv(8) = 0
  end type
  type, bind(c), public :: fm_outport
    integer(c_int64_t) :: priv(8) = 0
  end type
  ! A message being built or read.
  type, public :: fm_msg
    type(c_ptr) :: p = c_null_ptr
  end type
  type, public :: fm_block
    type(c_ptr) :: p = c_null_ptr
  end type
  type, public :: fm_args
    type(c_ptr) :: p = c_null_ptr
  end type
  type, public :: fm_processors
    type(c_ptr) :: p = c_null_ptr
  end type
  ! Where a process call runs (fm_place_t).
  type, bind(c), public :: fm_place
    integer(c_int) :: kind = 0
    type(c_ptr) :: vc = c_null_ptr
    integer(c_int) :: index = 0
    type(c_ptr) :: sub = c_null_ptr
  end type

  integer, parameter, public :: FM_END = 1, FM_EINVAL = -5001, &
    FM_EUNDEFINED = -5002, FM_EWRONGPORT = -5003, FM_EMOVED = -5004, &
    FM_EPEERDEAD = -5005, FM_ENOPROCESS = -5006, FM_ENDED = -5007, &
    FM_ENOTINIT = -5008, FM_ETYPE = -5009, FM_ENOMEM = -5010
  integer, parameter, public :: FM_IN = 1, FM_OUT = 2, FM_INOUT = 3
  integer, parameter, public :: FM_PLACE_THREAD = 1, FM_PLACE_CONTEXT = 2, &
    FM_PLACE_PROCESS = 3
  integer, parameter :: T_INT32 = 1, T_FLOAT = 3, T_DOUBLE = 4, T_CHAR = 5, &
    T_PORT = 6
  integer(c_int), parameter :: NX_ETYPE = -4008

  public :: fm_init, fm_finalize, fm_errstr, fm_channel, fm_merger, &
    fm_moveport, fm_send, fm_receive, fm_endchannel, fm_probe, &
    fm_send_begin, fm_send_end, fm_put, fm_get, fm_msg_free, fm_register, &
    fm_processes_begin, fm_processcall, fm_processes_end, fm_args_create, &
    fm_arg, fm_arg_get, fm_arg_set, fm_processors_create, &
    fm_processors_free, fm_processors_size, fm_location, fm_submachine, &
    fm_processors_self_size, fm_place_in

  interface
    integer(c_int) function c_fm_init(argc, argv) bind(c, name='fm_init')
      import :: c_int, c_ptr
      type(c_ptr), value :: argc, argv
    end function
    integer(c_int) function c_fm_finalize() bind(c, name='fm_finalize')
      import :: c_int
    end function
    type(c_ptr) function c_fm_strerror(e) bind(c, name='fm_strerror')
      import :: c_int, c_ptr
      integer(c_int), value :: e
    end function
    integer(c_size_t) function c_strlen(s) bind(c, name='strlen')
      import :: c_size_t, c_ptr
      type(c_ptr), value :: s
    end function
    integer(c_int) function c_fm_merger(in, outs, n) bind(c, name='fm_merger')
      import :: c_int, fm_inport, fm_outport
      type(fm_inport) :: in
      type(fm_outport) :: outs(*)
      integer(c_int), value :: n
    end function
    integer(c_int) function c_fm_moveport(from, to) bind(c, name='fm_moveport')
      import :: c_int, c_ptr
      type(c_ptr), value :: from, to
    end function
    integer(c_int) function c_fm_send_begin(out, hint, msg) &
        bind(c, name='fm_send_begin')
      import :: c_int, c_size_t, c_ptr, fm_outport
      type(fm_outport) :: out
      integer(c_size_t), value :: hint
      type(c_ptr) :: msg
    end function
    integer(c_int) function c_fm_send_end(msg) bind(c, name='fm_send_end')
      import :: c_int, c_ptr
      type(c_ptr), value :: msg
    end function
    integer(c_int) function c_fm_send_abort(out, msg) &
        bind(c, name='fm_send_abort')
      import :: c_int, c_ptr, fm_outport
      type(fm_outport) :: out
      type(c_ptr), value :: msg
    end function
    integer(c_int) function c_fm_endchannel(out) bind(c, name='fm_endchannel')
      import :: c_int, fm_outport
      type(fm_outport) :: out
    end function
    integer(c_int) function c_fm_receive(in, msg) bind(c, name='fm_receive')
      import :: c_int, c_ptr, fm_inport
      type(fm_inport) :: in
      type(c_ptr) :: msg
    end function
    integer(c_int) function c_fm_msg_free(msg) bind(c, name='fm_msg_free')
      import :: c_int, c_ptr
      type(c_ptr), value :: msg
    end function
    integer(c_int) function c_fm_probe(in) bind(c, name='fm_probe')
      import :: c_int, fm_inport
      type(fm_inport) :: in
    end function
    integer(c_int) function c_fm_put_port(msg, p) bind(c, name='fm_put_port')
      import :: c_int, c_ptr
      type(c_ptr), value :: msg, p
    end function
    integer(c_int) function c_fm_get_port(msg, p) bind(c, name='fm_get_port')
      import :: c_int, c_ptr
      type(c_ptr), value :: msg, p
    end function
    integer(c_int) function c_fm_port_kind(p) bind(c, name='fm_port_kind')
      import :: c_int, c_ptr
      type(c_ptr), value :: p
    end function
    ! The nexus buffer calls the message routines use.
    integer(c_int) function nx_put_int32_array(b, v, n) &
        bind(c, name='nx_put_int32_array')
      import :: c_int, c_ptr, c_size_t, c_int32_t
      type(c_ptr), value :: b
      integer(c_int32_t) :: v(*)
      integer(c_size_t), value :: n
    end function
    integer(c_int) function nx_get_int32_array(b, v, n) &
        bind(c, name='nx_get_int32_array')
      import :: c_int, c_ptr, c_size_t, c_int32_t
      type(c_ptr), value :: b
      integer(c_int32_t) :: v(*)
      integer(c_size_t), value :: n
    end function
    integer(c_int) function nx_put_float_array(b, v, n) &
        bind(c, name='nx_put_float_array')
      import :: c_int, c_ptr, c_size_t, c_float
      type(c_ptr), value :: b
      real(c_float) :: v(*)
      integer(c_size_t), value :: n
    end function
    integer(c_int) function nx_get_float_array(b, v, n) &
        bind(c, name='nx_get_float_array')
      import :: c_int, c_ptr, c_size_t, c_float
      type(c_ptr), value :: b
      real(c_float) :: v(*)
      integer(c_size_t), value :: n
    end function
    integer(c_int) function nx_put_double_array(b, v, n) &
        bind(c, name='nx_put_double_array')
      import :: c_int, c_ptr, c_size_t, c_double
      type(c_ptr), value :: b
      real(c_double) :: v(*)
      integer(c_size_t), value :: n
    end function
    integer(c_int) function nx_get_double_array(b, v, n) &
        bind(c, name='nx_get_double_array')
      import :: c_int, c_ptr, c_size_t, c_double
      type(c_ptr), value :: b
      real(c_double) :: v(*)
      integer(c_size_t), value :: n
    end function
    integer(c_int) function nx_put_char_array(b, v, n) &
        bind(c, name='nx_put_char_array')
      import :: c_int, c_ptr, c_size_t, c_char
      type(c_ptr), value :: b
      character(kind=c_char) :: v(*)
      integer(c_size_t), value :: n
    end function
    integer(c_int) function nx_get_char_array(b, v, n) &
        bind(c, name='nx_get_char_array')
      import :: c_int, c_ptr, c_size_t, c_char
      type(c_ptr), value :: b
      character(kind=c_char) :: v(*)
      integer(c_size_t), value :: n
    end function
    integer(c_int) function c_fm_register(name, fn) bind(c, name='fm_register')
      import :: c_int, c_char, c_funptr
      character(kind=c_char) :: name(*)
      type(c_funptr), value :: fn
    end function
    integer(c_int) function c_fm_processes_begin(b) &
        bind(c, name='fm_processes_begin')
      import :: c_int, c_ptr
      type(c_ptr) :: b
    end function
    integer(c_int) function c_fm_processcall(b, name, place, args) &
        bind(c, name='fm_processcall')
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: b
      character(kind=c_char) :: name(*)
      type(c_ptr), value :: place, args
    end function
    integer(c_int) function c_fm_processes_end(b) &
        bind(c, name='fm_processes_end')
      import :: c_int, c_ptr
      type(c_ptr), value :: b
    end function
    integer(c_int) function c_fm_args_create(a) bind(c, name='fm_args_create')
      import :: c_int, c_ptr
      type(c_ptr) :: a
    end function
    integer(c_int) function c_fm_args_add(a, t, data, n, intent) &
        bind(c, name='fm_args_add')
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: a
      integer(c_int), value :: t
      type(c_ptr), value :: data
      integer(c_size_t), value :: n
      integer(c_int), value :: intent
    end function
    integer(c_int) function c_fm_args_add_port(a, p) &
        bind(c, name='fm_args_add_port')
      import :: c_int, c_ptr
      type(c_ptr), value :: a, p
    end function
    type(c_ptr) function c_fm_args_data(a, i, t, n) bind(c, name='fm_args_data')
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: a
      integer(c_int), value :: i
      integer(c_int) :: t
      integer(c_size_t) :: n
    end function
    integer(c_int) function c_fm_processors_create(spec, nd, dims, vc) &
        bind(c, name='fm_processors_create')
      import :: c_int, c_ptr, c_char
      character(kind=c_char) :: spec(*)
      integer(c_int), value :: nd
      integer(c_int) :: dims(*)
      type(c_ptr) :: vc
    end function
    integer(c_int) function c_fm_processors_free(vc) &
        bind(c, name='fm_processors_free')
      import :: c_int, c_ptr
      type(c_ptr), value :: vc
    end function
    integer(c_int) function c_fm_processors_size(vc) &
        bind(c, name='fm_processors_size')
      import :: c_int, c_ptr
      type(c_ptr), value :: vc
    end function
    type(c_ptr) function c_fm_processors_self() &
        bind(c, name='fm_processors_self')
      import :: c_ptr
    end function
    integer(c_int) function c_fm_location(vc, coords, place) &
        bind(c, name='fm_location')
      import :: c_int, c_ptr, fm_place
      type(c_ptr), value :: vc
      integer(c_int) :: coords(*)
      type(fm_place) :: place
    end function
    integer(c_int) function c_fm_submachine(vc, lo, hi, sub) &
        bind(c, name='fm_submachine')
      import :: c_int, c_ptr
      type(c_ptr), value :: vc
      integer(c_int) :: lo(*), hi(*)
      type(c_ptr) :: sub
    end function
  end interface

  interface fm_moveport
    module procedure moveport_in, moveport_out
  end interface
  interface fm_send
    module procedure send_i, send_ia, send_r, send_ra, send_d, send_da, &
      send_c
  end interface
  interface fm_receive
    module procedure recv_i, recv_ia, recv_r, recv_ra, recv_d, recv_da, &
      recv_c, recv_msg
  end interface
  interface fm_put
    module procedure put_i, put_ia, put_r, put_ra, put_d, put_da, put_c, &
      put_in, put_out
  end interface
  interface fm_get
    module procedure get_i, get_ia, get_r, get_ra, get_d, get_da, get_c, &
      get_in, get_out
  end interface
  interface fm_arg
    module procedure arg_i, arg_ia, arg_d, arg_da, arg_c, arg_in, arg_out
  end interface
  interface fm_arg_get
    module procedure aget_i, aget_ia, aget_d, aget_da, aget_c, aget_in, &
      aget_out
  end interface
  interface fm_arg_set
    module procedure aset_i, aset_ia, aset_d, aset_da, aset_c
  end interface

contains

  ! ---- errors -----------------------------------------------------------

  function fm_errstr(e) result(s)
    integer, intent(in) :: e
    character(len=:), allocatable :: s
    type(c_ptr) :: p
    character(kind=c_char), pointer :: cs(:)
    integer :: i, n
    p = c_fm_strerror(int(e, c_int))
    n = int(c_strlen(p))
    call c_f_pointer(p, cs, [n])
    allocate (character(len=n) :: s)
    do i = 1, n
      s(i:i) = cs(i)
    end do
  end function

  ! Hands a result to the caller, or stops on an error nobody asked about.
  subroutine done(r, stat, what)
    integer(c_int), intent(in) :: r
    integer, intent(out), optional :: stat
    character(*), intent(in) :: what
    if (present(stat)) then
      stat = int(r)
    else if (r /= 0) then
      write (0, '(a,a,a,a)') 'fm: ', what, ': ', fm_errstr(int(r))
      error stop 1
    end if
  end subroutine

  function cstr(s) result(c)
    character(*), intent(in) :: s
    character(kind=c_char, len=len_trim(s) + 1) :: c
    c = trim(s)//c_null_char
  end function

  ! ---- lifecycle --------------------------------------------------------

  subroutine fm_init(stat)
    integer, intent(out), optional :: stat
    call done(c_fm_init(c_null_ptr, c_null_ptr), stat, 'fm_init')
  end subroutine

  subroutine fm_finalize(stat)
    integer, intent(out), optional :: stat
    call done(c_fm_finalize(), stat, 'fm_finalize')
  end subroutine

  ! ---- channels ---------------------------------------------------------

  subroutine fm_channel(in, out, stat)
    type(fm_inport), intent(inout) :: in
    type(fm_outport), intent(inout) :: out
    integer, intent(out), optional :: stat
    type(fm_outport) :: o(1)
    integer(c_int) :: r
    r = c_fm_merger(in, o, 1_c_int)
    out = o(1)
    call done(r, stat, 'fm_channel')
  end subroutine

  subroutine fm_merger(in, outs, stat)
    type(fm_inport), intent(inout) :: in
    type(fm_outport), intent(inout) :: outs(:)
    integer, intent(out), optional :: stat
    call done(c_fm_merger(in, outs, int(size(outs), c_int)), stat, 'fm_merger')
  end subroutine

  subroutine moveport_in(from, to, stat)
    type(fm_inport), intent(inout), target :: from, to
    integer, intent(out), optional :: stat
    call done(c_fm_moveport(c_loc(from), c_loc(to)), stat, 'fm_moveport')
  end subroutine

  subroutine moveport_out(from, to, stat)
    type(fm_outport), intent(inout), target :: from, to
    integer, intent(out), optional :: stat
    call done(c_fm_moveport(c_loc(from), c_loc(to)), stat, 'fm_moveport')
  end subroutine

  subroutine fm_send_begin(out, msg, stat)
    type(fm_outport), intent(inout) :: out
    type(fm_msg), intent(out) :: msg
    integer, intent(out), optional :: stat
    call done(c_fm_send_begin(out, 64_c_size_t, msg%p), stat, 'fm_send')
  end subroutine

  subroutine fm_send_end(msg, stat)
    type(fm_msg), intent(inout) :: msg
    integer, intent(out), optional :: stat
    integer(c_int) :: r
    r = c_fm_send_end(msg%p)
    msg%p = c_null_ptr
    call done(r, stat, 'fm_send')
  end subroutine

  subroutine recv_msg(in, msg, stat)
    type(fm_inport), intent(inout) :: in
    type(fm_msg), intent(out) :: msg
    integer, intent(out), optional :: stat
    call done(c_fm_receive(in, msg%p), stat, 'fm_receive')
  end subroutine

  subroutine fm_msg_free(msg)
    type(fm_msg), intent(inout) :: msg
    integer(c_int) :: r
    if (c_associated(msg%p)) r = c_fm_msg_free(msg%p)
    msg%p = c_null_ptr
  end subroutine

  subroutine fm_endchannel(out, stat)
    type(fm_outport), intent(inout) :: out
    integer, intent(out), optional :: stat
    call done(c_fm_endchannel(out), stat, 'fm_endchannel')
  end subroutine

  ! PROBE(in, empty=e): .true. when a receive would wait.
  subroutine fm_probe(in, empty, stat)
    type(fm_inport), intent(inout) :: in
    logical, intent(out) :: empty
    integer, intent(out), optional :: stat
    integer(c_int) :: r
    r = c_fm_probe(in)
    empty = r == 0
    call done(min(r, 0_c_int), stat, 'fm_probe')
  end subroutine

  ! ---- values into and out of messages ----------------------------------

  subroutine put_i(msg, v, stat)
    type(fm_msg), intent(in) :: msg
    integer(c_int32_t), intent(in) :: v
    integer, intent(out), optional :: stat
    integer(c_int32_t) :: a(1)
    a(1) = v
    call done(nx_put_int32_array(msg%p, a, 1_c_size_t), stat, 'fm_put')
  end subroutine
  subroutine put_ia(msg, v, stat)
    type(fm_msg), intent(in) :: msg
    integer(c_int32_t), intent(in) :: v(:)
    integer, intent(out), optional :: stat
    call done(nx_put_int32_array(msg%p, v, size(v, kind=c_size_t)), stat, &
      'fm_put')
  end subroutine
  subroutine put_r(msg, v, stat)
    type(fm_msg), intent(in) :: msg
    real(c_float), intent(in) :: v
    integer, intent(out), optional :: stat
    real(c_float) :: a(1)
    a(1) = v
    call done(nx_put_float_array(msg%p, a, 1_c_size_t), stat, 'fm_put')
  end subroutine
  subroutine put_ra(msg, v, stat)
    type(fm_msg), intent(in) :: msg
    real(c_float), intent(in) :: v(:)
    integer, intent(out), optional :: stat
    call done(nx_put_float_array(msg%p, v, size(v, kind=c_size_t)), stat, &
      'fm_put')
  end subroutine
  subroutine put_d(msg, v, stat)
    type(fm_msg), intent(in) :: msg
    real(c_double), intent(in) :: v
    integer, intent(out), optional :: stat
    real(c_double) :: a(1)
    a(1) = v
    call done(nx_put_double_array(msg%p, a, 1_c_size_t), stat, 'fm_put')
  end subroutine
  subroutine put_da(msg, v, stat)
    type(fm_msg), intent(in) :: msg
    real(c_double), intent(in) :: v(:)
    integer, intent(out), optional :: stat
    call done(nx_put_double_array(msg%p, v, size(v, kind=c_size_t)), stat, &
      'fm_put')
  end subroutine
  ! A string travels with its length; fm_get pads or cuts to the receiver's.
  subroutine put_c(msg, v, stat)
    type(fm_msg), intent(in) :: msg
    character(*), intent(in) :: v
    integer, intent(out), optional :: stat
    integer(c_int32_t) :: n(1)
    integer(c_int) :: r
    n(1) = len(v)
    r = nx_put_int32_array(msg%p, n, 1_c_size_t)
    if (r == 0 .and. len(v) > 0) &
      r = nx_put_char_array(msg%p, v, int(len(v), c_size_t))
    call done(r, stat, 'fm_put')
  end subroutine
  subroutine put_in(msg, p, stat)
    type(fm_msg), intent(in) :: msg
    type(fm_inport), intent(inout), target :: p
    integer, intent(out), optional :: stat
    call done(c_fm_put_port(msg%p, c_loc(p)), stat, 'fm_put')
  end subroutine
  subroutine put_out(msg, p, stat)
    type(fm_msg), intent(in) :: msg
    type(fm_outport), intent(inout), target :: p
    integer, intent(out), optional :: stat
    call done(c_fm_put_port(msg%p, c_loc(p)), stat, 'fm_put')
  end subroutine

  subroutine get_i(msg, v, stat)
    type(fm_msg), intent(in) :: msg
    integer(c_int32_t), intent(out) :: v
    integer, intent(out), optional :: stat
    integer(c_int32_t) :: a(1)
    integer(c_int) :: r
    r = nx_get_int32_array(msg%p, a, 1_c_size_t)
    v = a(1)
    call done(r, stat, 'fm_get')
  end subroutine
  subroutine get_ia(msg, v, stat)
    type(fm_msg), intent(in) :: msg
    integer(c_int32_t), intent(inout) :: v(:)
    integer, intent(out), optional :: stat
    call done(nx_get_int32_array(msg%p, v, size(v, kind=c_size_t)), stat, &
      'fm_get')
  end subroutine
  subroutine get_r(msg, v, stat)
    type(fm_msg), intent(in) :: msg
    real(c_float), intent(out) :: v
    integer, intent(out), optional :: stat
    real(c_float) :: a(1)
    integer(c_int) :: r
    r = nx_get_float_array(msg%p, a, 1_c_size_t)
    v = a(1)
    call done(r, stat, 'fm_get')
  end subroutine
  subroutine get_ra(msg, v, stat)
    type(fm_msg), intent(in) :: msg
    real(c_float), intent(inout) :: v(:)
    integer, intent(out), optional :: stat
    call done(nx_get_float_array(msg%p, v, size(v, kind=c_size_t)), stat, &
      'fm_get')
  end subroutine
  subroutine get_d(msg, v, stat)
    type(fm_msg), intent(in) :: msg
    real(c_double), intent(out) :: v
    integer, intent(out), optional :: stat
    real(c_double) :: a(1)
    integer(c_int) :: r
    r = nx_get_double_array(msg%p, a, 1_c_size_t)
    v = a(1)
    call done(r, stat, 'fm_get')
  end subroutine
  subroutine get_da(msg, v, stat)
    type(fm_msg), intent(in) :: msg
    real(c_double), intent(inout) :: v(:)
    integer, intent(out), optional :: stat
    call done(nx_get_double_array(msg%p, v, size(v, kind=c_size_t)), stat, &
      'fm_get')
  end subroutine
  subroutine get_c(msg, v, stat)
    type(fm_msg), intent(in) :: msg
    character(*), intent(out) :: v
    integer, intent(out), optional :: stat
    integer(c_int32_t) :: n(1)
    integer(c_int) :: r
    character(kind=c_char, len=:), allocatable :: t
    v = ' '
    r = nx_get_int32_array(msg%p, n, 1_c_size_t)
    if (r == 0 .and. n(1) < 0) r = NX_ETYPE
    if (r == 0 .and. n(1) > 0) then
      allocate (character(kind=c_char, len=n(1)) :: t)
      r = nx_get_char_array(msg%p, t, int(n(1), c_size_t))
      if (r == 0) v = t
    end if
    call done(r, stat, 'fm_get')
  end subroutine
  subroutine get_in(msg, p, stat)
    type(fm_msg), intent(in) :: msg
    type(fm_inport), intent(inout), target :: p
    integer, intent(out), optional :: stat
    call done(c_fm_get_port(msg%p, c_loc(p)), stat, 'fm_get')
  end subroutine
  subroutine get_out(msg, p, stat)
    type(fm_msg), intent(in) :: msg
    type(fm_outport), intent(inout), target :: p
    integer, intent(out), optional :: stat
    call done(c_fm_get_port(msg%p, c_loc(p)), stat, 'fm_get')
  end subroutine

  ! ---- one-value SEND and RECEIVE ---------------------------------------

  ! Starts a message, lets `put` fill it, sends it (or aborts it).
  subroutine send_with(out, r, msg, stat)
    type(fm_outport), intent(inout) :: out
    integer(c_int), intent(in) :: r
    type(fm_msg), intent(inout) :: msg
    integer, intent(out), optional :: stat
    integer(c_int) :: s
    if (r /= 0) then
      s = c_fm_send_abort(out, msg%p)
      call done(r, stat, 'fm_send')
    else
      call done(c_fm_send_end(msg%p), stat, 'fm_send')
    end if
    msg%p = c_null_ptr
  end subroutine

  subroutine send_i(out, v, stat)
    type(fm_outport), intent(inout) :: out
    integer(c_int32_t), intent(in) :: v
    integer, intent(out), optional :: stat
    type(fm_msg) :: m
    integer(c_int32_t) :: a(1)
    integer(c_int) :: r
    a(1) = v
    r = c_fm_send_begin(out, 8_c_size_t, m%p)
    if (r /= 0) then
      call done(r, stat, 'fm_send')
      return
    end if
    call send_with(out, nx_put_int32_array(m%p, a, 1_c_size_t), m, stat)
  end subroutine
  subroutine send_ia(out, v, stat)
    type(fm_outport), intent(inout) :: out
    integer(c_int32_t), intent(in) :: v(:)
    integer, intent(out), optional :: stat
    type(fm_msg) :: m
    integer(c_int) :: r
    r = c_fm_send_begin(out, 8 + 4*size(v, kind=c_size_t), m%p)
    if (r /= 0) then
      call done(r, stat, 'fm_send')
      return
    end if
    call send_with(out, nx_put_int32_array(m%p, v, size(v, kind=c_size_t)), &
      m, stat)
  end subroutine
  subroutine send_r(out, v, stat)
    type(fm_outport), intent(inout) :: out
    real(c_float), intent(in) :: v
    integer, intent(out), optional :: stat
    real(c_float) :: a(1)
    a(1) = v
    call send_ra(out, a, stat)
  end subroutine
  subroutine send_ra(out, v, stat)
    type(fm_outport), intent(inout) :: out
    real(c_float), intent(in) :: v(:)
    integer, intent(out), optional :: stat
    type(fm_msg) :: m
    integer(c_int) :: r
    r = c_fm_send_begin(out, 8 + 4*size(v, kind=c_size_t), m%p)
    if (r /= 0) then
      call done(r, stat, 'fm_send')
      return
    end if
    call send_with(out, nx_put_float_array(m%p, v, size(v, kind=c_size_t)), &
      m, stat)
  end subroutine
  subroutine send_d(out, v, stat)
    type(fm_outport), intent(inout) :: out
    real(c_double), intent(in) :: v
    integer, intent(out), optional :: stat
    real(c_double) :: a(1)
    a(1) = v
    call send_da(out, a, stat)
  end subroutine
  subroutine send_da(out, v, stat)
    type(fm_outport), intent(inout) :: out
    real(c_double), intent(in) :: v(:)
    integer, intent(out), optional :: stat
    type(fm_msg) :: m
    integer(c_int) :: r
    r = c_fm_send_begin(out, 8 + 8*size(v, kind=c_size_t), m%p)
    if (r /= 0) then
      call done(r, stat, 'fm_send')
      return
    end if
    call send_with(out, nx_put_double_array(m%p, v, size(v, kind=c_size_t)), &
      m, stat)
  end subroutine
  subroutine send_c(out, v, stat)
    type(fm_outport), intent(inout) :: out
    character(*), intent(in) :: v
    integer, intent(out), optional :: stat
    type(fm_msg) :: m
    integer :: s
    call fm_send_begin(out, m, stat)
    if (present(stat)) then
      if (stat /= 0) return
    end if
    call put_c(m, v, s)
    call send_with(out, int(s, c_int), m, stat)
  end subroutine

  ! Receives one message for a one-value receive; .false. when there is
  ! none (end, error: already handed to the caller by done).
  logical function take(in, m, stat)
    type(fm_inport), intent(inout) :: in
    type(fm_msg), intent(out) :: m
    integer, intent(out), optional :: stat
    integer(c_int) :: r
    r = c_fm_receive(in, m%p)
    take = r == 0
    if (.not. take) call done(r, stat, 'fm_receive')
  end function

  subroutine recv_i(in, v, stat)
    type(fm_inport), intent(inout) :: in
    integer(c_int32_t), intent(out) :: v
    integer, intent(out), optional :: stat
    type(fm_msg) :: m
    integer :: s
    if (.not. take(in, m, stat)) return
    call get_i(m, v, s)
    call fm_msg_free(m)
    call done(int(s, c_int), stat, 'fm_receive')
  end subroutine
  subroutine recv_ia(in, v, stat)
    type(fm_inport), intent(inout) :: in
    integer(c_int32_t), intent(inout) :: v(:)
    integer, intent(out), optional :: stat
    type(fm_msg) :: m
    integer :: s
    if (.not. take(in, m, stat)) return
    call get_ia(m, v, s)
    call fm_msg_free(m)
    call done(int(s, c_int), stat, 'fm_receive')
  end subroutine
  subroutine recv_r(in, v, stat)
    type(fm_inport), intent(inout) :: in
    real(c_float), intent(out) :: v
    integer, intent(out), optional :: stat
    real(c_float) :: a(1)
    call recv_ra(in, a, stat)
    v = a(1)
  end subroutine
  subroutine recv_ra(in, v, stat)
    type(fm_inport), intent(inout) :: in
    real(c_float), intent(inout) :: v(:)
    integer, intent(out), optional :: stat
    type(fm_msg) :: m
    integer :: s
    if (.not. take(in, m, stat)) return
    call get_ra(m, v, s)
    call fm_msg_free(m)
    call done(int(s, c_int), stat, 'fm_receive')
  end subroutine
  subroutine recv_d(in, v, stat)
    type(fm_inport), intent(inout) :: in
    real(c_double), intent(out) :: v
    integer, intent(out), optional :: stat
    real(c_double) :: a(1)
    call recv_da(in, a, stat)
    v = a(1)
  end subroutine
  subroutine recv_da(in, v, stat)
    type(fm_inport), intent(inout) :: in
    real(c_double), intent(inout) :: v(:)
    integer, intent(out), optional :: stat
    type(fm_msg) :: m
    integer :: s
    if (.not. take(in, m, stat)) return
    call get_da(m, v, s)
    call fm_msg_free(m)
    call done(int(s, c_int), stat, 'fm_receive')
  end subroutine
  subroutine recv_c(in, v, stat)
    type(fm_inport), intent(inout) :: in
    character(*), intent(out) :: v
    integer, intent(out), optional :: stat
    type(fm_msg) :: m
    integer :: s
    if (.not. take(in, m, stat)) return
    call get_c(m, v, s)
    call fm_msg_free(m)
    call done(int(s, c_int), stat, 'fm_receive')
  end subroutine

  ! ---- processes --------------------------------------------------------

  ! Registers `proc`, a subroutine proc(args) bind(c) with
  ! type(c_ptr), value :: args. Before fm_init.
  subroutine fm_register(name, proc, stat)
    character(*), intent(in) :: name
    type(c_funptr), value :: proc
    integer, intent(out), optional :: stat
    call done(c_fm_register(cstr(name), proc), stat, 'fm_register')
  end subroutine

  subroutine fm_processes_begin(b, stat)
    type(fm_block), intent(out) :: b
    integer, intent(out), optional :: stat
    call done(c_fm_processes_begin(b%p), stat, 'fm_processes_begin')
  end subroutine

  ! PROCESSCALL name(args) [at place]; args are taken.
  subroutine fm_processcall(b, name, args, place, stat)
    type(fm_block), intent(in) :: b
    character(*), intent(in) :: name
    type(fm_args), intent(inout) :: args
    type(fm_place), intent(in), target, optional :: place
    integer, intent(out), optional :: stat
    type(c_ptr) :: pp
    pp = c_null_ptr
    if (present(place)) pp = c_loc(place)
    call done(c_fm_processcall(b%p, cstr(name), pp, args%p), stat, &
      'fm_processcall')
    args%p = c_null_ptr
  end subroutine

  subroutine fm_processes_end(b, stat)
    type(fm_block), intent(inout) :: b
    integer, intent(out), optional :: stat
    call done(c_fm_processes_end(b%p), stat, 'fm_processes_end')
    b%p = c_null_ptr
  end subroutine

  subroutine fm_args_create(a, stat)
    type(fm_args), intent(out) :: a
    integer, intent(out), optional :: stat
    call done(c_fm_args_create(a%p), stat, 'fm_args_create')
  end subroutine

  ! Caller side: add an argument (copied in now). With FM_OUT or FM_INOUT,
  ! `v` must be a variable (a whole array or a contiguous section, not an
  ! expression) that stays in place until fm_processes_end, which copies
  ! the process's values back into it.
  subroutine arg_i(a, v, intent, stat)
    type(fm_args), intent(in) :: a
    integer(c_int32_t), intent(in), target :: v
    integer, intent(in), optional :: intent
    integer, intent(out), optional :: stat
    call done(c_fm_args_add(a%p, T_INT32, c_loc(v), 1_c_size_t, &
      int(intent_or_in(intent), c_int)), stat, 'fm_arg')
  end subroutine
  subroutine arg_ia(a, v, intent, stat)
    type(fm_args), intent(in) :: a
    integer(c_int32_t), intent(in), target, contiguous :: v(:)
    integer, intent(in), optional :: intent
    integer, intent(out), optional :: stat
    call done(c_fm_args_add(a%p, T_INT32, c_loc(v), size(v, kind=c_size_t), &
      int(intent_or_in(intent), c_int)), stat, 'fm_arg')
  end subroutine
  subroutine arg_d(a, v, intent, stat)
    type(fm_args), intent(in) :: a
    real(c_double), intent(in), target :: v
    integer, intent(in), optional :: intent
    integer, intent(out), optional :: stat
    call done(c_fm_args_add(a%p, T_DOUBLE, c_loc(v), 1_c_size_t, &
      int(intent_or_in(intent), c_int)), stat, 'fm_arg')
  end subroutine
  subroutine arg_da(a, v, intent, stat)
    type(fm_args), intent(in) :: a
    real(c_double), intent(in), target, contiguous :: v(:)
    integer, intent(in), optional :: intent
    integer, intent(out), optional :: stat
    call done(c_fm_args_add(a%p, T_DOUBLE, c_loc(v), size(v, kind=c_size_t), &
      int(intent_or_in(intent), c_int)), stat, 'fm_arg')
  end subroutine
  subroutine arg_c(a, v, intent, stat)
    type(fm_args), intent(in) :: a
    character(kind=c_char, len=*), intent(in), target :: v
    integer, intent(in), optional :: intent
    integer, intent(out), optional :: stat
    call done(c_fm_args_add(a%p, T_CHAR, c_loc(v), int(len(v), c_size_t), &
      int(intent_or_in(intent), c_int)), stat, 'fm_arg')
  end subroutine
  subroutine arg_in(a, p, stat)
    type(fm_args), intent(in) :: a
    type(fm_inport), intent(inout), target :: p
    integer, intent(out), optional :: stat
    call done(c_fm_args_add_port(a%p, c_loc(p)), stat, 'fm_arg')
  end subroutine
  subroutine arg_out(a, p, stat)
    type(fm_args), intent(in) :: a
    type(fm_outport), intent(inout), target :: p
    integer, intent(out), optional :: stat
    call done(c_fm_args_add_port(a%p, c_loc(p)), stat, 'fm_arg')
  end subroutine

  integer function intent_or_in(intent)
    integer, intent(in), optional :: intent
    intent_or_in = FM_IN
    if (present(intent)) intent_or_in = intent
  end function

  ! Process side: argument i (1-based) in place, checked for type and size.
  function arg_ptr(args, i, t, n, stat) result(p)
    type(c_ptr), intent(in) :: args
    integer, intent(in) :: i, t
    integer(c_size_t), intent(in) :: n
    integer, intent(out), optional :: stat
    type(c_ptr) :: p
    integer(c_int) :: at
    integer(c_size_t) :: an
    at = 0
    an = 0
    p = c_fm_args_data(args, int(i - 1, c_int), at, an)
    if (.not. c_associated(p)) then
      call done(FM_EINVAL, stat, 'fm_arg_get')
    else if (at /= t .or. (n >= 0 .and. an /= n)) then
      p = c_null_ptr
      call done(FM_ETYPE, stat, 'fm_arg_get')
    else if (present(stat)) then
      stat = 0
    end if
  end function

  integer(c_size_t) function arg_len(args, i)
    type(c_ptr), intent(in) :: args
    integer, intent(in) :: i
    integer(c_int) :: at
    type(c_ptr) :: p
    arg_len = 0
    p = c_fm_args_data(args, int(i - 1, c_int), at, arg_len)
  end function

  subroutine aget_i(args, i, v, stat)
    type(c_ptr), intent(in) :: args
    integer, intent(in) :: i
    integer(c_int32_t), intent(out) :: v
    integer, intent(out), optional :: stat
    integer(c_int32_t), pointer :: q
    type(c_ptr) :: p
    p = arg_ptr(args, i, T_INT32, 1_c_size_t, stat)
    if (.not. c_associated(p)) return
    call c_f_pointer(p, q)
    v = q
  end subroutine
  subroutine aget_ia(args, i, v, stat)
    type(c_ptr), intent(in) :: args
    integer, intent(in) :: i
    integer(c_int32_t), intent(inout) :: v(:)
    integer, intent(out), optional :: stat
    integer(c_int32_t), pointer :: q(:)
    type(c_ptr) :: p
    p = arg_ptr(args, i, T_INT32, size(v, kind=c_size_t), stat)
    if (.not. c_associated(p)) return
    call c_f_pointer(p, q, [size(v)])
    v = q
  end subroutine
  subroutine aget_d(args, i, v, stat)
    type(c_ptr), intent(in) :: args
    integer, intent(in) :: i
    real(c_double), intent(out) :: v
    integer, intent(out), optional :: stat
    real(c_double), pointer :: q
    type(c_ptr) :: p
    p = arg_ptr(args, i, T_DOUBLE, 1_c_size_t, stat)
    if (.not. c_associated(p)) return
    call c_f_pointer(p, q)
    v = q
  end subroutine
  subroutine aget_da(args, i, v, stat)
    type(c_ptr), intent(in) :: args
    integer, intent(in) :: i
    real(c_double), intent(inout) :: v(:)
    integer, intent(out), optional :: stat
    real(c_double), pointer :: q(:)
    type(c_ptr) :: p
    p = arg_ptr(args, i, T_DOUBLE, size(v, kind=c_size_t), stat)
    if (.not. c_associated(p)) return
    call c_f_pointer(p, q, [size(v)])
    v = q
  end subroutine
  subroutine aget_c(args, i, v, stat)
    type(c_ptr), intent(in) :: args
    integer, intent(in) :: i
    character(*), intent(out) :: v
    integer, intent(out), optional :: stat
    character(kind=c_char), pointer :: q(:)
    type(c_ptr) :: p
    integer :: k, n
    v = ' '
    n = int(arg_len(args, i))
    p = arg_ptr(args, i, T_CHAR, int(n, c_size_t), stat)
    if (.not. c_associated(p)) return
    call c_f_pointer(p, q, [n])
    do k = 1, min(n, len(v))
      v(k:k) = q(k)
    end do
  end subroutine
  ! A port argument is moved out of the argument list to `port`.
  subroutine aget_in(args, i, port, stat)
    type(c_ptr), intent(in) :: args
    integer, intent(in) :: i
    type(fm_inport), intent(inout), target :: port
    integer, intent(out), optional :: stat
    type(c_ptr) :: p
    p = arg_ptr(args, i, T_PORT, 1_c_size_t, stat)
    if (.not. c_associated(p)) return
    if (c_fm_port_kind(p) /= 1) then
      call done(FM_EWRONGPORT, stat, 'fm_arg_get')
      return
    end if
    call done(c_fm_moveport(p, c_loc(port)), stat, 'fm_arg_get')
  end subroutine
  subroutine aget_out(args, i, port, stat)
    type(c_ptr), intent(in) :: args
    integer, intent(in) :: i
    type(fm_outport), intent(inout), target :: port
    integer, intent(out), optional :: stat
    type(c_ptr) :: p
    p = arg_ptr(args, i, T_PORT, 1_c_size_t, stat)
    if (.not. c_associated(p)) return
    if (c_fm_port_kind(p) /= 2) then
      call done(FM_EWRONGPORT, stat, 'fm_arg_get')
      return
    end if
    call done(c_fm_moveport(p, c_loc(port)), stat, 'fm_arg_get')
  end subroutine

  ! Process side: write an INTENT out/inout argument (copied back when the
  ! block ends).
  subroutine aset_i(args, i, v, stat)
    type(c_ptr), intent(in) :: args
    integer, intent(in) :: i
    integer(c_int32_t), intent(in) :: v
    integer, intent(out), optional :: stat
    integer(c_int32_t), pointer :: q
    type(c_ptr) :: p
    p = arg_ptr(args, i, T_INT32, 1_c_size_t, stat)
    if (.not. c_associated(p)) return
    call c_f_pointer(p, q)
    q = v
  end subroutine
  subroutine aset_ia(args, i, v, stat)
    type(c_ptr), intent(in) :: args
    integer, intent(in) :: i
    integer(c_int32_t), intent(in) :: v(:)
    integer, intent(out), optional :: stat
    integer(c_int32_t), pointer :: q(:)
    type(c_ptr) :: p
    p = arg_ptr(args, i, T_INT32, size(v, kind=c_size_t), stat)
    if (.not. c_associated(p)) return
    call c_f_pointer(p, q, [size(v)])
    q = v
  end subroutine
  subroutine aset_d(args, i, v, stat)
    type(c_ptr), intent(in) :: args
    integer, intent(in) :: i
    real(c_double), intent(in) :: v
    integer, intent(out), optional :: stat
    real(c_double), pointer :: q
    type(c_ptr) :: p
    p = arg_ptr(args, i, T_DOUBLE, 1_c_size_t, stat)
    if (.not. c_associated(p)) return
    call c_f_pointer(p, q)
    q = v
  end subroutine
  subroutine aset_da(args, i, v, stat)
    type(c_ptr), intent(in) :: args
    integer, intent(in) :: i
    real(c_double), intent(in) :: v(:)
    integer, intent(out), optional :: stat
    real(c_double), pointer :: q(:)
    type(c_ptr) :: p
    p = arg_ptr(args, i, T_DOUBLE, size(v, kind=c_size_t), stat)
    if (.not. c_associated(p)) return
    call c_f_pointer(p, q, [size(v)])
    q = v
  end subroutine
  subroutine aset_c(args, i, v, stat)
    type(c_ptr), intent(in) :: args
    integer, intent(in) :: i
    character(*), intent(in) :: v
    integer, intent(out), optional :: stat
    character(kind=c_char), pointer :: q(:)
    type(c_ptr) :: p
    integer :: k, n
    n = int(arg_len(args, i))
    p = arg_ptr(args, i, T_CHAR, int(n, c_size_t), stat)
    if (.not. c_associated(p)) return
    call c_f_pointer(p, q, [n])
    do k = 1, n
      q(k) = ' '
      if (k <= len(v)) q(k) = v(k:k)
    end do
  end subroutine

  ! ---- virtual computers ------------------------------------------------

  ! PROCESSORS(dims): spec is "threads", "contexts" or a nexus node spec.
  subroutine fm_processors_create(spec, dims, vc, stat)
    character(*), intent(in) :: spec
    integer, intent(in) :: dims(:)
    type(fm_processors), intent(out) :: vc
    integer, intent(out), optional :: stat
    integer(c_int) :: d(size(dims))
    d = int(dims, c_int)
    call done(c_fm_processors_create(cstr(spec), int(size(dims), c_int), d, &
      vc%p), stat, 'fm_processors_create')
  end subroutine

  subroutine fm_processors_free(vc)
    type(fm_processors), intent(inout) :: vc
    integer(c_int) :: r
    if (c_associated(vc%p)) r = c_fm_processors_free(vc%p)
    vc%p = c_null_ptr
  end subroutine

  integer function fm_processors_size(vc)
    type(fm_processors), intent(in) :: vc
    fm_processors_size = int(c_fm_processors_size(vc%p))
  end function

  ! Inside a process: the size of the virtual computer it was given, or 0.
  integer function fm_processors_self_size()
    type(c_ptr) :: p
    p = c_fm_processors_self()
    fm_processors_self_size = 0
    if (c_associated(p)) fm_processors_self_size = int(c_fm_processors_size(p))
  end function

  ! LOCATION(vc(c1, c2, ...)), coordinates 1-based as in Fortran.
  subroutine fm_location(vc, coords, place, stat)
    type(fm_processors), intent(in) :: vc
    integer, intent(in) :: coords(:)
    type(fm_place), intent(out) :: place
    integer, intent(out), optional :: stat
    integer(c_int) :: c(size(coords))
    c = int(coords - 1, c_int)
    call done(c_fm_location(vc%p, c, place), stat, 'fm_location')
  end subroutine

  ! SUBMACHINE vc(lo:hi, ...), 1-based bounds.
  subroutine fm_submachine(vc, lo, hi, sub, stat)
    type(fm_processors), intent(in) :: vc
    integer, intent(in) :: lo(:), hi(:)
    type(fm_processors), intent(out) :: sub
    integer, intent(out), optional :: stat
    integer(c_int) :: l(size(lo)), h(size(hi))
    l = int(lo - 1, c_int)
    h = int(hi - 1, c_int)
    call done(c_fm_submachine(vc%p, l, h, sub%p), stat, 'fm_submachine')
  end subroutine

  ! A place for a whole submachine (its first processor, and the process
  ! gets the submachine as fm_processors_self).
  subroutine fm_place_in(sub, place)
    type(fm_processors), intent(in) :: sub
    type(fm_place), intent(out) :: place
    integer(c_int) :: c(4)
    integer(c_int) :: r
    c = 0
    r = c_fm_location(sub%p, c, place)
    place%sub = sub%p
  end subroutine

end module fm
