/* Stream sockets on the IO thread (src/io/tcp.c) through their requests, as the Lua layer drives
** them, over TCP and over a Unix socket: under ASan, TSan and valgrind this watches the loop's
** side (buffers, ids, cancels, the stop hook, a Unix listener's path). */
#define _POSIX_C_SOURCE 200809L
#include "test.h"

#include "io/tcp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *unix_path; /* the Unix run's socket path; NULL: the TCP run */

#define MS (1000LL * 1000)

/* Runs a request of op for the calling actor; returns its error, keeps it in *out if asked. */
static int tcp_call(tcp_req_t *r, int64_t timeout_ns, tcp_req_t **out)
{
  int rc = sm_io_call_timeout(&r->base, timeout_ns);
  int err = rc < 0 ? rc : r->base.err;
  if (out)
    *out = r;
  else
    sm_io_req_release(&r->base);
  return err;
}

static uint64_t listen_on(int *port)
{
  tcp_req_t *r = sm_tcp_req_new(unix_path ? IOTCP_LISTEN_UNIX : IOTCP_LISTEN);
  r->host = strdup(unix_path ? unix_path : "127.0.0.1");
  r->port = 0;
  r->backlog = 16;
  r->mode = 0600;
  tcp_req_t *done;
  CHECK_EQ(tcp_call(r, SMARM_FOREVER, &done), 0);
  uint64_t id = done->new_id;
  done->new_taken = 1; /* ours now: else releasing the request closes it */
  sm_io_req_release(&done->base);
  tcp_req_t *n = sm_tcp_req_new(IOTCP_NAME);
  n->id = id;
  CHECK_EQ(tcp_call(n, SMARM_FOREVER, &done), 0);
  *port = done->addr_port;
  if (unix_path) { /* named by its path, with no port */
    CHECK_EQ(strcmp(done->addr, unix_path), 0);
    CHECK_EQ(*port, -1);
  }
  sm_io_req_release(&done->base);
  return id;
}

static void post_close(uint64_t id)
{
  tcp_req_t *c = sm_tcp_req_new(IOTCP_CLOSE);
  c->id = id;
  sm_io_post(&c->base);
}

static int echo_port;
static smarm_pid_t echo_main; /* told when the server ends */

static void echo_server(void *arg)
{
  uint64_t lid = (uint64_t)(uintptr_t)arg;
  tcp_req_t *a = sm_tcp_req_new(IOTCP_ACCEPT), *done;
  a->id = lid;
  CHECK_EQ(tcp_call(a, SMARM_FOREVER, &done), 0);
  uint64_t cid = done->new_id;
  done->new_taken = 1; /* ours now: else releasing the request closes it */
  sm_io_req_release(&done->base);
  for (;;) {
    tcp_req_t *r = sm_tcp_req_new(IOTCP_RECEIVE);
    r->id = cid;
    r->want = 4096;
    if (tcp_call(r, SMARM_FOREVER, &done) != 0) {
      sm_io_req_release(&done->base);
      break; /* the client closed */
    }
    tcp_req_t *w = sm_tcp_req_new(IOTCP_SEND);
    w->id = cid;
    w->data = done->data; /* echo what came */
    w->len = done->len;
    done->data = NULL;
    sm_io_req_release(&done->base);
    CHECK_EQ(tcp_call(w, SMARM_FOREVER, NULL), 0);
  }
  post_close(cid);
  CHECK_EQ(test_send_u64(echo_main, 7), 0);
}

static tcp_req_t *pending_accept;

static void waiting_acceptor(void *arg)
{
  tcp_req_t *a = sm_tcp_req_new(IOTCP_ACCEPT);
  a->id = (uint64_t)(uintptr_t)arg;
  pending_accept = a;
  atomic_fetch_add(&a->base.refs, 1); /* the test's, to look at it afterwards */
  sm_io_call(&a->base); /* the runtime ends first: this actor never returns */
  CHECK(0);
}

