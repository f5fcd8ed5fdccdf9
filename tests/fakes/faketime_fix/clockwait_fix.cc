// Preloaded ahead of Debian's libfaketime 0.9.10 in the tests that slow a daemon's monotonic
// clock (ClusterFenceE2E, FAKETIME="+0 xRATE"). That libfaketime hands pthread_cond_clockwait's
// monotonic deadline to the kernel as if it were a wall-clock time (wolfcw/libfaketime#469), so
// every std::condition_variable::wait_until on steady_clock sleeps until notified, however near
// its deadline: the daemon's sampler then stops for good. This wrapper turns the faked monotonic
// deadline into a real one (real now + what is left on the faked clock / RATE) and calls glibc's
// own pthread_cond_clockwait. Only the tests load it; vramd is untouched.
#include <dlfcn.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace {

using ClockWait = int (*)(pthread_cond_t*, pthread_mutex_t*, clockid_t, const struct timespec*);

ClockWait glibc_clockwait() {
  static ClockWait fn = [] {
    void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    void* f = libc ? dlvsym(libc, "pthread_cond_clockwait", "GLIBC_2.34") : nullptr;
    if (!f && libc) f = dlvsym(libc, "pthread_cond_clockwait", "GLIBC_2.30");
    return reinterpret_cast<ClockWait>(f);
  }();
  return fn;
}

// FAKETIME's "xRATE" (1 without one).
double rate() {
  static double r = [] {
    const char* spec = std::getenv("FAKETIME");
    const char* x = spec ? std::strchr(spec, 'x') : nullptr;
    double v = x ? std::atof(x + 1) : 1.0;
    return v > 0 ? v : 1.0;
  }();
  return r;
}

long long ns(const struct timespec& t) { return t.tv_sec * 1000000000LL + t.tv_nsec; }

}  // namespace

extern "C" int pthread_cond_clockwait(pthread_cond_t* cond, pthread_mutex_t* mutex, clockid_t clock,
                                      const struct timespec* abstime) {
  ClockWait real = glibc_clockwait();
  if (!real) return EINVAL;
  if (clock != CLOCK_MONOTONIC) return real(cond, mutex, clock, abstime);
  struct timespec faked_now, real_now;
  clock_gettime(CLOCK_MONOTONIC, &faked_now);  // through libfaketime: the clock the caller used
  syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &real_now);  // the kernel's
  long long left = ns(*abstime) - ns(faked_now);
  long long deadline = ns(real_now) + (left > 0 ? static_cast<long long>(left / rate()) : 0);
  struct timespec real_abs = {static_cast<time_t>(deadline / 1000000000LL), static_cast<long>(deadline % 1000000000LL)};
  return real(cond, mutex, CLOCK_MONOTONIC, &real_abs);
}
