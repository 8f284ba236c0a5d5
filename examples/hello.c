/* The README's quick start: a main actor spawns a greeter on any scheduler and sends it a name. */
#include "smarm.h"

#include <stdio.h>
#include <string.h>

static void greeter(void *arg)
{
  (void)arg;
  smarm_msg_t *m;
  while (smarm_receive(SMARM_FOREVER, &m) == 0) { /* parks only this actor */
    printf("hello, %.*s\n", (int)smarm_msg_size(m), (char *)smarm_msg_data(m));
    fflush(stdout);
    smarm_msg_free(m);
  }
}

static void main_actor(void *arg)
{
  (void)arg;
  smarm_pid_t pid;
  smarm_spawn_on(SMARM_SCHED_ANY, greeter, NULL, NULL, &pid);
  smarm_msg_t *m = smarm_msg_new(5);
  memcpy(smarm_msg_data(m), "world", 5);
  smarm_send(pid, m);            /* the message block now belongs to the runtime */
  smarm_sleep(10 * 1000 * 1000); /* 10 ms; when main returns, the runtime stops */
}

int main(void) { return smarm_run(NULL, main_actor, NULL) == 0 ? 0 : 1; }