static void main_echo(void *arg)
{
  (void)arg;
  echo_main = smarm_self();
  uint64_t lid = listen_on(&echo_port);
  CHECK_EQ(smarm_spawn_on(1, echo_server, (void *)(uintptr_t)lid, NULL, NULL), 0);
  tcp_req_t *c = sm_tcp_req_new(unix_path ? IOTCP_CONNECT_UNIX : IOTCP_CONNECT), *done;
  c->host = strdup(unix_path ? unix_path : "127.0.0.1");
  c->port = echo_port;
  CHECK_EQ(tcp_call(c, SMARM_FOREVER, &done), 0);
  uint64_t cid = done->new_id;
  done->new_taken = 1; /* ours now: else releasing the request closes it */
  sm_io_req_release(&done->base);
  size_t got_total = 0;
  for (int i = 0; i < 200; i++) {
    tcp_req_t *w = sm_tcp_req_new(IOTCP_SEND);
    w->id = cid;
    w->data = strdup("0123456789");
    w->len = 10;
    CHECK_EQ(tcp_call(w, SMARM_FOREVER, NULL), 0);
    size_t got = 0;
    while (got < 10) {
      tcp_req_t *r = sm_tcp_req_new(IOTCP_RECEIVE);
      r->id = cid;
      r->want = 10 - got;
      CHECK_EQ(tcp_call(r, SMARM_FOREVER, &done), 0);
      got += done->len;
      sm_io_req_release(&done->base);
    }
    got_total += got;
  }
  CHECK_EQ(got_total, (size_t)2000);
  /* a receive that times out is cancelled, and the socket still works */
  tcp_req_t *r = sm_tcp_req_new(IOTCP_RECEIVE);
  r->id = cid;
  r->want = 10;
  CHECK_EQ(tcp_call(r, 20 * MS, NULL), -ETIMEDOUT);
  /* a bad id */
  tcp_req_t *b = sm_tcp_req_new(IOTCP_RECEIVE);
  b->id = 12345;
  b->want = 1;
  CHECK_EQ(tcp_call(b, SMARM_FOREVER, NULL), -EBADF);
  post_close(cid);
  CHECK_EQ(test_recv_u64(TEST_HANG_GUARD_NS), 7); /* the server sees the close and ends */
  /* left open, with an accept waiting: the IO thread's stop closes it */
  CHECK_EQ(smarm_spawn(waiting_acceptor, (void *)(uintptr_t)lid, NULL, NULL), 0);
  smarm_yield();
}

TEST(echo_cancel_and_stop_through_requests)
{
  RUN_IO(2, main_echo, NULL);
  sm_io_shutdown();
  /* the stopped acceptor's reference went with it (sm_io_call's cleanup); the test's remains */
  CHECK(pending_accept != NULL);
  CHECK(pending_accept->base.completed);
  sm_io_req_release(&pending_accept->base);
}

TEST(the_same_over_a_unix_socket_whose_path_goes_with_it)
{
  char dir[] = "/tmp/smarm-test-tcp-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[64];
  snprintf(path, sizeof path, "%s/sock", dir);
  unix_path = path;
  pending_accept = NULL;
  RUN_IO(2, main_echo, NULL);
  sm_io_shutdown(); /* its stop hook closes the listener, which removes its path */
  CHECK(pending_accept != NULL && pending_accept->base.completed);
  sm_io_req_release(&pending_accept->base);
  struct stat st;
  CHECK(stat(path, &st) < 0 && errno == ENOENT);
  CHECK_EQ(rmdir(dir), 0);
  unix_path = NULL;
}

/* ---- Active mode: the IO thread sends the owner its data and end as event blocks ----------- */

#define ACTIVE_BYTES (1024 * 1024)

