/*
** Ids for what the IO thread keeps open (sockets): a slot index (low 32 bits) and the slot's
** generation (high 32 bits), so that a closed thing's id never names the next one in its slot.
** An id is never 0. Owner: the IO thread alone (each module has its own table).
*/
#ifndef SMARM_IO_IDS_H
#define SMARM_IO_IDS_H

#include <stdint.h>

typedef struct io_id_slot {
  void *obj;
  uint32_t gen;
} io_id_slot_t;

typedef struct io_ids {
  io_id_slot_t *slots;
  uint32_t n, cap;
  uint32_t *free_slots; /* slots given back, reused first */
  uint32_t nfree;
} io_ids_t;

/* A new id for obj, or 0 when out of memory. */
uint64_t sm_io_id_new(io_ids_t *t, void *obj);

/* What id names, or NULL when it names nothing (any more). */
void *sm_io_id_get(const io_ids_t *t, uint64_t id);

/* id names nothing from now on; its slot is reused. */
void sm_io_id_free(io_ids_t *t, uint64_t id);

/* Calls fn on everything the table names now (fn may free ids). */
void sm_io_id_each(io_ids_t *t, void (*fn)(void *obj));

#endif
