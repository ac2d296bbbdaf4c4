/* What tcp_conn.c offers tcp.c: connections (connect, accept, reading
 * frames, deadlines, closing). */
#ifndef NX_PROTO_TCP_CONN_H
#define NX_PROTO_TCP_CONN_H

#include "tcp.h"

/* Accepts what waits on a listening socket (it became readable). */
void tcp_conn_accept(struct tcp_listener *l);
/* Starts connecting to the peer; fails the peer if no address works. */
void tcp_conn_start(struct tcp *t, struct tcp_peer *p);
/* Closes the socket at once; the connection is freed by
 * tcp_conn_free_closed, so events already taken for it stay harmless. */
void tcp_conn_close(struct tcp_conn *c);
/* Sets the events (EPOLLIN, EPOLLOUT) the epoll set reports for it. */
void tcp_conn_poll(struct tcp_conn *c, uint32_t events);
/* Handles what epoll reported for the connection. */
void tcp_conn_event(struct tcp_conn *c, uint32_t events);
/* Reads what the open connection holds now, as when epoll reports it
 * readable: to its EOF, which fails its peer (tcp.c, peer_write_failed). */
void tcp_conn_read(struct tcp_conn *c);
/* Reads the connection that delivered last, without asking epoll; 1 if
 * it delivered again (tcp.c, progress_round). */
int tcp_conn_read_hot(struct tcp *t);
/* Delivers read-ahead that connections kept when the budget ran out. */
void tcp_conn_read_left(struct tcp *t);
/* The timer fired: runs the handshake deadlines that passed. */
void tcp_conn_expire(struct tcp *t);
/* Frees the connections closed since the last call. */
void tcp_conn_free_closed(struct tcp *t);

#endif /* NX_PROTO_TCP_CONN_H */
