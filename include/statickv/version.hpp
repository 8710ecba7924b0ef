#pragma once
// The one place the version is spelled. CMakeLists.txt reads the three
// macros for the project and package version, and refuses to configure when
// kVersion disagrees with them.

#define STATICKV_VERSION_MAJOR 0
#define STATICKV_VERSION_MINOR 2
#define STATICKV_VERSION_PATCH 0

namespace statickv {
/// Library version, "major.minor.patch".
inline constexpr const char* kVersion = "0.2.0";
}  // namespace statickv
