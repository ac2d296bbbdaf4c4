/* What tcp_conn.c offers tcp.c: connections (connect, accept, reading
 * frames, closing). */
#ifndef NX_PROTO_TCP_CONN_H
#define NX_PROTO_TCP_CONN_H

#include "tcp.h"

void tcp_conn_on_listen(uv_poll_t *handle, int status, int events);
/* Starts connecting to the peer; fails the peer if no address works. */
void tcp_conn_start(struct tcp *t, struct tcp_peer *p);
void tcp_conn_close(struct tcp_conn *c);
void tcp_conn_poll(struct tcp_conn *c, int events);
/* Reads the hot connection without asking libuv; returns 1 if it
 * delivered something. */
int tcp_conn_read_hot(struct tcp *t);
/* Delivers read-ahead that a connection kept when the budget ran out. */
void tcp_conn_read_left(struct tcp *t);

#endif /* NX_PROTO_TCP_CONN_H */