static void active_writer(void *arg)
{
  int port = (int)(intptr_t)arg;
  tcp_req_t *c = sm_tcp_req_new(IOTCP_CONNECT), *done;
  c->host = strdup("127.0.0.1");
  c->port = port;
  CHECK_EQ(tcp_call(c, SMARM_FOREVER, &done), 0);
  uint64_t cid = done->new_id;
  done->new_taken = 1;
  sm_io_req_release(&done->base);
  for (size_t sent = 0; sent < ACTIVE_BYTES; sent += 8192) {
    tcp_req_t *w = sm_tcp_req_new(IOTCP_SEND);
    w->id = cid;
    w->data = malloc(8192);
    for (size_t i = 0; i < 8192; i++)
      w->data[i] = (char)((sent + i) % 251);
    w->len = 8192;
    CHECK_EQ(tcp_call(w, SMARM_FOREVER, NULL), 0);
  }
  post_close(cid);
}

static void main_active(void *arg)
{
  (void)arg;
  int port;
  uint64_t lid = listen_on(&port);
  CHECK_EQ(smarm_spawn_on(1, active_writer, (void *)(intptr_t)port, NULL, NULL), 0);
  tcp_req_t *a = sm_tcp_req_new(IOTCP_ACCEPT), *done;
  a->id = lid;
  CHECK_EQ(tcp_call(a, SMARM_FOREVER, &done), 0);
  uint64_t cid = done->new_id;
  done->new_taken = 1;
  sm_io_req_release(&done->base);
  tcp_req_t *on = sm_tcp_req_new(IOTCP_SETACTIVE);
  on->id = cid;
  on->flag = IOTCP_ACTIVE_ON;
  on->owner = smarm_self();
  sm_io_post(&on->base);
  size_t total = 0, unacked = 0;
  int ended = 0, data_msgs = 0;
  while (!ended) {
    smarm_msg_t *m;
    CHECK_EQ(smarm_receive(TEST_HANG_GUARD_NS, &m), 0);
    io_event_t ev;
    CHECK(smarm_msg_size(m) >= sizeof ev);
    memcpy(&ev, smarm_msg_data(m), sizeof ev);
    CHECK_EQ(ev.tag, IO_EVENT_TAG);
    CHECK_EQ(ev.source, IO_EV_TCP);
    CHECK_EQ(ev.id, cid);
    CHECK_EQ(smarm_msg_sender(m), 0);
    if (ev.kind == IO_EV_DATA) {
      size_t n = smarm_msg_size(m) - sizeof ev;
      const unsigned char *p = (const unsigned char *)smarm_msg_data(m) + sizeof ev;
      CHECK(n > 0 && n <= 64 * 1024);
      for (size_t i = 0; i < n; i++)
        CHECK_EQ(p[i], (unsigned char)((total + i) % 251));
      total += n;
      unacked += n;
      data_msgs++;
      if (unacked >= 64 * 1024) { /* as the Lua layer does: else it stops at 256 KiB */
        tcp_req_t *k = sm_tcp_req_new(IOTCP_ACK);
        k->id = cid;
        k->len = unacked;
        unacked = 0;
        sm_io_post(&k->base);
      }
    } else {
      CHECK_EQ(ev.kind, IO_EV_CLOSED);
      ended = 1;
    }
    smarm_msg_free(m);
  }
  CHECK_EQ(total, (size_t)ACTIVE_BYTES);
  CHECK(data_msgs > 0);
  /* after its end it is passive: a receive finds the end again */
  tcp_req_t *r = sm_tcp_req_new(IOTCP_RECEIVE);
  r->id = cid;
  r->want = 10;
  CHECK_EQ(tcp_call(r, SMARM_FOREVER, NULL), IOTCP_CLOSED);
  post_close(cid);
  post_close(lid);
}

TEST(an_active_connection_sends_its_data_and_end_to_its_owner)
{
  RUN_IO(2, main_active, NULL);
  sm_io_shutdown();
}

TEST_MAIN()
