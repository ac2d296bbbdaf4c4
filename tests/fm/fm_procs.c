/* A test program for libfm between OS processes: argv[1] picks the check
 * (migrate, dead, vc, copy, place, place-dead; copy takes the placement in
 * argv[2]: threads, contexts or processes); it exits 0 on success, 1 on
 * failure, 77 when the module asked for in FM_TEST_MODULE is not loaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fm.h"

#define TRAFFIC 2000

static int failures;

#define EXPECT(cond)                                                           \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "fm_procs: %s:%d: expected %s\n", __FILE__, __LINE__,    \
              #cond);                                                          \
      failures++;                                                              \
    }                                                                          \
  } while (0)

static void *arg(fm_args_t *a, int i) { return fm_args_data(a, i, NULL, NULL); }

/* Sends 0..TRAFFIC-1, then ends the channel. */
static void sender(fm_args_t *args) {
  fm_port_t *out = arg(args, 0);
  for (int32_t i = 0; i < TRAFFIC; i++)
    if (fm_send_int32(out, i) != 0)
      return;
  fm_endchannel(out);
}

/* Receives count values in order on its inport, acknowledging the first
 * (its value) on its outport; then the end. Writes how many followed their
 * predecessor, the last value and the code after them. */
static void acker(fm_args_t *args) {
  fm_port_t in, *ack = arg(args, 1);
  int32_t *count = arg(args, 2), *res = arg(args, 3);
  fm_moveport(arg(args, 0), &in);
  int32_t expect = 0, ok = 0, last = -1, v;
  for (int32_t i = 0; i < *count && fm_receive_int32(&in, &v) == 0; i++) {
    if (i == 0)
      fm_send_int32(ack, v);
    ok += v == expect;
    expect = v + 1;
    last = v;
  }
  res[0] = ok;
  res[1] = last;
  res[2] = fm_receive_int32(&in, &v);
}

/* Sends 7 on its outport and ends the channel. */
static void send7(fm_args_t *args) {
  fm_port_t *out = arg(args, 0);
  if (fm_send_int32(out, 7) == 0)
    fm_endchannel(out);
}

/* Copies its outport, sends 1 on the port and 2 on the copy (a second
 * writer: its code goes to the int32 out argument), ends the channel. */
static void copier(fm_args_t *args) {
  fm_port_t *out = arg(args, 0);
  int32_t *res = arg(args, 1);
  fm_port_t copy = *out;
  if (fm_send_int32(out, 1) != 0)
    return;
  res[0] = fm_send_int32(&copy, 2);
  fm_endchannel(out);
}

/* Receives until FM_END and `dups` FM_EDUPLICATE reports (a notice is a
 * message of its own, so it may come after the end: then receives go on,
 * each FM_END again, for at most 5 s), or another error: the values into
 * got[], the reports counted. Returns FM_END, or the error. */
static int drain(fm_port_t *in, int32_t *got, int *ngot, int *ndup, int dups) {
  int ended = 0;
  *ngot = *ndup = 0;
  for (int k = 0; k < 5000 && !(ended && *ndup >= dups); k++) {
    int32_t v;
    int r = fm_receive_int32(in, &v);
    if (r == 0 && *ngot < 8)
      got[(*ngot)++] = v;
    else if (r == FM_EDUPLICATE)
      (*ndup)++;
    else if (r != FM_END)
      return r;
    if (r == FM_END) {
      ended = 1;
      usleep(1000);
    }
  }
  return ended ? FM_END : FM_EINVAL;
}

/* A copied outport never loses a message silently: the stale copy's send
 * (or its move) fails with FM_EDUPLICATE and sends nothing, and the
 * channel's receiver gets FM_EDUPLICATE once for it. */
