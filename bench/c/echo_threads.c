/*
** bench/c/echo_threads.c: the baseline of bench/echo.lua. One round trip of a 64-byte message
** over loopback TCP between two threads of a plain C program doing blocking read and write (both
** ends TCP_NODELAY): what the kernel and two threads cost without any runtime. Batches of
** SMARM_ECHO_BATCH round trips are timed with the monotonic clock, the clock's own cost
** subtracted, per round trip into a histogram; SMARM_ECHO_ROUNDS per run, SMARM_ECHO_RUNS runs
** after a warm-up. Prints one line in the harness's format (scenario=echo variant=c_threads).
** With the argument `udp`: the same with 64-byte UDP datagrams and blocking sendto/recvfrom, the
** baseline of bench/echo.lua's udp_rtt (variant=c_threads_udp).
*/
#define _GNU_SOURCE
#include "util/histogram.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MSG 64

static long knob(const char *name, long def)
{
  const char *v = getenv(name);
  long n = v ? atol(v) : 0;
  return n > 0 ? n : def;
}

static int64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void die(const char *what)
{
  perror(what);
  exit(1);
}

static void exact(int fd, char *buf, size_t n, int writing)
{
  for (size_t done = 0; done < n;) {
    ssize_t k = writing ? write(fd, buf + done, n - done) : read(fd, buf + done, n - done);
    if (k <= 0)
      die(writing ? "write" : "read");
    done += (size_t)k;
  }
}

static int listener;
static int udp; /* the UDP variant: listener is the server's datagram socket */

static void *udp_server(void)
{
  char buf[MSG];
  for (;;) {
    struct sockaddr_in from;
    socklen_t flen = sizeof from;
    ssize_t k = recvfrom(listener, buf, sizeof buf, 0, (struct sockaddr *)&from, &flen);
    if (k <= 0)
      break; /* an empty datagram: the client is done */
    if (sendto(listener, buf, (size_t)k, 0, (struct sockaddr *)&from, flen) != k)
      die("sendto");
  }
  return NULL;
}

static struct sockaddr_in server_addr;

/* One round trip of the client: a TCP message, or a datagram to the server and its echo. */
static void round_trip(int fd, char *buf)
{
  if (!udp) {
    exact(fd, buf, MSG, 1);
    exact(fd, buf, MSG, 0);
    return;
  }
  if (sendto(fd, buf, MSG, 0, (struct sockaddr *)&server_addr, sizeof server_addr) != MSG ||
      recvfrom(fd, buf, MSG, 0, NULL, NULL) != MSG)
    die("udp round trip");
}

static void *server(void *arg)
{
  (void)arg;
  if (udp)
    return udp_server();
  int fd = accept(listener, NULL, NULL);
  if (fd < 0)
    die("accept");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  char buf[MSG];
  for (;;) {
    ssize_t k = 0;
    size_t done = 0;
    while (done < MSG && (k = read(fd, buf + done, MSG - done)) > 0)
      done += (size_t)k;
    if (done < MSG)
      break; /* the client closed */
    exact(fd, buf, MSG, 1);
  }
  close(fd);
  return NULL;
}

int main(int argc, char **argv)
{
  udp = argc > 1 && strcmp(argv[1], "udp") == 0;
  long rounds = knob("SMARM_ECHO_ROUNDS", 20000), runs = knob("SMARM_ECHO_RUNS", 3);
  long batch = knob("SMARM_ECHO_BATCH", 10), warmup = knob("SMARM_ECHO_WARMUP", 2000);
  int type = udp ? SOCK_DGRAM : SOCK_STREAM;
  listener = socket(AF_INET, type, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  if (listener < 0 || bind(listener, (struct sockaddr *)&a, sizeof a) != 0 ||
      (!udp && listen(listener, 1) != 0) ||
      getsockname(listener, (struct sockaddr *)&a, &alen) != 0)
    die("listen");
  server_addr = a;
  pthread_t t;
  pthread_create(&t, NULL, server, NULL);
  int fd = socket(AF_INET, type, 0);
  if (fd < 0 || (!udp && connect(fd, (struct sockaddr *)&a, sizeof a) != 0))
    die("connect");
  int one = 1;
  if (!udp)
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

  int64_t floor_ns = INT64_MAX;
  for (int i = 0; i < 1000; i++) {
    int64_t t0 = now_ns(), t1 = now_ns();
    if (t1 - t0 < floor_ns)
      floor_ns = t1 - t0;
  }
  static histogram_t ps;
  sm_hist_reset(&ps);
  char buf[MSG];
  memset(buf, 'e', sizeof buf);
  long samples = rounds / batch > 0 ? rounds / batch : 1;
  for (long run = 0; run < runs; run++) {
    for (long i = 0; i < warmup; i++)
      round_trip(fd, buf);
    for (long s = 0; s < samples; s++) {
      int64_t t0 = now_ns();
      for (long i = 0; i < batch; i++)
        round_trip(fd, buf);
      int64_t ns = now_ns() - t0 - floor_ns;
      sm_hist_record(&ps, (uint64_t)(ns > 0 ? ns : 0) * 1000 / (uint64_t)batch);
    }
  }
  if (udp && sendto(fd, buf, 0, 0, (struct sockaddr *)&server_addr, sizeof server_addr) != 0)
    die("sendto");
  close(fd);
  pthread_join(t, NULL);
  close(listener);
  printf("scenario=echo variant=%s schedulers=2 p50_ns=%.3f p90_ns=%.3f p99_ns=%.3f "
         "p999_ns=%.3f max_ns=%.3f per_op_ns=%.3f ops=%ld floor_ns=%ld\n",
         udp ? "c_threads_udp" : "c_threads", sm_hist_quantile(&ps, 0.5) / 1000.0,
         sm_hist_quantile(&ps, 0.9) / 1000.0,
         sm_hist_quantile(&ps, 0.99) / 1000.0, sm_hist_quantile(&ps, 0.999) / 1000.0,
         sm_hist_quantile(&ps, 1.0) / 1000.0, sm_hist_mean(&ps) / 1000.0, samples * batch * runs,
         (long)floor_ns);
  return 0;
}
