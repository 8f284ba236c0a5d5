/* The README's quick start: a main actor spawns a greeter on any scheduler, sends it a name and
** waits for its answer (not for a time: a slow machine would end the run before the greeting). */
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
    smarm_send(smarm_msg_sender(m), m); /* the same block back: done */
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
  if (smarm_receive(SMARM_FOREVER, &m) == 0) /* the greeter has printed */
    smarm_msg_free(m);
} /* when main returns, the runtime stops */

int main(void) { return smarm_run(NULL, main_actor, NULL) == 0 ? 0 : 1; }