static int check_copy(const fm_place_t *place) {
  fm_port_t in, out, out2;
  int32_t got[8];
  int ngot, ndup;
  fm_block_t *b;
  fm_args_t *a;

  /* A: a copy in the same thread, used after the original. */
  EXPECT(fm_channel(&in, &out) == 0);
  out2 = out;
  EXPECT(fm_send_int32(&out, 1) == 0);
  EXPECT(fm_send_int32(&out2, 2) == FM_EDUPLICATE);
  EXPECT(fm_endchannel(&out) == 0);
  EXPECT(drain(&in, got, &ngot, &ndup, 1) == FM_END);
  EXPECT(ngot == 1 && got[0] == 1 && ndup == 1);

  /* B: a copy moved to a process, then the original used here. */
  EXPECT(fm_channel(&in, &out) == 0);
  out2 = out;
  EXPECT(fm_processes_begin(&b) == 0);
  EXPECT(fm_args_create(&a) == 0);
  EXPECT(fm_args_add_port(a, &out2) == 0);
  EXPECT(fm_processcall(b, "send7", place, a) == 0);
  EXPECT(fm_send_int32(&out, 5) == FM_EDUPLICATE);
  EXPECT(drain(&in, got, &ngot, &ndup, 1) == FM_END);
  EXPECT(ngot == 1 && got[0] == 7 && ndup == 1);
  EXPECT(fm_processes_end(b) == 0);

  /* C: the copy made and used in the process; the receiver here waits. */
  int32_t res[1] = {0};
  EXPECT(fm_channel(&in, &out) == 0);
  EXPECT(fm_processes_begin(&b) == 0);
  EXPECT(fm_args_create(&a) == 0);
  EXPECT(fm_args_add_port(a, &out) == 0);
  EXPECT(fm_args_add(a, FM_TYPE_INT32, res, 1, FM_OUT) == 0);
  EXPECT(fm_processcall(b, "copier", place, a) == 0);
  EXPECT(drain(&in, got, &ngot, &ndup, 1) == FM_END);
  EXPECT(ngot == 1 && got[0] == 1 && ndup == 1);
  EXPECT(fm_processes_end(b) == 0);
  EXPECT(res[0] == FM_EDUPLICATE);

  /* D: a stale copy moved to a process after the original sent. */
  EXPECT(fm_channel(&in, &out) == 0);
  out2 = out;
  EXPECT(fm_send_int32(&out, 1) == 0);
  EXPECT(fm_processes_begin(&b) == 0);
  EXPECT(fm_args_create(&a) == 0);
  EXPECT(fm_args_add_port(a, &out2) == 0);
  EXPECT(fm_processcall(b, "send7", place, a) == FM_EDUPLICATE);
  EXPECT(fm_processes_end(b) == FM_EDUPLICATE);
  EXPECT(fm_endchannel(&out) == 0);
  EXPECT(drain(&in, got, &ngot, &ndup, 1) == FM_END);
  EXPECT(ngot == 1 && got[0] == 1 && ndup == 1);
  return failures;
}

/* Takes the data inport (from a carrier channel unless it is the first
 * stage), receives its share, passes the inport on or, last, checks that
 * the end follows. args: carrier-or-data inport, next outport or a
 * placeholder, int32 spec[3] = {first, count, carried}, int32 res[3] out. */
static void stage(fm_args_t *args) {
  int ntype;
  fm_port_t *in = arg(args, 0);
  fm_port_t *next = fm_args_data(args, 1, &ntype, NULL);
  int32_t *spec = arg(args, 2), *res = arg(args, 3);
  fm_port_t data;
  memset(&data, 0, sizeof(data));
  if (spec[2]) {
    nx_buffer_t *m;
    if (fm_receive(in, &m) != 0)
      return;
    int r = fm_get_port(m, &data);
    fm_msg_free(m);
    if (r != 0)
      return;
  } else {
    fm_moveport(in, &data);
  }
  int32_t expect = spec[0], ok = 0, last = -1, v;
  for (int32_t i = 0; i < spec[1] && fm_receive_int32(&data, &v) == 0; i++) {
    ok += v == expect;
    expect = v + 1;
    last = v;
  }
  if (ntype == FM_TYPE_PORT) {
    nx_buffer_t *m;
    if (fm_send_begin(next, 64, &m) == 0 && fm_put_port(m, &data) == 0)
      fm_send_end(m);
  } else {
    res[2] = fm_receive_int32(&data, &v);
  }
  res[0] = ok;
  res[1] = last;
}

