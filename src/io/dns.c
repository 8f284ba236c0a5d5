/*
** Name resolution (see dns.h). Runs on the IO thread.
*/
#define _GNU_SOURCE
#include "dns.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

int sm_dns_addr_text(const struct sockaddr *sa, char *out, size_t size, int *port)
{
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
    *port = ntohs(in->sin_port);
    uv_ip4_name(in, out, size);
    return 4;
  }
  if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
    *port = ntohs(in6->sin6_port);
    uv_ip6_name(in6, out, size);
    return 6;
  }
  return -EAFNOSUPPORT;
}

typedef struct resolving {
  uv_getaddrinfo_t gai;
  dns_req_t *req; /* NULL once abandoned */
} resolving_t;

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res)
{
  resolving_t *k = g->data;
  dns_req_t *r = k->req;
  free(k);
  if (!r) {
    uv_freeaddrinfo(res);
    return;
  }
  r->base.uv = NULL;
  size_t n = 0;
  for (struct addrinfo *a = res; a; a = a->ai_next)
    n++;
  if (status == 0 && n && !(r->entries = calloc(n, sizeof *r->entries)))
    status = -ENOMEM;
  for (struct addrinfo *a = status == 0 ? res : NULL; a; a = a->ai_next) {
    dns_entry_t e;
    memset(&e, 0, sizeof e);
    e.family = sm_dns_addr_text(a->ai_addr, e.addr, sizeof e.addr, &e.port);
    if (e.family < 0)
      continue;
    int dup = 0;
    for (size_t i = 0; i < r->count && !dup; i++)
      dup = r->entries[i].family == e.family && r->entries[i].port == e.port &&
            strcmp(r->entries[i].addr, e.addr) == 0;
    if (!dup)
      r->entries[r->count++] = e;
  }
  uv_freeaddrinfo(res);
  io_finish(&r->base, status);
}

static void dns_on_loop(io_req_t *req, void *loop)
{
  dns_req_t *r = (dns_req_t *)req;
  resolving_t *k = calloc(1, sizeof *k);
  if (!k) {
    io_finish(req, -ENOMEM);
    return;
  }
  k->req = r;
  k->gai.data = k;
  r->base.uv = k;
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM; /* one entry per address, not one per socket type */
  int rc = uv_getaddrinfo(loop, &k->gai, on_resolved, r->host, r->service, &hints);
  if (rc < 0) {
    r->base.uv = NULL;
    free(k);
    io_finish(req, rc);
  }
}

/* Timed out: the resolution goes on in the pool (it cannot be stopped once running); its answer
** is dropped. */
static void dns_cancel(io_req_t *req)
{
  dns_req_t *r = (dns_req_t *)req;
  resolving_t *k = r->base.uv;
  if (!k)
    return;
  k->req = NULL;
  r->base.uv = NULL;
  uv_cancel((uv_req_t *)&k->gai); /* if it has not started; on_resolved frees k either way */
  io_finish(req, -ETIMEDOUT);
}

static void dns_free(io_req_t *req)
{
  dns_req_t *r = (dns_req_t *)req;
  free(r->host);
  free(r->service);
  free(r->entries);
}

dns_req_t *sm_dns_req_new(void)
{
  return (dns_req_t *)sm_io_req_new_loop(sizeof(dns_req_t), dns_on_loop, dns_cancel, dns_free);
}
