/* The creator side of process contexts (parent.c): what nx_finalize calls. */
#ifndef NXI_PARENT_H
#define NXI_PARENT_H

/* Ends every child this process created and stops watching them. */
void nxi_parent_finalize(void);

#endif /* NXI_PARENT_H */
