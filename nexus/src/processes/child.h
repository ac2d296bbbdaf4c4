/* The child side of process contexts (child.c): what nx_init and nx_finalize
 * call. */
#ifndef NXI_CHILD_H
#define NXI_CHILD_H

/* Opens the channel to this process's creator, if a launcher started it,
 * and starts watching it: 1 then, 0 when there is none, or an error. */
int nxi_child_init(void);
void nxi_child_finalize(void);

#endif /* NXI_CHILD_H */
