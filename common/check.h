/*
 * common/check.h - checked calls and fatal errors for every module.
 *
 * Every MPI, file and allocation call in the project goes through these
 * macros. A failure prints what failed and where, plus a hint at what to do,
 * then ends ALL ranks (MPI_Abort when MPI is up), so a multi-rank run never
 * hangs on one rank's error. CUDA/cuBLAS checks live in the CUDA sources and
 * end in check_fatal too.
 */
#ifndef CHECK_H
#define CHECK_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Print "error: <message> (file:line)" and end every rank. */
#if defined(__GNUC__)
__attribute__((noreturn, format(printf, 3, 4)))
#endif
void check_fatal(const char* file, int line, const char* fmt, ...);
#define FATAL(...) check_fatal(__FILE__, __LINE__, __VA_ARGS__)

/* MPI: the project sets MPI_ERRORS_RETURN on its communicators so that this
 * macro, not Open MPI's default handler, reports the failure. */
void check_mpi(int err, const char* call, const char* file, int line);
#define MPI_CHECK(call) check_mpi((call), #call, __FILE__, __LINE__)

/* For functions that validate user input and let the caller decide how to
 * end: formats ONE line into err (newlines in user text become spaces) and
 * returns -1, so an error path is a single `return check_errorf(...)`. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
int check_errorf(char* err, size_t errlen, const char* fmt, ...);

FILE* check_fopen(const char* path, const char* mode, const char* file, int line);
void check_fread(void* ptr, size_t size, size_t n, FILE* f, const char* what, const char* file, int line);
void check_fwrite(const void* ptr, size_t size, size_t n, FILE* f, const char* what, const char* file, int line);
void check_fclose(FILE* f, const char* what, const char* file, int line);
void* check_malloc(size_t bytes, const char* file, int line);
void* check_calloc(size_t n, size_t size, const char* file, int line);
#define fopenCheck(path, mode) check_fopen(path, mode, __FILE__, __LINE__)
#define freadCheck(ptr, size, n, f, what) check_fread(ptr, size, n, f, what, __FILE__, __LINE__)
#define fwriteCheck(ptr, size, n, f, what) check_fwrite(ptr, size, n, f, what, __FILE__, __LINE__)
#define fcloseCheck(f, what) check_fclose(f, what, __FILE__, __LINE__)
#define mallocCheck(bytes) check_malloc(bytes, __FILE__, __LINE__)
#define callocCheck(n, size) check_calloc(n, size, __FILE__, __LINE__)

/* The same file calls for writers that must clean up before the run ends (a
 * checkpoint removes its partial files, the ranks agree on the failure):
 * instead of ending the run they return -1 (NULL for fopenErr) with one line
 * in err naming the file, what failed and the hint, like check_errorf.
 * fcloseErr flushes, fsyncs and closes, so a full disk is seen here (ENOSPC
 * often shows only at the flush) and renamed files are on disk. */
FILE* check_fopen_err(const char* path, const char* mode, char* err, size_t errlen);
int check_fwrite_err(const void* ptr, size_t size, size_t n, FILE* f, const char* what, char* err, size_t errlen);
int check_fputs_err(const char* s, FILE* f, const char* what, char* err, size_t errlen);
int check_fclose_err(FILE* f, const char* what, char* err, size_t errlen);
#define fopenErr(path, mode, err, errlen) check_fopen_err(path, mode, err, errlen)
#define fwriteErr(ptr, size, n, f, what, err, errlen) check_fwrite_err(ptr, size, n, f, what, err, errlen)
#define fputsErr(s, f, what, err, errlen) check_fputs_err(s, f, what, err, errlen)
#define fcloseErr(f, what, err, errlen) check_fclose_err(f, what, err, errlen)

#ifdef __cplusplus
}
#endif
#endif /* CHECK_H */
