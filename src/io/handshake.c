/*
** The distribution handshake (handshake.h). Messages of the handshake have a 2-byte length
** first; after it, packets have a 4-byte one (dist.c). The name message and the challenge come
** in two forms: 'n' (version 5, 32-bit flags) and 'N' (OTP 23's, 64-bit flags and the
** creation); this side sends 'N' and takes both. The digest of a challenge is
** md5(cookie ++ the challenge as a decimal number).
*/
#define _GNU_SOURCE /* accept4, getrandom */
#include "handshake.h"

#include "util/md5.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define EPMD_PORT 4369
#define EPMD_PORT2_REQ 122
#define EPMD_PORT2_RESP 119

/* erts' dist.h */
#define DFLAG_EXTENDED_REFERENCES 0x4
#define DFLAG_DIST_MONITOR 0x8
#define DFLAG_FUN_TAGS 0x10
#define DFLAG_DIST_MONITOR_NAME 0x20
#define DFLAG_NEW_FUN_TAGS 0x80
#define DFLAG_EXTENDED_PIDS_PORTS 0x100
#define DFLAG_EXPORT_PTR_TAG 0x200
#define DFLAG_BIT_BINARIES 0x400
#define DFLAG_NEW_FLOATS 0x800
#define DFLAG_UTF8_ATOMS 0x10000
#define DFLAG_MAP_TAG 0x20000
#define DFLAG_BIG_CREATION 0x40000
#define DFLAG_HANDSHAKE_23 0x1000000
#define DFLAG_UNLINK_ID 0x2000000
#define DFLAG_V4_NC ((uint64_t)1 << 34)

/* A hidden node (no DFLAG_PUBLISHED), as a C node is, that reads and writes what OTP 25 and 26
** require, links with unlink ids, and monitors by pid and by name. */
uint64_t sm_hs_flags(void)
{
  return DFLAG_EXTENDED_REFERENCES | DFLAG_DIST_MONITOR | DFLAG_FUN_TAGS |
         DFLAG_DIST_MONITOR_NAME | DFLAG_NEW_FUN_TAGS | DFLAG_EXTENDED_PIDS_PORTS |
         DFLAG_EXPORT_PTR_TAG | DFLAG_BIT_BINARIES | DFLAG_NEW_FLOATS | DFLAG_UTF8_ATOMS |
         DFLAG_MAP_TAG | DFLAG_BIG_CREATION | DFLAG_HANDSHAKE_23 | DFLAG_UNLINK_ID | DFLAG_V4_NC;
}

