/* What tcp_addr.c offers the rest of the tcp module: status conversion,
 * addresses, the listening sockets and the descriptor encoding. */
#ifndef NX_PROTO_TCP_ADDR_H
#define NX_PROTO_TCP_ADDR_H

#include "tcp.h"

int tcp_status_to_nx(int status);
int tcp_listeners_open(struct tcp *t, char *why, size_t why_len);
void tcp_listeners_close(struct tcp *t);
void tcp_desc_encode(const struct tcp *t, struct nx_desc_buf *out);
int tcp_desc_decode(const struct tcp *t, const struct nx_desc *d,
                    struct tcp_desc *out);
socklen_t tcp_addr_sockaddr(const struct tcp_addr *a,
                            struct sockaddr_storage *ss);
void tcp_addr_format(const struct tcp_addr *a, char *buf, size_t len);

#endif /* NX_PROTO_TCP_ADDR_H */