/* Dies without a word, holding an outport its creator receives from. */
static void die(fm_args_t *args) {
  (void)args;
  _exit(3);
}

/* Writes where it runs: the processors it was given and its pid. */
static void where(fm_args_t *args) {
  int32_t *res = arg(args, 0);
  const fm_processors_t *vc = fm_processors_self();
  res[0] = vc != NULL ? fm_processors_size(vc) : -1;
  res[1] = (int32_t)getpid();
}

static int check_migrate(fm_place_t *place) {
  fm_port_t in, out, c1in, c1out, c2in, c2out, none;
  memset(&none, 0, sizeof(none));
  EXPECT(fm_channel(&in, &out) == 0);
  EXPECT(fm_channel(&c1in, &c1out) == 0);
  EXPECT(fm_channel(&c2in, &c2out) == 0);
  const int32_t k1 = 500, k2 = 700, k3 = TRAFFIC - k1 - k2;
  int32_t spec[3][3] = {{0, k1, 0}, {k1, k2, 1}, {k1 + k2, k3, 1}};
  int32_t res[3][3] = {{-1, -1, -1}, {-1, -1, -1}, {-1, -1, -1}};
  fm_block_t *b;
  fm_args_t *a;
  EXPECT(fm_processes_begin(&b) == 0);
  EXPECT(fm_args_create(&a) == 0);
  EXPECT(fm_args_add_port(a, &out) == 0);
  EXPECT(fm_processcall(b, "sender", place, a) == 0);
  fm_port_t *ins[3] = {&in, &c1in, &c2in};
  fm_port_t *nexts[3] = {&c1out, &c2out, &none};
  for (int i = 0; i < 3; i++) {
    EXPECT(fm_args_create(&a) == 0);
    EXPECT(fm_args_add_port(a, ins[i]) == 0);
    if (i < 2)
      EXPECT(fm_args_add_port(a, nexts[i]) == 0);
    else
      EXPECT(fm_args_add(a, FM_TYPE_INT32, spec[i], 1, FM_IN) == 0);
    EXPECT(fm_args_add(a, FM_TYPE_INT32, spec[i], 3, FM_IN) == 0);
    EXPECT(fm_args_add(a, FM_TYPE_INT32, res[i], 3, FM_OUT) == 0);
    EXPECT(fm_processcall(b, "stage", place, a) == 0);
  }
  int r = fm_processes_end(b);
  if (r != 0)
    fprintf(stderr, "fm_procs: processes_end: %s\n", fm_strerror(r));
  EXPECT(r == 0);
  EXPECT(res[0][0] == k1 && res[0][1] == k1 - 1);
  EXPECT(res[1][0] == k2 && res[1][1] == k1 + k2 - 1);
  EXPECT(res[2][0] == k3 && res[2][1] == TRAFFIC - 1);
  EXPECT(res[2][2] == FM_END);

  /* The parent sends on a channel whose inport it passed to a process. The
   * first messages reach the parent's own queue while the inport moves and
   * are forwarded; after the process's acknowledgement (it has the inport,
   * so that queue knows the new place) the parent sends there directly
   * (docs/fm.md, "Moving an inport"), while forwarded ones may still be on
   * their way. All arrive once, in order, then the end. */
  fm_port_t ackin, ackout;
  int32_t count = TRAFFIC, got[3] = {-1, -1, -1};
  EXPECT(fm_channel(&in, &out) == 0);
  EXPECT(fm_channel(&ackin, &ackout) == 0);
  EXPECT(fm_processes_begin(&b) == 0);
  EXPECT(fm_args_create(&a) == 0);
  EXPECT(fm_args_add_port(a, &in) == 0);
  EXPECT(fm_args_add_port(a, &ackout) == 0);
  EXPECT(fm_args_add(a, FM_TYPE_INT32, &count, 1, FM_IN) == 0);
  EXPECT(fm_args_add(a, FM_TYPE_INT32, got, 3, FM_OUT) == 0);
  EXPECT(fm_processcall(b, "acker", place, a) == 0);
  int32_t i = 0, ack = -1;
  for (; i < TRAFFIC / 4; i++)
    EXPECT(fm_send_int32(&out, i) == 0);
  EXPECT(fm_receive_int32(&ackin, &ack) == 0 && ack == 0);
  for (; i < TRAFFIC; i++)
    EXPECT(fm_send_int32(&out, i) == 0);
  EXPECT(fm_endchannel(&out) == 0);
  EXPECT(fm_processes_end(b) == 0);
  EXPECT(got[0] == TRAFFIC && got[1] == TRAFFIC - 1);
  EXPECT(got[2] == FM_END);
  return failures;
}

