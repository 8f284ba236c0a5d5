/*
** Name resolution on the IO thread: uv_getaddrinfo (which runs getaddrinfo on libuv's pool).
*/
#ifndef SMARM_IO_DNS_H
#define SMARM_IO_DNS_H

#include "io.h"

#include <stddef.h>

typedef struct dns_entry {
  char addr[64];  /* numeric address */
  int family;     /* 4 or 6 */
  int port;
} dns_entry_t;

typedef struct dns_req {
  io_req_t base;
  char *host, *service;  /* owned; service may be NULL */
  dns_entry_t *entries;  /* owned: the answers, in the resolver's order, duplicates removed */
  size_t count;
} dns_req_t;

struct sockaddr;

/* An IPv4 or IPv6 address as numeric text and its port; returns 4 or 6, or -EAFNOSUPPORT for
** another family. (Also for the names of sockets, tcp.c.) */
int sm_dns_addr_text(const struct sockaddr *sa, char *out, size_t size, int *port);

/* A request (runs on the IO thread; a timed-out one is abandoned), or NULL. */
dns_req_t *sm_dns_req_new(void);

#endif
