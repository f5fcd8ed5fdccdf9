#include "daemon/config_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace vramd {

Result<Config> load_config(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return make_error(path + ": cannot read config: " + std::strerror(errno));
  std::string text;
  char buf[8192];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  int read_errno = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (read_errno != 0)
    return make_error(path + ": cannot read config: " + std::strerror(read_errno));
  return parse_config(text, path);
}

}  // namespace vramd