/* Opens a block with process `name` in a process context, given the
 * outport of a new channel; its inport goes to *in. */
static fm_block_t *start_writer(const char *name, fm_port_t *in) {
  fm_port_t out;
  EXPECT(fm_channel(in, &out) == 0);
  fm_block_t *b;
  fm_args_t *a;
  fm_place_t place = {FM_PLACE_PROCESS, NULL, 0, NULL};
  EXPECT(fm_processes_begin(&b) == 0);
  EXPECT(fm_args_create(&a) == 0);
  EXPECT(fm_args_add_port(a, &out) == 0);
  EXPECT(fm_processcall(b, name, &place, a) == 0);
  return b;
}

static int check_dead(void) {
  fm_port_t in;
  fm_block_t *b = start_writer("die", &in);
  int32_t v;
  int r = fm_receive_int32(&in, &v); /* must wake, not hang */
  EXPECT(r == FM_EPEERDEAD);
  EXPECT(fm_processes_end(b) == FM_EPEERDEAD);
  return failures;
}

/* Large arrays, received into the variable they arrive in (docs/fm.md,
 * "Receive placement"). */
#define PLACE_ROUNDS 20
#define PLACE_BIG (4 << 20)

static double big_value(int round, size_t i) { return round * 1e7 + (double)i; }

/* Echoes PLACE_ROUNDS arrays of doubles (1 MiB), then one of int32 and one
 * of doubles (4 MiB each); writes how many of its receives were placed. */
static void echo_big(fm_args_t *args) {
  fm_port_t in, *out = arg(args, 1);
  int32_t *placed = arg(args, 2);
  fm_moveport(arg(args, 0), &in);
  nx_stats_t s0, s1;
  nx_stats_get(&s0);
  size_t n = (1 << 20) / sizeof(double);
  double *d = malloc(PLACE_BIG);
  int32_t *k = malloc(PLACE_BIG);
  int r = d != NULL && k != NULL ? 0 : FM_ENOMEM;
  for (int i = 0; i < PLACE_ROUNDS && r == 0; i++)
    if ((r = fm_receive_double_array(&in, d, n)) == 0)
      r = fm_send_double_array(out, d, n);
  if (r == 0 && (r = fm_receive_int32_array(&in, k, PLACE_BIG / 4)) == 0)
    r = fm_send_int32_array(out, k, PLACE_BIG / 4);
  if (r == 0 && (r = fm_receive_double_array(&in, d, PLACE_BIG / 8)) == 0)
    r = fm_send_double_array(out, d, PLACE_BIG / 8);
  nx_stats_get(&s1);
  placed[0] = r == 0 ? (int32_t)(s1.rsr_placed - s0.rsr_placed) : r;
  free(d);
  free(k);
}

