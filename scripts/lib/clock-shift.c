/*
 * clock-shift: an LD_PRELOAD library that moves a process's wall clock, as an NTP step would.
 *
 *   gcc -shared -fPIC -O2 -o clock-shift.so scripts/lib/clock-shift.c
 *   CLOCK_SHIFT_FILE=/tmp/shift LD_PRELOAD=$PWD/clock-shift.so redis-server ...
 *   echo 10000 >/tmp/shift    # from now on its wall clock reads 10 s ahead
 *
 * CLOCK_SHIFT_FILE names a file holding a signed offset in milliseconds (none, or an empty
 * file: 0). It is read again on every call, so writing it jumps the clock of a running
 * process. Only the wall clock moves: CLOCK_REALTIME and its variants, gettimeofday and
 * time. CLOCK_MONOTONIC and the others are left alone, which is the whole lesson: a lease
 * measured on the monotonic clock does not notice the jump, one measured on the wall
 * clock does.
 *
 * Why not libfaketime (Debian's `faketime`)? redis-server links jemalloc, and libfaketime's
 * set-up calls clock_gettime while jemalloc initialises, which ends in "libfaketime:
 * Unexpected recursive calls to clock_gettime() without proper initialization"
 * (https://github.com/wolfcw/libfaketime/issues/130 and /issues/327). This library needs
 * neither dlsym nor malloc: it asks the kernel directly with syscall(), so it can run
 * before anything else in the process is ready.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* The offset in the file, in milliseconds; 0 when the file is missing or unreadable. */
static long long offset_ms(void) {
    const char *path = getenv("CLOCK_SHIFT_FILE");
    char text[32] = {0};
    int file = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (file < 0)
        return 0;
    ssize_t length = read(file, text, sizeof text - 1);
    close(file);
    return length > 0 ? strtoll(text, NULL, 10) : 0;
}

static int is_wall_clock(clockid_t clock) {
    return clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE || clock == CLOCK_TAI;
}

int clock_gettime(clockid_t clock, struct timespec *now) {
    if (syscall(SYS_clock_gettime, clock, now) != 0)
        return -1;
    if (is_wall_clock(clock)) {
        /* In nanoseconds since 1970, a long long lasts until the year 2262. */
        long long nanos = now->tv_sec * 1000000000LL + now->tv_nsec + offset_ms() * 1000000LL;
        now->tv_sec = nanos / 1000000000LL;
        now->tv_nsec = nanos % 1000000000LL;
    }
    return 0;
}

int gettimeofday(struct timeval *now, void *zone) {
    struct timespec wall;
    (void)zone;
    if (clock_gettime(CLOCK_REALTIME, &wall) != 0)
        return -1;
    now->tv_sec = wall.tv_sec;
    now->tv_usec = wall.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *seconds) {
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    if (seconds)
        *seconds = wall.tv_sec;
    return wall.tv_sec;
}
