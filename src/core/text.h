// Small text helpers every part uses (one copy each).
#pragma once

#include <string>
#include <string_view>

namespace vramd {

// ASCII lower case ("Content-Length" → "content-length"); other bytes unchanged.
std::string lower(std::string_view s);
// Without leading and trailing whitespace (space, tab, CR, LF, VT, FF).
std::string_view trim(std::string_view s);

}  // namespace vramd
