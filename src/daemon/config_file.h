// Reading vramd.toml from disk: the shell's part of loading a config (the core parses text).
#pragma once

#include <string>

#include "core/config.h"
#include "core/result.h"

namespace vramd {

// Reads and parses the file at `path`; an unreadable file is an error naming it and why.
Result<Config> load_config(const std::string& path);

}  // namespace vramd
