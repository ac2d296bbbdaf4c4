/* The child side of process contexts (child.c): what nx_init and nx_finalize
 * call. */
#ifndef NXI_CHILD_H
#define NXI_CHILD_H

/* Opens the channel to this process's creator, if a launcher started it,
 * and starts watching it: 1 then, 0 when there is none, or an error. */
int nxi_child_init(void);
void nxi_child_finalize(void);
/* Whether this process's creator takes modules that join late (a process
 * context nx_context_create forked: NX_CTL_LATE=1), so that nx_init may
 * leave the slow ones to nxi_child_join_start. */
int nxi_child_defers(void);
/* Loads the modules nx_init left to join, on a thread of their own, once
 * this process context is ready (nx_context_ready; at once when it has no
 * creator after all): each that comes up is watched by the engine, added
 * to this process's list, told to the creator (JOIN) and made the route
 * where it is better. One that fails is said as at nx_init, and tcp
 * carries on. nx_finalize (nxi_child_finalize) waits for the thread
 * first. */
void nxi_child_join_start(void);
/* The last nx_finalize, first: a module that is coming up is waited for
 * (its init does not block for long); those not started are left
 * unloaded. */
void nxi_child_join_stop(void);

#endif /* NXI_CHILD_H */
