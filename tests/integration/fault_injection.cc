#include "integration/fault_injection.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <sqlite3.h>
#include <boost/asio/post.hpp>

#include "cli/client.h"

namespace vramd::testing {

void FaultyProcessRunner::spawn(const ServiceConfig& svc, std::vector<int> ours) {
  if (!sw_->spawn_fail) return inner_->spawn(svc, std::move(ours));
  // Reported on the loop, later, as the real runner does.
  boost::asio::post(io_, [sink = sink_, name = svc.name] {
    sink.started(ChildStarted{name, false, 0, 0,
                              "fork: Resource temporarily unavailable (injected)", false});
  });
}

// ---- FaultVfs ----

std::atomic<FaultVfs::Mode> FaultVfs::mode_{FaultVfs::Mode::none};
std::atomic<int> FaultVfs::refused_{0};

namespace {

sqlite3_vfs* g_real = nullptr;
sqlite3_vfs g_vfs;

struct FaultFile {
  sqlite3_file base;
  sqlite3_file* real;  // the real VFS's file, right after this struct
};

sqlite3_file* real_of(sqlite3_file* f) { return reinterpret_cast<FaultFile*>(f)->real; }

int refuse(int ioerr) {
  ++FaultVfs::refused_;
  return FaultVfs::mode_ == FaultVfs::Mode::full ? SQLITE_FULL : ioerr;
}

int f_close(sqlite3_file* f) {
  sqlite3_file* r = real_of(f);
  int rc = r->pMethods ? r->pMethods->xClose(r) : SQLITE_OK;
  return rc;
}
int f_read(sqlite3_file* f, void* buf, int n, sqlite3_int64 off) {
  sqlite3_file* r = real_of(f);
  return r->pMethods->xRead(r, buf, n, off);
}
int f_write(sqlite3_file* f, const void* buf, int n, sqlite3_int64 off) {
  if (FaultVfs::mode_ != FaultVfs::Mode::none) return refuse(SQLITE_IOERR_WRITE);
  sqlite3_file* r = real_of(f);
  return r->pMethods->xWrite(r, buf, n, off);
}
int f_truncate(sqlite3_file* f, sqlite3_int64 size) {
  if (FaultVfs::mode_ == FaultVfs::Mode::ioerr) return refuse(SQLITE_IOERR_TRUNCATE);
  sqlite3_file* r = real_of(f);
  return r->pMethods->xTruncate(r, size);
}
int f_sync(sqlite3_file* f, int flags) {
  if (FaultVfs::mode_ == FaultVfs::Mode::ioerr) return refuse(SQLITE_IOERR_FSYNC);
  sqlite3_file* r = real_of(f);
  return r->pMethods->xSync(r, flags);
}
int f_size(sqlite3_file* f, sqlite3_int64* size) {
  sqlite3_file* r = real_of(f);
  return r->pMethods->xFileSize(r, size);
}
int f_lock(sqlite3_file* f, int l) {
  sqlite3_file* r = real_of(f);
  return r->pMethods->xLock(r, l);
}
int f_unlock(sqlite3_file* f, int l) {
  sqlite3_file* r = real_of(f);
  return r->pMethods->xUnlock(r, l);
}
int f_reserved(sqlite3_file* f, int* out) {
  sqlite3_file* r = real_of(f);
  return r->pMethods->xCheckReservedLock(r, out);
}
int f_control(sqlite3_file* f, int op, void* arg) {
  sqlite3_file* r = real_of(f);
  return r->pMethods->xFileControl(r, op, arg);
}
int f_sector(sqlite3_file* f) {
  sqlite3_file* r = real_of(f);
  return r->pMethods->xSectorSize(r);
}
int f_device(sqlite3_file* f) {
  sqlite3_file* r = real_of(f);
  return r->pMethods->xDeviceCharacteristics(r);
}
int f_shm_map(sqlite3_file* f, int pg, int sz, int extend, void volatile** pp) {
  sqlite3_file* r = real_of(f);
  return r->pMethods->xShmMap(r, pg, sz, extend, pp);
}
int f_shm_lock(sqlite3_file* f, int offset, int n, int flags) {
  sqlite3_file* r = real_of(f);
  return r->pMethods->xShmLock(r, offset, n, flags);
}
void f_shm_barrier(sqlite3_file* f) {
  sqlite3_file* r = real_of(f);
  r->pMethods->xShmBarrier(r);
}
int f_shm_unmap(sqlite3_file* f, int del) {
  sqlite3_file* r = real_of(f);
  return r->pMethods->xShmUnmap(r, del);
}
int f_fetch(sqlite3_file* f, sqlite3_int64 off, int n, void** pp) {
  sqlite3_file* r = real_of(f);
  if (r->pMethods->iVersion < 3) {
    *pp = nullptr;
    return SQLITE_OK;
  }
  return r->pMethods->xFetch(r, off, n, pp);
}
int f_unfetch(sqlite3_file* f, sqlite3_int64 off, void* p) {
  sqlite3_file* r = real_of(f);
  if (r->pMethods->iVersion < 3) return SQLITE_OK;
  return r->pMethods->xUnfetch(r, off, p);
}

const sqlite3_io_methods kMethods = {
    3,          f_close,       f_read,      f_write,   f_truncate, f_sync,   f_size,
    f_lock,     f_unlock,      f_reserved,  f_control, f_sector,   f_device, f_shm_map,
    f_shm_lock, f_shm_barrier, f_shm_unmap, f_fetch,   f_unfetch,
};

int v_open(sqlite3_vfs*, const char* name, sqlite3_file* f, int flags, int* out) {
  auto* ff = reinterpret_cast<FaultFile*>(f);
  ff->real = reinterpret_cast<sqlite3_file*>(ff + 1);
  std::memset(ff->real, 0, g_real->szOsFile);
  int rc = g_real->xOpen(g_real, name, ff->real, flags, out);
  ff->base.pMethods = ff->real->pMethods ? &kMethods : nullptr;
  return rc;
}
int v_delete(sqlite3_vfs*, const char* name, int sync) {
  return g_real->xDelete(g_real, name, sync);
}
int v_access(sqlite3_vfs*, const char* name, int flags, int* out) {
  return g_real->xAccess(g_real, name, flags, out);
}
int v_full(sqlite3_vfs*, const char* name, int n, char* out) {
  return g_real->xFullPathname(g_real, name, n, out);
}
void* v_dlopen(sqlite3_vfs*, const char* name) { return g_real->xDlOpen(g_real, name); }
void v_dlerror(sqlite3_vfs*, int n, char* out) { g_real->xDlError(g_real, n, out); }
void (*v_dlsym(sqlite3_vfs*, void* h, const char* sym))(void) {
  return g_real->xDlSym(g_real, h, sym);
}
void v_dlclose(sqlite3_vfs*, void* h) { g_real->xDlClose(g_real, h); }
int v_random(sqlite3_vfs*, int n, char* out) { return g_real->xRandomness(g_real, n, out); }
int v_sleep(sqlite3_vfs*, int us) { return g_real->xSleep(g_real, us); }
int v_time(sqlite3_vfs*, double* out) { return g_real->xCurrentTime(g_real, out); }
int v_last_error(sqlite3_vfs*, int n, char* out) { return g_real->xGetLastError(g_real, n, out); }
int v_time64(sqlite3_vfs*, sqlite3_int64* out) { return g_real->xCurrentTimeInt64(g_real, out); }

}  // namespace

FaultVfs::FaultVfs() {
  mode_ = Mode::none;
  refused_ = 0;
  g_real = sqlite3_vfs_find(nullptr);
  g_vfs = sqlite3_vfs{};
  g_vfs.iVersion = 2;
  g_vfs.szOsFile = static_cast<int>(sizeof(FaultFile)) + g_real->szOsFile;
  g_vfs.mxPathname = g_real->mxPathname;
  g_vfs.zName = "vramd-fault";
  g_vfs.xOpen = v_open;
  g_vfs.xDelete = v_delete;
  g_vfs.xAccess = v_access;
  g_vfs.xFullPathname = v_full;
  g_vfs.xDlOpen = v_dlopen;
  g_vfs.xDlError = v_dlerror;
  g_vfs.xDlSym = v_dlsym;
  g_vfs.xDlClose = v_dlclose;
  g_vfs.xRandomness = v_random;
  g_vfs.xSleep = v_sleep;
  g_vfs.xCurrentTime = v_time;
  g_vfs.xGetLastError = v_last_error;
  g_vfs.xCurrentTimeInt64 = v_time64;
  sqlite3_vfs_register(&g_vfs, 1);
}

FaultVfs::~FaultVfs() {
  mode_ = Mode::none;
  sqlite3_vfs_unregister(&g_vfs);
  sqlite3_vfs_register(g_real, 1);
}

// ---- HangingUnixServer ----

HangingUnixServer::HangingUnixServer(std::string path) : path_(std::move(path)) {
  fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
  ::unlink(path_.c_str());
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd_, 16) != 0) {
    ::close(fd_);
    fd_ = -1;
    return;
  }
  thread_ = std::thread([this] {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      ++accepted_;
      std::lock_guard<std::mutex> l(m_);
      if (released_)
        ::close(c);  // the daemon behind it is gone: the caller hears at once
      else
        held_.push_back(c);  // read nothing, answer nothing
    }
  });
}