static int64_t now_ms(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Waits until fd is ready for `events` or the deadline passes: 0, or -1 (errno ETIMEDOUT). */
static int wait_fd(int fd, short events, int64_t deadline)
{
  for (;;) {
    int64_t left = deadline - now_ms();
    if (left <= 0) {
      errno = ETIMEDOUT;
      return -1;
    }
    struct pollfd p = {fd, events, 0};
    int rc = poll(&p, 1, (int)left);
    if (rc > 0)
      return 0;
    if (rc < 0 && errno != EINTR)
      return -1;
  }
}

/* Reads (out: 0) or writes (out: 1) all n bytes of buf by the deadline: 0, or -1 (errno). */
static int transfer(int fd, void *buf, size_t n, int64_t deadline, int out)
{
  char *p = buf;
  while (n) {
    if (wait_fd(fd, out ? POLLOUT : POLLIN, deadline) < 0)
      return -1;
    ssize_t k = out ? send(fd, p, n, MSG_NOSIGNAL) : read(fd, p, n);
    if (k == 0 && !out) {
      errno = ECONNRESET;
      return -1;
    }
    if (k < 0 && errno != EINTR && errno != EAGAIN)
      return -1;
    if (k > 0) {
      p += k;
      n -= (size_t)k;
    }
  }
  return 0;
}

static int read_full(int fd, void *buf, size_t n, int64_t deadline)
{
  return transfer(fd, buf, n, deadline, 0);
}

static int write_full(int fd, const void *buf, size_t n, int64_t deadline)
{
  return transfer(fd, (void *)buf, n, deadline, 1);
}

/* One handshake message (its 2-byte length first) into buf: its length, or -1. */
static int recv_msg(int fd, unsigned char *buf, size_t cap, int64_t deadline)
{
  unsigned char len[2];
  if (read_full(fd, len, 2, deadline) < 0)
    return -1;
  size_t n = (size_t)len[0] << 8 | len[1];
  if (n == 0 || n > cap) {
    errno = EPROTO;
    return -1;
  }
  return read_full(fd, buf, n, deadline) < 0 ? -1 : (int)n;
}

static int send_msg(int fd, const unsigned char *msg, size_t n, int64_t deadline)
{
  unsigned char buf[2 + 1024];
  if (n > 1024)
    return -1;
  buf[0] = (unsigned char)(n >> 8);
  buf[1] = (unsigned char)n;
  memcpy(buf + 2, msg, n);
  return write_full(fd, buf, n + 2, deadline);
}

static unsigned char *put16(unsigned char *o, uint32_t v)
{
  o[0] = (unsigned char)(v >> 8);
  o[1] = (unsigned char)v;
  return o + 2;
}

static unsigned char *put32(unsigned char *o, uint32_t v)
{
  o = put16(o, v >> 16);
  return put16(o, v & 0xffff);
}

static uint32_t get16(const unsigned char *p) { return (uint32_t)p[0] << 8 | p[1]; }
static uint32_t get32(const unsigned char *p) { return get16(p) << 16 | get16(p + 2); }

static void digest_of(const char *cookie, uint32_t challenge, unsigned char out[16])
{
  char dec[16];
  int n = snprintf(dec, sizeof dec, "%u", (unsigned)challenge);
  md5_t m;
  sm_md5_init(&m);
  sm_md5_update(&m, cookie, strlen(cookie));
  sm_md5_update(&m, dec, (size_t)n);
  sm_md5_final(&m, out);
}

static uint32_t new_challenge(void)
{
  uint32_t c;
  if (getrandom(&c, sizeof c, 0) != sizeof c)
    c = (uint32_t)now_ms() ^ (uint32_t)getpid() * 2654435761u;
  return c;
}

/* 'N': flags (8), [challenge (4)], creation (4), name length (2), name. */
static size_t put_new_form(unsigned char *o, const hs_self_t *self, const uint32_t *challenge)
{
  unsigned char *start = o;
  uint64_t flags = sm_hs_flags();
  size_t n = strlen(self->name);
  *o++ = 'N';
  o = put32(o, (uint32_t)(flags >> 32));
  o = put32(o, (uint32_t)flags);
  if (challenge)
    o = put32(o, *challenge);
  o = put32(o, self->creation);
  o = put16(o, (uint32_t)n);
  memcpy(o, self->name, n);
  return (size_t)(o - start) + n;
}

static int fail(char *error, size_t len, const char *what)
{
  snprintf(error, len, "%s", what);
  return -1;
}

int sm_hs_accept(int fd, const hs_self_t *self, int timeout_ms, char peer[HS_NAME_MAX + 1],
                 char *error, size_t error_len)
{
  int64_t deadline = now_ms() + timeout_ms;
  unsigned char m[1024];
  int n = recv_msg(fd, m, sizeof m, deadline);
  size_t name_at, name_len;
  int old_form;
  if (n >= 7 && m[0] == 'n') { /* version (2), flags (4), name */
    old_form = 1;
    name_at = 7;
    name_len = (size_t)n - 7;
  } else if (n >= 15 && m[0] == 'N') { /* flags (8), creation (4), length (2), name */
    old_form = 0;
    name_at = 15;
    name_len = get16(m + 13);
    if (name_at + name_len > (size_t)n)
      return fail(error, error_len, "a malformed name message");
  } else {
    return fail(error, error_len, "no name message");
  }
  if (name_len == 0 || name_len > HS_NAME_MAX || memchr(m + name_at, '\0', name_len))
    return fail(error, error_len, "a malformed node name");
  memcpy(peer, m + name_at, name_len);
  peer[name_len] = '\0';
  static const unsigned char ok[] = {'s', 'o', 'k'};
  uint32_t mine = new_challenge();
  size_t len = put_new_form(m, self, &mine);
  if (send_msg(fd, ok, sizeof ok, deadline) < 0 || send_msg(fd, m, len, deadline) < 0)
    return fail(error, error_len, "the peer went during the handshake");
  n = recv_msg(fd, m, sizeof m, deadline);
  if (n > 0 && m[0] == 'c' && old_form) /* the complement: the rest of an 'n' peer's flags */
    n = recv_msg(fd, m, sizeof m, deadline);
  if (n != 21 || m[0] != 'r')
    return fail(error, error_len, "no challenge reply");
  unsigned char want[16];
  digest_of(self->cookie, mine, want);
  if (memcmp(want, m + 5, 16) != 0)
    return fail(error, error_len, "a wrong cookie");
  unsigned char ack[17] = {'a'};
  digest_of(self->cookie, get32(m + 1), ack + 1);
  if (send_msg(fd, ack, sizeof ack, deadline) < 0)
    return fail(error, error_len, "the peer went during the handshake");
  return 0;
}

/* The port of node `alive` on host (its address in addr) from epmd there, or -1 (errno). */
static int epmd_port(const struct sockaddr_in *addr, const char *alive, int64_t deadline)
{
  struct sockaddr_in a = *addr;
  a.sin_port = htons(EPMD_PORT);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return -1;
  int port = -1;
  size_t n = strlen(alive);
  unsigned char req[3 + HS_NAME_MAX], resp[4];
  put16(req, (uint32_t)(n + 1));
  req[2] = EPMD_PORT2_REQ;
  memcpy(req + 3, alive, n);
  if ((connect(fd, (struct sockaddr *)&a, sizeof a) == 0 || errno == EINPROGRESS) &&
      write_full(fd, req, 3 + n, deadline) == 0 && read_full(fd, resp, 2, deadline) == 0) {
    if (resp[0] == EPMD_PORT2_RESP && resp[1] == 0 && read_full(fd, resp + 2, 2, deadline) == 0)
      port = (int)get16(resp + 2);
    else
      errno = EHOSTUNREACH; /* epmd knows no such name */
  } else if (errno != ETIMEDOUT) {
    errno = EHOSTUNREACH;
  }
  close(fd);
  return port;
}

int sm_hs_connect(const char *peer, const hs_self_t *self, int timeout_ms, char *error,
                  size_t error_len, int *simultaneous)
{
  *simultaneous = 0;
  int64_t deadline = now_ms() + timeout_ms;
  const char *at = strchr(peer, '@');
  char alive[HS_NAME_MAX + 1];
  snprintf(error, error_len, "cannot connect to %s (no such node, or epmd does not know it)",
           peer);
  if (!at || at == peer || (size_t)(at - peer) > HS_NAME_MAX)
    return -1;
  snprintf(alive, sizeof alive, "%.*s", (int)(at - peer), peer);
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(at + 1, NULL, &hints, &res) != 0 || !res)
    return -1;
  struct sockaddr_in addr = *(struct sockaddr_in *)res->ai_addr;
  freeaddrinfo(res);
  int port = epmd_port(&addr, alive, deadline);
  if (port < 0) {
    if (errno == ETIMEDOUT)
      snprintf(error, error_len, "cannot connect to %s (timed out)", peer);
    return -1;
  }
  addr.sin_port = htons((uint16_t)port);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return -1;
  snprintf(error, error_len, "cannot connect to %s (refused: is the cookie the same?)", peer);
  unsigned char m[1024];
  size_t len = put_new_form(m, self, NULL);
  int n;
  if ((connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0 && errno != EINPROGRESS) ||
      send_msg(fd, m, len, deadline) < 0 || (n = recv_msg(fd, m, sizeof m, deadline)) < 2 ||
      m[0] != 's')
    goto failed;
  if (n == 6 && memcmp(m + 1, "alive", 5) == 0) { /* it has a connection of ours: replace it */
    static const unsigned char yes[] = {'s', 't', 'r', 'u', 'e'};
    if (send_msg(fd, yes, sizeof yes, deadline) < 0)
      goto failed;
  } else if (n == 4 && memcmp(m + 1, "nok", 3) == 0) { /* it is connecting to us: its wins */
    *simultaneous = 1;
    snprintf(error, error_len, "cannot connect to %s (it is connecting to us)", peer);
    goto failed;
  } else if (!(n == 3 && memcmp(m + 1, "ok", 2) == 0) &&
             !(n == 16 && memcmp(m + 1, "ok_simultaneous", 15) == 0)) {
    snprintf(error, error_len, "cannot connect to %s (it refused: %.*s)", peer, n - 1,
             (const char *)m + 1);
    goto failed;
  }
  n = recv_msg(fd, m, sizeof m, deadline);
  uint32_t theirs;
  const unsigned char *name;
  size_t name_len;
  if (n >= 19 && m[0] == 'N' && 19 + get16(m + 17) <= (size_t)n) {
    /* flags (8), challenge (4), creation (4), length (2), name */
    theirs = get32(m + 9);
    name = m + 19;
    name_len = get16(m + 17);
  } else if (n >= 11 && m[0] == 'n') { /* version (2), flags (4), challenge (4), name */
    theirs = get32(m + 7);
    name = m + 11;
    name_len = (size_t)n - 11;
  } else {
    goto failed;
  }
  /* The node that answered must be the one dialled, as Erlang's dist_util demands: another
  ** name for it (its host spelt otherwise) would be a second connection to the same node, and
  ** its pids, which name it as it calls itself, would open a third. */
  if (name_len != strlen(peer) || memcmp(name, peer, name_len) != 0) {
    snprintf(error, error_len, "cannot connect to %s (the node there is %.*s)", peer,
             (int)name_len, (const char *)name);
    errno = 0;
    goto failed;
  }
  uint32_t mine = new_challenge();
  unsigned char reply[21] = {'r'};
  put32(reply + 1, mine);
  digest_of(self->cookie, theirs, reply + 5);
  unsigned char want[16];
  digest_of(self->cookie, mine, want);
  if (send_msg(fd, reply, sizeof reply, deadline) < 0 ||
      recv_msg(fd, m, sizeof m, deadline) != 17 || m[0] != 'a' || memcmp(m + 1, want, 16) != 0)
    goto failed;
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0)
    fcntl(fd, F_SETFL, flags & ~O_NONBLOCK); /* as ei's were: libuv sets what it needs */
  return fd;
failed:
  if (errno == ETIMEDOUT)
    snprintf(error, error_len, "cannot connect to %s (timed out)", peer);
  close(fd);
  return -1;
}
