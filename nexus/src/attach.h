/* Attach (attach.c): what nx_finalize calls. */
#ifndef NXI_ATTACH_H
#define NXI_ATTACH_H

/* Stops listening for attaching programs. */
void nxi_attach_finalize(void);

#endif /* NXI_ATTACH_H */