static int check_place(void) {
  fm_port_t in, out, bin, bout;
  EXPECT(fm_channel(&in, &out) == 0);
  EXPECT(fm_channel(&bin, &bout) == 0);
  fm_block_t *b;
  fm_args_t *a;
  fm_place_t place = {FM_PLACE_PROCESS, NULL, 0, NULL};
  int32_t child_placed = -1;
  EXPECT(fm_processes_begin(&b) == 0);
  EXPECT(fm_args_create(&a) == 0);
  EXPECT(fm_args_add_port(a, &in) == 0);
  EXPECT(fm_args_add_port(a, &bout) == 0);
  EXPECT(fm_args_add(a, FM_TYPE_INT32, &child_placed, 1, FM_OUT) == 0);
  EXPECT(fm_processcall(b, "echo_big", &place, a) == 0);
  nx_stats_t s0, s1;
  nx_stats_get(&s0);
  size_t n = (1 << 20) / sizeof(double);
  double *d = malloc(PLACE_BIG), *e = malloc(PLACE_BIG);
  int32_t *k = malloc(PLACE_BIG), *l = malloc(PLACE_BIG);
  EXPECT(d != NULL && e != NULL && k != NULL && l != NULL);
  size_t bad = 0;
  for (int i = 0; i < PLACE_ROUNDS && d != NULL && e != NULL; i++) {
    for (size_t j = 0; j < n; j++)
      d[j] = big_value(i, j);
    memset(e, 0, n * sizeof(double));
    EXPECT(fm_send_double_array(&out, d, n) == 0);
    EXPECT(fm_receive_double_array(&bin, e, n) == 0);
    bad += memcmp(d, e, n * sizeof(double)) != 0;
  }
  EXPECT(bad == 0);
  if (k != NULL && l != NULL) {
    for (size_t j = 0; j < PLACE_BIG / 4; j++)
      k[j] = (int32_t)(j * 2654435761u);
    memset(l, 0, PLACE_BIG);
    EXPECT(fm_send_int32_array(&out, k, PLACE_BIG / 4) == 0);
    EXPECT(fm_receive_int32_array(&bin, l, PLACE_BIG / 4) == 0);
    EXPECT(memcmp(k, l, PLACE_BIG) == 0);
  }
  if (d != NULL && e != NULL) {
    for (size_t j = 0; j < PLACE_BIG / 8; j++)
      d[j] = big_value(-1, j);
    memset(e, 0, PLACE_BIG);
    EXPECT(fm_send_double_array(&out, d, PLACE_BIG / 8) == 0);
    EXPECT(fm_receive_double_array(&bin, e, PLACE_BIG / 8) == 0);
    EXPECT(memcmp(d, e, PLACE_BIG) == 0);
  }
  nx_stats_get(&s1);
  EXPECT(fm_processes_end(b) == 0);
  /* Each receive here waits from right after its send until the echo
   * comes: a whole 1 MiB round trip later. So every one posts its
   * variable before the reply's leading values are in, unless this
   * thread lost its core for that long, which 22 times in a row it does
   * not: at least one placed is the check (each one counted). */
  unsigned long long placed = s1.rsr_placed - s0.rsr_placed;
  fprintf(stderr, "fm_procs place: %llu of %d receives here placed, %d there\n",
          placed, PLACE_ROUNDS + 2, child_placed);
  EXPECT(placed >= 1 && placed <= PLACE_ROUNDS + 2);
  EXPECT(child_placed >= 0 && child_placed <= PLACE_ROUNDS + 2);
  free(d);
  free(e);
  free(k);
  free(l);
  return failures;
}

/* Sends a 64 MiB array and dies at once, most likely in the middle of its
 * transfer. */
static void send_die(fm_args_t *args) {
  fm_port_t *out = arg(args, 0);
  size_t n = (64u << 20) / sizeof(double);
  double *d = calloc(n, sizeof(double));
  if (d != NULL)
    fm_send_double_array(out, d, n);
  _exit(3);
}

/* A receive whose variable a dying sender's message was being written
 * into wakes with FM_EPEERDEAD (the loss reported, or nothing arrived)
 * and never hangs. */
static int check_place_dead(void) {
  fm_port_t in;
  fm_block_t *b = start_writer("send_die", &in);
  size_t n = (64u << 20) / sizeof(double);
  double *d = malloc(n * sizeof(double));
  EXPECT(d != NULL);
  if (d != NULL) {
    nx_stats_t s0, s1;
    nx_stats_get(&s0);
    int r = fm_receive_double_array(&in, d, n);
    nx_stats_get(&s1);
    /* The whole message may have come before the death: then it is 0. */
    fprintf(stderr, "fm_procs place-dead: %s, %llu placed\n", fm_strerror(r),
            (unsigned long long)(s1.rsr_placed - s0.rsr_placed));
    EXPECT(r == FM_EPEERDEAD || r == 0);
  }
  EXPECT(fm_processes_end(b) == FM_EPEERDEAD);
  free(d);
  return failures;
}

