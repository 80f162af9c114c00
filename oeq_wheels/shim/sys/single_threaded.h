/* Shadows glibc's <sys/single_threaded.h> (glibc >= 2.32) for builds that target
 * manylinux_2_28 (glibc 2.28). libstdc++'s <ext/atomicity.h> reads
 * __libc_single_threaded when this header exists, which would make the binary
 * need GLIBC_2.32. Declaring it here as a constant 0 gives what glibc < 2.32
 * gives: reference counts always use atomic operations, which is correct in
 * every process (only a single-threaded fast path is lost). */
#ifndef OEQ_WHEELS_SINGLE_THREADED_SHIM_H
#define OEQ_WHEELS_SINGLE_THREADED_SHIM_H
static const char __libc_single_threaded = 0;
#endif