HangingUnixServer::~HangingUnixServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  release();
  if (fd_ >= 0) ::close(fd_);
  ::unlink(path_.c_str());
}

void HangingUnixServer::release() {
  std::lock_guard<std::mutex> l(m_);
  released_ = true;
  for (int c : held_) ::close(c);
  held_.clear();
}

// ---- StatusLatencyProbe ----

StatusLatencyProbe::StatusLatencyProbe(std::string url, std::chrono::milliseconds every)
    : url_(std::move(url)), every_(every) {
  thread_ = std::thread([this] {
    while (!stop_) {
      auto t0 = std::chrono::steady_clock::now();
      auto r = http_request({url_}, "GET", "/v1/status", "", 5000);
      auto t1 = std::chrono::steady_clock::now();
      if (!r || r->status != 200)
        ++failed_;
      else
        ms_.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      std::this_thread::sleep_until(t0 + every_);
    }
  });
}

StatusLatencyProbe::~StatusLatencyProbe() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

LatencyFigures StatusLatencyProbe::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  LatencyFigures out;
  out.failed = failed_;
  out.requests = ms_.size() + failed_;
  if (ms_.empty()) return out;
  std::vector<double> v = ms_;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))]; };
  out.p50_ms = at(0.50);
  out.p99_ms = at(0.99);
  out.max_ms = v.back();
  return out;
}

}  // namespace vramd::testing