static int check_vc(void) {
  int dims[2] = {2, 2};
  fm_processors_t *vc, *sub;
  int r = fm_processors_create("localhost", 2, dims, &vc);
  EXPECT(r == 0);
  if (r != 0)
    return failures;
  int lo[2] = {0, 1}, hi[2] = {1, 1};
  EXPECT(fm_submachine(vc, lo, hi, &sub) == 0);
  int32_t res[5][2];
  memset(res, 0, sizeof(res));
  fm_block_t *b;
  EXPECT(fm_processes_begin(&b) == 0);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      int c[2] = {i, j};
      fm_place_t p;
      fm_args_t *a;
      EXPECT(fm_location(vc, c, &p) == 0);
      EXPECT(fm_args_create(&a) == 0);
      EXPECT(fm_args_add(a, FM_TYPE_INT32, res[i * 2 + j], 2, FM_OUT) == 0);
      EXPECT(fm_processcall(b, "where", &p, a) == 0);
    }
  fm_place_t ps = {FM_PLACE_PROCESS, vc, 0, sub};
  fm_args_t *a;
  EXPECT(fm_args_create(&a) == 0);
  EXPECT(fm_args_add(a, FM_TYPE_INT32, res[4], 2, FM_OUT) == 0);
  EXPECT(fm_processcall(b, "where", &ps, a) == 0);
  EXPECT(fm_processes_end(b) == 0);
  for (int k = 0; k < 4; k++) {
    EXPECT(res[k][0] == 4);
    EXPECT(res[k][1] != (int32_t)getpid() && res[k][1] > 0);
    for (int l = 0; l < k; l++)
      EXPECT(res[k][1] != res[l][1]); /* a process context each */
  }
  EXPECT(res[4][0] == 2);
  fm_processors_free(sub);
  fm_processors_free(vc);
  return failures;
}

int main(int argc, char **argv) {
  fm_register("sender", sender);
  fm_register("stage", stage);
  fm_register("die", die);
  fm_register("where", where);
  fm_register("send7", send7);
  fm_register("acker", acker);
  fm_register("copier", copier);
  fm_register("echo_big", echo_big);
  fm_register("send_die", send_die);
  int r = fm_init(&argc, &argv);
  if (r != 0) {
    fprintf(stderr, "fm_procs: fm_init: %s\n", fm_strerror(r));
    return 1;
  }
  const char *want = getenv("FM_TEST_MODULE");
  if (want != NULL && *want != '\0') {
    int found = 0;
    for (int i = 0; i < nx_module_count(); i++) {
      nx_module_info_t info;
      if (nx_module_info(i, &info) == 0 && info.loaded &&
          strcmp(info.name, want) == 0)
        found = 1;
    }
    if (!found) {
      fprintf(stderr, "fm_procs: module %s is not loaded: skipped\n", want);
      fm_finalize();
      return 77;
    }
  }
  const char *what = argc > 1 ? argv[1] : "migrate";
  fm_place_t place = {FM_PLACE_PROCESS, NULL, 0, NULL};
  if (strcmp(what, "migrate") == 0)
    check_migrate(&place);
  else if (strcmp(what, "dead") == 0)
    check_dead();
  else if (strcmp(what, "vc") == 0)
    check_vc();
  else if (strcmp(what, "place") == 0)
    check_place();
  else if (strcmp(what, "place-dead") == 0)
    check_place_dead();
  else if (strcmp(what, "copy") == 0) {
    const char *pl = argc > 2 ? argv[2] : "processes";
    place.kind = strcmp(pl, "threads") == 0    ? FM_PLACE_THREAD
                 : strcmp(pl, "contexts") == 0 ? FM_PLACE_CONTEXT
                                               : FM_PLACE_PROCESS;
    check_copy(&place);
  } else {
    fprintf(stderr, "fm_procs: unknown check %s\n", what);
    failures++;
  }
  fm_finalize();
  printf("fm_procs %s: %s\n", what, failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
