/*
 * compress/cuda_host.h - host helpers shared by the .cu files of compress/
 * (internal; compress_cuda.cu defines them).
 */
#ifndef COMPRESS_CUDA_HOST_H
#define COMPRESS_CUDA_HOST_H

/* multiprocessors of the current device (cached): the grids' sizes */
int compress_dev_num_sms(void);

#endif /* COMPRESS_CUDA_HOST_H */
