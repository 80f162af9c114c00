/* Force-included into nanobind's sources for a free-threaded module that targets manylinux_2_28 (glibc 2.28).
 * nanobind's free-threaded internals keep a pthread key per interpreter. glibc 2.34 moved libpthread into
 * libc and gave these functions a new version, so a link against a newer glibc would make the module need
 * GLIBC_2.34. Binding them to the version every glibc of the architecture has had since its first release
 * gives what a link against glibc 2.28 gives: the same functions (in libpthread.so.0 there, in libc.so.6
 * from 2.34 on, which exports the old version too). */
#ifndef OEQ_WHEELS_PTHREAD_KEYS_SHIM_H
#define OEQ_WHEELS_PTHREAD_KEYS_SHIM_H
#if defined(__x86_64__)
#define OEQ_WHEELS_GLIBC_BASE "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define OEQ_WHEELS_GLIBC_BASE "GLIBC_2.17"
#else
#error "oeq-wheels: no glibc base version known for this architecture"
#endif
__asm__(".symver pthread_key_create,pthread_key_create@" OEQ_WHEELS_GLIBC_BASE);
__asm__(".symver pthread_key_delete,pthread_key_delete@" OEQ_WHEELS_GLIBC_BASE);
__asm__(".symver pthread_getspecific,pthread_getspecific@" OEQ_WHEELS_GLIBC_BASE);
__asm__(".symver pthread_setspecific,pthread_setspecific@" OEQ_WHEELS_GLIBC_BASE);
#endif
