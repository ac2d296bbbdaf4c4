! The Fortran binding of libfm (module fm): channels, mergers, ports,
! process blocks and virtual computers. Values of every intrinsic type and
! kind, scalars and arrays of any rank, contiguous or not, go through one
! generic routine per operation: Fortran 2018 assumed-type, assumed-rank
! dummies (type(*), dimension(..)) bound to libfm's C entry points, which
! read the type, kind, shape and strides from the descriptor
! (ISO_Fortran_binding.h). The module binds only libfm.
!
! Every routine takes an optional integer `stat`: 0, FM_END (a receive at
! the end of the channel) or a negative FM_*/NX_* code (fm_errstr says what
! it means). Without `stat`, any nonzero result stops the program with a
! message.
module fm
  use, intrinsic :: iso_c_binding
  implicit none
  private

  ! FM_END, FM_E*, FM_IN/FM_OUT/FM_INOUT, FM_PLACE_* and the message tag,
  ! written from fm.h at build time (fm_constants.py).
  include 'fm_constants.inc'

  ! Ports are opaque values (fm_port_t); a default one is undefined.
  type, bind(c), public :: fm_inport
    integer(c_int64_t) :: priv(8) = 0
  end type
  type, bind(c), public :: fm_outport
    integer(c_int64_t) :: priv(8) = 0
  end type
  ! A message being built or read (struct fm_f_msg: the tag tells libfm
  ! that fm_receive's argument is a message, not a value).
  type, bind(c), public :: fm_msg
    type(c_ptr) :: p = c_null_ptr
    integer(c_int64_t) :: tag = FM_MSG_TAG
  end type
  type, public :: fm_block
    type(c_ptr) :: p = c_null_ptr
  end type
  type, bind(c), public :: fm_args
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


  public :: fm_init, fm_finalize, fm_errstr, fm_channel, fm_merger, &
    fm_moveport, fm_send, fm_receive, fm_endchannel, fm_probe, &
    fm_send_begin, fm_send_end, fm_put, fm_get, fm_msg_free, fm_register, &
    fm_processes_begin, fm_processcall, fm_processes_end, fm_args_create, &
    fm_arg, fm_arg_get, fm_arg_set, fm_processors_create, &
    fm_processors_free, fm_processors_size, fm_location, fm_submachine, &
    fm_processors_self_size, fm_place_in, fm_process_data, fm_zerocopy_min

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
    integer(c_size_t) function c_fm_zerocopy_min(n) &
        bind(c, name='fm_zerocopy_min')
      import :: c_size_t
      integer(c_size_t), value :: n
    end function
    type(c_ptr) function c_fm_process_data(n) bind(c, name='fm_process_data')
      import :: c_ptr, c_size_t
      integer(c_size_t), value :: n
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
  ! One routine per operation for every type, kind and rank: libfm reads
  ! the value's type and shape from its descriptor. A port (fm_put, fm_get,
  ! fm_send, fm_receive, fm_arg, fm_arg_get) moves; type(fm_msg) in
  ! fm_receive receives a message to read with fm_get.
  interface fm_send
    subroutine fm_f_send(out, v, stat) bind(c, name='fm_f_send')
      import :: fm_outport, c_int
      type(fm_outport), intent(inout) :: out
      type(*), dimension(..) :: v
      integer(c_int), intent(out), optional :: stat
    end subroutine
  end interface
  interface fm_receive
    subroutine fm_f_receive(in, v, stat) bind(c, name='fm_f_receive')
      import :: fm_inport, c_int
      type(fm_inport), intent(inout) :: in
      type(*), dimension(..) :: v
      integer(c_int), intent(out), optional :: stat
    end subroutine
  end interface
  interface fm_put
    subroutine fm_f_put(msg, v, stat) bind(c, name='fm_f_put')
      import :: fm_msg, c_int
      type(fm_msg), intent(in) :: msg
      type(*), dimension(..) :: v
      integer(c_int), intent(out), optional :: stat
    end subroutine
  end interface
  interface fm_get
    subroutine fm_f_get(msg, v, stat) bind(c, name='fm_f_get')
      import :: fm_msg, c_int
      type(fm_msg), intent(in) :: msg
      type(*), dimension(..) :: v
      integer(c_int), intent(out), optional :: stat
    end subroutine
  end interface
  ! Caller side: add an argument (copied in now; a section is gathered).
  ! With FM_OUT or FM_INOUT, `v` must be a variable (a whole array or a
  ! contiguous section, not an expression) that stays in place until
  ! fm_processes_end, which copies the process's values back into it.
  interface fm_arg
    subroutine fm_f_arg(a, v, intent, stat) bind(c, name='fm_f_arg')
      import :: fm_args, c_int
      type(fm_args), intent(in) :: a
      type(*), dimension(..) :: v
      integer(c_int), intent(in), optional :: intent
      integer(c_int), intent(out), optional :: stat
    end subroutine
  end interface
  ! Process side: argument i (from 1) into `v` (a port moves out of the
  ! list), or `v` into an INTENT out/inout argument (copied back when the
  ! block ends). Another type or size is FM_ETYPE; a character scalar is
  ! cut or padded.
  interface fm_arg_get
    subroutine fm_f_arg_get(args, i, v, stat) bind(c, name='fm_f_arg_get')
      import :: c_ptr, c_int
      type(c_ptr), value :: args
      integer(c_int), intent(in) :: i
      type(*), dimension(..) :: v
      integer(c_int), intent(out), optional :: stat
    end subroutine
  end interface
  interface fm_arg_set
    subroutine fm_f_arg_set(args, i, v, stat) bind(c, name='fm_f_arg_set')
      import :: c_ptr, c_int
      type(c_ptr), value :: args
      integer(c_int), intent(in) :: i
      type(*), dimension(..) :: v
      integer(c_int), intent(out), optional :: stat
    end subroutine
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

  ! Per-process data (fm.h, fm_process_data): the calling process's own
  ! zeroed block of at least `nbytes` bytes, in every placement; map it onto
  ! a type of your own with c_f_pointer. c_null_ptr for nbytes <= 0, or
  ! more than the first call asked for.
  type(c_ptr) function fm_process_data(nbytes)
    integer, intent(in) :: nbytes
    fm_process_data = c_null_ptr
    if (nbytes > 0) fm_process_data = c_fm_process_data(int(nbytes, c_size_t))
  end function

  ! fm_send of a contiguous array of at least `nbytes` bytes goes by
  ! reference (zero copy); 0 copies every array. Process-wide (each process
  ! context has its own); the default is 32768.
  subroutine fm_zerocopy_min(nbytes)
    integer, intent(in) :: nbytes
    integer(c_size_t) :: old
    old = c_fm_zerocopy_min(int(max(nbytes, 0), c_size_t))
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
