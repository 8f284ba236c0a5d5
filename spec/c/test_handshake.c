/*
** The distribution handshake's accepting side (src/io/handshake.c) against a peer written here
** from the protocol's description (erl_dist_protocol): a peer with the cookie is let in and can
** check our digest; one without it is refused. The connecting side and both sides against real
** Erlang nodes are spec/node_spec.lua's. MD5 itself against RFC 1321's test suite.
*/
#include "test.h"

#include "io/handshake.h"
#include "util/md5.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHECK_STR_EQ(a, b)                                                                     \
  do {                                                                                         \
    CHECK(strcmp((a), (b)) == 0);                                                              \
    if (strcmp((a), (b)) != 0)                                                                 \
      fprintf(stderr, "    '%s' != '%s'\n", (a), (b));                                          \
  } while (0)

static void hex(const char *text, char out[33])
{
  md5_t m;
  unsigned char d[16];
  sm_md5_init(&m);
  sm_md5_update(&m, text, strlen(text) / 2); /* in two pieces: a block may span updates */
  sm_md5_update(&m, text + strlen(text) / 2, strlen(text) - strlen(text) / 2);
  sm_md5_final(&m, d);
  for (int i = 0; i < 16; i++)
    snprintf(out + 2 * i, 3, "%02x", d[i]);
}

TEST(md5_gives_the_rfc_digests)
{
  static const char *const suite[][2] = {
    {"", "d41d8cd98f00b204e9800998ecf8427e"},
    {"a", "0cc175b9c0f1b6a831c399e269772661"},
    {"abc", "900150983cd24fb0d6963f7d28e17f72"},
    {"message digest", "f96b697d7cb7938d525a2f31aaf161d0"},
    {"abcdefghijklmnopqrstuvwxyz", "c3fcd3d76192e4007dfb496cca67e13b"},
    {"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
     "d174ab98d277d9f5a5611c2c9f419d9f"},
    {"12345678901234567890123456789012345678901234567890123456789012345678901234567890",
     "57edf4a22be3c955ac49da2e2107b67a"},
  };
  for (size_t i = 0; i < sizeof suite / sizeof suite[0]; i++) {
    char got[33];
    hex(suite[i][0], got);
    CHECK_STR_EQ(got, suite[i][1]);
  }
}

/* ---- A peer that connects, speaking the protocol by hand ------------------------------------ */

typedef struct peer {
  int fd;
  const char *cookie;
  int let_in;       /* it got the ack, and the ack's digest was right */
} peer_t;

static void digest(const char *cookie, unsigned challenge, unsigned char out[16])
{
  char text[300];
  snprintf(text, sizeof text, "%s%u", cookie, challenge);
  md5_t m;
  sm_md5_init(&m);
  sm_md5_update(&m, text, strlen(text));
  sm_md5_final(&m, out);
}

static int get_msg(int fd, unsigned char *b, size_t cap)
{
  unsigned char len[2];
  if (read(fd, len, 2) != 2)
    return -1;
  size_t n = (size_t)len[0] << 8 | len[1], got = 0;
  if (n > cap)
    return -1;
  while (got < n) {
    ssize_t r = read(fd, b + got, n - got);
    if (r <= 0)
      return -1;
    got += (size_t)r;
  }
  return (int)n;
}

static void put_msg(int fd, const unsigned char *b, size_t n)
{
  unsigned char len[2] = {(unsigned char)(n >> 8), (unsigned char)n};
  if (write(fd, len, 2) != 2 || write(fd, b, n) != (ssize_t)n)
    return;
}

static unsigned be32(const unsigned char *p)
{
  return (unsigned)p[0] << 24 | (unsigned)p[1] << 16 | (unsigned)p[2] << 8 | p[3];
}

static void *run_peer(void *arg)
{
  peer_t *p = arg;
  /* 'N': flags (8: HANDSHAKE_23 among the mandatory ones), creation, the name */
  static const char name[] = "erl@localhost";
  unsigned char m[512] = {'N', 0, 0, 0, 0, 0x01, 0x07, 0x3f, 0x9c, 0, 0, 0, 7, 0,
                          sizeof name - 1};
  memcpy(m + 15, name, sizeof name - 1);
  put_msg(p->fd, m, 15 + sizeof name - 1);
  int n = get_msg(p->fd, m, sizeof m);
  if (n != 3 || memcmp(m, "sok", 3) != 0)
    return NULL;
  n = get_msg(p->fd, m, sizeof m); /* the challenge: 'N', flags, challenge, creation, name */
  if (n < 19 || m[0] != 'N')
    return NULL;
  unsigned theirs = be32(m + 9), mine = 12345;
  unsigned char reply[21] = {'r', 0, 0, 0x30, 0x39};
  digest(p->cookie, theirs, reply + 5);
  put_msg(p->fd, reply, sizeof reply);
  unsigned char want[16];
  digest(p->cookie, mine, want);
  n = get_msg(p->fd, m, sizeof m);
  p->let_in = n == 17 && m[0] == 'a' && memcmp(m + 1, want, 16) == 0;
  return NULL;
}

/* Shakes hands with a peer that has `cookie`: our side's result, and whether the peer got in. */
static int shake(const char *cookie, int *let_in, char *error, size_t error_len, char *peer_name)
{
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  peer_t p = {sv[1], cookie, 0};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, run_peer, &p) == 0);
  hs_self_t self = {"smarm@localhost", "right-cookie", 7};
  int rc = sm_hs_accept(sv[0], &self, 5000, peer_name, error, error_len);
  close(sv[0]); /* a refused peer's last read ends */
  pthread_join(t, NULL);
  close(sv[1]);
  *let_in = p.let_in;
  return rc;
}

TEST(a_peer_with_the_cookie_is_let_in)
{
  char error[200] = "", peer[HS_NAME_MAX + 1] = "";
  int let_in;
  CHECK_EQ(shake("right-cookie", &let_in, error, sizeof error, peer), 0);
  CHECK_STR_EQ(peer, "erl@localhost");
  CHECK(let_in);
}

TEST(a_peer_without_it_is_refused)
{
  char error[200] = "", peer[HS_NAME_MAX + 1] = "";
  int let_in;
  CHECK_EQ(shake("wrong-cookie", &let_in, error, sizeof error, peer), -1);
  CHECK_STR_EQ(error, "a wrong cookie");
  CHECK(!let_in);
}

TEST_MAIN()
